"""ListOffsets: earliest (-2), latest (-1), max timestamp (-3) and by time; OffsetForLeaderEpoch.

ListOffsets.  -3 (KIP-734, v7+) answers the first record with the largest
timestamp; the tiered-storage specs (-4 and below, v8+) get INVALID_REQUEST.  (Committed consumer offsets are the groups'
business: `kfs_core.server.apis.groups`.)  From v4 a partition's
``current_leader_epoch`` older than this daemon's lease epoch answers
FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH; an answer carries
this daemon's epoch.  A partition another daemon serves is
NOT_LEADER_OR_FOLLOWER, from the log.

OffsetForLeaderEpoch (KIP-101, KIP-320).  A consumer that read records of
leader epoch ``E`` asks, after a leader change, where ``E`` ended, to know
whether its position is still in the log.  Each partition's answer is
Kafka's (`kfs_core.catalog.epochs`, from the lease history in the catalog):
for the newest epoch the high watermark, for an older one the start of the
first epoch after it with the largest known epoch at or below it, and
UNDEFINED (-1, -1) for a negative epoch or one newer than the newest.
``current_leader_epoch`` -1 asks for no check; any other value than this
daemon's lease epoch is FENCED_LEADER_EPOCH (older, negative ones too, as
Kafka) or UNKNOWN_LEADER_EPOCH (newer); a partition another daemon serves
is NOT_LEADER_OR_FOLLOWER, an unknown topic or partition
UNKNOWN_TOPIC_OR_PARTITION.  ``replica_id`` (v3+: -1 a consumer, -2 a debug
client, else a follower) changes nothing in the answer, as in Kafka: KFS
has no followers, and every caller is told the leader's history.  The ACLs
allow it with CLUSTER_ACTION on the cluster (what brokers' replica
fetchers hold) or, topic by topic, DESCRIBE, as Kafka does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from kfs_core.security.acls import Operation
from kfs_core.server.apis.access import Checker, Plan, topics_rule
from kfs_core.server.apis.base import Api, Refused, error_code_for, log_failure
from kfs_core.server.apis.error_bodies import Mirror, schema_error_body
from kfs_core.server.apis.fetch import READ_COMMITTED
from kfs_core.server.protocol.errors import ErrorCode
from kfs_core.server.protocol.messages import (
    ApiKey,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
)
from kfs_core.server.protocol.responses import ListOffsetsResponse, OffsetForLeaderEpochResponse

if TYPE_CHECKING:
    from kfs_core.server.apis.context import RequestContext
    from kfs_core.server.protocol import Request
    from kfs_core.server.protocol.bodies import (
        ListOffsetsRequestBody,
        OffsetForLeaderEpochRequestBody,
    )

__all__ = ["APIS", "LIST_OFFSETS", "OFFSET_FOR_LEADER_EPOCH"]

MAX_TIMESTAMP: Final = -3  # the largest timestamp (-2 the log start, -1 the high watermark)
MAX_TIMESTAMP_VERSION: Final = 7  # the first ListOffsets version that may ask for it


async def handle(
    context: RequestContext, request: Request[ListOffsetsRequestBody]
) -> ListOffsetsResponse:
    answer = ListOffsetsResponse.ListOffsetsTopicResponse
    partition_answer = answer.ListOffsetsPartitionResponse
    topics = []
    read_committed = getattr(request.body, "isolation_level", 0) == READ_COMMITTED
    for topic in request.body.topics:
        partitions = []
        for p in topic.partitions:
            code, offset, timestamp = ErrorCode.NONE, -1, -1
            try:
                epoch_error = context.leader_epoch_error(
                    topic.name, p.partition_index, getattr(p, "current_leader_epoch", -1)
                )
                if epoch_error != ErrorCode.NONE:
                    raise Refused(epoch_error, f"leader epoch: {epoch_error.name}")
                if p.timestamp < MAX_TIMESTAMP or (
                    p.timestamp == MAX_TIMESTAMP and request.api_version < MAX_TIMESTAMP_VERSION
                ):
                    # The tiered-storage specs; -3 before v7 (Kafka's clients never send it).
                    raise Refused(
                        ErrorCode.INVALID_REQUEST,
                        f"ListOffsets timestamp {p.timestamp} is not supported",
                    )
                found = await context.log.list_offsets(
                    topic.name, p.partition_index, p.timestamp, read_committed=read_committed
                )
                offset, timestamp = found.offset, found.timestamp
            except Exception as exc:  # noqa: BLE001 - any failure is this partition's error code
                code = error_code_for(exc)
                log_failure(f"list offsets of {topic.name}-{p.partition_index}", exc, code)
            context.count_error(ApiKey.LIST_OFFSETS, code)
            partitions.append(
                partition_answer(
                    partition_index=p.partition_index,
                    error_code=code,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=context.local_epoch(topic.name, p.partition_index)
                    if code == ErrorCode.NONE
                    else -1,
                )
            )
        topics.append(answer(name=topic.name, partitions=partitions))
    return ListOffsetsResponse(version=request.api_version, throttle_time_ms=0, topics=topics)


error_body = schema_error_body(
    ListOffsetsResponse,
    {
        "topics": Mirror(
            "topics",
            {"name": "name"},
            {
                "partitions": Mirror(
                    "partitions",
                    {"partition_index": "partition_index"},
                    {"timestamp": -1, "offset": -1},
                )
            },
        )
    },
)


# v0 (offset arrays) is gone from the spec.  librdkafka sends <= 7;
# kafka-python would send 11, but v8+ only add tiered-storage offset specs
# (-4, -5, -6) and a timeout, none of which KFS implements.
LIST_OFFSETS: Final[Api[ListOffsetsRequestBody, ListOffsetsResponse]] = Api(
    ApiKey.LIST_OFFSETS,
    ListOffsetsRequest,
    ListOffsetsResponse,
    (1, 7),
    handle,
    error_body,
    authorize=topics_rule("topics", Operation.DESCRIBE, "topics"),
)

# --- OffsetForLeaderEpoch ---------------------------------------------------------

NO_EPOCH_CHECK: Final = -1  # a current_leader_epoch of -1 asks for no check


async def handle_offset_for_leader_epoch(
    context: RequestContext, request: Request[OffsetForLeaderEpochRequestBody]
) -> OffsetForLeaderEpochResponse:
    result = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
    answer = result.EpochEndOffset
    topics = []
    for topic in request.body.topics:
        partitions = []
        for p in topic.partitions:
            code, epoch, end_offset = ErrorCode.NONE, -1, -1
            try:
                # Opening the partition first (if it is ours and closed) gives it its epoch.
                found = await context.log.end_offset_for_epoch(
                    topic.topic, p.partition, p.leader_epoch
                )
                current = getattr(p, "current_leader_epoch", NO_EPOCH_CHECK)
                epoch_error = _current_epoch_error(context, topic.topic, p.partition, current)
                if epoch_error != ErrorCode.NONE:
                    raise Refused(epoch_error, f"leader epoch: {epoch_error.name}")
                epoch, end_offset = found
            except Exception as exc:  # noqa: BLE001 - any failure is this partition's error code
                code = error_code_for(exc)
                log_failure(f"end offset of epoch in {topic.topic}-{p.partition}", exc, code)
            context.count_error(ApiKey.OFFSET_FOR_LEADER_EPOCH, code)
            partitions.append(
                answer(
                    error_code=code,
                    partition=p.partition,
                    leader_epoch=epoch,
                    end_offset=end_offset,
                )
            )
        topics.append(result(topic=topic.topic, partitions=partitions))
    return OffsetForLeaderEpochResponse(
        version=request.api_version, throttle_time_ms=0, topics=topics
    )


def _current_epoch_error(
    context: RequestContext, topic: str, partition: int, current: int
) -> ErrorCode:
    """As Kafka: only -1 skips the check, so another negative epoch is older than any: fenced."""
    if current < NO_EPOCH_CHECK and context.cluster.local_epoch(topic, partition) is not None:
        return ErrorCode.FENCED_LEADER_EPOCH
    return context.leader_epoch_error(topic, partition, current)


offset_for_leader_epoch_error = schema_error_body(
    OffsetForLeaderEpochResponse,
    {
        "topics": Mirror(
            "topics",
            {"topic": "topic"},
            {
                "partitions": Mirror(
                    "partitions",
                    {"partition": "partition"},
                    {"leader_epoch": -1, "end_offset": -1},
                )
            },
        )
    },
)

_DESCRIBE_TOPICS = topics_rule("topics", Operation.DESCRIBE, "topics")


def _authorize_offset_for_leader_epoch(may: Checker, request: Request[Any]) -> Plan | None:
    """CLUSTER_ACTION on the cluster allows every topic; otherwise DESCRIBE on each (Kafka's)."""
    if may.cluster(Operation.CLUSTER_ACTION, log_denied=False):
        return None
    return _DESCRIBE_TOPICS(may, request)


# v0 and v1 are gone from the spec (Kafka 4.0); v2 adds current_leader_epoch,
# v3 replica_id, v4 is v3 flexible.  librdkafka sends 2, kafka-python 4.
OFFSET_FOR_LEADER_EPOCH: Final[
    Api[OffsetForLeaderEpochRequestBody, OffsetForLeaderEpochResponse]
] = Api(
    ApiKey.OFFSET_FOR_LEADER_EPOCH,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    (2, 4),
    handle_offset_for_leader_epoch,
    offset_for_leader_epoch_error,
    authorize=_authorize_offset_for_leader_epoch,
)

APIS: Final = (LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH)
