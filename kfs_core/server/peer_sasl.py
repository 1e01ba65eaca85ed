"""A daemon's SASL login on another daemon's SASL listener: `PeerSasl`.

When the daemon leading a transaction's partition has only SASL listeners,
the coordinator's `PeerClient` logs in on it before sending WriteTxnMarkers,
as Kafka's brokers log in on an inter-broker SASL listener
(``sasl.mechanism.inter.broker.protocol``): SaslHandshake v1, then
SaslAuthenticate exchanges driven by kafka-python's client side of the
mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).  The user and password are
``KFS_INTER_BROKER_SASL_USERNAME`` and ``KFS_INTER_BROKER_SASL_PASSWORD``, a
SASL user of the namespace (`kfs users add`); where ACLs are enforced it
needs CLUSTER_ACTION on the cluster, as a ``KFS_SUPER_USERS`` member has.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kafka.net.sasl import get_sasl_mechanism

from kfs_core.errors import PeerUnavailable
from kfs_core.server.protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest

__all__ = ["PeerSasl"]

#: More rounds than any supported mechanism takes: a server that never finishes.
_MAX_ROUNDS = 4


@dataclass(frozen=True)
class PeerSasl:
    """The mechanism and credentials a daemon logs in to the others with."""

    mechanism: str
    username: str
    password: str = field(repr=False)

    async def authenticate(self, protocol: str, send: Callable[[Any], Awaitable[Any]]) -> None:
        """Log in on a fresh connection; `PeerUnavailable` saying why when refused."""
        handshake = await send(SaslHandshakeRequest(version=1, mechanism=self.mechanism))
        if handshake.error_code:
            raise PeerUnavailable(
                f"SASL mechanism {self.mechanism} is not enabled there "
                f"(it offers {', '.join(handshake.mechanisms) or 'none'})"
            )
        client = get_sasl_mechanism(self.mechanism)(
            sasl_mechanism=self.mechanism,
            sasl_plain_username=self.username,
            sasl_plain_password=self.password,
            security_protocol=protocol,
        )
        for _ in range(_MAX_ROUNDS):
            if client.is_done():
                break
            answer = await send(SaslAuthenticateRequest(version=1, auth_bytes=client.auth_bytes()))
            if answer.error_code:
                raise PeerUnavailable(
                    f"SASL login as {self.username!r} refused: {answer.error_message or answer.error_code}"
                )
            try:
                client.receive(answer.auth_bytes or b"")
            except ValueError as exc:  # a SCRAM server signature that does not verify
                raise PeerUnavailable(f"SASL login as {self.username!r}: {exc}") from None
        if not (client.is_done() and client.is_authenticated()):
            raise PeerUnavailable(f"SASL login as {self.username!r} did not complete")
