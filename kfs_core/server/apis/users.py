"""The users and clients as entities: their SCRAM credentials, and (no) client quotas.

What kafka-configs.sh ``--entity-type users`` and an AdminClient's
``describe_user_scram_credentials`` / ``alter_user_scram_credentials`` use.
The client salts and iterates the password itself and sends the salted
password, from which the stored keys are derived (`credential_from_salted`);
no password reaches the daemon.  Users live in the store
(`kfs_core.security.users`), as ``kfs users`` writes them.  Kafka's per-user
errors: RESOURCE_NOT_FOUND (no such user or credential), DUPLICATE_RESOURCE
(a user twice in one request), UNSUPPORTED_SASL_MECHANISM,
UNACCEPTABLE_CREDENTIAL (iterations outside 4096..16384, an empty name or salt).

DescribeClientQuotas (what ``kafka-configs --describe --entity-type users``
asks besides the credentials): KFS enforces no client quotas, so a valid
filter matches nothing and the answer lists no entries; a filter Kafka
refuses (an unknown entity type or match type, ``match`` missing from an
exact match or given to another, an entity type twice) is INVALID_REQUEST.
AlterClientQuotas is not served: clients learn from ApiVersions that
quotas cannot be set.

    DescribeUserScramCredentials, AlterUserScramCredentials   v0
    DescribeClientQuotas                                        v0-v1
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING, Any

from kfs_core.security.acls import Operation
from kfs_core.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, credential_from_salted
from kfs_core.server.apis.access import cluster_rule
from kfs_core.server.apis.base import Api
from kfs_core.server.apis.error_bodies import ITEM, Mirror, schema_error_body
from kfs_core.server.protocol.errors import ErrorCode
from kfs_core.server.protocol.messages import (
    AlterUserScramCredentialsRequest,
    ApiKey,
    DescribeClientQuotasRequest,
    DescribeUserScramCredentialsRequest,
)
from kfs_core.server.protocol.responses import (
    AlterUserScramCredentialsResponse,
    DescribeClientQuotasResponse,
    DescribeUserScramCredentialsResponse,
)

if TYPE_CHECKING:
    from kfs_core.security.users import UserStore
    from kfs_core.server.apis.context import RequestContext
    from kfs_core.server.protocol import Request
    from kfs_core.server.protocol.bodies import (
        AlterUserScramCredentialsRequestBody,
        DescribeClientQuotasRequestBody,
        DescribeUserScramCredentialsRequestBody,
    )

#: Kafka's ScramMechanism numbers.
MECHANISM_NUMBERS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
NUMBER_OF = {name: number for number, name in MECHANISM_NUMBERS.items()}


def _describe_sync(
    users: UserStore, names: list[str] | None
) -> list[tuple[str, int, str | None, list[Any]]]:
    """(user, error code, message, [(mechanism number, iterations)]) per user asked for."""
    counts = Counter(names or [])
    out: list[tuple[str, int, str | None, list[Any]]] = []
    for name in names if names is not None else list(users.names()):
        if counts[name] > 1:
            out.append((name, int(ErrorCode.DUPLICATE_RESOURCE), "user named twice", []))
            continue
        credentials = users.credentials(name)
        if not credentials:
            out.append((name, int(ErrorCode.RESOURCE_NOT_FOUND), f"no user {name!r}", []))
            continue
        infos = [(NUMBER_OF[m], c.iterations) for m, c in sorted(credentials.items())]
        out.append((name, 0, None, infos))
    return out


async def _describe(
    context: RequestContext, request: Request[DescribeUserScramCredentialsRequestBody]
) -> DescribeUserScramCredentialsResponse:
    users = context.users
    if users is None:
        return _describe_error(
            request, ErrorCode.SECURITY_DISABLED, "no user store", context.options
        )
    asked = request.body.users
    names = None if asked is None else [u.name or "" for u in asked]
    rows = await asyncio.to_thread(_describe_sync, users, names)
    result = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
    return DescribeUserScramCredentialsResponse(
        version=request.api_version,
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        results=[
            result(
                user=name,
                error_code=code,
                error_message=message,
                credential_infos=[
                    result.CredentialInfo(mechanism=m, iterations=i) for m, i in infos
                ],
            )
            for name, code, message, infos in rows
        ],
    )


_describe_error = schema_error_body(DescribeUserScramCredentialsResponse, {})


def _alter_sync(
    users: UserStore, body: AlterUserScramCredentialsRequestBody
) -> dict[str, tuple[int, str | None]]:
    """Apply the deletions and upsertions; per user, the first error (or success)."""
    results: dict[str, tuple[int, str | None]] = {}
    seen = Counter([d.name for d in body.deletions or []] + [u.name for u in body.upsertions or []])

    def fail(name: str, code: ErrorCode, message: str) -> None:
        results.setdefault(name, (int(code), message))

    for name, count in seen.items():
        if count > 1:
            fail(name, ErrorCode.DUPLICATE_RESOURCE, "a user may appear once per request")
    for deletion in body.deletions or []:
        name, mechanism = deletion.name or "", MECHANISM_NUMBERS.get(deletion.mechanism)
        if name in results:
            continue
        if mechanism is None:
            fail(name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"mechanism {deletion.mechanism}")
        elif not users.delete_credential(name, mechanism):
            fail(name, ErrorCode.RESOURCE_NOT_FOUND, f"{name!r} has no {mechanism} credential")
        else:
            results[name] = (0, None)
    for upsertion in body.upsertions or []:
        name, mechanism = upsertion.name or "", MECHANISM_NUMBERS.get(upsertion.mechanism)
        if name in results:
            continue
        if mechanism is None:
            fail(name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"mechanism {upsertion.mechanism}")
        elif not name:
            fail(name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "an empty user name")
        elif not MIN_ITERATIONS <= upsertion.iterations <= MAX_ITERATIONS:
            fail(name, ErrorCode.UNACCEPTABLE_CREDENTIAL,
                 f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}")  # fmt: skip
        elif not upsertion.salt or not upsertion.salted_password:
            fail(name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "an empty salt or salted password")
        else:
            users.set_credential(
                name,
                credential_from_salted(
                    mechanism, bytes(upsertion.salted_password), bytes(upsertion.salt),
                    upsertion.iterations,
                ),
            )  # fmt: skip
            results[name] = (0, None)
    return results


async def _alter(
    context: RequestContext, request: Request[AlterUserScramCredentialsRequestBody]
) -> AlterUserScramCredentialsResponse:
    users = context.users
    if users is None:
        return _alter_error(request, ErrorCode.SECURITY_DISABLED, "no user store", context.options)
    results = await asyncio.to_thread(_alter_sync, users, request.body)
    if context.authenticator is not None:
        for name in results:
            context.authenticator.users.forget(name)
    result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
    return AlterUserScramCredentialsResponse(
        version=request.api_version,
        throttle_time_ms=0,
        results=[
            result(user=name, error_code=code, error_message=message)
            for name, (code, message) in results.items()
        ],
    )


def _users_named(body: AlterUserScramCredentialsRequestBody) -> list[str]:
    """Each user the request names, once, in the order it first names them."""
    return list(
        dict.fromkeys(
            [d.name for d in body.deletions or []] + [u.name for u in body.upsertions or []]
        )
    )


_alter_error = schema_error_body(
    AlterUserScramCredentialsResponse, {"results": Mirror(_users_named, {"user": ITEM})}
)


# --- DescribeClientQuotas ---------------------------------------------------------

QUOTA_ENTITY_TYPES = ("user", "client-id", "ip")
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


def _quota_filter_error(body: DescribeClientQuotasRequestBody) -> str | None:
    """Why Kafka would refuse the filter, or None."""
    seen: set[str] = set()
    for component in body.components:
        kind, match_type = component.entity_type, component.match_type
        if kind not in QUOTA_ENTITY_TYPES:
            return f"unknown entity type {kind!r} (user, client-id, ip)"
        if kind in seen:
            return f"entity type {kind!r} named twice"
        seen.add(kind)
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            return f"{kind}: unknown match type {match_type} (0 exact, 1 default, 2 any)"
        if (match_type == MATCH_EXACT) != (component.match is not None):
            return f"{kind}: an exact match needs a name, the others none"
    return None


async def _describe_client_quotas(
    context: RequestContext, request: Request[DescribeClientQuotasRequestBody]
) -> DescribeClientQuotasResponse:
    problem = _quota_filter_error(request.body)
    if problem is not None:
        context.count_error(ApiKey.DESCRIBE_CLIENT_QUOTAS, ErrorCode.INVALID_REQUEST)
        return _client_quotas_error(request, ErrorCode.INVALID_REQUEST, problem, context.options)
    return DescribeClientQuotasResponse(
        version=request.api_version,
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        entries=[],  # KFS enforces no client quotas
    )


_client_quotas_error = schema_error_body(DescribeClientQuotasResponse, {"entries": None})


APIS = (
    Api(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, DescribeUserScramCredentialsRequest,
        DescribeUserScramCredentialsResponse, (0, 0), _describe, _describe_error,
        authorize=cluster_rule(Operation.DESCRIBE)),
    Api(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, AlterUserScramCredentialsRequest,
        AlterUserScramCredentialsResponse, (0, 0), _alter, _alter_error,
        authorize=cluster_rule(Operation.ALTER)),
    Api(ApiKey.DESCRIBE_CLIENT_QUOTAS, DescribeClientQuotasRequest,
        DescribeClientQuotasResponse, (0, 1), _describe_client_quotas, _client_quotas_error,
        authorize=cluster_rule(Operation.DESCRIBE_CONFIGS)),
)  # fmt: skip
