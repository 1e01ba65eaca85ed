"""Requests from one daemon to another, over the Kafka protocol: `PeerClient`.

A transaction coordinator has the leader of each partition of a
transaction write its marker (WriteTxnMarkers, as Kafka's coordinator asks
the partition leaders); the leader may be another daemon.  `PeerClient`
keeps one connection per daemon and sends a request at a time on it, with
kafka-python's message classes (the ones the daemon decodes requests with).

Which listener: of those the other daemon advertises (its heartbeat,
`NodeInfo.listeners`), PLAINTEXT, else SSL, else - when the daemon has SASL
credentials for the others (``KFS_INTER_BROKER_SASL_USERNAME``, a `PeerLogin`
such as `kfs_core.server.peer_sasl.PeerSasl`) - SASL_SSL, else
SASL_PLAINTEXT, as Kafka's brokers reach each other through
``inter.broker.listener.name`` and ``sasl.mechanism.inter.broker.protocol``.
Over SSL and SASL_SSL the daemon checks the other's certificate against
``KFS_TLS_CLIENT_CA_FILE`` (else its own certificate, for a cluster that
shares one) and presents its own, so mutual TLS names it.  A daemon it has
no way to reach is `PeerUnavailable`, saying why.  The requests a daemon
sends need CLUSTER_ACTION on the cluster where ACLs are enforced: grant it
to the principal of that listener (``User:ANONYMOUS`` on PLAINTEXT, the
certificate's name on SSL, the SASL user) or list it in ``KFS_SUPER_USERS``,
as Kafka's brokers are.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import ssl
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from kfs_core.cluster.view import NodeInfo
from kfs_core.errors import PeerUnavailable
from kfs_core.security.listeners import SecurityProtocol
from kfs_core.security.tls import TlsFiles

__all__ = ["PeerClient", "PeerLogin", "peer_address"]

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
#: Reachable listeners, the preferred first; the SASL ones need a `PeerLogin`.
_PROTOCOLS = (SecurityProtocol.PLAINTEXT, SecurityProtocol.SSL)
_SASL_PROTOCOLS = (SecurityProtocol.SASL_SSL, SecurityProtocol.SASL_PLAINTEXT)
_TLS_PROTOCOLS = (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)


class PeerLogin(Protocol):
    """How a daemon logs in on another's SASL listener."""

    async def authenticate(self, protocol: str, send: Callable[[Any], Awaitable[Any]]) -> None:
        """Log in over a fresh connection (``send`` exchanges one request); raise if refused."""


def peer_address(node: NodeInfo, *, sasl: bool = False) -> tuple[SecurityProtocol, str, int] | None:
    """The listener to reach ``node`` through: PLAINTEXT, SSL, then (``sasl``) SASL_SSL, SASL_PLAINTEXT."""
    for protocol in _PROTOCOLS + (_SASL_PROTOCOLS if sasl else ()):
        address = node.listeners.get(str(protocol))
        if address is not None:
            return protocol, address[0], address[1]
    return None


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.lock = asyncio.Lock()
        self.correlation = 0

    def close(self) -> None:
        self.writer.close()


class PeerClient:
    """One connection per other daemon; `request` sends a message and decodes its answer."""

    def __init__(
        self,
        live_nodes: Callable[[], Sequence[NodeInfo]],
        *,
        tls: TlsFiles | None = None,
        login: PeerLogin | None = None,
        client_id: str = "kfs-daemon",
        timeout_s: float = 10.0,
    ) -> None:
        self._live_nodes = live_nodes
        self._tls = tls
        self._login = login
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._connections: dict[tuple[int, str, str, int], _Connection] = {}
        self._context: ssl.SSLContext | None = None

    async def request(self, node_id: int, message: Any) -> Any:
        """Send ``message`` (a kafka-python request object) to daemon ``node_id``; its response.

        Raises `PeerUnavailable` when the daemon is not live, advertises no
        listener this one can use, refuses the SASL login, or the connection
        fails or times out.
        """
        node = next((n for n in self._live_nodes() if n.node_id == node_id), None)
        if node is None:
            raise PeerUnavailable(f"node {node_id} is not live")
        address = peer_address(node, sasl=self._login is not None)
        if address is None:
            has = ", ".join(sorted(node.listeners)) or "none"
            if any(str(p) in node.listeners for p in _SASL_PROTOCOLS):
                raise PeerUnavailable(
                    f"node {node_id} has only SASL listeners ({has}): set "
                    "KFS_INTER_BROKER_SASL_USERNAME and KFS_INTER_BROKER_SASL_PASSWORD "
                    "so daemons log in on each other"
                )
            raise PeerUnavailable(f"node {node_id} advertises no listener to reach it ({has})")
        key = (node_id, node.incarnation, address[1], address[2])
        try:
            return await asyncio.wait_for(self._send(key, address[0], message), self._timeout_s)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ssl.SSLError) as exc:
            self._drop(key)
            raise PeerUnavailable(
                f"asking node {node_id} at {address[1]}:{address[2]} failed: {exc!r}"
            ) from exc

    async def _send(self, key: tuple[int, str, str, int], protocol: str, message: Any) -> Any:
        connection = self._connections.get(key)
        if connection is None:
            for old in [k for k in self._connections if k[0] == key[0]]:
                self._drop(old)  # the daemon restarted or moved
            context = self._ssl_context() if protocol in _TLS_PROTOCOLS else None
            reader, writer = await asyncio.open_connection(key[2], key[3], ssl=context)
            fresh = _Connection(reader, writer)
            if protocol in _SASL_PROTOCOLS and self._login is not None:
                try:
                    await self._login.authenticate(
                        protocol, lambda request: self._exchange(fresh, request)
                    )
                except BaseException:
                    fresh.close()
                    raise
            connection = self._connections[key] = fresh
        try:
            return await self._exchange(connection, message)
        except OSError:
            self._drop(key)
            raise

    async def _exchange(self, connection: _Connection, message: Any) -> Any:
        """One request and its response on ``connection``."""
        async with connection.lock:
            connection.correlation += 1
            message.with_header(correlation_id=connection.correlation, client_id=self._client_id)
            connection.writer.write(bytes(message.encode(header=True, framed=True)))
            await connection.writer.drain()
            (size,) = _SIZE.unpack(await connection.reader.readexactly(4))
            payload = await connection.reader.readexactly(size)
        response_class = message.header.get_response_class()
        buffer = io.BytesIO(payload)
        if response_class.parse_header(buffer).correlation_id != connection.correlation:
            raise OSError("an answer to another request")
        return response_class.decode(buffer)

    def _ssl_context(self) -> ssl.SSLContext:
        if self._context is None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.check_hostname = False  # advertised names are not always the certificate's
            tls = self._tls
            if tls is not None and tls.client_ca_file:
                context.load_verify_locations(cafile=tls.client_ca_file)
            elif tls is not None and tls.cert_file:
                context.load_verify_locations(cafile=tls.cert_file)
            else:
                context.load_default_certs()
            if tls is not None and tls.cert_file and tls.key_file:
                context.load_cert_chain(tls.cert_file, tls.key_file)
            self._context = context
        return self._context

    def _drop(self, key: tuple[int, str, str, int]) -> None:
        connection = self._connections.pop(key, None)
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.close()

    def close(self) -> None:
        """Close every connection."""
        for key in list(self._connections):
            self._drop(key)
