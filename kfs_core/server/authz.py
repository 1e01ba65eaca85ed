"""Authorizing requests the way Kafka does, before the handlers see them.

With ``KFS_AUTHORIZER=acl`` every request is checked against the ACLs
(`kfs_core.security.acls.Authorizer`) for the connection's principal and
host: `check` runs before every handler and `filter_response` after the
listings.  What each API checks is declared beside its handler, in its
`Api` (``authorize``, ``filter_response``); the rules, plans and the audit
log are `kfs_core.server.apis.access`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kfs_core.security.acls import Authorizer
from kfs_core.security.sasl import Session
from kfs_core.server.apis import REGISTRY
from kfs_core.server.apis.access import AuditLog, Checker, Plan

if TYPE_CHECKING:
    from kfs_core.server.protocol import Request
    from kfs_core.server.protocol.bodies import ResponseBody

__all__ = ["AuditLog", "Plan", "check", "filter_response"]


def check(
    authorizer: Authorizer, session: Session, audit_log: AuditLog, request: Request[Any]
) -> Plan | None:
    """How to serve ``request`` for ``session``: None (all allowed) or a `Plan`."""
    rule = REGISTRY[request.api_key].authorize
    if rule is None:
        return None
    return rule(Checker(authorizer, session, audit_log, request.api_key), request)


def filter_response(
    authorizer: Authorizer,
    session: Session,
    audit_log: AuditLog,
    request: Request[Any],
    response: ResponseBody,
) -> ResponseBody:
    """Drop what a listing response shows that the principal may not DESCRIBE."""
    keep_visible = REGISTRY[request.api_key].filter_response
    if keep_visible is None:
        return response
    shown: ResponseBody = keep_visible(
        Checker(authorizer, session, audit_log, request.api_key), request, response
    )
    return shown
