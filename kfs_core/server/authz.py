"""Authorizing requests the way Kafka does, before the handlers see them.

With ``KFS_AUTHORIZER=acl`` every request but ApiVersions and the SASL ones
is checked against the ACLs (`kfs_core.security.acls.Authorizer`) for the
connection's principal and host, per Kafka's table:

    Produce              WRITE topic            Fetch                READ topic
    ListOffsets          DESCRIBE topic         Metadata             DESCRIBE topic (listing
                                                                     shows only those); CREATE
                                                                     cluster or topic to auto-create
    OffsetCommit         READ group, READ topic OffsetFetch          DESCRIBE group, DESCRIBE topic
    OffsetDelete         DELETE group, READ topic
    FindCoordinator      DESCRIBE group         Join/Sync/Heartbeat/LeaveGroup   READ group
    DescribeGroups       DESCRIBE group         DeleteGroups         DELETE group
    ListGroups           DESCRIBE cluster, else only the groups it may DESCRIBE
    CreateTopics         CREATE cluster or topic               DeleteTopics / DeleteRecords  DELETE topic
    CreatePartitions     ALTER topic            DescribeConfigs      DESCRIBE_CONFIGS topic/cluster
    AlterConfigs, IncrementalAlterConfigs      ALTER_CONFIGS topic/cluster
    InitProducerId       IDEMPOTENT_WRITE cluster, or WRITE on any topic (KIP-679)
    DescribeCluster, DescribeLogDirs, DescribeAcls, DescribeUserScramCredentials   DESCRIBE cluster
    CreateAcls, DeleteAcls, AlterUserScramCredentials                          ALTER cluster

A denied topic (or group, in DescribeGroups and DeleteGroups) gets its
authorization error code in its own response entry while the allowed ones
are served: `check` splits the request, the handler sees only what is
allowed, and `Plan.merge` adds the error entries (built by the API's own
error body) to its response.  A request denied as a whole gets the error in
every slot.  Every denial is logged on ``kfs.audit``; allowed decisions are
logged once a minute per principal, operation and resource.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kfs_core.security.acls import CLUSTER_NAME, Authorizer, Operation, ResourceType
from kfs_core.security.sasl import Session
from kfs_core.server.protocol.errors import ErrorCode
from kfs_core.server.protocol.messages import ApiKey

if TYPE_CHECKING:
    from kfs_core.server.protocol import Request

__all__ = ["AuditLog", "Plan", "check", "filter_response"]

# A named channel, not __name__: operators route the audit trail on its own (README).
audit = logging.getLogger("kfs.audit")

TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class AuditLog:
    """One line per decision: every denial, and allowed decisions sampled once a minute per key."""

    def __init__(self, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self._clock = clock
        self._last: dict[tuple[str, str, int, int, str], float] = {}

    def decision(
        self, allowed: bool, session: Session, op: Operation, rtype: ResourceType, name: str,
        api: ApiKey,
    ) -> None:  # fmt: skip
        if allowed:
            key = (session.principal, session.host, int(op), int(rtype), name)
            now = self._clock()
            if now - self._last.get(key, -self.every_s) < self.every_s:
                return
            self._last[key] = now
            if len(self._last) > 100_000:
                self._last.pop(next(iter(self._last)))
        audit.info(
            "%s %s from %s: %s on %s %r (%s)",
            "ALLOWED" if allowed else "DENIED",
            session.principal,
            session.host or "?",
            op.name,
            rtype.name,
            name,
            api.name,
        )


@dataclasses.dataclass
class Plan:
    """What to do with a request the ACLs do not wholly allow."""

    whole: ErrorCode | None = None  # deny everything with this code
    request: Request | None = None  # the allowed part, for the handler
    denied: Request | None = None  # the denied part, answered with ``code``
    code: ErrorCode = TOPIC_DENIED
    field: str = ""  # the response's list the denied entries join

    def merge(self, response: Any, error_body: Callable[[Request, ErrorCode], Any]) -> Any:
        if self.denied is None:
            return response
        extra = getattr(error_body(self.denied, self.code), self.field) or []
        setattr(response, self.field, list(getattr(response, self.field) or []) + list(extra))
        return response


class _Checker:
    def __init__(
        self, authorizer: Authorizer, session: Session, audit_log: AuditLog, api: ApiKey
    ) -> None:
        self.authorizer, self.session, self.audit, self.api = authorizer, session, audit_log, api

    def __call__(
        self, op: Operation, rtype: ResourceType, name: str, *, log_denied: bool = True
    ) -> bool:
        ok = self.authorizer.authorize(self.session.principal, self.session.host, op, rtype, name)
        if ok or log_denied:
            self.audit.decision(ok, self.session, op, rtype, name, self.api)
        return ok

    def cluster(self, op: Operation, *, log_denied: bool = True) -> bool:
        return self(op, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=log_denied)


def _split(
    request: Request,
    attr: str,
    allowed: Callable[[Any], bool],
    code: ErrorCode,
    response_field: str,
) -> Plan | None:
    """Split ``request.body.<attr>`` by ``allowed``; None when everything is allowed."""
    items = getattr(request.body, attr) or []
    keep = [item for item in items if allowed(item)]
    if len(keep) == len(items):
        return None
    if not keep:
        return Plan(whole=code)
    kept = {id(item) for item in keep}
    gone = [item for item in items if id(item) not in kept]
    return Plan(
        request=_with(request, attr, keep),
        denied=_with(request, attr, gone),
        code=code,
        field=response_field,
    )


def _with(request: Request, attr: str, items: list[Any]) -> Request:
    body = copy.copy(request.body)
    setattr(body, attr, items)
    return dataclasses.replace(request, body=body)


def _name(item: Any) -> str:
    if isinstance(item, str):
        return item
    return str(getattr(item, "name", None) or getattr(item, "topic", None) or "")


_TOPIC_LISTS: dict[ApiKey, tuple[str, Operation, str]] = {
    # api: (request list, operation, response list)
    ApiKey.PRODUCE: ("topic_data", Operation.WRITE, "responses"),
    ApiKey.FETCH: ("topics", Operation.READ, "responses"),
    ApiKey.LIST_OFFSETS: ("topics", Operation.DESCRIBE, "topics"),
    ApiKey.DELETE_RECORDS: ("topics", Operation.DELETE, "topics"),
    ApiKey.CREATE_PARTITIONS: ("topics", Operation.ALTER, "results"),
}
_GROUP_APIS = {
    ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP,
}  # fmt: skip
_CLUSTER_APIS: dict[ApiKey, Operation] = {
    ApiKey.DESCRIBE_CLUSTER: Operation.DESCRIBE,
    ApiKey.DESCRIBE_LOG_DIRS: Operation.DESCRIBE,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: Operation.DESCRIBE,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: Operation.ALTER,
}
_OPEN = {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
_CONFIG_RESOURCES = {2: ResourceType.TOPIC, 4: ResourceType.CLUSTER}


def check(
    authorizer: Authorizer, session: Session, audit_log: AuditLog, request: Request
) -> Plan | None:
    """How to serve ``request`` for ``session``: None (all allowed) or a `Plan`."""
    api = request.api_key
    if api in _OPEN:
        return None
    may = _Checker(authorizer, session, audit_log, api)
    body = request.body
    if api in _TOPIC_LISTS:
        attr, op, field = _TOPIC_LISTS[api]
        return _split(
            request, attr, lambda t: may(op, ResourceType.TOPIC, _name(t)), TOPIC_DENIED, field
        )
    if api in _GROUP_APIS:
        return (
            None
            if may(Operation.READ, ResourceType.GROUP, body.group_id)
            else Plan(whole=GROUP_DENIED)
        )
    if api in _CLUSTER_APIS:
        return None if may.cluster(_CLUSTER_APIS[api]) else Plan(whole=CLUSTER_DENIED)
    if api == ApiKey.METADATA:
        return _metadata(may, request)
    if api in (ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_DELETE):
        op = Operation.READ if api == ApiKey.OFFSET_COMMIT else Operation.DELETE
        if not may(op, ResourceType.GROUP, body.group_id):
            return Plan(whole=GROUP_DENIED)
        return _split(request, "topics", lambda t: may(Operation.READ, ResourceType.TOPIC, t.name),
                      TOPIC_DENIED, "topics")  # fmt: skip
    if api == ApiKey.OFFSET_FETCH:
        return _offset_fetch(may, request)
    if api == ApiKey.FIND_COORDINATOR:
        keys = body.coordinator_keys if request.api_version >= 4 else [body.key]
        if body.key_type == 1:  # a transaction coordinator: refused by the handler anyway
            return None
        ok = all(may(Operation.DESCRIBE, ResourceType.GROUP, k or "") for k in keys or [])
        return None if ok else Plan(whole=GROUP_DENIED)
    if api == ApiKey.DESCRIBE_GROUPS:
        return _split(request, "groups", lambda g: may(Operation.DESCRIBE, ResourceType.GROUP, g),
                      GROUP_DENIED, "groups")  # fmt: skip
    if api == ApiKey.DELETE_GROUPS:
        return _split(request, "groups_names", lambda g: may(Operation.DELETE, ResourceType.GROUP, g),
                      GROUP_DENIED, "results")  # fmt: skip
    if api == ApiKey.LIST_GROUPS:
        return None  # filtered afterwards (`filter_response`)
    if api == ApiKey.CREATE_TOPICS:
        if may.cluster(Operation.CREATE):
            return None
        return _split(request, "topics", lambda t: may(Operation.CREATE, ResourceType.TOPIC, t.name),
                      TOPIC_DENIED, "topics")  # fmt: skip
    if api == ApiKey.DELETE_TOPICS:
        attr = "topic_names" if request.api_version < 6 else "topics"
        return _split(request, attr, lambda t: may(Operation.DELETE, ResourceType.TOPIC, _name(t)),
                      TOPIC_DENIED, "responses")  # fmt: skip
    if api in (ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
        op = (
            Operation.DESCRIBE_CONFIGS
            if api == ApiKey.DESCRIBE_CONFIGS
            else Operation.ALTER_CONFIGS
        )
        field = "results" if api == ApiKey.DESCRIBE_CONFIGS else "responses"

        def config_allowed(resource: Any) -> bool:
            rtype = _CONFIG_RESOURCES.get(resource.resource_type)
            if rtype is ResourceType.CLUSTER:
                return may.cluster(op)
            return rtype is None or may(op, rtype, resource.resource_name)

        return _split(request, "resources", config_allowed, TOPIC_DENIED, field)
    if api == ApiKey.INIT_PRODUCER_ID:
        if body.transactional_id is not None:
            return None  # transactions are refused by the handler
        if may.cluster(Operation.IDEMPOTENT_WRITE) or authorizer.may_write_some_topic(
            session.principal
        ):
            return None
        return Plan(whole=CLUSTER_DENIED)
    if api in (ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS):
        return None if may.cluster(Operation.ALTER) else Plan(whole=CLUSTER_DENIED)
    if api == ApiKey.DESCRIBE_ACLS:
        return None if may.cluster(Operation.DESCRIBE) else Plan(whole=CLUSTER_DENIED)
    # Anything else (the transaction APIs) is refused by its handler.
    return None


def _metadata(may: _Checker, request: Request) -> Plan | None:
    body = request.body
    if body.topics is None or (request.api_version == 0 and not body.topics):
        return None  # every topic: the listing is filtered afterwards
    plan = _split(request, "topics", lambda t: may(Operation.DESCRIBE, ResourceType.TOPIC, t.name or ""),
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
        allowed_request = _with(allowed_request, "topics", list(allowed_request.body.topics))
        allowed_request.body.allow_auto_topic_creation = False
        if plan is None:
            return Plan(request=allowed_request)
        plan.request = allowed_request
    return plan


def _offset_fetch(may: _Checker, request: Request) -> Plan | None:
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
    return _split(request, "topics", lambda t: may(Operation.DESCRIBE, ResourceType.TOPIC, t.name),
                  TOPIC_DENIED, "topics")  # fmt: skip


def filter_response(
    authorizer: Authorizer, session: Session, audit_log: AuditLog, request: Request, response: Any
) -> Any:
    """Drop what a listing response shows that the principal may not DESCRIBE."""
    api = request.api_key
    may = _Checker(authorizer, session, audit_log, api)
    if api == ApiKey.METADATA and (
        request.body.topics is None or (request.api_version == 0 and not request.body.topics)
    ):
        response.topics = [
            t
            for t in response.topics or []
            if may(Operation.DESCRIBE, ResourceType.TOPIC, t.name or "")
        ]
    elif api == ApiKey.LIST_GROUPS and not may.cluster(Operation.DESCRIBE):
        response.groups = [
            g
            for g in response.groups or []
            if may(Operation.DESCRIBE, ResourceType.GROUP, g.group_id)
        ]
    elif api == ApiKey.OFFSET_FETCH and request.api_version < 8 and request.body.topics is None:
        response.topics = [
            t for t in response.topics or [] if may(Operation.DESCRIBE, ResourceType.TOPIC, t.name)
        ]
    return response
