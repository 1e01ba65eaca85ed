"""Metadata: one broker (node 0) leading every partition, ISR ``[0]``.

Every topic (null list; an empty list at v0), or the named ones,
auto-creating those a client may create; INVALID_TOPIC_EXCEPTION and
UNKNOWN_TOPIC_OR_PARTITION per topic.  Replication factor 1 is the only one
there is: durability comes from the WAL and the object store, not replicas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from kfs_core.log.topic_cache import TopicInfo as LogTopicInfo
from kfs_core.security.acls import Operation, ResourceType
from kfs_core.server.apis.access import TOPIC_DENIED, Checker, Plan, split, with_items
from kfs_core.server.apis.base import (
    LEADER_EPOCH,
    NODE_ID,
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
        topics = [topic_metadata(info) for info in await context.topics.all()]
    else:
        topics = [await _one_topic(context, entry, allow_create) for entry in requested]
    for topic in topics:
        context.count_error(ApiKey.METADATA, topic.error_code)
    return MetadataResponse(
        version=request.api_version,
        throttle_time_ms=0,
        brokers=[broker_entry(context.advertised)],
        cluster_id=options.cluster_id,
        controller_id=NODE_ID,
        topics=topics,
    )


_Topic = MetadataResponse.MetadataResponseTopic


async def _one_topic(context: RequestContext, entry: MetadataTopic, allow_create: bool) -> _Topic:
    name = entry.name
    topic = MetadataResponse.MetadataResponseTopic
    if name is None:  # named by id only (v10+): KFS does not look topics up by id
        return topic(
            error_code=ErrorCode.UNKNOWN_TOPIC_ID,
            name=None,
            topic_id=getattr(entry, "topic_id", None),
            is_internal=False,
            partitions=[],
        )
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
    return topic_metadata(info)


def broker_entry(advertised: tuple[str, int]) -> MetadataResponse.MetadataResponseBroker:
    """This broker as Metadata lists it, at the (host, port) the connection's listener advertises."""
    host, port = advertised
    return MetadataResponse.MetadataResponseBroker(node_id=NODE_ID, host=host, port=port, rack=None)


def topic_metadata(info: LogTopicInfo) -> _Topic:
    """A topic's Metadata entry: every partition led by this broker."""
    topic = MetadataResponse.MetadataResponseTopic
    partition = topic.MetadataResponsePartition
    return topic(
        error_code=0,
        name=info.name,
        topic_id=topic_uuid(info.topic_id),
        is_internal=info.name.startswith("__"),
        partitions=[
            partition(
                error_code=0,
                partition_index=index,
                leader_id=NODE_ID,
                leader_epoch=LEADER_EPOCH,
                replica_nodes=[NODE_ID],
                isr_nodes=[NODE_ID],
                offline_replicas=[],
            )
            for index in range(info.partitions)
        ],
    )


def _brokers(
    _: Request[Any], options: BrokerOptions
) -> list[MetadataResponse.MetadataResponseBroker]:
    return [broker_entry(advertised_address(options))]


def _cluster_id(_: Request[Any], options: BrokerOptions) -> str:
    return options.cluster_id


error_body = schema_error_body(
    MetadataResponse,
    {
        "brokers": Derived(_brokers),
        "cluster_id": Derived(_cluster_id),
        "controller_id": NODE_ID,
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
    plan = split(request, "topics", lambda t: may(Operation.DESCRIBE, ResourceType.TOPIC, t.name or ""),
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
    """A listing of every topic shows only those the principal may DESCRIBE."""
    if _lists_every_topic(request):
        response.topics = [
            t
            for t in response.topics or []
            if may(Operation.DESCRIBE, ResourceType.TOPIC, t.name or "")
        ]
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
