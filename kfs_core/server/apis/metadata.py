"""Metadata: every live daemon is a broker; each partition is led by the daemon that holds it.

Every topic (null list; an empty list at v0), or the named ones,
auto-creating those a client may create; INVALID_TOPIC_EXCEPTION and
UNKNOWN_TOPIC_OR_PARTITION per topic.  The brokers are the live daemons
(`ClusterView.live_nodes`) at the address of the listener the client came
through (a daemon without that listener is left out); the controller is
the lowest live node id.  Each partition's leader and leader epoch are
`ClusterView.leader`'s (no leader: LEADER_NOT_AVAILABLE for that
partition); a partition of a named topic that is assigned to this daemon
and held by nobody (epoch -1) is opened in the background, which takes its
lease, so the client's next Metadata carries its epoch.  Replicas and in-sync replicas are the leader and the next
brokers, up to the replication factor the topic was created with: what
Kafka tools expect to see, while durability comes from the WAL and the
object store, not from copies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from kfs_core.log.topic_cache import TopicInfo as LogTopicInfo
from kfs_core.security.acls import Operation, ResourceType
from kfs_core.server.apis.access import TOPIC_DENIED, Checker, Plan, split, with_items
from kfs_core.server.apis.base import (
    Api,
    advertised_address,
    error_code_for,
    log_failure,
)
from kfs_core.server.apis.error_bodies import Derived, Mirror, schema_error_body
from kfs_core.server.directory import topic_uuid
from kfs_core.server.protocol.errors import ErrorCode
from kfs_core.server.protocol.messages import ApiKey, MetadataRequest
from kfs_core.server.protocol.responses import MetadataResponse

if TYPE_CHECKING:
    from kfs_core.server.apis.context import BrokerOptions, RequestContext
    from kfs_core.server.protocol import Request
    from kfs_core.server.protocol.bodies import MetadataRequestBody, MetadataTopic

__all__ = ["APIS", "METADATA", "broker_entry", "topic_metadata"]


async def handle(
    context: RequestContext, request: Request[MetadataRequestBody]
) -> MetadataResponse:
    body = request.body
    requested = body.topics
    options = context.options
    allow_create = options.auto_create_topics and bool(
        getattr(body, "allow_auto_topic_creation", True)
    )
    if requested is None or (request.api_version == 0 and not requested):  # every topic
        topics = [await topic_metadata(context, info) for info in await context.topics.all()]
    else:
        topics = [await _one_topic(context, entry, allow_create) for entry in requested]
    for topic in topics:
        context.count_error(ApiKey.METADATA, topic.error_code)
        for partition in topic.partitions:
            context.count_error(ApiKey.METADATA, partition.error_code)
    return MetadataResponse(
        version=request.api_version,
        throttle_time_ms=0,
        brokers=[
            broker_entry(node.node_id, address, node.rack) for node, address in context.brokers()
        ],
        cluster_id=options.cluster_id,
        controller_id=context.controller_id(),
        topics=topics,
    )


_Topic = MetadataResponse.MetadataResponseTopic


async def _one_topic(context: RequestContext, entry: MetadataTopic, allow_create: bool) -> _Topic:
    name = entry.name
    topic = MetadataResponse.MetadataResponseTopic
    if not name:  # named by id only (v10+; the Java client sends the name "")
        topic_id = getattr(entry, "topic_id", None)
        found = (
            None if topic_id is None or topic_id.int == 0 else await context.topics.by_id(topic_id)
        )
        if found is None:
            return topic(
                error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                name=None,
                topic_id=topic_id,
                is_internal=False,
                partitions=[],
            )
        return await topic_metadata(context, found)
    info: LogTopicInfo | None
    try:
        if allow_create:
            info = await context.topics.lookup_or_create(name, context.options.default_partitions)
        else:
            info = await context.topics.lookup(name)
    except Exception as exc:  # noqa: BLE001 - any failure is this topic's error code
        code = error_code_for(exc)
        log_failure(f"metadata of topic {name!r}", exc, code)
        return topic(error_code=code, name=name, is_internal=False, partitions=[])
    if info is None:
        return topic(
            error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            name=name,
            is_internal=False,
            partitions=[],
        )
    named = await topic_metadata(context, info)
    context.open_unheld(info.name, info.partitions)
    return named


def broker_entry(
    node_id: int, address: tuple[str, int], rack: str | None = None
) -> MetadataResponse.MetadataResponseBroker:
    """A broker as Metadata lists it, at the (host, port) of the client's listener."""
    host, port = address
    return MetadataResponse.MetadataResponseBroker(node_id=node_id, host=host, port=port, rack=rack)


async def topic_metadata(context: RequestContext, info: LogTopicInfo) -> _Topic:
    """A topic's Metadata entry: each partition's leader, epoch and replicas, from the cluster."""
    topic = MetadataResponse.MetadataResponseTopic
    partition = topic.MetadataResponsePartition
    factor = await context.topics.replication_factor(info)
    partitions = []
    for index in range(info.partitions):
        leader = context.cluster.leader(info.name, index)
        replicas = context.replicas(leader.node_id, factor)
        partitions.append(
            partition(
                error_code=ErrorCode.NONE
                if leader.node_id >= 0
                else ErrorCode.LEADER_NOT_AVAILABLE,
                partition_index=index,
                leader_id=leader.node_id,
                leader_epoch=leader.epoch,
                replica_nodes=replicas,
                isr_nodes=replicas if leader.node_id >= 0 else [],
                offline_replicas=[],
            )
        )
    return topic(
        error_code=0,
        name=info.name,
        topic_id=topic_uuid(info.topic_id),
        is_internal=info.name.startswith("__"),
        partitions=partitions,
    )


def _brokers(
    _: Request[Any], options: BrokerOptions
) -> list[MetadataResponse.MetadataResponseBroker]:
    # An error body has no cluster view: this broker alone, as a client can always reach it.
    return [broker_entry(options.node_id, advertised_address(options))]


def _controller_id(_: Request[Any], options: BrokerOptions) -> int:
    return options.node_id


def _cluster_id(_: Request[Any], options: BrokerOptions) -> str:
    return options.cluster_id


error_body = schema_error_body(
    MetadataResponse,
    {
        "brokers": Derived(_brokers),
        "cluster_id": Derived(_cluster_id),
        "controller_id": Derived(_controller_id),
        "topics": Mirror("topics", {"name": "name"}, {"is_internal": False, "partitions": []}),
    },
)


# Both clients send 13, which only adds a top-level error code for KIP-1102
# rebootstrapping.  v10+ carry topic ids beside the names.
# --- authorization -------------------------------------------------------------------


def _lists_every_topic(request: Request[Any]) -> bool:
    topics = request.body.topics
    return topics is None or (request.api_version == 0 and not topics)


def _authorize(may: Checker, request: Request[Any]) -> Plan | None:
    """DESCRIBE on each topic named (a listing is filtered afterwards); CREATE to auto-create."""
    if _lists_every_topic(request):
        return None  # every topic: the listing is filtered afterwards
    # Topics named by id are checked once their names are known (`_visible_topics`).
    plan = split(request, "topics", lambda t: not t.name or may(Operation.DESCRIBE, ResourceType.TOPIC, t.name),
                 TOPIC_DENIED, "topics")  # fmt: skip
    if plan is not None and plan.whole is not None:
        return plan
    allowed_request = plan.request if plan is not None and plan.request is not None else request
    # As Kafka, a client that may not create topics is not told so on every Metadata request.
    if getattr(allowed_request.body, "allow_auto_topic_creation", False) and not (
        may.cluster(Operation.CREATE, log_denied=False)
        or all(
            may(Operation.CREATE, ResourceType.TOPIC, t.name or "", log_denied=False)
            for t in allowed_request.body.topics
        )
    ):
        allowed_request = with_items(allowed_request, "topics", list(allowed_request.body.topics))
        allowed_request.body.allow_auto_topic_creation = False
        if plan is None:
            return Plan(request=allowed_request)
        plan.request = allowed_request
    return plan


def _visible_topics(
    may: Checker, request: Request[Any], response: MetadataResponse
) -> MetadataResponse:
    """A listing of every topic shows only those the principal may DESCRIBE; so does a lookup by id."""
    if _lists_every_topic(request):
        response.topics = [
            t
            for t in response.topics or []
            if may(Operation.DESCRIBE, ResourceType.TOPIC, t.name or "")
        ]
        return response
    by_id = {t.topic_id for t in request.body.topics if not t.name}
    for i, t in enumerate(response.topics or []):
        if (
            t.topic_id in by_id
            and t.name
            and not may(Operation.DESCRIBE, ResourceType.TOPIC, t.name)
        ):
            response.topics[i] = MetadataResponse.MetadataResponseTopic(
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                name=None,
                topic_id=t.topic_id,
                is_internal=False,
                partitions=[],
            )
    return response


METADATA: Final[Api[MetadataRequestBody, MetadataResponse]] = Api(
    ApiKey.METADATA,
    MetadataRequest,
    MetadataResponse,
    (0, 12),
    handle,
    error_body,
    authorize=_authorize,
    filter_response=_visible_topics,
)

APIS: Final = (METADATA,)
