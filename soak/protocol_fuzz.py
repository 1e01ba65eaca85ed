"""The hostile-input campaign: a live `kfs serve` fuzzed over real sockets while clients work.

The request corpus is structure-aware in two ways:

- **every API key and version the daemon serves**, each request built by its
  spec-generated message class with default fields (`default_requests`),
  plus one version past the highest and an API key nobody serves;
- **real client traffic**: the frames confluent-kafka (librdkafka) and
  kafka-python send for produce, fetch, metadata, groups and admin requests,
  recorded through `RecordingProxy` (`record_client_frames`).

Each case keeps a request's header valid and mutates its body (bits
flipped, bytes set to boundary values, int16/int32 fields set to extremes,
cuts, inserts, repeats), seeded so a run replays.  Beside them: frames cut
short, size prefixes negative or past ``socket.request.max.bytes``, slow-loris
connections that trickle a request a byte at a time, and a few thousand
idle connections held open throughout.

Meanwhile an idempotent producer and a tail consumer (`soak.load`) must see
no error and no delivery slower than `MAX_DELIVERY_S`; afterwards the daemon
must still be alive, must have logged no traceback (a request that met an
exception nobody expected), its RSS must have stayed within its configured
pool and caches plus 256 MiB, and every acknowledged record must read back
unchanged.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import psutil
from confluent_kafka.cimpl import NewTopic

from kfs_core.server.apis import SUPPORTED_VERSIONS
from kfs_core.server.protocol import MESSAGES, ApiKey
from kfs_core.server.protocol.framing import MAX_REQUEST_BYTES
from soak.load import (
    QUIET,
    Findings,
    LoadProducer,
    TailConsumer,
    check_log,
    create_topic,
    read_range,
    wait_until,
)
from soak.report import Row

MAX_DELIVERY_S = 10.0  # the bound on a well-behaved producer's delivery during the fuzzing
ANSWER_WAIT_S = 0.3  # how long a case waits for an answer before it moves on
FUZZ_TOPIC = "kfs-fuzz"


@dataclass(frozen=True)
class Template:
    """A request frame's payload (no size prefix) and where its body starts."""

    api_key: int
    api_version: int
    payload: bytes
    body_start: int


def _header_length(payload: bytes) -> int:
    """Bytes of a request header: key, version, correlation id, client id, tags if flexible."""
    api_key: int
    api_version: int
    client_len: int
    api_key, api_version = struct.unpack_from(">hh", payload)
    (client_len,) = struct.unpack_from(">h", payload, 8)
    end = 10 + max(client_len, 0)
    with contextlib.suppress(KeyError, ValueError):  # ValueError: a key KFS does not serve
        if MESSAGES[ApiKey(api_key)].request.flexible_version_q(api_version):
            end += 1  # an empty tagged-field section
    return min(end, len(payload))


def default_requests() -> list[Template]:
    """Every served (API key, version) with default fields, one version too new, an unknown key."""
    out = []
    for api_key, (low, high) in SUPPORTED_VERSIONS.items():
        message = MESSAGES[ApiKey(api_key)].request
        for version in range(low, high + 1):
            request = message(version=version)
            request.with_header(correlation_id=1, client_id="kfs-fuzz")
            payload = bytes(request.encode(header=True))
            out.append(Template(int(api_key), version, payload, _header_length(payload)))
        too_new = bytearray(out[-1].payload)
        struct.pack_into(">h", too_new, 2, high + 1)
        out.append(Template(int(api_key), high + 1, bytes(too_new), out[-1].body_start))
    unknown = bytearray(out[0].payload)
    struct.pack_into(">h", unknown, 0, 9999)
    out.append(Template(9999, 0, bytes(unknown), out[0].body_start))
    return out


#: The host the fuzzed daemon advertises (``--advertised-host``): a `RecordingProxy` listens
#: there on the daemon's port, so clients reach the daemon through it after the bootstrap.
ADVERTISED_HOST = "127.0.0.2"


class RecordingProxy:
    """A TCP proxy at ``ADVERTISED_HOST`` in front of the daemon; keeps request frames while on.

    The daemon advertises that host, so every connection a client makes after
    its bootstrap comes through here, and ``frames`` holds the requests real
    clients send while ``recording`` is set.
    """

    def __init__(self, port: int) -> None:
        self.upstream = ("127.0.0.1", port)
        self.frames: list[bytes] = []
        self.recording = True
        self._lock = threading.Lock()
        self._listener = socket.create_server((ADVERTISED_HOST, port))
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
                server = socket.create_connection(self.upstream)
            except OSError:
                if self._closed:
                    return
                continue
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, requests: bool) -> None:
        pending = b""
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                if requests and self.recording:
                    pending += data
                    while len(pending) >= 4:
                        (size,) = struct.unpack_from(">i", pending)
                        if len(pending) < 4 + size:
                            break
                        with self._lock:
                            self.frames.append(pending[4 : 4 + size])
                        pending = pending[4 + size :]
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._closed = True
        self._listener.close()


def record_client_frames(bootstrap: str, proxy: RecordingProxy) -> list[Template]:
    """The request frames real clients send: produce, fetch, metadata, groups and admin."""
    via = bootstrap
    proxy.recording = True
    try:
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": via, "enable.idempotence": True, "linger.ms": 1, **QUIET}
        )
        for i in range(20):
            producer.produce(FUZZ_TOPIC, key=b"k%d" % i, value=b"v" * i, headers={"h": b"x"})
        producer.flush(30)
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": via, **QUIET})
        admin.list_topics(timeout=10)
        for future in admin.create_topics([NewTopic(f"{FUZZ_TOPIC}-admin", 2, 1)]).values():
            with contextlib.suppress(Exception):
                future.result(30)
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": via,
                "group.id": "kfs-fuzz-group",
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                **QUIET,
            }
        )
        consumer.subscribe([FUZZ_TOPIC])
        deadline = time.monotonic() + 30
        got = 0
        while got < 20 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got += 1
        consumer.commit(asynchronous=False)
        consumer.close()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import kafka

            kp = kafka.KafkaProducer(bootstrap_servers=via, acks="all")
            kp.send(FUZZ_TOPIC, b"from kafka-python").get(30)
            kp.close()
    finally:
        proxy.recording = False
    out = []
    for frame in proxy.frames:
        if len(frame) >= 10:
            api_key, api_version = struct.unpack_from(">hh", frame)
            out.append(Template(api_key, api_version, frame, _header_length(frame)))
    return out


def mutate(payload: bytes, body_start: int, rng: random.Random) -> bytes:
    """The payload with its body mutated one to three times (the header kept)."""
    data = bytearray(payload)
    for _ in range(rng.randint(1, 3)):
        body = len(data) - body_start
        pos = body_start + rng.randrange(body) if body > 0 else len(data)
        kind = rng.randrange(7)
        if kind == 0 and body > 0:  # flip bits
            data[pos] ^= 1 << rng.randrange(8)
        elif kind == 1 and body > 0:  # a boundary byte
            data[pos] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF))
        elif kind == 2 and body >= 4:  # an int32 or int16 field at an extreme
            at = body_start + rng.randrange(body - 3)
            value = rng.choice((-1, 0, 0x7FFFFFFF, -0x80000000, 0x7FFF, -0x8000))
            if rng.random() < 0.5:
                struct.pack_into(">i", data, at, value)
            else:
                struct.pack_into(">h", data, at, max(-0x8000, min(0x7FFF, value)))
        elif kind == 3:  # cut the body
            del data[pos:]
        elif kind == 4:  # insert random bytes
            data[pos:pos] = rng.randbytes(rng.choice((1, 2, 4, 16, 300)))
        elif kind == 5 and body > 0:  # repeat a slice
            end = min(len(data), pos + rng.randrange(1, 64))
            data[pos:pos] = data[pos:end] * rng.randint(2, 20)
        else:  # random bytes over a stretch
            end = min(len(data), pos + rng.randrange(1, 32))
            data[pos:end] = rng.randbytes(end - pos)
    return bytes(data)


@dataclass
class Outcomes:
    """How the daemon took the cases."""

    counts: Counter[str] = field(default_factory=Counter)

    def line(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))


class Attacker:
    """Sends fuzz cases and frame-level abuse on its own connections."""

    def __init__(self, address: tuple[str, int], rng: random.Random) -> None:
        self.address = address
        self.rng = rng
        self.outcomes = Outcomes()
        self._sock: socket.socket | None = None

    def _connection(self) -> socket.socket:
        if self._sock is None:
            self._sock = socket.create_connection(self.address, timeout=5)
        return self._sock

    def _drop(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = None

    def send_case(self, payload: bytes) -> None:
        """One frame; the outcome: answered, closed (by the daemon), or pending."""
        try:
            sock = self._connection()
            sock.sendall(struct.pack(">i", len(payload)) + payload)
            sock.settimeout(ANSWER_WAIT_S)
            head = sock.recv(4)
        except TimeoutError:
            self.outcomes.counts["no answer yet (long poll or refused silently)"] += 1
            self._drop()  # the answer may still come: a fresh connection for the next case
            return
        except OSError:
            self.outcomes.counts["connection closed"] += 1
            self._drop()
            return
        if len(head) < 4:
            self.outcomes.counts["connection closed"] += 1
            self._drop()
            return
        (size,) = struct.unpack(">i", head)
        try:
            remaining = size
            while remaining > 0:
                chunk = sock.recv(min(remaining, 1 << 20))
                if not chunk:
                    raise OSError("closed mid-response")
                remaining -= len(chunk)
        except OSError:
            self.outcomes.counts["connection closed"] += 1
            self._drop()
            return
        self.outcomes.counts["answered"] += 1

    def frame_abuse(self) -> None:
        """One frame-level attack on a fresh connection."""
        self._drop()
        kind = self.rng.randrange(4)
        try:
            with socket.create_connection(self.address, timeout=5) as sock:
                if kind == 0:  # a frame cut short, then the connection closed
                    sock.sendall(struct.pack(">i", 1000) + self.rng.randbytes(300))
                elif kind == 1:  # past socket.request.max.bytes
                    sock.sendall(struct.pack(">i", MAX_REQUEST_BYTES + 1) + b"\0" * 64)
                elif kind == 2:  # a negative size
                    sock.sendall(struct.pack(">i", -5) + b"\0" * 64)
                else:  # a partial size prefix
                    sock.sendall(b"\0\0")
                sock.settimeout(1.0)
                with contextlib.suppress(OSError):
                    sock.recv(4)
        except OSError:
            pass
        self.outcomes.counts[f"frame abuse {kind}"] += 1


class SlowLoris:
    """Connections that trickle one request a byte at a time, forever, until stopped."""

    def __init__(self, address: tuple[str, int], count: int, payload: bytes) -> None:
        self.address, self.count, self.payload = address, count, payload
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.bytes_sent = 0

    def _run(self) -> None:
        frame = struct.pack(">i", len(self.payload)) + self.payload
        socks = []
        for _ in range(self.count):
            with contextlib.suppress(OSError):
                socks.append(socket.create_connection(self.address, timeout=5))
        pos = 0
        while not self._stop.wait(0.2) and pos < len(frame):
            for sock in socks:
                with contextlib.suppress(OSError):
                    sock.send(frame[pos : pos + 1])
                    self.bytes_sent += 1
            pos += 1
        self._stop.wait()
        for sock in socks:
            sock.close()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@contextlib.contextmanager
def idle_connections(address: tuple[str, int], count: int) -> Iterator[int]:
    """``count`` connections that never send a byte, open for the block; how many opened."""
    socks = []
    try:
        for _ in range(count):
            try:
                socks.append(socket.create_connection(address, timeout=5))
            except OSError:
                break
        yield len(socks)
    finally:
        for sock in socks:
            sock.close()


def run(
    daemon: Any,
    *,
    cases: int,
    seed: int,
    memory_bound: int,
    idle: int = 2000,
    loris: int = 50,
    rate: int = 200,
    progress: Callable[[str], None] | None = None,
) -> tuple[Row, Outcomes]:
    """``cases`` fuzz cases at ``daemon`` (`testkit.daemon.Daemon`) while clients work; the row."""
    rng = random.Random(seed)
    tracebacks_before = daemon.log().count("Traceback")
    host, port = daemon.bootstrap.rsplit(":", 1)
    address = (host, int(port))
    proxy = RecordingProxy(int(port))  # before any client: the daemon advertises it
    create_topic(daemon.bootstrap)
    templates = default_requests() + record_client_frames(daemon.bootstrap, proxy)
    producer = LoadProducer(daemon.bootstrap, 0, seed, "lz4", rate)
    tail = TailConsumer(daemon.bootstrap)
    process = psutil.Process(daemon.proc.pid)
    findings = Findings()
    attacker = Attacker(address, rng)
    peak_rss = 0
    producer.start()
    tail.start()
    wait_until(lambda: bool(producer.snapshot()[1]), 60, "a first acknowledgement")
    loris_payload = templates[0].payload
    slow = SlowLoris(address, loris, loris_payload)
    try:
        with idle_connections(address, idle) as opened:
            slow.start()
            if opened < idle:
                findings.problem("idle connections", f"only {opened} of {idle} opened")
            for case in range(cases):
                if rng.random() < 0.02:
                    attacker.frame_abuse()
                else:
                    # Round-robin over the templates: every API key and version gets cases.
                    template = templates[case % len(templates)]
                    attacker.send_case(mutate(template.payload, template.body_start, rng))
                if case % 500 == 0:
                    peak_rss = max(peak_rss, process.memory_info().rss)
                    if not daemon.alive():
                        findings.problem("daemon", f"exited during case {case}")
                        break
                    if progress:
                        progress(f"{case}/{cases} cases: {attacker.outcomes.line()}")
            peak_rss = max(peak_rss, process.memory_info().rss)
    finally:
        slow.stop()
        producer.stop()
    if not daemon.alive():
        findings.problem("daemon", "not running after the fuzzing")
    sent, acked = producer.snapshot()
    log, ends = read_range(daemon.bootstrap, {})
    wait_until(lambda: tail.count() >= sum(ends.values()), 120, "the tail consumer")
    tail.stop()
    check_log(log, sent, acked, findings, ends)
    for position, record in tail.seen.items():
        if log.get(position) != record:
            findings.changed.add(position)
    proxy.close()
    for error in tail.errors[:5]:
        findings.problem("tail consumer error", error)
    if producer.failed:
        findings.problem("producer errors", str(sorted(set(producer.failed.values()))))
    if producer.max_latency_s > MAX_DELIVERY_S:
        findings.problem("stall", f"a delivery took {producer.max_latency_s:.1f} s")
    tracebacks = daemon.log().count("Traceback") - tracebacks_before
    if tracebacks:
        findings.problem(
            "daemon", f"logged {tracebacks} traceback(s): an exception nobody expected"
        )
    if peak_rss > memory_bound:
        findings.problem("memory", f"RSS {peak_rss >> 20} MiB over {memory_bound >> 20} MiB")
    row = Row(
        campaign=f"protocol fuzzing ({len(templates)} templates)",
        store="local",
        cycles=cases,
        acknowledged=len(acked),
        lost=len(findings.lost),
        duplicated=len(findings.duplicated),
        changed=len(findings.changed),
        seed=seed,
        problems=findings.lines(),
    )
    return row, attacker.outcomes


def daemon_args() -> list[str]:
    """`kfs serve` flags for the fuzzed daemon: clients come back through the recording proxy."""
    return ["--advertised-host", ADVERTISED_HOST, "--pool-bytes", "64MiB",
            "--cache-size", "64MiB", "--index-cache-size", "16MiB"]  # fmt: skip


MEMORY_BOUND = (64 + 64 + 16 + 256) << 20  # the pool and caches above, plus 256 MiB
