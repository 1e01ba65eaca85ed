"""Spark's own Kafka connector against `kfs serve`: batch reads and writes, a streaming copy, the DAG.

The connector (``spark-sql-kafka-0-10``, `spark_jobs.kafka_source.KAFKA_PACKAGE`)
is not among pyspark's jars and must be on the classpath when a JVM starts, so
Spark runs in processes of its own here, never in the test process (whose
tests/spark_jobs session, if any, has no connector):

- a Spark Connect server, ``spark-submit --packages <connector>`` on
  ``local[2]``, started once for the module; the tests drive it through a Spark
  Connect session, with the ordinary DataFrame API;
- the ``kfs_stream_to_parquet`` DAG's own spark-submit, under ``dag.test()``.

Ivy resolves the connector from Maven Central into ``~/.ivy2.5.2`` on a
machine's first run (63 MB, 5-7 s on a fast link) and from that cache
afterwards, offline too.  Offline without the cache, the tests that need Spark
fail saying so (`connector_missing`): none skips.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from compat.daemons import ADMIN, sasl_ssl_daemon
from spark_jobs.kafka_source import (
    KAFKA_PACKAGE,
    CopyOptions,
    copy_available,
    kafka_options,
    start_parquet_copy,
)
from testkit.daemon import Daemon, DaemonFactory
from testkit.pki import make_pki
from testkit.ports import free_port
from testkit.waiting import wait_for
from tests.airflow.conftest import airflow_db, kfs_connection_env  # noqa: F401 - a fixture
from tests.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.spark]

#: A first resolve downloads 63 MB; a slow link gets minutes.
SERVER_START_TIMEOUT_S = 300.0
#: Spark answers within seconds here; a stuck query fails the test instead of hanging it.
QUERY_TIMEOUT_S = 120.0
BASE_TIMESTAMP_MS = 1_700_000_000_000
SPARK_CONNECTION = json.dumps({"conn_type": "spark", "host": "local[2]"})


# --- the Spark Connect server ----------------------------------------------------------------


def connector_missing(log: str) -> str | None:
    """Why Spark could not load the connector, from spark-submit's output; None if it could."""
    if "unresolved dependency" not in log and "download failed" not in log:
        return None
    return (
        f"Spark could not resolve its Kafka connector {KAFKA_PACKAGE} through Ivy: Maven "
        "Central is unreachable from here and ~/.ivy2.5.2 does not hold the connector yet. "
        "Run these tests once with network access (the jars are then cached), or copy a "
        "filled ~/.ivy2.5.2 onto this machine."
    )


class SparkDidNotStart(Exception):
    """The Spark Connect server exited or never listened; the message says why."""


@dataclass
class ConnectServer:
    """``spark-submit --packages <connector> SparkConnectServer`` on a free loopback port."""

    workdir: Path
    extra_conf: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / "spark-connect.log"

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.warehouse.dir": str(self.workdir / "warehouse"),
            "spark.log.level": "WARN",
            **self.extra_conf,
        }
        bin_dir = Path(sys.executable).parent
        env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    str(bin_dir / "spark-submit"),
                    "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                    "--master", "local[2]",
                    "--packages", KAFKA_PACKAGE,
                    *(arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")),
                    "spark-internal",
                ],
                cwd=self.workdir,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def wait_ready(self, timeout: float = SERVER_START_TIMEOUT_S) -> None:
        """Return once the server listens; `SparkDidNotStart` if it exits first or never does."""
        assert self.proc is not None
        proc = self.proc

        def up_or_gone() -> bool:
            if proc.poll() is not None:
                return True
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", self.port)) == 0

        try:
            wait_for(up_or_gone, timeout=timeout, interval=0.2, what="the Spark Connect server")
        except TimeoutError:
            raise SparkDidNotStart(
                f"no Spark Connect server within {timeout:g} s:\n{self.log()[-4000:]}"
            ) from None
        if proc.poll() is not None:
            log = self.log()
            raise SparkDidNotStart(
                f"{connector_missing(log) or 'spark-submit exited'}\n{log[-4000:]}"
            )

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)  # its own session: spark-submit and the JVM
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark Connect session on a module-wide server that has the Kafka connector."""
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    server = ConnectServer(tmp_path_factory.mktemp("spark-connect"))
    started = time.monotonic()
    server.start()
    try:
        try:
            server.wait_ready()
        except SparkDidNotStart as exc:
            pytest.fail(str(exc), pytrace=False)
        print(f"Spark Connect server with {KAFKA_PACKAGE} up in {time.monotonic() - started:.1f} s")
        # The Connect builder itself: a classic session in this process (tests/spark_jobs')
        # would make pyspark.sql.SparkSession.builder.remote() refuse.
        session = RemoteSparkSession.builder.remote(server.url).create()
        try:
            yield session
        finally:
            session.stop()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonFactory]:
    daemons = DaemonFactory(tmp_path_factory.mktemp("daemons"))
    try:
        yield daemons
    finally:
        daemons.close()


@pytest.fixture(scope="module")
def daemon(factory: DaemonFactory) -> Daemon:
    return factory.start(name="spark-kafka")


def test_offline_and_without_the_cache_the_tests_fail_saying_so(tmp_path: Path) -> None:
    """A fresh machine (empty home: no ~/.ivy2.5.2, no ~/.m2) whose proxy refuses everything."""
    home = tmp_path / "home"
    home.mkdir()
    refused = free_port()  # nothing listens there
    jvm = [f"-Duser.home={home}"]
    for scheme in ("http", "https"):
        jvm += [f"-D{scheme}.proxyHost=127.0.0.1", f"-D{scheme}.proxyPort={refused}"]
    server = ConnectServer(tmp_path / "spark", {"spark.driver.extraJavaOptions": " ".join(jvm)})
    server.start()
    try:
        with pytest.raises(SparkDidNotStart, match="Maven Central is unreachable from here"):
            server.wait_ready(timeout=120)
    finally:
        server.stop()


# --- Kafka helpers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: tuple[tuple[str, bytes | None], ...]


def create_topic(bootstrap: str, topic: str, partitions: int = 3) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)
    return topic


def produce(bootstrap: str, topic: str, records: Sequence[dict[str, Any]]) -> list[Record]:
    """Produce ``records`` (kwargs of ``Producer.produce``) idempotently; each as acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    acked: list[Record] = []
    errors: list[Any] = []

    def delivered(spec: dict[str, Any]) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
                return
            acked.append(
                Record(
                    msg.partition(),
                    msg.offset(),
                    spec.get("key"),
                    spec.get("value"),
                    msg.timestamp()[1],
                    tuple(spec.get("headers") or ()),
                )
            )

        return on_delivery

    for spec in records:
        producer.produce(topic, on_delivery=delivered(spec), **spec)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors[:3]
    return sorted(acked, key=lambda r: (r.partition, r.offset))


def consume_all(bootstrap: str, topic: str, partitions: int, count: int) -> list[Any]:
    """``count`` messages of ``topic`` from the beginning of each partition (confluent-kafka)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "spark-kafka-check",
            "enable.auto.commit": False,
        }
    )
    messages: list[Any] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + 60
        while len(messages) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                messages.append(msg)
        # Nothing beyond what was written: one more short poll comes back empty.
        extra = consumer.poll(1.0)
        assert extra is None or extra.error() is not None, extra.value()
    finally:
        consumer.close()
    return messages


def spark_records(frame: Any) -> list[Record]:
    """The rows of a Kafka source DataFrame (headers included) as `Record`s."""
    rows = frame.selectExpr(
        "partition", "offset", "key", "value", "unix_millis(timestamp) AS ts", "timestampType",
        "headers",
    ).collect()  # fmt: skip
    assert all(row.timestampType == 0 for row in rows)  # CreateTime
    return sorted(
        (
            Record(
                row.partition,
                row.offset,
                None if row.key is None else bytes(row.key),
                None if row.value is None else bytes(row.value),
                row.ts,
                tuple(
                    (h.key, None if h.value is None else bytes(h.value)) for h in row.headers or ()
                ),
            )
            for row in rows
        ),
        key=lambda r: (r.partition, r.offset),
    )


def read_batch(spark: Any, bootstrap: str, **options: str) -> Any:
    """A batch read; ``options`` name the topics (``subscribe``, ``assign``) and the offsets."""
    return (
        spark.read.format("kafka")
        .options(**kafka_options(bootstrap))
        .option("includeHeaders", "true")
        .options(**options)
        .load()
    )


# --- the connector's options --------------------------------------------------------------------


def test_kafka_options_turn_librdkafka_settings_into_the_java_clients(tmp_path: Path) -> None:
    ca, cert, key = (tmp_path / name for name in ("ca.pem", "client.pem", "client.key"))
    for path in (ca, cert, key):
        path.write_text(f"-----BEGIN {path.name}-----\n")
    assert kafka_options(" 127.0.0.1:9092 ") == {"kafka.bootstrap.servers": "127.0.0.1:9092"}
    options = kafka_options(
        "kfs:9093",
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": 'pa"ss\\word',
            "ssl.ca.location": str(ca),
            "ssl.certificate.location": str(cert),
            "ssl.key.location": str(key),
        },
    )
    assert options == {
        "kafka.bootstrap.servers": "kfs:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="alice" password="pa\\"ss\\\\word";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.certificates": "-----BEGIN ca.pem-----\n",
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.certificate.chain": "-----BEGIN client.pem-----\n",
        "kafka.ssl.keystore.key": "-----BEGIN client.key-----\n",
    }
    plain = kafka_options("kfs:9093", {"sasl.username": "bob", "sasl.password": "x"})
    assert plain["kafka.sasl.jaas.config"].startswith("org.apache.kafka.common.security.plain.")
    with pytest.raises(ValueError, match="unsupported Kafka client settings"):
        kafka_options("kfs:9093", {"socket.timeout.ms": "1000"})
    with pytest.raises(ValueError, match="needs both"):
        kafka_options("kfs:9093", {"ssl.certificate.location": str(cert)})
    with pytest.raises(ValueError, match="no bootstrap servers"):
        kafka_options(" ")


def test_the_job_refuses_bad_settings_before_starting_spark(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from spark_jobs.kafka_source import CLIENT_CONFIG_ENV, default_paths, run_cli

    monkeypatch.setenv("KFS_HOME", str(tmp_path))
    assert default_paths("orders") == (
        str(tmp_path / "exports" / "orders" / "parquet"),
        str(tmp_path / "exports" / "orders" / "checkpoint"),
    )
    assert run_cli(["--bootstrap-servers", " ", "--topic", "orders"], environ={}) == 2
    assert "no bootstrap servers" in capsys.readouterr().err
    bad = {CLIENT_CONFIG_ENV: '["SASL_SSL"]'}
    assert run_cli(["--bootstrap-servers", "kfs:9092", "--topic", "orders"], environ=bad) == 2
    assert f"{CLIENT_CONFIG_ENV} must hold a JSON object" in capsys.readouterr().err
    same = ["--output-path", "/x", "--checkpoint-path", "/x"]
    assert run_cli(["--bootstrap-servers", "kfs:9092", "--topic", "t", *same], environ={}) == 2
    assert "directories of their own" in capsys.readouterr().err


# --- batch read and write ----------------------------------------------------------------------


def _varied_records(count: int) -> list[dict[str, Any]]:
    """Keys, null keys, a tombstone, explicit partitions and timestamps, repeated and null headers."""
    specs = []
    for i in range(count):
        spec: dict[str, Any] = {
            "key": None if i % 7 == 0 else b"key-%d" % i,
            "value": None if i == 5 else b"value-%d" % i,
            "partition": i % 3,
            "timestamp": BASE_TIMESTAMP_MS + i * 1000,
        }
        if i % 2:
            spec["headers"] = [("trace", b"t-%d" % i), ("trace", None), ("id", str(i).encode())]
        specs.append(spec)
    return specs


def test_batch_read_returns_exactly_the_records_produced(spark: Any, daemon: Daemon) -> None:
    topic = create_topic(daemon.bootstrap, "spark-batch-read")
    produced = produce(daemon.bootstrap, topic, _varied_records(30))
    assert [r.offset for r in produced if r.partition == 1] == list(range(10))

    everything = read_batch(
        spark, daemon.bootstrap, subscribe=topic, startingOffsets="earliest", endingOffsets="latest"
    )
    assert spark_records(everything) == produced

    # One partition, offsets [2, 6).
    some = read_batch(
        spark,
        daemon.bootstrap,
        assign=json.dumps({topic: [1]}),
        startingOffsets=json.dumps({topic: {"1": 2}}),
        endingOffsets=json.dumps({topic: {"1": 6}}),
    )
    assert spark_records(some) == [r for r in produced if r.partition == 1 and 2 <= r.offset < 6]

    # From a time on, every partition (ListOffsets by timestamp): records 15.. of the 30.
    since = BASE_TIMESTAMP_MS + 15_000
    recent = read_batch(spark, daemon.bootstrap, subscribe=topic, startingTimestamp=str(since))
    assert spark_records(recent) == [r for r in produced if r.timestamp_ms >= since]


def test_batch_write_is_read_back_by_confluent_kafka(spark: Any, daemon: Daemon) -> None:
    topic = create_topic(daemon.bootstrap, "spark-batch-write")
    rows = [
        (
            None if i % 5 == 0 else f"key-{i}".encode(),
            f"value-{i}".encode(),
            i % 3,
            [("source", b"spark"), ("n", str(i).encode())] if i % 2 else [],
        )
        for i in range(40)
    ]
    frame = spark.createDataFrame(
        rows,
        "key binary, value binary, partition int, headers array<struct<key string, value binary>>",
    )
    frame.write.format("kafka").options(**kafka_options(daemon.bootstrap)).option(
        "topic", topic
    ).save()

    messages = consume_all(daemon.bootstrap, topic, 3, len(rows))
    got = collections.Counter(
        (m.key(), m.value(), m.partition(), tuple(m.headers() or ())) for m in messages
    )
    written = collections.Counter((k, v, p, tuple(h)) for k, v, p, h in rows)
    assert got == written  # each record once, where Spark put it
    for partition in range(3):
        offsets = [m.offset() for m in messages if m.partition() == partition]
        assert sorted(offsets) == list(range(len(offsets)))


def test_batch_read_over_sasl_ssl_with_settings_as_the_kfs_connection_spells_them(
    spark: Any, factory: DaemonFactory, tmp_path: Path
) -> None:
    """`kafka_options` turns librdkafka's TLS/SASL names (the DAG's) into the Java client's."""
    secured = sasl_ssl_daemon(factory, make_pki(tmp_path / "pki"), tmp_path)
    user, password = ADMIN
    client_config = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(secured.ca),
    }
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": secured.bootstrap, **client_config})
    for future in admin.create_topics([NewTopic("secured", 1, 1)]).values():
        future.result(30)
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": secured.bootstrap, **client_config})
    for i in range(5):
        producer.produce("secured", value=b"secret-%d" % i)
    assert producer.flush(30) == 0

    options = kafka_options(secured.bootstrap, client_config)
    frame = spark.read.format("kafka").options(**options).option("subscribe", "secured").load()
    assert sorted(bytes(r.value) for r in frame.select("value").collect()) == [
        b"secret-%d" % i for i in range(5)
    ]


# --- Structured Streaming: stopped mid-way, restarted, exactly once ----------------------------


class Feed:
    """Produces ``{"id": n}`` records on a thread until stopped: records still arriving.

    Small chunks at a steady pace (a rate, not a synchronisation: the test waits on
    the query's progress); every acknowledged id is kept.
    """

    CHUNK = 10
    PAUSE_S = 0.05

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.acked: list[int] = []
        self.errors: list[Any] = []
        self.next_id = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feed", daemon=True)

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5}
        )

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(err)
            else:
                self.acked.append(json.loads(msg.value())["id"])

        while not self._stop.is_set():
            for _ in range(self.CHUNK):
                n = self.next_id
                self.next_id += 1
                value = json.dumps({"id": n}).encode()
                producer.produce(self.topic, key=b"k%d" % n, value=value, on_delivery=on_delivery)
            producer.flush(30)
            self._stop.wait(self.PAUSE_S)
        assert producer.flush(30) == 0

    def start(self) -> Feed:
        self._thread.start()
        return self

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop producing and wait for every acknowledgement (again: a no-op)."""
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive() and not self.errors, self.errors[:3]


def batches_with_rows(query: Any) -> int:
    """Micro-batches of ``query`` that read records; raises if the query failed."""
    failure = query.exception()
    if failure is not None:
        raise AssertionError(f"the streaming query failed: {failure}")
    return sum(1 for p in query.recentProgress if p.numInputRows)


def copied_ids(spark: Any, output: str) -> collections.Counter[int]:
    """How often each id is in the Parquet output (read by Spark: committed batches only)."""
    values = spark.read.parquet(output).select("value").collect()
    return collections.Counter(json.loads(bytes(r.value))["id"] for r in values)


def test_a_streaming_copy_stopped_mid_way_and_restarted_holds_every_record_once(
    spark: Any, daemon: Daemon, tmp_path: Path
) -> None:
    topic = create_topic(daemon.bootstrap, "spark-stream")
    copy = CopyOptions(
        topic=topic,
        kafka=kafka_options(daemon.bootstrap),
        output_path=str(tmp_path / "parquet"),
        checkpoint_path=str(tmp_path / "checkpoint"),
    )
    every = {"processingTime": "200 milliseconds"}
    feed = Feed(daemon.bootstrap, topic).start()
    try:
        first = start_parquet_copy(spark, copy, every)
        wait_for(lambda: batches_with_rows(first) >= 2, QUERY_TIMEOUT_S, 0.1, "2 micro-batches")
        assert feed.alive()
        first.stop()  # records keep arriving while no query runs
        produced_while_stopped = feed.next_id
        wait_for(lambda: feed.next_id > produced_while_stopped + 50, 30, 0.05, "more records")

        second = start_parquet_copy(spark, copy, every)  # the same checkpoint
        wait_for(lambda: batches_with_rows(second) >= 2, QUERY_TIMEOUT_S, 0.1, "2 more batches")
        feed.stop()
        second.processAllAvailable()  # everything acknowledged
        second.stop()
    finally:
        feed.stop()
        for query in spark.streams.active:  # a failed test leaves no query running
            query.stop()

    copied = copied_ids(spark, copy.output_path)
    assert len(feed.acked) == feed.next_id > 100
    assert sorted(copied) == sorted(feed.acked)  # no record lost
    assert max(copied.values()) == 1  # none twice

    # The DAG's mode: availableNow from the same checkpoint copies only what is new.
    produce(
        daemon.bootstrap, topic, [{"value": json.dumps({"id": -n}).encode()} for n in range(1, 26)]
    )
    result = copy_available(spark, copy)
    assert result.records == 25
    copied = copied_ids(spark, copy.output_path)
    assert sorted(copied) == sorted([*feed.acked, *range(-25, 0)])
    assert max(copied.values()) == 1
    assert copy_available(spark, copy).records == 0  # nothing new: nothing copied


# --- the kfs_stream_to_parquet DAG ---------------------------------------------------------------


def _dag() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / "kfs_stream_to_parquet.py"))
    assert bag.import_errors == {}
    return bag.dags["kfs_stream_to_parquet"]


@pytest.mark.airflow
def test_the_dag_loads_paused_unscheduled_with_the_connector_of_the_installed_spark() -> None:
    import pyspark

    from spark_jobs import kafka_source

    dag = _dag()
    assert {"kfs", "example"} <= set(dag.tags)
    assert dag.doc_md and "Reading the outcome" in dag.doc_md and "Params" in dag.doc_md
    assert dag.is_paused_upon_creation is True
    assert type(dag.timetable).__name__ == "NullTimetable"
    assert dag.max_active_runs == 1
    assert set(dag.params.keys()) == {"topic", "output_path", "checkpoint_path", "starting_offsets"}
    (copy,) = dag.tasks
    assert copy.packages == KAFKA_PACKAGE
    assert KAFKA_PACKAGE.endswith(f"_2.13:{pyspark.__version__}")
    assert Path(copy.application) == Path(kafka_source.__file__)
    assert copy.pool == "kfs_spark"
    assert copy.owner == "kfs" and copy.retries >= 1 and copy.execution_timeout is not None
    module = sys.modules[type(copy).__module__]
    assert module.CLIENT_CONFIG_ENV == kafka_source.CLIENT_CONFIG_ENV


@pytest.mark.airflow
def test_the_copy_task_hands_the_daemon_and_its_settings_to_the_job(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Address and paths on the command line; TLS/SASL settings, password too, in the environment."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk.exceptions import AirflowFailException

    from spark_jobs.kafka_source import CLIENT_CONFIG_ENV

    submitted: list[tuple[list[str], dict[str, str]]] = []
    monkeypatch.setattr(
        SparkSubmitOperator,
        "execute",
        lambda self, context: submitted.append((self.application_args, self.env_vars)),
    )
    security = {"sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "u", "sasl_password": "p"}
    extra = {"bootstrap_servers": "kfs-1:9092,kfs-2:9094", "security_protocol": "SASL_SSL"}
    monkeypatch.setenv(
        "AIRFLOW_CONN_KFS_DEFAULT",
        kfs_connection_env((tmp_path / "store").as_uri(), **extra, **security),
    )
    copy = _dag().get_task("copy")
    # As rendered from the params: an empty checkpoint path leaves the job its default.
    copy.topic, copy.output_path, copy.checkpoint_path = "orders", "/data/orders", ""
    copy.starting_offsets = "latest"
    copy.execute({})
    ((args, env),) = submitted
    assert args == [
        "--bootstrap-servers", "kfs-1:9092,kfs-2:9094", "--topic", "orders",
        "--starting-offsets", "latest", "--output-path", "/data/orders",
    ]  # fmt: skip
    assert json.loads(env[CLIENT_CONFIG_ENV]) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "u",
        "sasl.password": "p",
    }

    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env("file:///nowhere"))
    with pytest.raises(AirflowFailException, match="add bootstrap_servers"):
        _dag().get_task("copy").execute({})


@pytest.mark.airflow
@pytest.mark.usefixtures("airflow_db")
@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`:UserWarning")
def test_a_dag_run_copies_what_the_topic_received_since_the_last_copy(
    spark: Any, daemon: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real run (``dag.test()``: spark-submit), going on from a checkpoint an earlier copy left.

    The earlier copy is `copy_available` on the Connect server, what an earlier run
    of the DAG does: one spark-submit (20-30 s here) fewer.
    """
    topic = create_topic(daemon.bootstrap, "spark-dag")
    output, checkpoint = str(tmp_path / "parquet"), str(tmp_path / "checkpoint")
    earlier = produce(daemon.bootstrap, topic, [{"value": b"%d" % n} for n in range(40)])
    copy = CopyOptions(topic, kafka_options(daemon.bootstrap), output, checkpoint)
    assert copy_available(spark, copy).records == len(earlier)
    new = produce(daemon.bootstrap, topic, [{"value": b"%d" % n} for n in range(40, 60)])

    store_url = (tmp_path / "unused-store").as_uri()  # the DAG needs only bootstrap_servers
    monkeypatch.setenv(
        "AIRFLOW_CONN_KFS_DEFAULT",
        kfs_connection_env(store_url, namespace="test", bootstrap_servers=daemon.bootstrap),
    )
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_CONNECTION)
    conf = {"topic": topic, "output_path": output, "checkpoint_path": checkpoint}
    dag_run = _dag().test(run_conf=conf)
    assert str(dag_run.state) == "success", dag_run

    rows = spark.read.parquet(output).select("partition", "offset", "value").collect()
    assert sorted((r.partition, r.offset, bytes(r.value)) for r in rows) == sorted(
        (r.partition, r.offset, r.value) for r in [*earlier, *new]
    )
    assert copy_available(spark, copy).records == 0  # the run left nothing behind
