"""The consumer-group APIs, answered by the group coordinator (`kfs_core.groups`).

FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, ListGroups, DescribeGroups, DeleteGroups and OffsetDelete.  This
module only translates: wire fields in, `GroupCoordinator` calls, wire fields
out; a `GroupError` becomes its Kafka error code.

A group's coordinator is the daemon leading its ``__consumer_offsets``
partition (`RequestContext.coordinator`): FindCoordinator names it
(COORDINATOR_NOT_AVAILABLE while no daemon leads it), and every other
daemon answers the group's requests NOT_COORDINATOR, per group where a
request names several; ListGroups lists the groups this daemon
coordinates.  A transactional id's coordinator is the daemon asked, so a
transactional producer gets InitProducerId's clear refusal.

The KIP-848 ConsumerGroupHeartbeat API is not offered, so clients use the
classic protocol (librdkafka's ``group.protocol=classic`` default;
kafka-python, aiokafka and KafkaJS have only the classic one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from kfs_core.errors import KfsError, MemberIdRequired
from kfs_core.groups.coordinator import CommitRequest
from kfs_core.security.acls import Operation, ResourceType
from kfs_core.server.apis.access import (
    GROUP_DENIED,
    TOPIC_DENIED,
    Checker,
    Plan,
    Rule,
    group_rule,
    split,
)
from kfs_core.server.apis.base import (
    Api,
    error_code_for,
    log_failure,
    message_of,
)
from kfs_core.server.apis.error_bodies import ITEM, Derived, Mirror, schema_error_body
from kfs_core.server.protocol.errors import ErrorCode
from kfs_core.server.protocol.messages import (
    ApiKey,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kfs_core.server.protocol.responses import (
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    FindCoordinatorResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListGroupsResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)

if TYPE_CHECKING:
    from kfs_core.server.apis.context import BrokerOptions, RequestContext
    from kfs_core.server.protocol import Request
    from kfs_core.server.protocol.bodies import (
        DeleteGroupsRequestBody,
        DescribeGroupsRequestBody,
        FindCoordinatorRequestBody,
        HeartbeatRequestBody,
        JoinGroupRequestBody,
        LeaveGroupRequestBody,
        OffsetCommitRequestBody,
        OffsetDeleteRequestBody,
        OffsetFetchRequestBody,
        OffsetFetchTopic,
        SyncGroupRequestBody,
    )

__all__ = [
    "APIS",
    "DELETE_GROUPS",
    "DESCRIBE_GROUPS",
    "FIND_COORDINATOR",
    "HEARTBEAT",
    "JOIN_GROUP",
    "LEAVE_GROUP",
    "LIST_GROUPS",
    "OFFSET_COMMIT",
    "OFFSET_DELETE",
    "OFFSET_FETCH",
    "SYNC_GROUP",
]

COORDINATOR_KEY_GROUP: Final = 0
COORDINATOR_KEY_TRANSACTION: Final = 1
# KIP-394: JoinGroup v4+ learns its member id before it joins.
_MEMBER_ID_REQUIRED_FROM: Final = 4


def _code(exc: BaseException, what: str) -> ErrorCode:
    code = error_code_for(exc)
    log_failure(what, exc, code)
    return code


# --- FindCoordinator ------------------------------------------------------------------


async def _find_coordinator(
    context: RequestContext, request: Request[FindCoordinatorRequestBody]
) -> FindCoordinatorResponse:
    body = request.body
    keys = list(body.coordinator_keys) if request.api_version >= 4 else [body.key]
    key_type = getattr(body, "key_type", COORDINATOR_KEY_GROUP)
    answers: list[FindCoordinatorResponse.Coordinator] = []
    for key in keys:
        code, message = ErrorCode.NONE, None
        node_id, (host, port) = context.cluster.node_id, context.advertised
        if key_type not in (COORDINATOR_KEY_GROUP, COORDINATOR_KEY_TRANSACTION):
            code, message = ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}"
        elif key_type == COORDINATOR_KEY_GROUP and not key:
            code, message = ErrorCode.INVALID_GROUP_ID, "the group id is empty"
        elif not key:
            code, message = ErrorCode.INVALID_REQUEST, "the transactional id is empty"
        else:
            group = key_type == COORDINATOR_KEY_GROUP
            what = f"group {key!r}" if group else f"transactional id {key!r}"
            try:
                if group:
                    await context.known_offsets_topic()
                    node_id = context.coordinator(key).node_id
                else:
                    node_id = (await context.transaction_coordinator(key)).node_id
            except KfsError as exc:  # the registry cannot be read or written now
                message = f"the coordinator of {what} cannot be found now: {exc}"
                node_id = -1
            found = _reachable(context, node_id)
            if found is None:
                code = ErrorCode.COORDINATOR_NOT_AVAILABLE
                message = message or f"no live daemon coordinates {what} now"
            else:
                host, port = found
        context.count_error(ApiKey.FIND_COORDINATOR, code)
        ok = code == ErrorCode.NONE
        answers.append(
            FindCoordinatorResponse.Coordinator(
                key=key,
                node_id=node_id if ok else -1,
                host=host if ok else "",
                port=port if ok else -1,
                error_code=int(code),
                error_message=message,
            )
        )
    if request.api_version >= 4:
        return FindCoordinatorResponse(
            version=request.api_version, throttle_time_ms=0, coordinators=answers
        )
    (answer,) = answers  # before v4 the one key's answer is the response's own fields
    return FindCoordinatorResponse(
        version=request.api_version,
        throttle_time_ms=0,
        node_id=answer.node_id,
        host=answer.host,
        port=answer.port,
        error_code=answer.error_code,
        error_message=answer.error_message,
    )


def _reachable(context: RequestContext, node_id: int) -> tuple[str, int] | None:
    """Where a client on this request's listener reaches live node ``node_id``, if it can."""
    for node, address in context.brokers():
        if node.node_id == node_id:
            return address
    return None


# --- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ----------------------------------------


async def _join_group(
    context: RequestContext, request: Request[JoinGroupRequestBody]
) -> JoinGroupResponse:
    body = request.body
    version = request.api_version
    try:
        await context.check_coordinator(body.group_id)
        result = await context.groups.join(
            body.group_id,
            body.member_id,
            protocol_type=body.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
            session_timeout_ms=body.session_timeout_ms,
            rebalance_timeout_ms=getattr(body, "rebalance_timeout_ms", -1),
            instance_id=getattr(body, "group_instance_id", None),
            client_id=request.client_id or "",
            client_host=context.client_host,
            require_known_member_id=version >= _MEMBER_ID_REQUIRED_FROM,
        )
    except MemberIdRequired as exc:
        context.count_error(ApiKey.JOIN_GROUP, ErrorCode.MEMBER_ID_REQUIRED)
        required = _join_group_error(request, ErrorCode.MEMBER_ID_REQUIRED, None, context.options)
        required.member_id = exc.member_id  # the id to join with next time (KIP-394)
        return required
    except Exception as exc:  # noqa: BLE001 - any failure is the response's error code
        code = _code(exc, f"join group {body.group_id!r}")
        context.count_error(ApiKey.JOIN_GROUP, code)
        return _join_group_error(request, code, None, context.options)
    member = JoinGroupResponse.JoinGroupResponseMember
    return JoinGroupResponse(
        version=request.api_version,
        throttle_time_ms=0,
        error_code=0,
        generation_id=result.generation,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        leader=result.leader_id,
        skip_assignment=False,
        member_id=result.member_id,
        members=[
            member(member_id=m.member_id, group_instance_id=m.instance_id, metadata=m.metadata)
            for m in result.members
        ],
    )


def _no_protocol_name(request: Request[Any], _: BrokerOptions) -> str | None:
    # v7 made the name nullable, and an error answers null from then on.
    return "" if request.api_version < 7 else None


def _member_id(request: Request[JoinGroupRequestBody], _: BrokerOptions) -> str:
    return request.body.member_id


_join_group_error = schema_error_body(
    JoinGroupResponse,
    {"protocol_name": Derived(_no_protocol_name), "member_id": Derived(_member_id)},
)


async def _sync_group(
    context: RequestContext, request: Request[SyncGroupRequestBody]
) -> SyncGroupResponse:
    body = request.body
    try:
        await context.check_coordinator(body.group_id)
        assignments: dict[str, bytes] = {}
        for a in body.assignments:
            assignments[a.member_id] = bytes(a.assignment)
        result = await context.groups.sync(
            body.group_id,
            body.member_id,
            body.generation_id,
            assignments,
            instance_id=getattr(body, "group_instance_id", None),
            protocol_type=getattr(body, "protocol_type", None),
            protocol_name=getattr(body, "protocol_name", None),
        )
    except Exception as exc:  # noqa: BLE001 - any failure is the response's error code
        code = _code(exc, f"sync group {body.group_id!r}")
        context.count_error(ApiKey.SYNC_GROUP, code)
        return _sync_error(request, code, None, context.options)
    return SyncGroupResponse(
        version=request.api_version,
        throttle_time_ms=0,
        error_code=0,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


_sync_error = schema_error_body(
    SyncGroupResponse, {"protocol_type": None, "protocol_name": None, "assignment": b""}
)


async def _heartbeat(
    context: RequestContext, request: Request[HeartbeatRequestBody]
) -> HeartbeatResponse:
    body = request.body
    code = ErrorCode.NONE
    try:
        await context.check_coordinator(body.group_id)
        context.groups.heartbeat(
            body.group_id,
            body.member_id,
            body.generation_id,
            instance_id=getattr(body, "group_instance_id", None),
        )
    except Exception as exc:  # noqa: BLE001 - any failure is the response's error code
        code = _code(exc, f"heartbeat of group {body.group_id!r}")
    context.count_error(ApiKey.HEARTBEAT, code)
    return HeartbeatResponse(version=request.api_version, throttle_time_ms=0, error_code=int(code))


async def _leave_group(
    context: RequestContext, request: Request[LeaveGroupRequestBody]
) -> LeaveGroupResponse:
    body = request.body
    batched = request.api_version >= 3
    departures: list[tuple[str, str | None]] = (
        [(m.member_id, m.group_instance_id) for m in body.members]
        if batched
        else [(body.member_id, None)]
    )
    answer = LeaveGroupResponse.MemberResponse
    try:
        await context.check_coordinator(body.group_id)
        outcomes = context.groups.leave(body.group_id, departures)
    except Exception as exc:  # noqa: BLE001 - any failure is the response's error code
        code = _code(exc, f"leave group {body.group_id!r}")
        context.count_error(ApiKey.LEAVE_GROUP, code)
        return _leave_error(request, code, None, context.options)
    codes = [ErrorCode.NONE if o is None else error_code_for(o) for o in outcomes]
    for code in codes:
        context.count_error(ApiKey.LEAVE_GROUP, code)
    if not batched:
        return LeaveGroupResponse(
            version=request.api_version, throttle_time_ms=0, error_code=int(codes[0]), members=[]
        )
    return LeaveGroupResponse(
        version=request.api_version,
        throttle_time_ms=0,
        error_code=0,
        members=[
            answer(member_id=member_id, group_instance_id=instance_id, error_code=int(code))
            for (member_id, instance_id), code in zip(departures, codes, strict=True)
        ],
    )


_leave_error = schema_error_body(LeaveGroupResponse, {})


# --- OffsetCommit, OffsetFetch, OffsetDelete -----------------------------------------------


async def _offset_commit(
    context: RequestContext, request: Request[OffsetCommitRequestBody]
) -> OffsetCommitResponse:
    body = request.body
    requests = [
        CommitRequest(
            topic=t.name,
            partition=p.partition_index,
            offset=p.committed_offset,
            leader_epoch=getattr(p, "committed_leader_epoch", -1),
            metadata=p.committed_metadata,
        )
        for t in body.topics
        for p in t.partitions
    ]
    try:
        await context.check_coordinator(body.group_id)
        outcomes: Sequence[BaseException | None] = await context.groups.commit(
            body.group_id,
            requests,
            member_id=body.member_id,
            generation=body.generation_id_or_member_epoch,
            instance_id=getattr(body, "group_instance_id", None),
        )
    except Exception as exc:  # noqa: BLE001 - any failure is every commit's error code
        code = _code(exc, f"offset commit of group {body.group_id!r}")
        outcomes = [exc] * len(requests)
    answer = OffsetCommitResponse.OffsetCommitResponseTopic
    by_topic: dict[str, list[Any]] = {}
    for commit, outcome in zip(requests, outcomes, strict=True):
        code = ErrorCode.NONE if outcome is None else error_code_for(outcome)
        context.count_error(ApiKey.OFFSET_COMMIT, code)
        by_topic.setdefault(commit.topic, []).append(
            answer.OffsetCommitResponsePartition(
                partition_index=commit.partition, error_code=int(code)
            )
        )
    return OffsetCommitResponse(
        version=request.api_version,
        throttle_time_ms=0,
        topics=[answer(name=name, partitions=parts) for name, parts in by_topic.items()],
    )


async def _fetched_topics(
    context: RequestContext,
    group_id: str,
    topics: Sequence[OffsetFetchTopic] | None,
    flexible_groups: bool,
    require_stable: bool = False,
) -> list[Any]:
    """The committed offsets of ``topics`` (None: every committed one) as response topics.

    ``require_stable`` (KIP-447): a partition with a transactional commit
    still pending answers UNSTABLE_OFFSET_COMMIT, and the client asks again.
    """
    await context.check_coordinator(group_id)
    unstable = context.groups.pending_transactional(group_id) if require_stable else set()
    response = OffsetFetchResponse
    # v8+ nests topics in groups, with classes of their own names: the same fields.
    topic_class: Any = (
        response.OffsetFetchResponseGroup.OffsetFetchResponseTopics
        if flexible_groups
        else response.OffsetFetchResponseTopic
    )
    partition_class: Any = (
        topic_class.OffsetFetchResponsePartitions
        if flexible_groups
        else topic_class.OffsetFetchResponsePartition
    )
    if topics is None:
        committed = context.groups.committed(group_id)
        wanted: dict[str, list[int]] = {}
        for topic, partition in sorted(committed):
            wanted.setdefault(topic, []).append(partition)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in topics}
        committed = context.groups.committed(
            group_id, [(name, p) for name, parts in wanted.items() for p in parts]
        )
    answers = []
    for name, partitions in wanted.items():
        rows = []
        for partition in partitions:
            found = committed.get((name, partition))
            if (name, partition) in unstable:
                found = None
            rows.append(
                partition_class(
                    partition_index=partition,
                    committed_offset=-1 if found is None else found.offset,
                    committed_leader_epoch=-1 if found is None else found.leader_epoch,
                    metadata="" if found is None else found.metadata,
                    error_code=int(
                        ErrorCode.UNSTABLE_OFFSET_COMMIT
                        if (name, partition) in unstable
                        else ErrorCode.NONE
                    ),
                )
            )
        answers.append(topic_class(name=name, partitions=rows))
    return answers


async def _offset_fetch(
    context: RequestContext, request: Request[OffsetFetchRequestBody]
) -> OffsetFetchResponse:
    body = request.body
    stable = bool(getattr(body, "require_stable", False))
    if request.api_version >= 8:
        group_class = OffsetFetchResponse.OffsetFetchResponseGroup
        groups = []
        for g in body.groups:
            try:
                topics = await _fetched_topics(
                    context, g.group_id, g.topics, flexible_groups=True, require_stable=stable
                )
                code = ErrorCode.NONE
            except Exception as exc:  # noqa: BLE001 - any failure is this group's error code
                topics, code = [], _code(exc, f"offset fetch of group {g.group_id!r}")
            context.count_error(ApiKey.OFFSET_FETCH, code)
            groups.append(group_class(group_id=g.group_id, topics=topics, error_code=int(code)))
        return OffsetFetchResponse(version=request.api_version, throttle_time_ms=0, groups=groups)
    try:
        topics = await _fetched_topics(
            context, body.group_id, body.topics, flexible_groups=False, require_stable=stable
        )
    except Exception as exc:  # noqa: BLE001 - any failure is the response's error code
        code = _code(exc, f"offset fetch of group {body.group_id!r}")
        context.count_error(ApiKey.OFFSET_FETCH, code)
        return _offset_fetch_error(request, code, message_of(exc), context.options)
    return OffsetFetchResponse(
        version=request.api_version, throttle_time_ms=0, error_code=0, topics=topics
    )


async def _offset_delete(
    context: RequestContext, request: Request[OffsetDeleteRequestBody]
) -> OffsetDeleteResponse:
    body = request.body
    keys = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    try:
        await context.check_coordinator(body.group_id)
        outcomes = await context.groups.delete_offsets(body.group_id, keys)
    except Exception as exc:  # noqa: BLE001 - any failure is the response's error code
        code = _code(exc, f"offset delete of group {body.group_id!r}")
        context.count_error(ApiKey.OFFSET_DELETE, code)
        return _offset_delete_error(request, code, None, context.options)
    answer = OffsetDeleteResponse.OffsetDeleteResponseTopic
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), outcome in zip(keys, outcomes, strict=True):
        code = ErrorCode.NONE if outcome is None else error_code_for(outcome)
        context.count_error(ApiKey.OFFSET_DELETE, code)
        by_topic.setdefault(topic, []).append(
            answer.OffsetDeleteResponsePartition(partition_index=partition, error_code=int(code))
        )
    return OffsetDeleteResponse(
        version=request.api_version,
        error_code=0,
        throttle_time_ms=0,
        topics=[answer(name=name, partitions=parts) for name, parts in by_topic.items()],
    )


_offset_delete_error = schema_error_body(OffsetDeleteResponse, {})


# --- ListGroups, DescribeGroups, DeleteGroups -----------------------------------------------


async def _list_groups(context: RequestContext, request: Request[Any]) -> ListGroupsResponse:
    body = request.body
    types = getattr(body, "types_filter", None) or []
    if types and not {t.lower() for t in types} & {"classic", "consumer"}:
        listed: list[tuple[str, str, str]] = []
    else:
        listed = [
            g
            for g in context.groups.list_groups(getattr(body, "states_filter", None) or None)
            if context.coordinator(g[0]).node_id == context.cluster.node_id
        ]
    group = ListGroupsResponse.ListedGroup
    return ListGroupsResponse(
        version=request.api_version,
        throttle_time_ms=0,
        error_code=0,
        groups=[
            group(group_id=g, protocol_type=kind, group_state=state, group_type="classic")
            for g, kind, state in listed
        ],
    )


_list_groups_error = schema_error_body(ListGroupsResponse, {})


async def _describe_groups(
    context: RequestContext, request: Request[DescribeGroupsRequestBody]
) -> DescribeGroupsResponse:
    described = DescribeGroupsResponse.DescribedGroup
    member = described.DescribedGroupMember
    groups = []
    for group_id in request.body.groups:
        try:
            await context.check_coordinator(group_id)
            d = context.groups.describe(group_id)
        except Exception as exc:  # noqa: BLE001 - any failure is this group's error code
            code = _code(exc, f"describe group {group_id!r}")
            context.count_error(ApiKey.DESCRIBE_GROUPS, code)
            groups.append(
                _describe_groups_error.entry(
                    request, "groups", group_id, code, message_of(exc), context.options
                )
            )
            continue
        groups.append(
            described(
                error_code=0,
                error_message=None,
                group_id=group_id,
                group_state=d.state.value,
                protocol_type=d.protocol_type,
                protocol_data=d.protocol_name,
                members=[
                    member(
                        member_id=m.member_id,
                        group_instance_id=m.instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata,
                        member_assignment=m.assignment,
                    )
                    for m in d.members
                ],
                authorized_operations=None,
            )
        )
    return DescribeGroupsResponse(version=request.api_version, throttle_time_ms=0, groups=groups)


_describe_groups_error = schema_error_body(
    DescribeGroupsResponse,
    {
        "groups": Mirror(
            "groups",
            {"group_id": ITEM},
            {
                "group_state": "",
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
                "authorized_operations": None,
            },
        )
    },
)


async def _delete_groups(
    context: RequestContext, request: Request[DeleteGroupsRequestBody]
) -> DeleteGroupsResponse:
    result = DeleteGroupsResponse.DeletableGroupResult
    results = []
    for group_id in request.body.groups_names:
        code = ErrorCode.NONE
        try:
            await context.check_coordinator(group_id)
            await context.groups.delete_group(group_id)
        except Exception as exc:  # noqa: BLE001 - any failure is this group's error code
            code = _code(exc, f"delete group {group_id!r}")
        context.count_error(ApiKey.DELETE_GROUPS, code)
        results.append(result(group_id=group_id, error_code=int(code)))
    return DeleteGroupsResponse(version=request.api_version, throttle_time_ms=0, results=results)


_delete_groups_error = schema_error_body(
    DeleteGroupsResponse, {"results": Mirror("groups_names", {"group_id": ITEM})}
)


# --- error bodies -----------------------------------------------------------------------------


_find_coordinator_error = schema_error_body(
    FindCoordinatorResponse,
    {
        "node_id": -1,
        "host": "",
        "port": -1,
        "coordinators": Mirror(
            "coordinator_keys", {"key": ITEM}, {"node_id": -1, "host": "", "port": -1}
        ),
    },
)


_offset_commit_error = schema_error_body(
    OffsetCommitResponse,
    {
        "topics": Mirror(
            "topics",
            {"name": "name"},
            {"partitions": Mirror("partitions", {"partition_index": "partition_index"})},
        )
    },
)


_offset_fetch_error = schema_error_body(
    OffsetFetchResponse,
    {
        "groups": Mirror("groups", {"group_id": "group_id"}),
        "topics": Mirror(
            "topics",
            {"name": "name"},
            {
                "partitions": Mirror(
                    "partition_indexes",
                    {"partition_index": ITEM},
                    {"committed_offset": -1, "metadata": ""},
                )
            },
        ),
    },
)


_code_only_error = schema_error_body(HeartbeatResponse, {})


# kafka-python uses v4 (batched keys) when offered, librdkafka <= 2; v5/v6
# add transaction-abortable errors and share-group keys.
# --- authorization -------------------------------------------------------------------


def _authorize_find_coordinator(may: Checker, request: Request[Any]) -> Plan | None:
    """DESCRIBE on each group asked for, or on each transactional id."""
    body = request.body
    keys = body.coordinator_keys if request.api_version >= 4 else [body.key]
    if body.key_type == COORDINATOR_KEY_TRANSACTION:
        ok = all(
            may(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, k or "") for k in keys or []
        )
        return None if ok else Plan(whole=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    ok = all(may(Operation.DESCRIBE, ResourceType.GROUP, k or "") for k in keys or [])
    return None if ok else Plan(whole=GROUP_DENIED)


def _group_then_topics(op: Operation) -> Rule:
    """``op`` on the group (else all denied), then READ on each topic."""

    def rule(may: Checker, request: Request[Any]) -> Plan | None:
        if not may(op, ResourceType.GROUP, request.body.group_id):
            return Plan(whole=GROUP_DENIED)
        return split(request, "topics", lambda t: may(Operation.READ, ResourceType.TOPIC, t.name),
                     TOPIC_DENIED, "topics")  # fmt: skip

    return rule


def _authorize_offset_fetch(may: Checker, request: Request[Any]) -> Plan | None:
    """DESCRIBE on the group(s) and on each topic named (all of them filtered afterwards)."""
    body = request.body
    if request.api_version >= 8:
        for group in body.groups or []:
            if not may(Operation.DESCRIBE, ResourceType.GROUP, group.group_id):
                return Plan(whole=GROUP_DENIED)
            for topic in group.topics or []:
                if not may(Operation.DESCRIBE, ResourceType.TOPIC, topic.name):
                    return Plan(whole=TOPIC_DENIED)
        return None
    if not may(Operation.DESCRIBE, ResourceType.GROUP, body.group_id):
        return Plan(whole=GROUP_DENIED)
    if body.topics is None:
        return None  # every topic the group has: filtered afterwards
    return split(request, "topics", lambda t: may(Operation.DESCRIBE, ResourceType.TOPIC, t.name),
                 TOPIC_DENIED, "topics")  # fmt: skip


def _visible_offsets(
    may: Checker, request: Request[Any], response: OffsetFetchResponse
) -> OffsetFetchResponse:
    """Every topic of a group (v1-v7, no topics named) shows only those it may DESCRIBE."""
    if request.api_version < 8 and request.body.topics is None:
        response.topics = [
            t for t in response.topics or [] if may(Operation.DESCRIBE, ResourceType.TOPIC, t.name)
        ]
    return response


def _visible_groups(
    may: Checker, request: Request[Any], response: ListGroupsResponse
) -> ListGroupsResponse:
    """DESCRIBE on the cluster lists every group; else only the groups it may DESCRIBE."""
    if not may.cluster(Operation.DESCRIBE):
        response.groups = [
            g
            for g in response.groups or []
            if may(Operation.DESCRIBE, ResourceType.GROUP, g.group_id)
        ]
    return response


def _authorize_describe_groups(may: Checker, request: Request[Any]) -> Plan | None:
    return split(request, "groups", lambda g: may(Operation.DESCRIBE, ResourceType.GROUP, g),
                 GROUP_DENIED, "groups")  # fmt: skip


def _authorize_delete_groups(may: Checker, request: Request[Any]) -> Plan | None:
    return split(request, "groups_names", lambda g: may(Operation.DELETE, ResourceType.GROUP, g),
                 GROUP_DENIED, "results")  # fmt: skip


FIND_COORDINATOR: Final[Api[FindCoordinatorRequestBody, FindCoordinatorResponse]] = Api(
    ApiKey.FIND_COORDINATOR,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    (0, 4),
    _find_coordinator,
    _find_coordinator_error,
    authorize=_authorize_find_coordinator,
)
# kafka-python sends <= 7, librdkafka <= 5; v8/v9 are KIP-800 reasons and
# KIP-814 skipped assignments.
JOIN_GROUP: Final[Api[JoinGroupRequestBody, JoinGroupResponse]] = Api(
    ApiKey.JOIN_GROUP,
    JoinGroupRequest,
    JoinGroupResponse,
    (0, 7),
    _join_group,
    _join_group_error,
    authorize=group_rule(Operation.READ),
)
HEARTBEAT: Final[Api[HeartbeatRequestBody, HeartbeatResponse]] = Api(
    ApiKey.HEARTBEAT,
    HeartbeatRequest,
    HeartbeatResponse,
    (0, 4),
    _heartbeat,
    _code_only_error,
    authorize=group_rule(Operation.READ),
)
LEAVE_GROUP: Final[Api[LeaveGroupRequestBody, LeaveGroupResponse]] = Api(
    ApiKey.LEAVE_GROUP,
    LeaveGroupRequest,
    LeaveGroupResponse,
    (0, 5),
    _leave_group,
    _leave_error,
    authorize=group_rule(Operation.READ),
)
SYNC_GROUP: Final[Api[SyncGroupRequestBody, SyncGroupResponse]] = Api(
    ApiKey.SYNC_GROUP,
    SyncGroupRequest,
    SyncGroupResponse,
    (0, 5),
    _sync_group,
    _sync_error,
    authorize=group_rule(Operation.READ),
)
# v9 is v8 plus KIP-848 member epochs (librdkafka 9, kafka-python 8); v10
# names topics by id.
OFFSET_COMMIT: Final[Api[OffsetCommitRequestBody, OffsetCommitResponse]] = Api(
    ApiKey.OFFSET_COMMIT,
    OffsetCommitRequest,
    OffsetCommitResponse,
    (2, 9),
    _offset_commit,
    _offset_commit_error,
    authorize=_group_then_topics(Operation.READ),
)
OFFSET_FETCH: Final[Api[OffsetFetchRequestBody, OffsetFetchResponse]] = Api(
    ApiKey.OFFSET_FETCH,
    OffsetFetchRequest,
    OffsetFetchResponse,
    (1, 9),
    _offset_fetch,
    _offset_fetch_error,
    authorize=_authorize_offset_fetch,
    filter_response=_visible_offsets,
)
# v4 adds the states filter (kfs groups list --state), v5 the group-type filter.
LIST_GROUPS = Api(
    ApiKey.LIST_GROUPS,
    ListGroupsRequest,
    ListGroupsResponse,
    (0, 5),
    _list_groups,
    _list_groups_error,
    filter_response=_visible_groups,
)
# v6 adds per-group error messages; KFS answers authorized operations as "not requested".
DESCRIBE_GROUPS: Final[Api[DescribeGroupsRequestBody, DescribeGroupsResponse]] = Api(
    ApiKey.DESCRIBE_GROUPS,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    (0, 6),
    _describe_groups,
    _describe_groups_error,
    authorize=_authorize_describe_groups,
)
DELETE_GROUPS: Final[Api[DeleteGroupsRequestBody, DeleteGroupsResponse]] = Api(
    ApiKey.DELETE_GROUPS,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    (0, 2),
    _delete_groups,
    _delete_groups_error,
    authorize=_authorize_delete_groups,
)
OFFSET_DELETE: Final[Api[OffsetDeleteRequestBody, OffsetDeleteResponse]] = Api(
    ApiKey.OFFSET_DELETE,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    (0, 0),
    _offset_delete,
    _offset_delete_error,
    authorize=_group_then_topics(Operation.DELETE),
)

APIS: Final = (
    FIND_COORDINATOR,
    JOIN_GROUP,
    SYNC_GROUP,
    HEARTBEAT,
    LEAVE_GROUP,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    LIST_GROUPS,
    DESCRIBE_GROUPS,
    DELETE_GROUPS,
    OFFSET_DELETE,
)
