"""The daemon's operational surface: Prometheus metrics and the /livez, /readyz probes.

`ServerMetrics` owns a private `CollectorRegistry` (never prometheus_client's
global one, so two daemons in one process, or a test, never share series):

* request counters and latency histograms per API, produce/fetch bytes,
  per-partition error codes, connections and refused frames;
* the WAL fsync latency histogram, fed by `WalWriter`'s ``fsync_observer``
  from its writer thread (prometheus_client metrics are thread-safe), and the
  time an append waits for the writer and spends in its write
  (``stage_observer``): with the Produce latency and the event loop's lag,
  where an acknowledgement's time goes;
* object-store requests, errors, bytes and latency, counted by
  `InstrumentedStore`, a wrapper the daemon hands to everything that talks to
  the store;
* whatever plain counters the WAL and the log manager keep, read at scrape
  time by `CountersCollector` (flushes, cache hits and misses, pool usage ...)
  - the library code stays free of Prometheus.

`OpsHttpServer` serves them on ``KFS_METRICS_LISTEN`` from the daemon's own
event loop: a probe that gets an answer has proved the loop runs.

    GET /metrics   Prometheus text format
    GET /livez     200 "ok" while the event loop runs
    GET /readyz    200 "ready" once WAL recovery and the log manager's start
                   are done and the Kafka listener is open; 503 before and
                   while shutting down.  A ready daemon adds a line per
                   degraded condition (the store failing, the memory pool
                   nearly full): it still takes writes into the WAL then.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from kfs_core import __version__
from kfs_core.storage.base import ByteRange, ObjectInfo, ObjectStore

__all__ = [
    "CountersCollector",
    "InstrumentedStore",
    "LabelledGauges",
    "OpsHttpServer",
    "ServerMetrics",
    "numeric_fields",
]

log = logging.getLogger(__name__)

# Latency buckets from a quarter of a millisecond (a cached fetch) to 30 s (a
# produce waiting out a full pool, a long poll), finest where a cautious
# Produce is (1-10 ms): a quantile read from them is within half a millisecond there.
_LATENCY_BUCKETS: Final = (
    0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.0025, 0.003, 0.0035, 0.004, 0.005,
    0.006, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
# fdatasync on SSDs is 0.05-5 ms; on network disks tens of ms.  The WAL's
# append stages (queue wait, write) use the same buckets.
_FSYNC_BUCKETS: Final = (
    0.00005, 0.0001, 0.00015, 0.0002, 0.0003, 0.0004, 0.0005, 0.00075, 0.001, 0.0015, 0.002,
    0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0,
)  # fmt: skip
_FRAMES_BUCKETS: Final = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024)
# Flush sizes: a few KiB (a quiet partition every 500 ms) to the 4 MiB seal size and beyond.
_SIZE_BUCKETS: Final = tuple(float(1 << shift) for shift in range(10, 27, 2))


class ServerMetrics:
    """Every metric the daemon exports, in one private registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "kfs_requests", "Kafka requests served, by API", ["api"], registry=r
        )
        self.request_latency = Histogram(
            "kfs_request_latency_seconds",
            "Time from decoding a request to writing its response, by API "
            "(Fetch includes its long-poll wait)",
            ["api"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.request_failures = Counter(
            "kfs_request_failures",
            "Requests answered with UNKNOWN_SERVER_ERROR because a handler raised",
            ["api"],
            registry=r,
        )
        self.partition_errors = Counter(
            "kfs_partition_errors",
            "Per-partition (or per-topic) error codes sent, by API and Kafka error name",
            ["api", "error"],
            registry=r,
        )
        self.produce_bytes = Counter(
            "kfs_produce_bytes", "Record-batch bytes accepted by Produce", registry=r
        )
        self.fetch_bytes = Counter(
            "kfs_fetch_bytes", "Record-batch bytes returned by Fetch", registry=r
        )
        self.fetch_waiting = Gauge(
            "kfs_fetch_waiting", "Fetch requests long-polling for data right now", registry=r
        )
        self.connections = Gauge("kfs_connections", "Open client connections", registry=r)
        self.connections_accepted = Counter(
            "kfs_connections_accepted", "Client connections accepted", registry=r
        )
        self.refused_frames = Counter(
            "kfs_refused_frames",
            "Frames that could not become a request (oversize, truncated, garbage, "
            "unknown API, unsupported version), by error class",
            ["kind"],
            registry=r,
        )
        self.wal_fsync_seconds = Histogram(
            "kfs_wal_fsync_seconds",
            "Duration of each WAL data fsync",
            buckets=_FSYNC_BUCKETS,
            registry=r,
        )
        self.wal_stage_seconds = Histogram(
            "kfs_wal_append_stage_seconds",
            "Time an append spends in each WAL stage before its fsync: queue_wait "
            "(queued until the writer thread takes it, per append) and write (per write)",
            ["stage"],
            buckets=_FSYNC_BUCKETS,
            registry=r,
        )
        self.event_loop_lag = Histogram(
            "kfs_event_loop_lag_seconds",
            "How late the event loop ran a callback due now (sampled every 50 ms): "
            "time it spent on other work or waiting for the GIL",
            buckets=_FSYNC_BUCKETS,
            registry=r,
        )
        self.wal_fsync_frames = Histogram(
            "kfs_wal_fsync_frames",
            "Frames covered by each WAL fsync (group commit)",
            buckets=_FRAMES_BUCKETS,
            registry=r,
        )
        self.flush_seconds = Histogram(
            "kfs_flush_seconds",
            "Duration of each partition flush (seal, upload, commit)",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.flush_bytes = Histogram(
            "kfs_flush_bytes",
            "Segment bytes committed by each partition flush",
            buckets=_SIZE_BUCKETS,
            registry=r,
        )
        self.store_requests = Counter(
            "kfs_object_store_requests", "Object-store requests, by operation", ["op"], registry=r
        )
        self.store_errors = Counter(
            "kfs_object_store_errors",
            "Object-store requests that raised, by operation and error class "
            "(a missing key on get/head counts as not_found)",
            ["op", "error"],
            registry=r,
        )
        self.store_latency = Histogram(
            "kfs_object_store_request_seconds",
            "Object-store request duration, by operation",
            ["op"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.store_bytes = Counter(
            "kfs_object_store_bytes",
            "Bytes moved to (put) and from (get) the object store",
            ["direction"],
            registry=r,
        )
        self.ready = Gauge("kfs_ready", "1 once the daemon serves Kafka clients", registry=r)
        self.sasl_authentications = Counter(
            "kfs_sasl_authentications",
            "SASL authentications by mechanism and result (success, failure)",
            ["mechanism", "result"],
            registry=r,
        )
        self.store_health = StoreHealth()
        Gauge(
            "kfs_store_unavailable_seconds",
            "How long the object store's requests have been failing (0: it answers)",
            registry=r,
        ).set_function(self.store_health.unavailable_for)
        self.offsets_load_seconds = Gauge(
            "kfs_groups_offsets_load_seconds",
            "Seconds the last start took to rebuild committed offsets from __consumer_offsets",
            registry=r,
        )
        self.offsets_loaded = Gauge(
            "kfs_groups_offsets_loaded",
            "Committed offsets rebuilt from __consumer_offsets at the last start",
            registry=r,
        )
        self.info = Gauge("kfs_build_info", "KFS version", ["version"], registry=r)
        self.info.labels(__version__).set(1)

    def observe_fsync(self, seconds: float, frames: int) -> None:
        """`WalWriter`'s ``fsync_observer``: runs on the WAL writer thread."""
        self.wal_fsync_seconds.observe(seconds)
        self.wal_fsync_frames.observe(frames)

    def observe_wal_stage(self, stage: str, seconds: float) -> None:
        """`WalWriter`'s ``stage_observer``: runs on the WAL writer thread."""
        self.wal_stage_seconds.labels(stage).observe(seconds)

    def observe_flush(self, seconds: float, size: int, segments: int) -> None:
        """`LogManager`'s ``flush_observer``: one partition flush committed."""
        self.flush_seconds.observe(seconds)
        self.flush_bytes.observe(size)

    def observe_sasl(self, mechanism: str, ok: bool) -> None:
        """One SASL authentication's outcome (the authenticator's ``on_result``)."""
        self.sasl_authentications.labels(mechanism, "success" if ok else "failure").inc()

    def add_collector(self, collector: Collector) -> None:
        self.registry.register(collector)

    def render(self) -> bytes:
        return generate_latest(self.registry)


# --- plain counters kept by library code ------------------------------------


def numeric_fields(source: Any) -> Mapping[str, float]:
    """The numeric fields of a metrics object: a dataclass, a mapping or plain attributes."""
    if source is None:
        return {}
    if isinstance(source, Mapping):
        items: Iterable[tuple[str, Any]] = source.items()
    elif dataclasses.is_dataclass(source) and not isinstance(source, type):
        items = ((f.name, getattr(source, f.name)) for f in dataclasses.fields(source))
    else:
        items = ((k, v) for k, v in vars(source).items() if not k.startswith("_"))
    return {
        str(name): float(value)
        for name, value in items
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


class CountersCollector(Collector):
    """Exports the numeric fields of a library metrics object at scrape time.

    ``read`` returns the object (a dataclass such as `WalMetrics`, a mapping
    or an object with attributes).  Field ``x`` becomes ``{prefix}_x``: a
    gauge if it is in ``gauges``, else a counter (``{prefix}_x_total``);
    fields in ``exclude`` are skipped (another metric covers them).  For every
    ``<name>_hits`` with a ``<name>_misses`` beside it, the collector adds the
    gauge ``{prefix}_<name>_hit_ratio``.
    """

    def __init__(
        self,
        prefix: str,
        read: Callable[[], Any],
        documentation: str,
        *,
        gauges: Iterable[str] = (),
        exclude: Iterable[str] = (),
    ) -> None:
        self._prefix = prefix
        self._read = read
        self._doc = documentation
        self._gauges = frozenset(gauges)
        self._exclude = frozenset(exclude)

    def describe(self) -> Iterable[Metric]:
        return []  # names depend on the object: collected lazily

    def collect(self) -> Iterator[Metric]:
        try:
            values = numeric_fields(self._read())
        except Exception:  # a scrape must never take the daemon down
            log.exception("reading %s counters failed", self._prefix)
            return
        for name, value in sorted(values.items()):
            if name in self._exclude:
                continue
            metric_name = f"{self._prefix}_{name}"
            if name in self._gauges:
                yield GaugeMetricFamily(metric_name, f"{self._doc}: {name}", value=value)
            else:
                yield CounterMetricFamily(
                    metric_name.removesuffix("_total"), f"{self._doc}: {name}", value=value
                )
        for name, hits in values.items():
            if not name.endswith("_hits"):
                continue
            stem = name.removesuffix("_hits")
            misses = values.get(f"{stem}_misses")
            if misses is None:
                continue
            total = hits + misses
            yield GaugeMetricFamily(
                f"{self._prefix}_{stem}_hit_ratio",
                f"{self._doc}: {stem} hits / (hits + misses), 0 before the first lookup",
                value=hits / total if total else 0.0,
            )


class LabelledGauges(Collector):
    """Gauges with labels, read at scrape time: ``read`` gives rows of label values, then values.

    ``names`` pairs each value column with its metric name and help.
    """

    def __init__(
        self,
        labels: Sequence[str],
        names: Sequence[tuple[str, str]],
        read: Callable[[], Iterable[Sequence[Any]]],
    ) -> None:
        self._labels = list(labels)
        self._names = list(names)
        self._read = read

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        try:
            rows = list(self._read())
        except Exception:  # a scrape must never take the daemon down
            log.exception("reading %s failed", self._names[0][0])
            return
        width = len(self._labels)
        for column, (name, documentation) in enumerate(self._names):
            family = GaugeMetricFamily(name, documentation, labels=self._labels)
            for row in rows:
                family.add_metric([str(v) for v in row[:width]], float(row[width + column]))
            yield family


# --- object-store instrumentation -------------------------------------------


#: Store errors that are answers, not unavailability: the request reached the store.
_ANSWERS: Final = frozenset({"not_found", "already_exists", "PreconditionFailed"})


class StoreHealth:
    """Whether the store answers: since when its requests fail, and the last failure's kind.

    A request that got an answer (even "not found" or a lost conditional
    write) ends an outage; any other failure starts one.  Written from the
    store's I/O threads; each field is one atomic assignment.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.failing_since: float | None = None
        self.last_error = ""

    def answered(self) -> None:
        self.failing_since = None

    def failed(self, label: str) -> None:
        self.last_error = label
        if self.failing_since is None:
            self.failing_since = self._clock()

    def unavailable_for(self) -> float:
        """Seconds since the first of the failures not followed by an answer; 0 when healthy."""
        since = self.failing_since
        return 0.0 if since is None else self._clock() - since


class InstrumentedStore(ObjectStore):
    """An `ObjectStore` that counts, times and forwards every request to ``inner``.

    Anything beyond the `ObjectStore` interface (a backend's own attributes)
    is forwarded unchanged.
    """

    def __init__(self, inner: ObjectStore, metrics: ServerMetrics) -> None:
        self.inner = inner
        self.url = inner.url
        self._metrics = metrics

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def put_concurrency(self) -> int | None:  # type: ignore[override]
        return self.inner.put_concurrency

    def __repr__(self) -> str:
        return f"InstrumentedStore({self.inner!r})"

    @contextlib.contextmanager
    def _timed(self, op: str, requests: int = 1) -> Iterator[None]:
        m = self._metrics
        m.store_requests.labels(op).inc(requests)
        started = time.perf_counter()
        try:
            yield
        except Exception as exc:
            label = _error_label(exc)
            m.store_errors.labels(op, label).inc()
            if label in _ANSWERS:
                m.store_health.answered()
            else:
                m.store_health.failed(label)
            raise
        else:
            m.store_health.answered()
        finally:
            m.store_latency.labels(op).observe(time.perf_counter() - started)

    def put(self, key: str, data: bytes) -> ObjectInfo:
        with self._timed("put"):
            info = self.inner.put(key, data)
        self._metrics.store_bytes.labels("put").inc(len(data))
        return info

    def put_parts(self, key: str, parts: Sequence[bytes | bytearray | memoryview]) -> ObjectInfo:
        with self._timed("put"):
            info = self.inner.put_parts(key, parts)
        self._metrics.store_bytes.labels("put").inc(sum(memoryview(p).nbytes for p in parts))
        return info

    def put_many(
        self, objects: Sequence[tuple[str, Sequence[bytes | bytearray | memoryview]]]
    ) -> list[ObjectInfo]:
        if type(self.inner).put_many is ObjectStore.put_many:
            # One PUT after another (S3): each is a request of its own, timed as such.
            return [self.put_parts(key, parts) for key, parts in objects]
        # Written together (the local store): one request per object, one latency for all.
        with self._timed("put", requests=len(objects)):
            infos = self.inner.put_many(objects)
        self._metrics.store_bytes.labels("put").inc(
            sum(memoryview(p).nbytes for _, parts in objects for p in parts)
        )
        return infos

    def put_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        with self._timed("put_if_absent"):
            info = self.inner.put_if_absent(key, data)
        self._metrics.store_bytes.labels("put").inc(len(data))
        return info

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        with self._timed("get" if byte_range is None else "get_range"):
            data = self.inner.get(key, byte_range)
        self._metrics.store_bytes.labels("get").inc(len(data))
        return data

    def head(self, key: str) -> ObjectInfo:
        with self._timed("head"):
            return self.inner.head(key)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        # Listing is lazy (one request per page); time the whole iteration.
        with self._timed("list"):
            yield from self.inner.list(prefix, start_after)

    def delete(self, key: str) -> None:
        with self._timed("delete"):
            self.inner.delete(key)

    def close(self) -> None:
        self.inner.close()


def _error_label(exc: BaseException) -> str:
    from kfs_core.errors import ObjectAlreadyExists, ObjectNotFound

    if isinstance(exc, ObjectNotFound):
        return "not_found"
    if isinstance(exc, ObjectAlreadyExists):
        return "already_exists"  # a lost put-if-absent race: expected, but worth seeing
    return type(exc).__name__


# --- the HTTP endpoint --------------------------------------------------------

_MAX_REQUEST_HEAD = 16 * 1024
_REQUEST_TIMEOUT_S = 10.0
_REASONS: Final = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable",
                   400: "Bad Request"}  # fmt: skip


class OpsHttpServer:
    """A deliberately small HTTP/1.0 server for /metrics, /livez and /readyz.

    One request per connection, GET (and HEAD) only, bounded request size and
    time.  It runs on the daemon's event loop; rendering the metrics takes
    well under a millisecond per scrape.
    """

    def __init__(
        self,
        metrics: ServerMetrics,
        is_ready: Callable[[], bool],
        conditions: Callable[[], list[str]] = list,
    ) -> None:
        self._metrics = metrics
        self._is_ready = is_ready
        self._conditions = conditions  # lines /readyz adds: what is degraded, while ready
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the metrics server is not listening")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._serve, host, port, reuse_address=True)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _REQUEST_TIMEOUT_S)
            except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError):
                return
            if len(head) > _MAX_REQUEST_HEAD:
                return
            status, content_type, body, head_only = self._route(head)
            reason = _REASONS.get(status, "")
            writer.write(
                f"HTTP/1.0 {status} {reason}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1")
            )
            if not head_only:
                writer.write(body)
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        except Exception:
            log.exception("metrics endpoint failed")
        finally:
            writer.close()

    def _route(self, head: bytes) -> tuple[int, str, bytes, bool]:
        text = "text/plain; charset=utf-8"
        try:
            method, target, _version = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
        except ValueError:
            return 400, text, b"bad request\n", False
        head_only = method == "HEAD"
        if method not in ("GET", "HEAD"):
            return 405, text, b"method not allowed\n", False
        path = target.split("?", 1)[0]
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, self._metrics.render(), head_only
        if path == "/livez":
            return 200, text, b"ok\n", head_only
        if path == "/readyz":
            if self._is_ready():
                body = "".join(f"{line}\n" for line in ["ready", *self._conditions()])
                return 200, text, body.encode(), head_only
            return 503, text, b"not ready\n", head_only
        return 404, text, b"not found\n", head_only
