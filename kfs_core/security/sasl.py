"""One connection's SASL state, and the daemon's authenticator that moves it along.

On a SASL listener a connection starts unauthenticated: besides ApiVersions
it may only send SaslHandshake (naming a mechanism) and then SaslAuthenticate
(one or two rounds); anything else closes it, as Kafka does.  After a
SaslHandshake v0 (clients before KIP-152) the SASL tokens come as bare
size-prefixed frames instead, answered the same way (``Session.raw_tokens``).  A failed
authentication is answered SASL_AUTHENTICATION_FAILED -- after a delay that
grows with the failures from the client's address -- and the connection is
closed.  A success sets the session's principal (``User:<name>``).

With ``KFS_CONNECTIONS_MAX_REAUTH_MS`` (Kafka's ``connections.max.reauth.ms``)
the SaslAuthenticate response carries the session lifetime; the client
re-authenticates (KIP-368) on the same connection before it ends, as the
same user, or the connection is closed at its next request after the end.

Mechanisms: PLAIN (``authzid NUL user NUL password``, checked against the
user's SCRAM credentials) and SCRAM-SHA-256/512 (`kfs_core.security.scram`).
Credential lookups read the store, so they run on a thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Final

from kfs_core.security.listeners import SecurityProtocol
from kfs_core.security.scram import (
    MECHANISMS,
    Credential,
    SaslAuthenticationFailed,
    ScramServer,
    check_plain,
)
from kfs_core.security.users import UserCache

__all__ = ["ANONYMOUS", "Authenticator", "FailureDelay", "SaslResult", "Session"]

log = logging.getLogger(__name__)

ANONYMOUS: Final = "User:ANONYMOUS"
# Kafka's error codes, kept here so this module needs nothing of the server.
NONE: Final = 0
UNSUPPORTED_SASL_MECHANISM: Final = 33
ILLEGAL_SASL_STATE: Final = 34
SASL_AUTHENTICATION_FAILED: Final = 58
#: The longest SASL message a client may send (Kafka's sasl.server.max.receive.size).
MAX_AUTH_BYTES: Final = 524_288


@dataclasses.dataclass
class Session:
    """Who is on one connection, and where its SASL exchange stands."""

    protocol: SecurityProtocol
    host: str = ""
    principal: str = ANONYMOUS
    authenticated: bool = True  # False until SASL succeeds on a SASL listener
    mechanism: str | None = None  # chosen by SaslHandshake, awaiting SaslAuthenticate
    scram: ScramServer | None = None
    failed: bool = False  # answer, then close
    expires_at: float | None = None  # monotonic end of the SASL session (KIP-368)
    raw_tokens: bool = False  # after SaslHandshake v0: bare SASL tokens, no Kafka header

    @classmethod
    def on(cls, protocol: SecurityProtocol, host: str, principal: str | None = None) -> Session:
        return cls(protocol, host, principal or ANONYMOUS, authenticated=not protocol.sasl)

    def expired(self, now: float | None = None) -> bool:
        return self.expires_at is not None and (now or time.monotonic()) >= self.expires_at


@dataclasses.dataclass(frozen=True)
class SaslResult:
    error_code: int
    message: str | None = None
    auth_bytes: bytes = b""
    session_lifetime_ms: int = 0


class FailureDelay:
    """How long to hold a failed login's answer: doubling per recent failure from one address."""

    def __init__(
        self,
        base_s: float = 0.1,
        max_s: float = 5.0,
        forget_after_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_s, self.max_s, self.forget_after_s = base_s, max_s, forget_after_s
        self._clock = clock
        self._failures: dict[str, tuple[int, float]] = {}

    def failed(self, host: str) -> float:
        """Count a failure from ``host``; the delay its answer gets."""
        now = self._clock()
        count, last = self._failures.get(host, (0, now))
        if now - last > self.forget_after_s:
            count = 0
        count += 1
        self._failures[host] = (count, now)
        if len(self._failures) > 100_000:
            self._failures.pop(next(iter(self._failures)))
        return float(min(self.base_s * 2.0 ** (count - 1), self.max_s))

    def succeeded(self, host: str) -> None:
        self._failures.pop(host, None)


class Authenticator:
    """The daemon's SASL side: the enabled mechanisms, the users, the failure delays."""

    def __init__(
        self,
        mechanisms: list[str],
        users: UserCache,
        *,
        reauth_ms: int = 0,
        delay: FailureDelay | None = None,
        on_result: Callable[[str, bool], None] | None = None,
    ) -> None:
        self.mechanisms = list(mechanisms)
        self.users = users
        self.reauth_ms = reauth_ms
        self.delay = delay or FailureDelay()
        self._on_result = on_result or (lambda mechanism, ok: None)

    def handshake(self, session: Session, mechanism: str) -> tuple[int, list[str]]:
        """SaslHandshake: the error code and the mechanisms offered."""
        if not session.protocol.sasl:
            return ILLEGAL_SASL_STATE, self.mechanisms
        if session.mechanism is not None:
            return ILLEGAL_SASL_STATE, self.mechanisms  # a second handshake mid-exchange
        if mechanism not in self.mechanisms:
            session.failed = True  # Kafka closes the connection after this answer
            return UNSUPPORTED_SASL_MECHANISM, self.mechanisms
        session.mechanism = mechanism
        session.scram = None
        return NONE, self.mechanisms

    async def authenticate(self, session: Session, auth_bytes: bytes) -> SaslResult:
        """One SaslAuthenticate round."""
        mechanism = session.mechanism
        if mechanism is None:
            session.failed = True
            return SaslResult(ILLEGAL_SASL_STATE, "SaslAuthenticate before SaslHandshake")
        try:
            if len(auth_bytes) > MAX_AUTH_BYTES:
                raise SaslAuthenticationFailed(
                    f"SASL message of {len(auth_bytes)} bytes is too large"
                )
            if mechanism == "PLAIN":
                user = await asyncio.to_thread(self._plain, auth_bytes)
                return self._success(session, mechanism, user, b"")
            if session.scram is None:
                scram = ScramServer(mechanism, lambda name: self.users.lookup(name, mechanism))
                session.scram = scram
                first = await asyncio.to_thread(scram.first, auth_bytes)
                return SaslResult(NONE, None, first)
            final = session.scram.final(auth_bytes)
            assert session.scram.user is not None
            return self._success(session, mechanism, session.scram.user, final)
        except SaslAuthenticationFailed as exc:
            return await self._failure(session, mechanism, str(exc))

    def _plain(self, auth_bytes: bytes) -> str:
        parts = auth_bytes.split(b"\0")
        if len(parts) != 3:
            raise SaslAuthenticationFailed("PLAIN message is not authzid NUL user NUL password")
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed("PLAIN message is not UTF-8") from None
        if not user or (authzid and authzid != user):
            raise SaslAuthenticationFailed("PLAIN: an empty user or an authzid of another user")
        credentials = self.users.credentials(user)
        credential: Credential | None = next(
            (credentials[m] for m in sorted(MECHANISMS, reverse=True) if m in credentials), None
        )
        if credential is None or not check_plain(credential, password):
            raise SaslAuthenticationFailed(f"authentication failed for {user!r}")
        return user

    def _success(self, session: Session, mechanism: str, user: str, out: bytes) -> SaslResult:
        principal = f"User:{user}"
        if session.authenticated and session.protocol.sasl and principal != session.principal:
            # Re-authentication (KIP-368) must keep the principal.
            session.failed = True
            self._on_result(mechanism, False)
            return SaslResult(
                SASL_AUTHENTICATION_FAILED, "re-authentication as another user is not allowed"
            )
        session.principal = principal
        session.authenticated = True
        session.mechanism = None
        session.scram = None
        lifetime = self.reauth_ms
        session.expires_at = time.monotonic() + lifetime / 1000 if lifetime else None
        self.delay.succeeded(session.host)
        self._on_result(mechanism, True)
        log.debug("%s authenticated with %s from %s", principal, mechanism, session.host)
        return SaslResult(NONE, None, out, lifetime)

    async def _failure(self, session: Session, mechanism: str, message: str) -> SaslResult:
        session.failed = True
        self._on_result(mechanism, False)
        wait = self.delay.failed(session.host)
        log.info("SASL %s from %s failed: %s", mechanism, session.host or "?", message)
        await asyncio.sleep(wait)  # the delay itself: slow down password guessing
        # The client is told only that it failed: not whether the user exists.
        return SaslResult(SASL_AUTHENTICATION_FAILED, "Authentication failed: invalid credentials")
