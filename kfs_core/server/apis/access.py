"""How an API declares who may call it: authorization rules, plans and the audit log.

With ``KFS_AUTHORIZER=acl`` every request is authorized as Kafka does it,
before its handler runs (`kfs_core.server.authz.check`, for every API).
What to check is the API's own business: each `Api` in ``apis/<family>.py``
names its rule (``authorize``) and, for listings, a filter of its response
(``filter_response``), beside its handler.  An API without a rule is open
(ApiVersions and the SASL exchange) or refused by its handler anyway (the
transaction APIs).

A rule gets a `Checker` - the connection's principal and host against the
ACLs, every decision audited - and the request, and answers None (all
allowed) or a `Plan`.  A denied topic (or group, in DescribeGroups and
DeleteGroups) gets its authorization error code in its own response entry
while the allowed ones are served: `split` splits the request, the handler
sees only what is allowed, and `Plan.merge` adds the error entries (built by
the API's own error body) to its response.  A request denied as a whole
gets the error in every slot.  Every denial is logged on ``kfs.audit``;
allowed decisions are logged once a minute per principal, operation and
resource.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from kfs_core.security.acls import CLUSTER_NAME, Authorizer, Operation, ResourceType
from kfs_core.security.sasl import Session
from kfs_core.server.protocol import ApiKey, ErrorCode

if TYPE_CHECKING:
    from kfs_core.server.protocol import Request

__all__ = [
    "CLUSTER_DENIED",
    "GROUP_DENIED",
    "TOPIC_DENIED",
    "AuditLog",
    "Checker",
    "Plan",
    "ResponseFilter",
    "Rule",
    "cluster_rule",
    "group_rule",
    "name_of",
    "split",
    "topics_rule",
    "with_items",
]

# A named channel, not __name__: operators route the audit trail on its own (README, Security).
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


ResponseT = TypeVar("ResponseT")


@dataclasses.dataclass
class Plan:
    """What to do with a request the ACLs do not wholly allow."""

    whole: ErrorCode | None = None  # deny everything with this code
    request: Request[Any] | None = None  # the allowed part, for the handler
    denied: Request[Any] | None = None  # the denied part, answered with ``code``
    code: ErrorCode = TOPIC_DENIED
    field: str = ""  # the response's list the denied entries join

    def merge(
        self, response: ResponseT, error_body: Callable[[Request[Any], ErrorCode], object]
    ) -> ResponseT:
        if self.denied is None:
            return response
        extra = getattr(error_body(self.denied, self.code), self.field) or []
        setattr(response, self.field, list(getattr(response, self.field) or []) + list(extra))
        return response


class Checker:
    """Asks the ACLs whether the connection's principal may do something; audits the answer."""

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

    def may_write_some_topic(self) -> bool:
        """Whether the principal may WRITE at least one topic (KIP-679's idempotence rule)."""
        return self.authorizer.may_write_some_topic(self.session.principal)


# An API's authorization: None (all allowed) or how to serve the request.
Rule = Callable[[Checker, "Request[Any]"], "Plan | None"]
# After the handler: drop what a listing shows that the principal may not see.
ResponseFilter = Callable[[Checker, "Request[Any]", Any], Any]


def split(
    request: Request[Any],
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
        request=with_items(request, attr, keep),
        denied=with_items(request, attr, gone),
        code=code,
        field=response_field,
    )


def with_items(request: Request[Any], attr: str, items: list[Any]) -> Request[Any]:
    """A copy of ``request`` whose body's ``attr`` list is ``items``."""
    body = copy.copy(request.body)
    setattr(body, attr, items)
    return dataclasses.replace(request, body=body)


def name_of(item: Any) -> str:
    """The topic a request entry names: a plain string, or its ``name`` or ``topic`` field."""
    if isinstance(item, str):
        return item
    return str(getattr(item, "name", None) or getattr(item, "topic", None) or "")


def topics_rule(attr: str, op: Operation, response_field: str) -> Rule:
    """``op`` on each topic of the request's ``attr`` list; denied ones answered in ``response_field``."""

    def rule(may: Checker, request: Request[Any]) -> Plan | None:
        return split(
            request,
            attr,
            lambda t: may(op, ResourceType.TOPIC, name_of(t)),
            TOPIC_DENIED,
            response_field,
        )

    return rule


def group_rule(op: Operation) -> Rule:
    """``op`` on the request's ``group_id``, or the whole request is denied."""

    def rule(may: Checker, request: Request[Any]) -> Plan | None:
        return (
            None if may(op, ResourceType.GROUP, request.body.group_id) else Plan(whole=GROUP_DENIED)
        )

    return rule


def cluster_rule(op: Operation) -> Rule:
    """``op`` on the cluster, or the whole request is denied."""

    def rule(may: Checker, request: Request[Any]) -> Plan | None:
        return None if may.cluster(op) else Plan(whole=CLUSTER_DENIED)

    return rule
