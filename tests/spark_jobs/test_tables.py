"""The tables job on topics a real daemon wrote: Iceberg tables equal to what a consumer reads.

confluent-kafka producers write JSON values to table-enabled topics - new
fields appearing mid-stream, malformed values, a type conflict, null values,
a compacted topic with tombstones, an aborted transaction - and the daemon
stops, so everything is sealed into segments.  The job appends to the
tables; pyiceberg, an independent reader, reads them back: one row per
record a ``read_committed`` consumer reads (each key's latest for the
compacted topic), dead letters with their raw bytes, each offset once however
runs fail or race.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kfs_core.storage import open_store
from kfs_core.tables import covered_offsets, open_catalog, table_state
from spark_jobs.tables import job as tables_job
from spark_jobs.tables import run
from spark_jobs.tables.schema import Rows, shape_of
from testkit.daemon import Daemon, DaemonFactory
from testkit.waiting import wait_for
from tests.conftest import REPO
from tests.spark_jobs.test_topic_source import _consume_partitions

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import confluent_kafka
    import confluent_kafka.admin

pytestmark = [pytest.mark.spark, pytest.mark.integration]

NS = "test"  # the namespace DaemonFactory gives its daemons
PARTITIONS = 2


@pytest.fixture
def factory(tmp_path: Path) -> Iterator[DaemonFactory]:
    made = DaemonFactory(tmp_path / "kfs")
    try:
        yield made
    finally:
        made.close()


def _create(bootstrap: str, topic: str, **configs: str) -> None:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    new = confluent_kafka.admin.NewTopic(
        topic, PARTITIONS, 1, config={"kfs.table.enabled": "true", **configs}
    )
    admin.create_topics([new])[topic].result(30)


def _produce(
    bootstrap: str,
    topic: str,
    records: list[tuple[bytes | None, bytes | None]],
    *,
    by_key: bool = False,
) -> None:
    """Round robin over the partitions, or (``by_key``) each key in one partition always."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, (key, value) in enumerate(records):
        partition = sum(key or b"") % PARTITIONS if by_key else i % PARTITIONS
        producer.produce(topic, value, key, partition=partition)
        producer.poll(0)
    assert producer.flush(30) == 0


def _aborted(bootstrap: str, topic: str) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(6):
        producer.produce(topic, b'{"aborted": true}', b"a", partition=i % PARTITIONS)
    producer.flush(30)  # on the broker first: an abort purges what is still queued
    producer.abort_transaction(30)


def _sealed(
    factory: DaemonFactory, prefix: str, records: list[tuple[bytes | None, bytes | None]]
) -> tuple[Daemon, str]:
    """A table-enabled topic holding ``records``, the daemon stopped so all are in segments."""
    daemon = factory.start(name="tables")
    topic = f"{prefix}-{uuid.uuid4().hex[:6]}"
    _create(daemon.bootstrap, topic)
    _produce(daemon.bootstrap, topic, records)
    assert daemon.stop() == 0
    return daemon, topic


def _check_each_offset_once(daemon: Daemon, topic: str, count: int) -> None:
    rows = _rows(daemon, topic)
    assert len({(r["_partition"], r["_offset"]) for r in rows}) == len(rows) == count
    assert sorted(r["n"] for r in rows) == list(range(count))


def _run(daemon: Daemon, spark: Any, *args: str) -> dict[str, Any]:
    return run(["--store-url", daemon.store_url, "--namespace", NS, *args], spark)


def _table(daemon: Daemon, topic: str) -> Any:
    return open_catalog(daemon.store_url, NS).load_table((NS, topic.replace(".", "_")))


def _rows(daemon: Daemon, topic: str) -> list[dict[str, Any]]:
    return sorted(
        _table(daemon, topic).scan().to_arrow().to_pylist(),
        key=lambda r: (r["_partition"], r["_offset"]),
    )


FIRST = [
    (b"k1", b'{"id": 1, "name": "ann"}'),
    (b"k2", b'{"id": 2, "name": "bob"}'),
    (None, b'{"id": 3, "name": "cy", "score": 1}'),
    (b"k4", b'{"id": 4, "score": 2.5, "tags": ["a", "b"], "address": {"city": "Oslo"}}'),
    (b"k5", b"not json at all"),
    (b"k6", b"[1, 2]"),
    (b"k7", b'{"id": "seven"}'),
    (b"k8", None),
    (b"k9", b'{"id": 9, "tags": [], "extra": null}'),
]
LATER = [
    (b"k10", b'{"id": 10, "address": {"city": "Bergen", "zip": "5003"}, "active": true}'),
    (b"k11", b'{"id": 11.5}'),
    (b"k12", b'{"id": 12, "_offset": 3}'),
]


def _expected(consumed: set[tuple[Any, ...]]) -> dict[tuple[int, int], tuple[Any, Any]]:
    return {(r[1], r[2]): (r[3], r[4]) for r in consumed}


def _check_rows(rows: list[dict[str, Any]], consumed: set[tuple[Any, ...]]) -> None:
    """One row per consumed record: its fields, or a dead letter holding its bytes."""
    expected = _expected(consumed)
    assert [(r["_partition"], r["_offset"]) for r in rows] == sorted(expected)
    for row in rows:
        key, value = expected[(row["_partition"], row["_offset"])]
        assert row["_key"] == key
        fields = {k: v for k, v in row.items() if not k.startswith("_") and v not in (None, [])}
        if row["_error"] is not None:
            assert row["_value"] == value and not fields
            continue
        assert row["_value"] is None
        doc = json.loads(value) if value is not None else {}
        want = {k: v for k, v in doc.items() if v not in (None, [])}
        assert {k: _plain(v) for k, v in fields.items()} == want


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    return value


def test_a_table_holds_what_a_consumer_reads_with_its_schema_evolved(
    factory: DaemonFactory, spark: Any
) -> None:
    daemon = factory.start(name="tables")
    topic = f"orders.{uuid.uuid4().hex[:6]}"
    _create(daemon.bootstrap, topic, **{"kfs.table.partition.by": "_partition, bucket(4, id)"})
    _produce(daemon.bootstrap, topic, FIRST)
    _aborted(daemon.bootstrap, topic)
    assert daemon.stop() == 0

    summary = _run(daemon, spark)
    assert summary["status"] == "ok", summary["message"]
    counts = summary["counts"]
    assert counts["records"] == len(FIRST) and counts["commits"] == 1
    assert counts["dead_letters"] == 3  # not JSON, not an object, "seven" in a long column
    rows = _rows(daemon, topic)
    daemon.start()
    consumed = _consume_partitions(daemon.bootstrap, [topic], PARTITIONS)
    _check_rows(rows, consumed)
    errors = {r["_key"]: r["_error"] for r in rows if r["_error"]}
    assert errors[b"k5"].startswith("not JSON")
    assert errors[b"k6"] == "not a JSON object: a JSON array"
    assert errors[b"k7"] == 'field id: long column, string value "seven"'
    table = _table(daemon, topic)
    spec = [str(f.transform) for f in table.spec().fields]
    assert spec == ["identity", "bucket[4]"]
    (tables,) = summary["details"]["tables"]
    assert (
        "score double" in tables["schema_changes"] and "address struct" in tables["schema_changes"]
    )

    _produce(daemon.bootstrap, topic, LATER)
    consumed = _consume_partitions(daemon.bootstrap, [topic], PARTITIONS)
    assert daemon.stop() == 0
    again = _run(daemon, spark)
    assert again["counts"]["records"] == len(LATER) and again["counts"]["dead_letters"] == 2
    rows = _rows(daemon, topic)
    _check_rows(rows, consumed)
    columns = {f.name for f in _table(daemon, topic).schema().fields}
    assert {"active", "address", "id", "name", "score", "tags"} <= columns
    assert "extra" not in columns  # only null so far: no type to give it
    zips = {r["address"]["zip"] for r in rows if r["address"]}
    assert zips == {None, "5003"}  # a struct field added inside a struct

    state = table_state(open_catalog(daemon.store_url, NS), NS, topic)
    assert state is not None
    ends = {p: max(o for (q, o) in _expected(consumed) if q == p) + 1 for p in range(PARTITIONS)}
    assert state.lag(ends) == 0
    assert state.report and state.report.endswith("report.json")
    report = json.loads(open_store(daemon.store_url).get(state.report))
    outcomes = {e["id"]: e["success"] for e in report["expectations"]}
    assert outcomes == {
        "rows": True,
        "offsets_unique": True,
        "keys": True,
        "no_dead_letters": False,  # 11.5 in a long column, a field named _offset
        "freshness": True,
    }
    assert report["records"] == len(LATER) and report["dead_letters"] == 2
    assert b"kfs_table_" in open_store(daemon.store_url).get(report["data_docs_index"])
    nothing = _run(daemon, spark)
    assert nothing["counts"]["commits"] == 0 and nothing["counts"]["lag"] == 0


def test_a_compacted_topics_table_holds_each_keys_latest_value(
    factory: DaemonFactory, spark: Any
) -> None:
    daemon = factory.start(name="tables")
    topic = f"users-{uuid.uuid4().hex[:6]}"
    _create(daemon.bootstrap, topic, **{"cleanup.policy": "compact"})
    first = [(b"u%d" % (i % 5), b'{"v": %d}' % i) for i in range(20)]
    _produce(daemon.bootstrap, topic, first, by_key=True)
    assert daemon.stop() == 0
    assert _run(daemon, spark)["status"] == "ok"
    daemon.start()
    _produce(
        daemon.bootstrap,
        topic,
        [(b"u1", None), (b"u2", b'{"v": 100}'), (b"u9", b'{"v": 9}'), (b"u3", None)],
        by_key=True,
    )
    consumed = _consume_partitions(daemon.bootstrap, [topic], PARTITIONS)
    assert daemon.stop() == 0
    assert _run(daemon, spark)["status"] == "ok"

    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for _, _, offset, key, value, *_ in sorted(consumed, key=lambda r: (r[1], r[2])):
        latest[key] = (offset, value)
    want = {k: json.loads(v) for k, (_, v) in latest.items() if v is not None}
    rows = _rows(daemon, topic)
    assert {r["_key"]: {"v": r["v"]} for r in rows} == want
    assert len(rows) == len(want)  # u1 and u3 deleted by their tombstones


def test_a_failed_commit_and_a_racing_run_leave_each_offset_once(
    factory: DaemonFactory, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon, topic = _sealed(factory, "events", [(None, b'{"n": %d}' % i) for i in range(40)])

    from pyiceberg.catalog.sql import SqlCatalog

    real_commit = SqlCatalog.commit_table

    def dies(*args: Any, **kwargs: Any) -> Any:
        raise OSError("connection to the catalog lost")

    monkeypatch.setattr(SqlCatalog, "commit_table", dies)
    failed = _run(daemon, spark, "--max-records", "10")
    assert failed["status"] == "failed"
    assert "connection to the catalog lost" in failed["message"]
    monkeypatch.setattr(SqlCatalog, "commit_table", real_commit)
    assert _rows(daemon, topic) == []  # the data files written are in no snapshot

    stale = _table(daemon, topic)  # loaded before another run commits
    assert (
        _run(daemon, spark, "--max-records", "10", "--max-commits", "1")["counts"]["commits"] == 1
    )
    rows = Rows(shape_of(stale.schema().as_arrow()))
    rows.add(0, 0, None, None, b'{"n": 0}')
    properties = {"kfs.next-offsets": json.dumps({"0": 1})}
    assert tables_job._commit(stale, _topic(topic), rows, properties, changed=True) is None

    finished = _run(daemon, spark, "--max-records", "10")
    assert finished["status"] == "ok"
    _check_each_offset_once(daemon, topic, 40)
    assert covered_offsets(_table(daemon, topic)) == {0: 20, 1: 20}


def test_a_job_killed_mid_run_and_run_again_leaves_each_offset_once(
    factory: DaemonFactory, spark: Any
) -> None:
    daemon, topic = _sealed(factory, "killed", [(b"k%d" % i, b'{"n": %d}' % i) for i in range(60)])
    command = [
        sys.executable, "-m", "spark_jobs.tables", "--store-url", daemon.store_url,
        "--namespace", NS, "--max-records", "2", "--master", "local[1]",
    ]  # fmt: skip
    job = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = open_store(daemon.store_url)
    try:
        # Killed once a first snapshot's report is written: the next commit is under way.
        wait_for(
            lambda: any(
                info.key.endswith("/report.json") for info in store.list(f"{NS}/_reports/tables/")
            ),
            timeout=120,
            what="the first snapshot's report",
        )
    finally:
        store.close()
        job.kill()
        job.wait(30)
    partial = _rows(daemon, topic)
    assert 0 < len(partial) < 60  # 15 commits of 4 records: the kill came before the last
    assert _run(daemon, spark)["status"] == "ok"
    _check_each_offset_once(daemon, topic, 60)


def test_a_dry_run_says_how_far_behind_and_writes_nothing(
    factory: DaemonFactory, spark: Any
) -> None:
    daemon, topic = _sealed(factory, "dry", [(None, b'{"n": %d}' % i) for i in range(10)])
    dry = _run(daemon, spark, "--dry-run")
    assert dry["status"] == "ok" and dry["counts"]["lag"] == 10 and dry["counts"]["commits"] == 0
    assert dry["message"] == "would append 10 records to 1 table(s) (dry run)"
    assert _rows(daemon, topic) == []


def _topic(name: str) -> tables_job.TableTopic:
    return tables_job.TableTopic(name, PARTITIONS, compacted=False, partition_by=())


def test_bad_requests_get_one_line(factory: DaemonFactory, spark: Any) -> None:
    daemon = factory.start(name="tables")
    plain = f"plain-{uuid.uuid4().hex[:6]}"
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": daemon.bootstrap})
    admin.create_topics([confluent_kafka.admin.NewTopic(plain, 1, 1)])[plain].result(30)
    assert daemon.stop() == 0
    none = _run(daemon, spark)
    assert none["status"] == "ok" and none["message"] == "no topic has kfs.table.enabled=true"
    assert (
        tables_job.main(["--store-url", daemon.store_url, "--namespace", NS, "--topics", "nope"])
        == 2
    )


def test_a_table_of_a_topic_on_s3(
    factory: DaemonFactory,
    spark: Any,
    moto_server: str,
    s3_bucket: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Data and metadata in the bucket, the embedded catalog under $KFS_HOME."""
    monkeypatch.setenv("KFS_HOME", str(tmp_path / "home"))
    url = f"s3://{s3_bucket}/tables-{uuid.uuid4().hex[:8]}"
    daemon = factory.start(name="tables", store_url=url, s3_endpoint_url=moto_server)
    topic = f"s3-{uuid.uuid4().hex[:6]}"
    _create(daemon.bootstrap, topic)
    _produce(daemon.bootstrap, topic, [(None, b'{"n": %d}' % i) for i in range(20)])
    assert daemon.stop() == 0
    summary = _run(daemon, spark, "--s3-endpoint-url", moto_server)
    assert summary["status"] == "ok", summary["message"]
    catalog = open_catalog(url, NS, s3_endpoint_url=moto_server)
    table = catalog.load_table((NS, topic))
    assert table.location().startswith(f"{url}/{NS}/_tables/")
    assert sorted(r["n"] for r in table.scan().to_arrow().to_pylist()) == list(range(20))
    assert (tmp_path / "home" / "tables" / f"{NS}.db").is_file()
