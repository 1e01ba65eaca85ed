"""Cluster and log administration: DescribeCluster, DescribeLogDirs, DeleteRecords.

DescribeCluster lists every live daemon at the address of the client's
listener, the lowest node id as the controller (as Metadata).  Its one "log directory" is the namespace in the object store
(``{store url}/{namespace}``): DescribeLogDirs reports each partition's live
segment bytes plus its unflushed batches, and -1 (unknown) for the volume's
total and usable bytes, which an object store does not have.  Partitions that
do not exist are left out, as Kafka leaves out those a broker does not host.

DeleteRecords moves a partition's log start offset forwards with a catalog
commit (`LogManager.delete_records`): from then on fetches below it answer
OFFSET_OUT_OF_RANGE, ListOffsets(earliest) returns it, and retention removes
the segments wholly below it.  An offset above the high watermark (or below
-1, which means the high watermark) is OFFSET_OUT_OF_RANGE.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Final

from kfs_core.errors import UnknownTopicOrPartition
from kfs_core.security.acls import Operation
from kfs_core.server.apis.access import cluster_rule, topics_rule
from kfs_core.server.apis.base import (
    Api,
    error_code_for,
    log_failure,
    message_of,
)
from kfs_core.server.apis.error_bodies import Derived, Mirror, Single, schema_error_body
from kfs_core.server.protocol.errors import ErrorCode
from kfs_core.server.protocol.messages import (
    ApiKey,
    DeleteRecordsRequest,
    DescribeClusterRequest,
    DescribeLogDirsRequest,
)
from kfs_core.server.protocol.responses import (
    DeleteRecordsResponse,
    DescribeClusterResponse,
    DescribeLogDirsResponse,
)

if TYPE_CHECKING:
    from kfs_core.server.apis.context import BrokerOptions, RequestContext
    from kfs_core.server.protocol import Request
    from kfs_core.server.protocol.bodies import (
        DeleteRecordsRequestBody,
        DescribeLogDirsRequestBody,
        ResponseBody,
    )

__all__ = ["APIS", "DELETE_RECORDS", "DESCRIBE_CLUSTER", "DESCRIBE_LOG_DIRS"]

log = logging.getLogger(__name__)

# DescribeCluster endpoint types (KIP-919).
ENDPOINT_BROKERS: Final = 1
ENDPOINT_CONTROLLERS: Final = 2


# --- DescribeCluster ----------------------------------------------------------------


async def _describe_cluster(
    context: RequestContext, request: Request[Any]
) -> DescribeClusterResponse:
    endpoint = getattr(request.body, "endpoint_type", ENDPOINT_BROKERS)
    if endpoint != ENDPOINT_BROKERS:
        # Clients ask controllers only with bootstrap.controllers, which name
        # controller listeners; KFS has none apart from its Kafka listener.
        code = (
            ErrorCode.MISMATCHED_ENDPOINT_TYPE
            if endpoint == ENDPOINT_CONTROLLERS
            else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
        )
        context.count_error(ApiKey.DESCRIBE_CLUSTER, code)
        return _describe_cluster_error(
            request, code, f"endpoint type {endpoint}: this is a broker", context.options
        )
    options = context.options
    return DescribeClusterResponse(
        version=request.api_version,
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=endpoint,
        cluster_id=options.cluster_id,
        controller_id=context.controller_id(),
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=node.node_id,
                host=host,
                port=port,
                rack=node.rack,
                is_fenced=False,
            )
            for node, (host, port) in context.brokers()
        ],
    )


def _endpoint_type(request: Request[Any], _: BrokerOptions) -> int:
    endpoint: int = getattr(request.body, "endpoint_type", ENDPOINT_BROKERS)
    return endpoint


def _cluster_id(_: Request[Any], options: BrokerOptions) -> str:
    return options.cluster_id


_describe_cluster_error = schema_error_body(
    DescribeClusterResponse,
    {
        "endpoint_type": Derived(_endpoint_type),
        "cluster_id": Derived(_cluster_id),
        "controller_id": -1,
        "brokers": [],
    },
)


# --- DescribeLogDirs ----------------------------------------------------------------


async def _describe_log_dirs(
    context: RequestContext, request: Request[DescribeLogDirsRequestBody]
) -> DescribeLogDirsResponse:
    requested = request.body.topics
    if requested is None:
        wanted = [(info.name, list(range(info.partitions))) for info in await context.topics.all()]
    else:
        wanted = [(t.topic, list(t.partitions)) for t in requested]
    result = DescribeLogDirsResponse.DescribeLogDirsResult
    topic_entry = result.DescribeLogDirsTopic
    partition_entry = topic_entry.DescribeLogDirsPartition
    topics = []
    for name, indexes in wanted:
        partitions = []
        for index in indexes:
            try:
                size = await context.log.partition_size(name, index)
            except UnknownTopicOrPartition:
                continue  # not hosted here: Kafka leaves it out
            except Exception as exc:  # noqa: BLE001 - any failure is the response's error code
                code = error_code_for(exc)
                log_failure(f"describe log dir of {name}-{index}", exc, code)
                return _describe_log_dirs_error(request, code, message_of(exc), context.options)
            partitions.append(
                partition_entry(
                    partition_index=index, partition_size=size, offset_lag=0, is_future_key=False
                )
            )
        if partitions:
            topics.append(topic_entry(name=name, partitions=partitions))
    return DescribeLogDirsResponse(
        version=request.api_version,
        throttle_time_ms=0,
        error_code=0,
        results=[
            result(
                error_code=0,
                log_dir=_log_dir(context),
                topics=topics,
                total_bytes=-1,
                usable_bytes=-1,
            )
        ],
    )


def _log_dir(context: RequestContext) -> str:
    return f"{context.log.store.url.rstrip('/')}/{context.log.namespace}"


# v1 and v2 have no top-level error code: the one result carries it.
_describe_log_dirs_error = schema_error_body(
    DescribeLogDirsResponse, {"results": Single({"log_dir": ""})}
)


# --- DeleteRecords --------------------------------------------------------------------


async def _delete_records(
    context: RequestContext, request: Request[DeleteRecordsRequestBody]
) -> DeleteRecordsResponse:
    body = request.body
    topic_result = DeleteRecordsResponse.DeleteRecordsTopicResult
    topics = []
    try:
        async with asyncio.timeout(body.timeout_ms / 1000 if body.timeout_ms > 0 else None):
            for topic in body.topics:
                partitions = [
                    await _delete_below(context, topic.name, p.partition_index, p.offset)
                    for p in topic.partitions
                ]
                topics.append(topic_result(name=topic.name, partitions=partitions))
    except TimeoutError:
        # What is done stays done; the rest answers REQUEST_TIMED_OUT, as Kafka does.
        answered = {t.name: {p.partition_index: p for p in t.partitions} for t in topics}
        every: Any = _delete_records_error(
            request, ErrorCode.REQUEST_TIMED_OUT, None, context.options
        )
        timed_out = every.topics
        for entry in timed_out:
            done = answered.get(entry.name, {})
            entry.partitions = [done.get(p.partition_index, p) for p in entry.partitions]
            for p in entry.partitions:
                context.count_error(ApiKey.DELETE_RECORDS, p.error_code)
        return DeleteRecordsResponse(
            version=request.api_version, throttle_time_ms=0, topics=timed_out
        )
    return DeleteRecordsResponse(version=request.api_version, throttle_time_ms=0, topics=topics)


_PartitionResult = DeleteRecordsResponse.DeleteRecordsTopicResult.DeleteRecordsPartitionResult


async def _delete_below(
    context: RequestContext, topic: str, partition: int, offset: int
) -> _PartitionResult:
    result = _PartitionResult
    try:
        low_watermark = await context.log.delete_records(topic, partition, offset)
    except Exception as exc:  # noqa: BLE001 - any failure is this partition's error code
        code = error_code_for(exc)
        log_failure(f"delete records of {topic}-{partition} below {offset}", exc, code)
        context.count_error(ApiKey.DELETE_RECORDS, code)
        return result(partition_index=partition, low_watermark=-1, error_code=code)
    return result(partition_index=partition, low_watermark=low_watermark, error_code=0)


_delete_records_error = schema_error_body(
    DeleteRecordsResponse,
    {
        "topics": Mirror(
            "topics",
            {"name": "name"},
            {
                "partitions": Mirror(
                    "partitions", {"partition_index": "partition_index"}, {"low_watermark": -1}
                )
            },
        )
    },
)


# librdkafka has no DescribeCluster request (its describe_cluster reads
# Metadata); kafka-python sends 2, whose brokers carry is_fenced.
DESCRIBE_CLUSTER = Api(
    ApiKey.DESCRIBE_CLUSTER,
    DescribeClusterRequest,
    DescribeClusterResponse,
    (0, 2),
    _describe_cluster,
    _describe_cluster_error,
    authorize=cluster_rule(Operation.DESCRIBE),
)
# librdkafka has no DescribeLogDirs; kafka-python sends up to 5.  Not 5 (it
# only adds is_cordoned): kafka-python takes a broker serving v5 for Kafka
# 4.3 and gates features on that.  v4 adds the volume's bytes; v0 is not in
# the specs kafka-python ships.
DESCRIBE_LOG_DIRS: Final[Api[DescribeLogDirsRequestBody, DescribeLogDirsResponse]] = Api(
    ApiKey.DESCRIBE_LOG_DIRS,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    (1, 4),
    _describe_log_dirs,
    _describe_log_dirs_error,
    authorize=cluster_rule(Operation.DESCRIBE),
)
# librdkafka and kafka-python send 2 (flexible); 0 and 1 have the same fields.
DELETE_RECORDS: Final[Api[DeleteRecordsRequestBody, DeleteRecordsResponse]] = Api(
    ApiKey.DELETE_RECORDS,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    (0, 2),
    _delete_records,
    _delete_records_error,
    authorize=topics_rule("topics", Operation.DELETE, "topics"),
)

APIS: Final[tuple[Api[Any, ResponseBody], ...]] = (
    DESCRIBE_CLUSTER,
    DESCRIBE_LOG_DIRS,
    DELETE_RECORDS,
)
