"""The daemon's other APIs and surfaces: admin requests, fetch semantics, probes, metrics, CLI.

* CreateTopics / DescribeConfigs / DeleteTopics with confluent-kafka's
  AdminClient and raw requests for the error cases clients check locally;
* ListOffsets (earliest, latest, by timestamp) through the AdminClient;
* Fetch: a long poll woken by a produce, a long poll that times out empty,
  max_bytes with KIP-74's first-batch rule, OFFSET_OUT_OF_RANGE, read_committed;
* Metadata: v0's empty list means every topic, v1's means none;
* /livez, /readyz, /metrics, and `kfs produce | kfs consume`.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kfs_core.errors import ObjectNotFound, ObjectStoreError
from kfs_core.server.metrics import InstrumentedStore, OpsHttpServer, ServerMetrics, StoreHealth
from kfs_core.server.protocol import ErrorCode
from kfs_core.storage.base import ObjectInfo, ObjectStore
from kfs_core.storage.local import LocalObjectStore
from kfs_core.storage.s3 import S3ObjectStore
from testkit.daemon import Daemon, DaemonFactory
from testkit.metrics import parse_metrics
from testkit.raw_client import RawClient
from testkit.waiting import wait_for
from tests.server.conftest import (
    confluent_kafka,
    consume_confluent,
    produce_confluent,
    produce_request,
)

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=r"(read_text|open_text) is deprecated", category=DeprecationWarning
    )
    from confluent_kafka.admin import (
        AdminClient,
        ConfigResource,
        ConfigSource,
        NewTopic,
        OffsetSpec,
        ResourceType,
    )
    from kafka.protocol.admin import CreateTopicsRequest
    from kafka.protocol.consumer import FetchRequest
    from kafka.protocol.metadata import MetadataRequest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

Creatable = CreateTopicsRequest.CreatableTopic


@pytest.fixture(scope="module")
def admin(local_daemon: Daemon) -> Iterator[AdminClient]:
    """One AdminClient, alive for the module (its futures fail once the client is gone)."""
    client = AdminClient({"bootstrap.servers": local_daemon.bootstrap})
    yield client
    # Destroyed before the daemon stops, so librdkafka has no reconnect failures to log.
    del client
    gc.collect()


def kafka_error(future: Any) -> Any:
    """The KafkaError a failed admin future carries (None when it succeeded)."""
    try:
        future.result(timeout=30)
    except confluent_kafka.KafkaException as exc:
        return exc.args[0]
    return None


def create_raw(daemon: Daemon, *topics: Any, validate_only: bool = False) -> Any:
    with RawClient(daemon.bootstrap) as client:
        return client.request(
            CreateTopicsRequest(
                version=5, topics=list(topics), timeout_ms=10_000, validate_only=validate_only
            )
        )


def creatable(name: str, partitions: int = 1, replication: int = 1, **configs: str) -> Any:
    return Creatable(
        name=name,
        num_partitions=partitions,
        replication_factor=replication,
        assignments=[],
        configs=[
            Creatable.CreatableTopicConfig(name=key.replace("_", "."), value=value)
            for key, value in configs.items()
        ],
    )


def metadata_names(daemon: Daemon, version: int, topics: list[str] | None) -> list[str]:
    with RawClient(daemon.bootstrap) as client:
        request = MetadataRequest(
            version=version,
            topics=None
            if topics is None
            else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
        )
        return sorted(t.name for t in client.request(request).topics if t.error_code == 0)


# --- admin ------------------------------------------------------------------------------


def test_create_topics_and_their_errors(local_daemon: Daemon, admin: AdminClient) -> None:
    futures = admin.create_topics([NewTopic("adm-created", 2, 1, config={"retention.ms": "1000"})])
    assert kafka_error(futures["adm-created"]) is None
    again = admin.create_topics([NewTopic("adm-created", 2, 1)])
    assert kafka_error(again["adm-created"]).code() == ErrorCode.TOPIC_ALREADY_EXISTS

    response = create_raw(
        local_daemon,
        creatable("adm-zero", partitions=0),
        creatable("adm-triple", replication=3),
        creatable("adm-no-replicas", replication=0),
        creatable("adm-bad-config", retention_ms="soon"),
        creatable("adm-unknown-config", **{"no_such_config": "1"}),
        creatable("bad name!"),
        creatable("adm-v5", partitions=4, cleanup_policy="compact"),
    )
    codes = {t.name: (t.error_code, t.error_message) for t in response.topics}
    assert codes["adm-zero"][0] == ErrorCode.INVALID_PARTITIONS
    assert codes["adm-triple"] == (0, None)  # durability is the store's; the factor is kept
    assert codes["adm-no-replicas"][0] == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "at least 1" in codes["adm-no-replicas"][1]
    assert codes["adm-bad-config"][0] == ErrorCode.INVALID_CONFIG
    assert "retention.ms" in codes["adm-bad-config"][1]
    assert codes["adm-unknown-config"][0] == ErrorCode.INVALID_CONFIG
    assert codes["bad name!"][0] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert codes["adm-v5"] == (0, None)
    created = next(t for t in response.topics if t.name == "adm-v5")
    assert (created.num_partitions, created.replication_factor) == (4, 1)
    sources = {c.name: (c.value, c.config_source) for c in created.configs}
    assert sources["cleanup.policy"] == ("compact", 1)  # DYNAMIC_TOPIC_CONFIG
    assert sources["retention.ms"] == ("604800000", 5)  # DEFAULT_CONFIG

    checked = create_raw(local_daemon, creatable("adm-validate-only", 2), validate_only=True)
    assert checked.topics[0].error_code == 0
    assert metadata_names(local_daemon, 12, ["adm-validate-only"]) == []
    assert metadata_names(local_daemon, 12, ["adm-created", "adm-v5"]) == ["adm-created", "adm-v5"]


def test_describe_configs(local_daemon: Daemon, admin: AdminClient) -> None:
    admin.create_topics([NewTopic("adm-described", 1, 1, config={"retention.ms": "1234"})])[
        "adm-described"
    ].result(30)
    topic = ConfigResource(ResourceType.TOPIC, "adm-described")
    broker = ConfigResource(ResourceType.BROKER, "0")
    results = admin.describe_configs([topic, broker])
    entries = results[topic].result(30)
    assert entries["retention.ms"].value == "1234"
    assert not entries["retention.ms"].is_default
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["cleanup.policy"].value == "delete"
    assert entries["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["max.message.bytes"].value == "1048588"
    broker_entries = results[broker].result(30)
    assert broker_entries["broker.id"].value == "0"
    assert broker_entries["broker.id"].is_read_only

    missing = ConfigResource(ResourceType.TOPIC, "adm-never-created")
    error = kafka_error(admin.describe_configs([missing])[missing])
    assert error.code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_topics(local_daemon: Daemon, admin: AdminClient) -> None:
    admin.create_topics([NewTopic("adm-doomed", 1, 1)])["adm-doomed"].result(30)
    assert "adm-doomed" in metadata_names(local_daemon, 12, None)
    assert kafka_error(admin.delete_topics(["adm-doomed"])["adm-doomed"]) is None
    assert "adm-doomed" not in metadata_names(local_daemon, 12, None)
    gone = kafka_error(admin.delete_topics(["adm-doomed"])["adm-doomed"])
    assert gone.code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_metadata_empty_list_means_all_at_v0_and_none_later(
    local_daemon: Daemon, admin: AdminClient
) -> None:
    admin.create_topics([NewTopic("adm-listed", 1, 1)])["adm-listed"].result(30)
    assert "adm-listed" in metadata_names(local_daemon, 0, [])
    assert metadata_names(local_daemon, 1, []) == []
    assert "adm-listed" in metadata_names(local_daemon, 1, None)


def test_list_offsets(local_daemon: Daemon, admin: AdminClient) -> None:
    topic = "offsets-by-time"
    producer = confluent_kafka.Producer({"bootstrap.servers": local_daemon.bootstrap})
    base = 1_700_000_000_000
    for i in range(10):
        producer.produce(topic, value=b"t%d" % i, partition=0, timestamp=base + i * 1000)
        producer.flush(30)  # one batch per record, so timestamps pick batches
    producer.produce(topic, value=b"late", partition=0, timestamp=base)  # offset 10, older
    producer.flush(30)
    partition = confluent_kafka.TopicPartition(topic, 0)

    def offset_for(spec: Any) -> tuple[int, int]:
        info = admin.list_offsets({partition: spec})[partition].result(30)
        return info.offset, info.timestamp

    assert offset_for(OffsetSpec.earliest())[0] == 0
    assert offset_for(OffsetSpec.latest())[0] == 11
    assert offset_for(OffsetSpec.for_timestamp(base + 4500)) == (5, base + 5000)
    assert offset_for(OffsetSpec.for_timestamp(base + 99_000))[0] == -1
    # KIP-734 (ListOffsets v7): the record with the largest timestamp, not the last one.
    assert offset_for(OffsetSpec.max_timestamp()) == (9, base + 9000)


# --- fetch semantics ----------------------------------------------------------------------


def fetch_request(
    topic: str,
    partitions: list[tuple[int, int]],
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 50 << 20,
    partition_max_bytes: int = 1 << 20,
    isolation_level: int = 0,
) -> Any:
    fetch_topic = FetchRequest.FetchTopic
    return FetchRequest(
        version=12,
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        topics=[
            fetch_topic(
                topic=topic,
                partitions=[
                    fetch_topic.FetchPartition(
                        partition=partition,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=partition_max_bytes,
                    )
                    for partition, offset in partitions
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def produce_batch(daemon: Daemon, topic: str, partition: int, values: list[bytes]) -> int:
    request = produce_request(topic, values, partition)
    with RawClient(daemon.bootstrap) as client:
        answer = client.request(request).responses[0].partition_responses[0]
    assert answer.error_code == 0
    return int(answer.base_offset)


def fetch_waiting(daemon: Daemon) -> float:
    for line in daemon.http("/metrics")[1].splitlines():
        if line.startswith("kfs_fetch_waiting "):
            return float(line.split()[1])
    return 0.0


def test_long_poll_is_woken_by_a_produce(local_daemon: Daemon, admin: AdminClient) -> None:
    topic = "long-poll"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    with RawClient(local_daemon.bootstrap, timeout=30) as client:
        started = time.monotonic()
        correlation = client.send(fetch_request(topic, [(0, 0)], max_wait_ms=20_000))
        wait_for(lambda: fetch_waiting(local_daemon) >= 1, timeout=10, what="a waiting fetch")
        produce_batch(local_daemon, topic, 0, [b"wake up"])
        payload = client.read_frame()
        elapsed = time.monotonic() - started
    assert payload is not None and int.from_bytes(payload[:4], "big") == correlation
    assert b"wake up" in payload
    assert elapsed < 10, "the fetch waited for max_wait_ms instead of the produce"


def test_long_poll_without_data_answers_empty_after_max_wait(
    local_daemon: Daemon, admin: AdminClient
) -> None:
    topic = "long-poll-empty"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    with RawClient(local_daemon.bootstrap) as client:
        started = time.monotonic()
        response = client.request(fetch_request(topic, [(0, 0)], max_wait_ms=300))
        elapsed = time.monotonic() - started
    [partition] = response.responses[0].partitions
    assert (partition.error_code, partition.high_watermark) == (0, 0)
    assert not partition.records
    assert elapsed >= 0.29


def test_fetch_limits_and_errors(local_daemon: Daemon, admin: AdminClient) -> None:
    topic = "fetch-limits"
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    for partition in (0, 1):
        produce_batch(
            local_daemon, topic, partition, [b"p%d-%d" % (partition, i) * 500 for i in range(5)]
        )
    with RawClient(local_daemon.bootstrap) as client:
        # KIP-74: the first partition's first batch comes whole, over max_bytes;
        # the second partition gets nothing that would overshoot.
        response = client.request(fetch_request(topic, [(0, 0), (1, 0)], max_bytes=100))
        first, second = response.responses[0].partitions
        assert len(first.records) > 100 and b"p0-0" in first.records
        assert not second.records and second.high_watermark == 5

        roomy = client.request(fetch_request(topic, [(0, 0), (1, 0)]))
        assert all(len(p.records) > 2500 for p in roomy.responses[0].partitions)

        beyond = client.request(fetch_request(topic, [(0, 99), (1, 5)]))
        out_of_range, at_end = beyond.responses[0].partitions
        assert out_of_range.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert (at_end.error_code, at_end.high_watermark, bool(at_end.records)) == (0, 5, False)

        committed = client.request(fetch_request(topic, [(0, 0)], isolation_level=1))
        [partition] = committed.responses[0].partitions
        assert partition.last_stable_offset == partition.high_watermark == 5
        assert partition.aborted_transactions == []

        unknown = client.request(fetch_request("fetch-nowhere", [(0, 0)]))
        assert unknown.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_sigterm_answers_a_long_poll_and_exits_0(daemons: DaemonFactory) -> None:
    daemon = daemons.start(name="stopping")
    assert create_raw(daemon, creatable("quiet")).topics[0].error_code == 0
    with RawClient(daemon.bootstrap, timeout=30) as client:
        request = fetch_request("quiet", [(0, 0)], max_wait_ms=60_000)
        started = time.monotonic()
        client.send(request)
        wait_for(lambda: fetch_waiting(daemon) >= 1, timeout=10, what="a waiting fetch")
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGTERM)
        response = client.read_response(request)
        assert response.responses[0].partitions[0].error_code == 0
        assert time.monotonic() - started < 30
        assert client.closed_by_server()
    assert daemon.proc.wait(30) == 0


def test_two_daemons_started_on_one_namespace_share_it_instead_of_overwriting(
    daemons: DaemonFactory,
) -> None:
    """Two daemons on one store and namespace: one writer per partition, both stop cleanly."""
    first = daemons.start(name="first", extra_args=["--node-id", "1"])
    second = daemons.start(name="second", store_url=first.store_url, extra_args=["--node-id", "2"])
    wait_for(
        lambda: min(d.metric("kfs_cluster_live_nodes") for d in (first, second)) == 2,
        what="each daemon seeing the other",
    )
    assert create_raw(first, creatable("both", partitions=1)).topics[0].error_code == 0
    for daemon in (second, first):  # clients find the partition's one leader
        produce_confluent(daemon.bootstrap, "both", [b"x"] * 10, partitions=1)
    assert first.stop() == 0
    assert second.stop() == 0
    first.start()
    records = consume_confluent(first.bootstrap, "both", 1, 20)
    assert sorted(offset for _, offset, _ in records) == list(range(20))


# --- probes, metrics ------------------------------------------------------------------------


def test_probes_and_metrics(local_daemon: Daemon) -> None:
    produce_confluent(local_daemon.bootstrap, "metered", [b"m%d" % i for i in range(20)])
    assert local_daemon.http("/livez") == (200, "ok\n")
    assert local_daemon.http("/readyz") == (200, "ready\n")
    assert local_daemon.http("/nope")[0] == 404
    status, text = local_daemon.http("/metrics")
    assert status == 200
    for name in (
        'kfs_requests_total{api="PRODUCE"}',
        'kfs_request_latency_seconds_bucket{api="PRODUCE",le="0.005"}',
        "kfs_produce_bytes_total",
        "kfs_fetch_bytes_total",
        "kfs_wal_fsync_seconds_bucket",
        "kfs_wal_fsyncs_total",
        "kfs_flush_bytes_bucket",
        'kfs_object_store_requests_total{op="put_if_absent"}',
        "kfs_log_pool_used_bytes",
        "kfs_log_pool_waits_total",
        "kfs_log_pool_wait_seconds_total",
        "kfs_log_l1_hit_ratio",
        "kfs_log_flushes_total",
        "kfs_ready 1.0",
    ):
        assert name in text, name
    # Where an acknowledgement's time goes: observed, not merely declared.
    counts = parse_metrics(text)
    assert counts['kfs_wal_append_stage_seconds_count{stage="queue_wait"}'] >= 1
    assert counts['kfs_wal_append_stage_seconds_count{stage="write"}'] >= 1
    # The loop's lag is sampled every 50 ms from the start: a daemon this
    # young (the module's first test) may not have taken a sample yet.
    wait_for(
        lambda: (
            parse_metrics(local_daemon.http("/metrics")[1])["kfs_event_loop_lag_seconds_count"] >= 1
        ),
        timeout=10,
        what="an event-loop lag sample",
    )


def test_readyz_is_503_until_ready() -> None:
    async def probe() -> list[int]:
        ready = threading.Event()
        server = OpsHttpServer(ServerMetrics(), ready.is_set)
        await server.start("127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.port}/readyz"

        def status() -> int:
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    return int(response.status)
            except urllib.error.HTTPError as error:
                return int(error.code)

        try:
            before = await asyncio.to_thread(status)
            ready.set()
            after = await asyncio.to_thread(status)
        finally:
            await server.close()
        return [before, after]

    assert asyncio.run(probe()) == [503, 200]


def test_store_health_counts_an_outage_from_its_first_failure_to_the_next_answer() -> None:
    now = [100.0]
    health = StoreHealth(clock=lambda: now[0])
    assert health.unavailable_for() == 0.0
    health.failed("EndpointConnectionError")
    now[0] = 104.0
    health.failed("ReadTimeoutError")  # still the same outage
    now[0] = 107.5
    assert health.unavailable_for() == 7.5 and health.last_error == "ReadTimeoutError"
    health.answered()
    assert health.unavailable_for() == 0.0


def test_the_metrics_wrapper_passes_on_what_the_store_says_about_parallel_puts(
    tmp_path: Path,
) -> None:
    metrics = ServerMetrics()
    assert InstrumentedStore(LocalObjectStore(tmp_path), metrics).put_concurrency == 1
    s3 = S3ObjectStore("bucket", endpoint_url="http://127.0.0.1:9")  # never contacted
    assert InstrumentedStore(s3, metrics).put_concurrency is None


def test_the_metrics_wrapper_counts_each_object_of_a_put_many(tmp_path: Path) -> None:
    metrics = ServerMetrics()
    store = InstrumentedStore(LocalObjectStore(tmp_path), metrics)
    infos = store.put_many([("t/0/a.kfs", [b"abc", b"de"]), ("t/0/a.index", [b"xyz"])])
    assert [info.size for info in infos] == [5, 3]
    sample = metrics.registry.get_sample_value
    assert sample("kfs_object_store_requests_total", {"op": "put"}) == 2
    assert sample("kfs_object_store_bytes_total", {"direction": "put"}) == 8
    assert store.inner.get("t/0/a.kfs") == b"abcde"
    # The local store writes them together: one latency for the call.
    assert sample("kfs_object_store_request_seconds_count", {"op": "put"}) == 1


def test_the_metrics_wrapper_times_each_put_of_a_store_that_puts_one_at_a_time() -> None:
    class OneAtATime(ObjectStore):  # the base put_many: one put_parts after another, as S3
        url = "mem://one-at-a-time"

        def __init__(self) -> None:
            self.objects: dict[str, bytes] = {}

        def put(self, key: str, data: bytes) -> ObjectInfo:
            self.objects[key] = data
            return ObjectInfo(key, len(data), etag=key, last_modified=0.0)

        put_if_absent = get = head = list = delete = put  # type: ignore[assignment]

    metrics = ServerMetrics()
    inner = OneAtATime()
    InstrumentedStore(inner, metrics).put_many([("a", [b"12"]), ("b", [b"3"])])
    assert inner.objects == {"a": b"12", "b": b"3"}
    sample = metrics.registry.get_sample_value
    assert sample("kfs_object_store_requests_total", {"op": "put"}) == 2
    assert sample("kfs_object_store_request_seconds_count", {"op": "put"}) == 2
    assert sample("kfs_object_store_bytes_total", {"direction": "put"}) == 3


def test_a_failing_store_shows_on_readyz_and_in_the_metrics() -> None:
    class Down(ObjectStore):
        url = "mem://down"

        def get(self, key: str, byte_range: Any = None) -> bytes:
            raise ObjectStoreError("connection reset")

        def head(self, key: str) -> Any:
            raise ObjectNotFound(key)  # an answer: the store is up

        put = put_if_absent = list = delete = close = get  # type: ignore[assignment]

    async def probe() -> tuple[str, str, str]:
        metrics = ServerMetrics()
        store = InstrumentedStore(Down(), metrics)
        lines = ["ready"]

        def conditions() -> list[str]:
            down = metrics.store_health.unavailable_for()
            return [f"store: failing for {down:.0f} s"] if down else []

        server = OpsHttpServer(metrics, lambda: True, conditions)
        await server.start("127.0.0.1", 0)
        base = f"http://127.0.0.1:{server.port}"

        def get(path: str) -> str:
            with urllib.request.urlopen(base + path, timeout=5) as response:
                return str(response.read().decode())

        try:
            with pytest.raises(ObjectStoreError):
                store.get("k")
            failing = await asyncio.to_thread(get, "/readyz")
            scraped = await asyncio.to_thread(get, "/metrics")
            with pytest.raises(ObjectNotFound):
                store.head("k")
            lines = [failing, scraped, await asyncio.to_thread(get, "/readyz")]
        finally:
            await server.close()
        return lines[0], lines[1], lines[2]

    failing, scraped, healthy = asyncio.run(probe())
    assert failing.startswith("ready\nstore: failing for ")
    assert "kfs_store_unavailable_seconds " in scraped
    assert not scraped.split("kfs_store_unavailable_seconds ")[1].startswith("0.0\n")
    assert healthy == "ready\n"


# --- kfs produce | kfs consume ----------------------------------------------------------------


def test_kfs_produce_then_kfs_consume(local_daemon: Daemon) -> None:
    env = {**os.environ, "KFS_LISTEN": local_daemon.bootstrap}
    lines = [f"line {i}: {'x' * i}" for i in range(25)]
    produced = subprocess.run(
        [sys.executable, "-m", "kfs_core.cli", "produce", "cli-topic", "--partition", "1"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert produced.returncode == 0, produced.stderr
    assert "produced 25 message(s)" in produced.stderr
    command = [
        sys.executable, "-m", "kfs_core.cli", "consume", "cli-topic",
        "--from-beginning", "--max-messages", "25", "--timeout", "20",
    ]  # fmt: skip
    consumed = subprocess.run(
        command, capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == lines
