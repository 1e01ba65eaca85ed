"""SaslHandshake and SaslAuthenticate: the connection's session moves through its SASL exchange.

The work is `kfs_core.security.sasl.Authenticator`'s; these handlers read the
connection's `Session` (``context.session``; the error body, which has no
context, reads the ``SESSION`` context variable the connection sets) and
turn results into responses.  The connection itself refuses every other
API before authentication and closes after a failure (`kfs_core.server.app`).

    SaslHandshake     v0-v1 (after v0 the tokens come as bare frames: the connection reads them)
    SaslAuthenticate  v0-v2 (v1 adds the session lifetime, KIP-368)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kfs_core.server.apis.base import SESSION, Api
from kfs_core.server.apis.error_bodies import schema_error_body
from kfs_core.server.protocol.errors import ErrorCode
from kfs_core.server.protocol.messages import ApiKey, SaslAuthenticateRequest, SaslHandshakeRequest
from kfs_core.server.protocol.responses import (
    SaslAuthenticateResponse,
    SaslHandshakeResponse,
)

if TYPE_CHECKING:
    from kfs_core.server.apis.context import BrokerOptions, RequestContext
    from kfs_core.server.protocol import Request
    from kfs_core.server.protocol.bodies import (
        SaslAuthenticateRequestBody,
        SaslHandshakeRequestBody,
    )


async def _handshake(
    context: RequestContext, request: Request[SaslHandshakeRequestBody]
) -> SaslHandshakeResponse:
    session = context.session
    authenticator = context.authenticator
    if session is None or authenticator is None:
        return _handshake_error(request, ErrorCode.ILLEGAL_SASL_STATE, None, context.options)
    code, mechanisms = authenticator.handshake(session, request.body.mechanism or "")
    if code == ErrorCode.NONE and request.api_version == 0:
        session.raw_tokens = True  # the connection reads the tokens as bare frames now
    return SaslHandshakeResponse(
        version=request.api_version, error_code=code, mechanisms=mechanisms
    )


_handshake_error = schema_error_body(SaslHandshakeResponse, {"mechanisms": []})


async def _authenticate(
    context: RequestContext, request: Request[SaslAuthenticateRequestBody]
) -> SaslAuthenticateResponse:
    session = context.session
    authenticator = context.authenticator
    if session is None or authenticator is None:
        return _authenticate_error(request, ErrorCode.ILLEGAL_SASL_STATE, None, context.options)
    result = await authenticator.authenticate(session, bytes(request.body.auth_bytes or b""))
    return SaslAuthenticateResponse(
        version=request.api_version,
        error_code=result.error_code,
        error_message=result.message,
        auth_bytes=result.auth_bytes,
        session_lifetime_ms=result.session_lifetime_ms,
    )


_authenticate_error_body = schema_error_body(
    SaslAuthenticateResponse, {"auth_bytes": b"", "session_lifetime_ms": 0}
)


def _authenticate_error(
    request: Request[Any], code: ErrorCode, message: str | None, options: BrokerOptions
) -> SaslAuthenticateResponse:
    # A failed exchange ends the connection; an error body has no context, so
    # the connection's session is its context variable's.
    session = SESSION.get()
    if session is not None:
        session.failed = True
    return _authenticate_error_body(request, code, message, options)


APIS = (
    Api(ApiKey.SASL_HANDSHAKE, SaslHandshakeRequest, SaslHandshakeResponse, (0, 1), _handshake,
        _handshake_error),
    Api(ApiKey.SASL_AUTHENTICATE, SaslAuthenticateRequest, SaslAuthenticateResponse, (0, 2),
        _authenticate, _authenticate_error),
)  # fmt: skip
