"""`kfs serve`: the asyncio daemon that speaks the Kafka protocol.

Lifecycle (`KfsServer.run`):

1. the ops HTTP endpoint comes up first (``KFS_METRICS_LISTEN``), so /livez
   answers and /readyz says 503 while the log recovers;
2. the Kafka port (``KFS_LISTEN``) is bound, not yet served, so a port in
   use fails at once;
3. the object store (wrapped to count requests), the topic registry, the WAL
   (its fsyncs timed into a histogram) and the `LogManager` open, and the
   log manager recovers the WAL (``start``);
4. clients are accepted; /readyz turns 200;
5. on SIGTERM or SIGINT: stop accepting, stop reading new requests, answer
   every request already read (long polls answer at once), flush the log
   (`LogManager.close`), close the WAL and the store; exit 0.  A signal
   during start-up abandons it: the WAL keeps what it holds for next time.

A failed WAL write or fsync (`WalWriteFailed`) puts the log into its failed
state (`LogManager.failed`): produces in flight and after it get
KAFKA_STORAGE_ERROR, /readyz turns 503 at once, one error line tells the
operator to restart, and the daemon shuts down as on SIGTERM -- what is
acknowledged is flushed to the store if it can be, the rest stays in the WAL
-- and exits 1.  The next start recovers the WAL and replays it.  It does not
limp on: after a failed fsync nothing written since can be trusted to be on
disk, so no further write may be acknowledged.

Connections (`_Connection`).  Frames are read by one loop and answered by
another, strictly in request order, as Kafka requires.  Produce requests may
overlap each other: their appends start in order and their WAL fsyncs share
a group commit.  Any other request first waits for everything before it on
the connection to finish, and what follows waits for it, so its effects are
ordered as on a Kafka broker.  A frame the protocol layer refuses gets the
answer `error_response_frame` prescribes (ApiVersions and Produce v0-v2 with
UNSUPPORTED_VERSION) or the connection is closed; a handler that raises gets
UNKNOWN_SERVER_ERROR for that request, a logged traceback, and the
connection carries on.  A Produce with acks=0 gets no answer; if it failed,
the connection is closed, which is how Kafka tells such a producer.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import signal
import socket
import struct
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from kfs_core import __version__
from kfs_core.catalog.config import DEFAULT_CONFIGS
from kfs_core.catalog.partition import PartitionCatalog
from kfs_core.catalog.topics import TopicRegistry
from kfs_core.cluster.leases import LeaseKeeper
from kfs_core.config import Settings
from kfs_core.errors import CorruptWal, KfsError, SegmentConflict
from kfs_core.groups.coordinator import GroupSettings
from kfs_core.groups.transactions import TransactionSettings
from kfs_core.log.log_manager import LogManager
from kfs_core.log.wal import StoreWal, StoreWalReader, WalLike, WalWriter
from kfs_core.log.wal.lock import WalDirectoryLock
from kfs_core.security.acls import AclStore, Authorizer
from kfs_core.security.listeners import (
    Listener,
    SecurityProtocol,
    parse_host_port,
    parse_listeners,
)
from kfs_core.security.sasl import Authenticator, Session
from kfs_core.security.tls import ServerTls, TlsFiles, principal_of
from kfs_core.security.users import UserCache, UserStore
from kfs_core.server.allocator import tune_allocator
from kfs_core.server.apis import SUPPORTED_VERSIONS
from kfs_core.server.apis import acls as acl_api
from kfs_core.server.apis.base import ADVERTISED, SESSION
from kfs_core.server.apis.context import BrokerOptions
from kfs_core.server.broker import CLIENT_HOST, Broker, cluster_id_for, error_response
from kfs_core.server.metrics import (
    CountersCollector,
    InstrumentedStore,
    LabelledGauges,
    OpsHttpServer,
    ServerMetrics,
)
from kfs_core.server.peer_sasl import PeerSasl
from kfs_core.server.protocol import (
    MAX_REQUEST_BYTES,
    ApiKey,
    ErrorCode,
    FrameError,
    FrameTooLarge,
    InvalidResponse,
    Request,
    RequestError,
    decode_request,
    encode_response_parts,
    error_response_frame,
)
from kfs_core.server.protocol.framing import FrameStream
from kfs_core.storage import open_store

__all__ = ["KfsServer", "check_addresses", "parse_host_port", "serve"]

log = logging.getLogger(__name__)

KAFKA_PORT: Final = 9092
METRICS_PORT: Final = 9644
# Requests read ahead of their responses on one connection (librdkafka's
# default max.in.flight is far higher; this bounds a connection's memory).
MAX_IN_FLIGHT: Final = 64
# How long shutdown waits for in-flight requests before it cancels them.
SHUTDOWN_GRACE_S: Final = 30.0
# How long shutdown keeps flushing buffers to the store.  What is left
# unflushed after that stays in the WAL and is replayed by the next start.
CLOSE_FLUSH_TIMEOUT_S: Final = 120.0
_WILDCARD_HOSTS: Final = frozenset({"", "0.0.0.0", "::", "*"})

# The fields of `LogMetrics` that are levels, not counts.
LOG_GAUGES: Final = (
    "flush_seconds_max",
    "pool_used_bytes",
    "pool_capacity_bytes",
    "pool_waiters",
    "buffered_bytes",
    "l1_bytes",
    "l1_segments",
    "l2_bytes",
    "l2_indexes",
    "partitions",
)

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1


def check_addresses(settings: Settings) -> None:
    """The daemon's addresses: bad ones fail here, as one-line errors, not after WAL recovery.

    Every other setting is checked where it is declared (`Settings`).
    """
    parse_host_port(settings.listen, KAFKA_PORT)
    parse_host_port(settings.metrics_listen, METRICS_PORT)
    listeners = listeners_of(settings)
    if settings.advertised_listeners:
        parse_listeners(settings.advertised_listeners, "KFS_ADVERTISED_LISTENERS")
    if any(listener.protocol.tls for listener in listeners):
        ServerTls(tls_files(settings))  # readable files, a key that matches the certificate


def listeners_of(settings: Settings) -> list[Listener]:
    """``KFS_LISTENERS``, or one PLAINTEXT listener on ``KFS_LISTEN``."""
    if settings.listeners:
        return parse_listeners(settings.listeners)
    host, port = parse_host_port(settings.listen, KAFKA_PORT)
    return [Listener(SecurityProtocol.PLAINTEXT, host, port)]


def tls_files(settings: Settings) -> TlsFiles:
    return TlsFiles(settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file)


def peer_login(settings: Settings) -> PeerSasl | None:
    """How this daemon logs in on another's SASL listener; None without a user set."""
    if not settings.inter_broker_sasl_username:
        return None
    return PeerSasl(
        settings.sasl_mechanism_inter_broker_protocol,
        settings.inter_broker_sasl_username,
        settings.inter_broker_sasl_password,
    )


def group_settings(settings: Settings) -> GroupSettings:
    """The group coordinator's settings from the daemon's (Kafka's group.* and offsets.*)."""
    return GroupSettings(
        initial_rebalance_delay_ms=settings.group_initial_rebalance_delay_ms,
        min_session_timeout_ms=settings.group_min_session_timeout_ms,
        max_session_timeout_ms=settings.group_max_session_timeout_ms,
        offsets_retention_ms=settings.offsets_retention_minutes * 60_000,
        offsets_retention_check_interval_ms=settings.offsets_retention_check_interval_ms,
    )


def transaction_settings(settings: Settings) -> TransactionSettings:
    """The transaction coordinator's settings from the daemon's (Kafka's transaction.*)."""
    return TransactionSettings(
        max_timeout_ms=settings.transaction_max_timeout_ms,
        id_expiration_ms=settings.transactional_id_expiration_ms,
        abort_check_interval_ms=settings.transaction_abort_timed_out_transaction_cleanup_interval_ms,
    )


def _advertised_host(settings: Settings, listen_host: str) -> str:
    if settings.advertised_host:
        return settings.advertised_host
    if listen_host in _WILDCARD_HOSTS:
        # Listening everywhere: the machine's name is the best guess a client can use.
        return socket.getfqdn()
    return listen_host


def _broker_configs(settings: Settings, advertised_listeners: str) -> dict[str, str]:
    """Read-only broker configs for DescribeConfigs: Kafka names where Kafka has one.

    The daemon's own settings come from their declaration (`Settings.broker_configs`);
    the rest are what a single broker without replication always answers.
    """
    return {
        "broker.id": str(settings.node_id),
        "node.id": "0",
        "advertised.listeners": advertised_listeners,
        "default.replication.factor": "1",
        "socket.request.max.bytes": str(MAX_REQUEST_BYTES),
        "message.max.bytes": DEFAULT_CONFIGS["max.message.bytes"],
        "compression.type": DEFAULT_CONFIGS["compression.type"],
        **settings.broker_configs(),
        "kfs.version": __version__,
    }


#: How often the event loop's lag is sampled (`kfs_event_loop_lag_seconds`).
LOOP_LAG_SAMPLE_S = 0.05


class KfsServer:
    """One daemon: ops endpoint, store, WAL, log manager and the Kafka listener."""

    def __init__(self, settings: Settings) -> None:
        check_addresses(settings)
        self.settings = settings
        self.metrics = ServerMetrics()
        self.broker: Broker | None = None
        self.kafka_port = 0
        self._ready = False
        self._stopping = False
        self._stop = asyncio.Event()
        self._exit_code = EXIT_OK
        self._connections: set[_Connection] = set()
        self._kafka_servers: list[tuple[Listener, asyncio.Server]] = []
        self._tls: ServerTls | None = None
        self._acl_refresh: asyncio.Future[None] | None = None
        self._wal_sweeper: asyncio.Future[None] | None = None
        # What Metadata names for each listener (the address a client should use).
        self.advertised: dict[SecurityProtocol, tuple[str, int]] = {}
        self._ops = OpsHttpServer(self.metrics, lambda: self._ready, self._conditions)
        self._store: InstrumentedStore | None = None
        self._wal: WalLike | None = None
        self._log: LogManager | None = None
        self._keeper: LeaseKeeper | None = None
        self._wal_lock: WalDirectoryLock | None = None

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def metrics_port(self) -> int:
        return self._ops.port

    def _conditions(self) -> list[str]:
        """What a ready daemon says on /readyz about degraded parts: the store, the pool."""
        lines = []
        health = self.metrics.store_health
        down = health.unavailable_for()
        if down > 0:
            lines.append(
                f"store: requests failing for {down:.0f} s ({health.last_error}); "
                "acknowledged writes wait in the WAL"
            )
        if self._log is not None:
            stats = self._log.metrics()
            used, capacity = stats.pool_used_bytes, stats.pool_capacity_bytes
            if capacity and used >= capacity * self.settings.pressure_ratio:
                waiting = f", {stats.pool_waiters} produce request(s) waiting" * bool(
                    stats.pool_waiters
                )
                lines.append(f"memory pool: {100 * used // capacity}% full{waiting}")
        return lines

    def request_stop(self) -> None:
        """Begin a graceful shutdown, as SIGTERM does."""
        self._stop.set()

    async def run(self, *, install_signal_handlers: bool = True) -> int:
        """Serve until asked to stop; return the process exit code."""
        loop = asyncio.get_running_loop()
        if install_signal_handlers:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self._on_signal, signum)
            loop.add_signal_handler(signal.SIGHUP, self.reload_tls)
        lag = asyncio.ensure_future(self._sample_loop_lag())
        try:
            try:
                host, port = parse_host_port(self.settings.metrics_listen, METRICS_PORT)
                await self._ops.start(host, port)
            except (OSError, ValueError) as exc:
                log.error("cannot serve /metrics on %s: %s", self.settings.metrics_listen, exc)
                return EXIT_FAILED
            log.info(
                "KFS %s: ops endpoint on http://%s:%d (/metrics /livez /readyz)",
                __version__,
                host,
                self._ops.port,
            )
            if not await self._start_or_stop():
                return self._exit_code
            if not self._stop.is_set():  # the WAL may have failed already
                self._ready = True
                self.metrics.ready.set(1)
            await self._stop.wait()
            await self._shutdown()
        finally:
            lag.cancel()
            self._ready = False
            self.metrics.ready.set(0)
            await self._close()
            await self._ops.close()
            if install_signal_handlers:
                for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                    loop.remove_signal_handler(signum)
        log.info("kfs serve stopped (exit %d)", self._exit_code)
        return self._exit_code

    async def _sample_loop_lag(self) -> None:
        """Every `LOOP_LAG_SAMPLE_S`, how late the loop woke us: `kfs_event_loop_lag_seconds`."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + LOOP_LAG_SAMPLE_S
            await asyncio.sleep(LOOP_LAG_SAMPLE_S)
            self.metrics.event_loop_lag.observe(max(0.0, loop.time() - due))

    async def _start_or_stop(self) -> bool:
        """Start the services unless a stop request comes first; whether the daemon may serve."""
        startup = asyncio.ensure_future(self._start_services())
        stop = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait({startup, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not startup.done():
            # Recovery or the store is taking long; whatever the WAL holds stays there.
            log.warning("stopping before start-up finished")
            startup.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await startup
            return False
        error = startup.exception()
        if error is not None:
            if isinstance(error, CorruptWal):
                log.error(
                    "kfs serve could not start: %s; the WAL holds acknowledged data after this "
                    "point: restore the file, or start once with KFS_WAL_ACCEPT_LOSS=true "
                    "(--wal-accept-loss) to cut the WAL there and lose what follows",
                    error,
                )
            elif isinstance(error, OSError | KfsError):  # a port in use, a bad setting ...
                log.error("kfs serve could not start: %s", error)
            else:
                log.error("kfs serve could not start", exc_info=error)
            self._exit_code = EXIT_FAILED
            return False
        return True

    async def _start_services(self) -> None:
        """Bind the Kafka port, open store, registry, WAL and log (recovery), then serve.

        The port is bound first, so a port in use fails at once, but clients
        are accepted only once the log has recovered.
        """
        s = self.settings
        listeners = listeners_of(s)
        if any(listener.protocol.tls for listener in listeners):
            self._tls = ServerTls(tls_files(s))
        loop = asyncio.get_running_loop()
        for listener in listeners:
            server = await loop.create_server(
                functools.partial(
                    FrameStream, functools.partial(self._accept, listener), MAX_REQUEST_BYTES
                ),
                listener.host or None,
                listener.port,
                reuse_address=True,
                start_serving=False,
                ssl=self._tls.context if self._tls is not None and listener.protocol.tls else None,
            )
            self._kafka_servers.append((listener, server))
        self.kafka_port = self.listener_port(listeners[0].protocol)
        self.advertised = self._advertise()
        store = open_store(s.store_url, endpoint_url=s.s3_endpoint_url or None)
        self._store = InstrumentedStore(store, self.metrics)
        registry = TopicRegistry(self._store, s.namespace)
        self._wal_lock = WalDirectoryLock(s.data_dir)
        incarnation = uuid.uuid4().hex
        previous = await asyncio.to_thread(self._wal_lock.acquire, incarnation)
        self._keeper = LeaseKeeper(
            self._store,
            s.namespace,
            s,
            {str(protocol): address for protocol, address in self.advertised.items()},
            partition_count=lambda topic: (
                self._log.cached_partition_count(topic) if self._log is not None else None
            ),
            catalog_for=functools.partial(PartitionCatalog, self._store, s.namespace),
            incarnation=incarnation,
        )
        await self._keeper.start(dead_incarnation=previous)
        keeper = self._keeper
        previous_holders: StoreWalReader | None = None
        if s.durability == "store":
            self._wal = StoreWal.from_settings(
                s,
                self._store,
                incarnation,
                fsync_observer=self.metrics.observe_fsync,
                stage_observer=self.metrics.observe_wal_stage,
                epoch_of=lambda topic, partition: keeper.local_epoch(topic, partition) or 0,
                lease_valid=lambda topic, partition: (
                    keeper.local_epoch(topic, partition) is not None
                ),
            )
            # One reader for takeovers and the sweep: they share its listings and headers.
            previous_holders = StoreWalReader(self._store, s.namespace)
            self._wal_sweeper = asyncio.ensure_future(
                self._sweep_store_wal(previous_holders, registry)
            )
        else:
            self._wal = WalWriter.from_settings(
                s,
                fsync_observer=self.metrics.observe_fsync,
                stage_observer=self.metrics.observe_wal_stage,
                control_store=self._store,
            )
        self._log = LogManager(
            self._store,
            s.namespace,
            self._wal,
            s,
            registry,
            flush_observer=self.metrics.observe_flush,
            on_failure=self._on_log_failure,
            ownership=self._keeper,
            previous_holders=previous_holders,
            fencing=self._keeper,
        )
        self._keeper.set_callbacks(
            self._log.release, self._log.take_over, self._log.read_ahead_takeover
        )
        log.info(
            "recovering the WAL in %s (durability %s); store %s, namespace %r",
            self._wal.directory,
            s.durability,
            s.store_url,
            s.namespace,
        )
        started = time.monotonic()
        report = await self._log.start()
        log.info(
            "WAL recovered in %.2fs: %d batch(es) replayed into %d partition(s), "
            "%d already in the store",
            time.monotonic() - started,
            report.replayed_batches,
            report.partitions,
            report.skipped_batches,
        )
        self._add_counters(self._wal, self._log)
        await self._serve_kafka(self._log)

    def _on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self._stop.is_set():
            log.info("%s: already shutting down", name)
            return
        log.info("%s: shutting down gracefully", name)
        self.request_stop()

    def _on_log_failure(self, error: BaseException) -> None:
        """The WAL failed: not ready any more, stop, exit non-zero; the operator restarts."""
        self._ready = False
        self.metrics.ready.set(0)
        self._exit_code = EXIT_FAILED
        where = getattr(error, "path", None) or getattr(self._wal, "directory", "?")
        log.error(
            "the WAL failed (%s in %s): kfs serve stops with exit %d; fix the disk, then "
            "restart kfs serve -- recovery replays the WAL",
            error.__cause__ or error,
            where,
            EXIT_FAILED,
        )
        self.request_stop()

    async def _sweep_store_wal(self, reader: StoreWalReader, registry: TopicRegistry) -> None:
        """Delete the store WAL objects of daemons gone whose records are all committed.

        One daemon sweeps, the live one with the lowest node id, every ten
        heartbeats; a daemon deletes its own objects as it commits.
        """
        keeper, s = self._keeper, self.settings
        assert keeper is not None
        while True:
            await asyncio.sleep(10 * s.broker_heartbeat_interval_ms / 1000)
            live = keeper.live_nodes()
            if not live or min(n.node_id for n in live) != keeper.node_id:
                continue
            incarnations = {n.incarnation for n in live}

            def committed(topic: str, partition: int) -> int | None:
                if not registry.exists(topic):
                    return None
                catalog = PartitionCatalog(registry.store, s.namespace, topic, partition)
                return catalog.load().high_watermark

            try:
                deleted = await asyncio.to_thread(reader.sweep, committed, incarnations)
            except (KfsError, OSError) as exc:
                log.warning("sweeping the store WAL of daemons gone failed: %s", exc)
                continue
            if deleted:
                log.info("deleted %d store WAL object(s) of daemons gone", deleted)

    def _add_counters(self, wal: WalLike, partition_log: LogManager) -> None:
        if self._keeper is not None:
            self.metrics.add_collector(
                CountersCollector(
                    "kfs_cluster",
                    self._keeper.metrics,
                    "Daemons on the namespace, as this one sees them",
                    gauges=("live_nodes", "held_partitions", "lease_valid"),
                )
            )
        self.metrics.add_collector(
            CountersCollector(
                "kfs_wal",
                lambda: wal.metrics,
                "WAL manager",
                gauges=("max_frames_per_fsync",),
                exclude=("fsync_seconds",),  # kfs_wal_fsync_seconds is the histogram
            )
        )
        self.metrics.add_collector(
            CountersCollector(
                "kfs_log",
                partition_log.metrics,
                "Log manager",
                gauges=LOG_GAUGES,
            )
        )
        self.metrics.add_collector(
            LabelledGauges(
                ("topic", "partition"),
                (
                    (
                        "kfs_partition_open_transactions",
                        "Transactions open on a partition (only partitions with one)",
                    ),
                    (
                        "kfs_partition_lso_lag",
                        "High watermark minus last stable offset: what read_committed "
                        "readers wait for (only partitions with an open transaction)",
                    ),
                ),
                partition_log.open_transactions,
            )
        )

    def listener_port(self, protocol: SecurityProtocol) -> int:
        """The port the listener of ``protocol`` is bound to."""
        for listener, server in self._kafka_servers:
            if listener.protocol is protocol:
                return int(server.sockets[0].getsockname()[1])
        raise KeyError(f"no {protocol} listener")

    def _advertise(self) -> dict[SecurityProtocol, tuple[str, int]]:
        """What Metadata names for each listener: KFS_ADVERTISED_LISTENERS, else host and port."""
        s = self.settings
        given = {
            a.protocol: (a.host, a.port)
            for a in (
                parse_listeners(s.advertised_listeners, "KFS_ADVERTISED_LISTENERS")
                if s.advertised_listeners
                else []
            )
        }
        return {
            listener.protocol: given.get(
                listener.protocol,
                (_advertised_host(s, listener.host), self.listener_port(listener.protocol)),
            )
            for listener, _ in self._kafka_servers
        }

    async def _serve_kafka(self, partition_log: LogManager) -> None:
        s = self.settings
        first = self._kafka_servers[0][0].protocol
        host, port = self.advertised[first]
        listeners = ",".join(f"{p}://{h}:{n}" for p, (h, n) in self.advertised.items())
        options = BrokerOptions(
            advertised_host=host,
            advertised_port=port,
            cluster_id=cluster_id_for(s.store_url, s.namespace),
            node_id=s.node_id,
            listeners={str(p): address for p, address in self.advertised.items()},
            durability=s.durability,
            auto_create_topics=s.auto_create_topics,
            default_partitions=s.default_partitions,
            broker_configs=_broker_configs(s, listeners),
            groups=group_settings(s),
            offsets_topic_partitions=s.offsets_topic_num_partitions,
            transactions=transaction_settings(s),
            transaction_topic_partitions=s.transaction_state_log_num_partitions,
            peer_tls=tls_files(s),
            peer_login=peer_login(s),
        )
        self.broker = Broker(options, partition_log, self.metrics, cluster=self._keeper)
        self.metrics.add_collector(
            CountersCollector(
                "kfs_transactions",
                self.broker.transactions.metrics,
                "Transaction coordinator",
                gauges=("transactional_ids", "open_transactions"),
            )
        )
        assert self._store is not None
        self.broker.users = UserStore(self._store, s.namespace)
        if any(listener.protocol.sasl for listener, _ in self._kafka_servers):
            self.broker.authenticator = Authenticator(
                s.sasl_mechanisms(),
                UserCache(self.broker.users),
                reauth_ms=s.connections_max_reauth_ms,
                on_result=self.metrics.observe_sasl,
            )
        if s.authorizer == "acl":
            assert self._store is not None
            store = AclStore(self._store, s.namespace)
            authorizer = Authorizer(
                super_users=s.super_user_principals(),
                allow_if_no_acl=s.allow_everyone_if_no_acl_found,
            )
            self.broker.acl_store, self.broker.authorizer = store, authorizer
            await acl_api.refresh(
                store, authorizer
            )  # the ACLs are in force before the first client
            self._acl_refresh = asyncio.ensure_future(acl_api.refresh_forever(store, authorizer))
        await self.broker.start()
        for listener, server in self._kafka_servers:
            await server.start_serving()
            log.info(
                "serving Kafka %s on %s:%d (advertised as %s:%d)",
                listener.protocol,
                listener.host,
                self.listener_port(listener.protocol),
                *self.advertised[listener.protocol],
            )

    def reload_tls(self) -> None:
        """SIGHUP: load the TLS certificate and key again; open connections keep theirs."""
        if self._tls is None:
            log.info("SIGHUP: no TLS listener, nothing to reload")
            return
        self._tls.reload()

    async def _accept(self, listener: Listener, stream: FrameStream) -> None:
        if self._stopping or self.broker is None:
            stream.close()
            return
        connection = _Connection(
            self, self.broker, stream, listener, self.advertised.get(listener.protocol)
        )
        self._connections.add(connection)
        self.metrics.connections.inc()
        self.metrics.connections_accepted.inc()
        try:
            await connection.serve()
        finally:
            self._connections.discard(connection)
            self.metrics.connections.dec()

    async def _shutdown(self) -> None:
        self._stopping = True
        self._ready = False
        self.metrics.ready.set(0)
        for _, server in self._kafka_servers:
            server.close()
        if self.broker is not None:
            self.broker.stop()
        tasks = [c.stop_reading() for c in list(self._connections)]
        pending = {t for t in tasks if t is not None and not t.done()}
        if pending:
            log.info("finishing the requests of %d connection(s)", len(pending))
            _, late = await asyncio.wait(pending, timeout=SHUTDOWN_GRACE_S)
            for task in late:
                task.cancel()
            if late:
                log.warning(
                    "cancelled %d connection(s) still busy after %.0fs", len(late), SHUTDOWN_GRACE_S
                )
                await asyncio.wait(late, timeout=5)

    async def _close(self) -> None:
        """Close the listeners; flush and close the log, then the WAL, then the store."""
        for _, server in self._kafka_servers:
            server.close()
        if self._acl_refresh is not None:
            self._acl_refresh.cancel()
        if self._wal_sweeper is not None:
            self._wal_sweeper.cancel()
        if self.broker is not None:
            await self.broker.close()
        if self._log is not None:
            started = time.monotonic()
            try:
                await self._log.close(flush=self._stopping, timeout_s=CLOSE_FLUSH_TIMEOUT_S)
            except SegmentConflict as exc:
                log.error("flushing the log on shutdown stopped: %s", exc)
                self._exit_code = EXIT_FAILED
            except Exception:
                log.exception("flushing the log on shutdown failed; the WAL keeps the rest")
                self._exit_code = EXIT_FAILED
            else:
                log.info("log flushed and closed in %.2fs", time.monotonic() - started)
        if self._keeper is not None:
            # A clean flush lets the other daemons take this one's partitions at once.
            flushed = self._stopping and self._exit_code == EXIT_OK and self._log is not None
            with contextlib.suppress(Exception):
                await self._keeper.stop(flushed=flushed)
        if self._wal is not None:
            try:
                await asyncio.to_thread(self._wal.close)
            except Exception:
                self._exit_code = EXIT_FAILED
                if self._log is None or self._log.failed is None:  # else reported already
                    log.exception("closing the WAL failed")
        if self._wal_lock is not None:
            self._wal_lock.release()
        if self._store is not None:
            with contextlib.suppress(Exception):
                self._store.close()


# --- one client connection --------------------------------------------------------

#: What a connection may send before (and while re-doing) SASL authentication.
_SASL_OPEN_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


@dataclass(slots=True)
class _Pending:
    """A request read and started, waiting for its turn to be answered."""

    request: Request[Any] | None  # None: ``raw`` is a pre-encoded answer
    future: asyncio.Future[Any] | None
    raw: bytes | None
    started: float
    barrier: bool  # not a Produce: later requests wait for it


class _Connection:
    def __init__(
        self,
        server: KfsServer,
        broker: Broker,
        stream: FrameStream,
        listener: Listener | None = None,
        advertised: tuple[str, int] | None = None,
    ) -> None:
        self._server = server
        self._broker = broker
        self._metrics = server.metrics
        self._stream = stream
        self._queue: asyncio.Queue[_Pending | None] = asyncio.Queue(MAX_IN_FLIGHT)
        self._in_flight: deque[_Pending] = deque()  # read and not yet answered, in order
        self._barriers_in_flight = 0
        self._idle = False
        self._task: asyncio.Task[Any] | None = None
        self._broken = False
        peer = stream.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        protocol = listener.protocol if listener is not None else SecurityProtocol.PLAINTEXT
        # A verified client certificate names the principal (mutual TLS); SASL may replace it.
        principal = principal_of(stream.get_extra_info("peercert")) if protocol.tls else None
        self.session = Session.on(protocol, self.peer.rsplit(":", 1)[0], principal)
        self._advertised = advertised

    def stop_reading(self) -> asyncio.Task[Any] | None:
        """Shutdown: read no more requests; the task ends once those read are answered."""
        if self._idle and self._task is not None:
            self._task.cancel()
        return self._task

    async def serve(self) -> None:
        self._task = asyncio.current_task()
        # Handlers run in tasks made from this one, so they see the client's host.
        CLIENT_HOST.set(f"/{self.peer.rsplit(':', 1)[0]}")
        SESSION.set(self.session)
        ADVERTISED.set(self._advertised)
        responder = asyncio.create_task(self._respond())
        try:
            if await self._read_requests():
                self._client_gone()
        except Exception:
            log.exception("connection %s failed", self.peer)
        finally:
            await self._finish(responder)

    def _client_gone(self) -> None:
        """Nobody will read the answers: drop the long polls (appends still complete)."""
        for item in self._in_flight:
            if item.request is not None and item.request.api_key == ApiKey.FETCH:
                assert item.future is not None
                item.future.cancel()

    async def _finish(self, responder: asyncio.Task[None]) -> None:
        # The responder answers what is queued, then stops at the sentinel.
        try:
            await self._queue.put(None)
            await responder
        except asyncio.CancelledError:
            responder.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await responder
            self._cancel_queued()
        finally:
            self._stream.close()

    def _cancel_queued(self) -> None:
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not None and item.future is not None:
                item.future.cancel()

    async def _enqueue(self, item: _Pending) -> None:
        if item.barrier:
            self._barriers_in_flight += 1
        self._in_flight.append(item)
        await self._queue.put(item)

    async def _read_requests(self) -> bool:
        """Read, decode and start requests in order; True when the client went away."""
        stream = self._stream
        while not self._server.stopping and not self._broken:
            self._idle = True
            try:
                payload = await stream.read_frame()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
                return False  # shutdown while waiting for a frame: nothing in flight is lost
            except FrameError as error:
                kind = "too_large" if isinstance(error, FrameTooLarge) else "truncated"
                self._metrics.refused_frames.labels(kind).inc()
                log.info("closing %s: %s", self.peer, error)
                return True
            except (ConnectionError, OSError):
                return True
            finally:
                self._idle = False
            if payload is None:
                return True
            if self.session.protocol.sasl and not self.session.authenticated:
                await self._queue.join()  # the SASL requests before this one are answered
                if self.session.raw_tokens:
                    if not await self._raw_token(bytes(payload)):
                        return False
                    continue
            started = time.perf_counter()
            try:
                request = decode_request(payload, SUPPORTED_VERSIONS)
            except RequestError as error:
                self._metrics.refused_frames.labels(type(error).__name__).inc()
                answer = error_response_frame(error, SUPPORTED_VERSIONS)
                log.info(
                    "%s %s (client %r): %s",
                    "answering" if answer else "closing",
                    self.peer,
                    error.client_id,
                    error,
                )
                if answer is None:
                    return False
                await self._enqueue(_Pending(None, None, answer, started, barrier=True))
                continue
            barrier = request.api_key != ApiKey.PRODUCE
            if barrier or self._barriers_in_flight:
                await self._queue.join()
            if self._broken:
                return False  # a failed SASL exchange: its answer was the last
            refusal = self._refusal(request.api_key)
            if refusal:
                log.info("closing %s: %s", self.peer, refusal)
                return False
            try:
                future = await self._broker.begin(request)
            except Exception as exc:  # noqa: BLE001 - answered in order, as a failed handler is
                future = asyncio.get_running_loop().create_future()
                future.set_exception(exc)
            await self._enqueue(_Pending(request, future, None, started, barrier))
        return False

    async def _raw_token(self, token: bytes) -> bool:
        """One bare SASL token after SaslHandshake v0; whether the connection goes on."""
        authenticator = self._broker.authenticator
        if authenticator is None:
            return False
        result = await authenticator.authenticate(self.session, token)
        if result.error_code:
            log.info("closing %s: SASL (handshake v0) failed", self.peer)
            return False  # a v0 client learns of the failure from the closed connection
        await self._write([struct.pack(">i", len(result.auth_bytes)), result.auth_bytes])
        if self.session.authenticated:
            self.session.raw_tokens = False
        return True

    def _refusal(self, api_key: ApiKey) -> str | None:
        """Why the session may not send ``api_key`` now (the connection closes), or None."""
        session = self.session
        if api_key in _SASL_OPEN_APIS:
            return None
        if not session.authenticated:
            return f"{api_key.name} before SASL authentication (Kafka closes the connection too)"
        if session.expired():
            return "the SASL session expired without re-authentication"
        return None

    async def _respond(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                if item is None:
                    return
                await self._answer(item)
                if self.session.failed:  # a failed SASL exchange: answered, now close
                    self._broken = True
                    self._stream.close()
            except Exception:
                log.exception("answering %s failed; closing the connection", self.peer)
                self._abort()
            finally:
                if item is not None:
                    self._in_flight.popleft()
                    if item.barrier:
                        self._barriers_in_flight -= 1
                self._queue.task_done()

    async def _answer(self, item: _Pending) -> None:
        if item.raw is not None:
            await self._write([item.raw])
            return
        request, future = item.request, item.future
        assert request is not None and future is not None
        api = request.api_key.name
        try:
            body = await future
        except asyncio.CancelledError:
            if future.cancelled() and not _cancelling():
                return  # a long poll whose client went away
            raise
        except Exception as exc:
            log.error(
                "%s v%d from %s (client %r, correlation %d) failed",
                api,
                request.api_version,
                self.peer,
                request.client_id,
                request.correlation_id,
                exc_info=exc,
            )
            self._metrics.request_failures.labels(api).inc()
            body = error_response(request, ErrorCode.UNKNOWN_SERVER_ERROR, self._broker.options)
        self._metrics.requests.labels(api).inc()
        if not request.expects_response:
            self._metrics.request_latency.labels(api).observe(time.perf_counter() - item.started)
            if _produce_failed(body):
                log.info("closing %s: an acks=0 produce failed", self.peer)
                self._abort()
            return
        try:
            parts = encode_response_parts(request, body)
        except InvalidResponse:
            log.exception("%s v%d: the response could not be encoded", api, request.api_version)
            self._metrics.request_failures.labels(api).inc()
            try:
                parts = encode_response_parts(
                    request,
                    error_response(request, ErrorCode.UNKNOWN_SERVER_ERROR, self._broker.options),
                )
            except InvalidResponse:
                self._abort()
                return
        await self._write(parts)
        self._metrics.request_latency.labels(api).observe(time.perf_counter() - item.started)

    async def _write(self, parts: list[bytes | bytearray | memoryview]) -> None:
        if self._broken:
            return
        try:
            self._stream.writelines(parts)
            await self._stream.drain()
        except (ConnectionError, OSError):
            self._abort()

    def _abort(self) -> None:
        """Drop the connection; requests already read still run to completion."""
        self._broken = True
        with contextlib.suppress(Exception):
            self._stream.abort()


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _produce_failed(body: Any) -> bool:
    return any(
        p.error_code != ErrorCode.NONE
        for topic in getattr(body, "responses", ())
        for p in topic.partition_responses
    )


# --- entry point ----------------------------------------------------------------


def serve(settings: Settings) -> int:
    """Run the daemon until SIGTERM/SIGINT; return the exit code.  Uses uvloop when installed.

    The allocator is tuned first, before any thread starts (`allocator`).
    """
    tuned = tune_allocator()
    log.debug("allocator: %s", tuned or "glibc not found, defaults kept")
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency on every POSIX platform
        pass
    server = KfsServer(settings)
    # What exists now (the modules, the protocol's message classes, the
    # settings) lives as long as the process: moved out of the collector's
    # generations, it is no longer walked by every full collection.
    gc.freeze()
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(server.run())
