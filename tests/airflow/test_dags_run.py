"""Every KFS DAG end to end with ``dag.test()``: real daemon data, real spark-submit.

One module-scoped dataset is written by a real ``kfs serve`` through
confluent-kafka and flushed by a graceful stop:

- ``orders``: 1 partition, 5 small segments (compaction merges them);
- ``events``: 1 partition, ``retention.ms`` 1 h, 3 segments of records stamped two
  days ago and 1 fresh one (retention drops the 3).

Each test copies the store, points ``kfs_default`` at the copy and runs DAGs
with ``dag.test()`` on the session's SQLite metadata database; every Spark task
is a ``spark-submit`` of the job file on ``local[2]`` (10-15 s of JVM each).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kfs_core.catalog import PartitionCatalog, PartitionState
from kfs_core.catalog import snapshots as snaps
from kfs_core.storage import open_store
from testkit.daemon import DaemonFactory
from testkit.waiting import wait_for
from tests.airflow.conftest import kfs_connection_env
from tests.conftest import REPO
from tests.server.conftest import by_partition, consume_confluent, produce_confluent

pytestmark = [
    pytest.mark.airflow,
    pytest.mark.spark,
    pytest.mark.integration,
    # dag.test() starts Airflow's in-process execution API, whose svcs import pulls in
    # starlette's test client, which warns about the httpx it finds (third-party noise).
    pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`:UserWarning"),
]

NS = "test"  # DaemonFactory's namespace
ORDERS_ROUNDS = 5
EVENTS_OLD_ROUNDS = 3
RECORDS_PER_ROUND = 20
RETENTION_MS = 3_600_000
TWO_DAYS_MS = 2 * 24 * 3_600_000
SPARK_CONNECTION = json.dumps({"conn_type": "spark", "host": "local[2]"})


@dataclass
class Dataset:
    store_dir: Path
    orders: list[tuple[int, int, bytes]]  # (partition, offset, value) as acknowledged
    events: list[tuple[int, int, bytes]]


def _state(store_url: str, topic: str) -> PartitionState:
    store = open_store(store_url)
    try:
        return PartitionCatalog(store, NS, topic, 0).load()
    finally:
        store.close()


def _produce_round(daemon: Any, topic: str, n: int, timestamp_ms: int | None) -> list:
    """One round of records, then wait for the daemon to seal it into segment ``n + 1``."""
    values = [f"{topic}-{n}-{i}".encode() for i in range(RECORDS_PER_ROUND)]
    delivered = produce_confluent(
        daemon.bootstrap, topic, values, partitions=1, timestamp_ms=timestamp_ms
    )
    wait_for(
        lambda: len(_state(daemon.store_url, topic).segments) == n + 1,
        timeout=30,
        what=f"{topic} segment {n + 1}",
    )
    return delivered


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dataset]:
    from confluent_kafka.admin import AdminClient, NewTopic

    factory = DaemonFactory(tmp_path_factory.mktemp("daemons"))
    try:
        daemon = factory.start(name="source", extra_args=["--flush-interval-ms", "50"])
        admin = AdminClient({"bootstrap.servers": daemon.bootstrap})
        futures = admin.create_topics(
            [
                NewTopic("orders", 1, 1),
                NewTopic("events", 1, 1, config={"retention.ms": str(RETENTION_MS)}),
            ]
        )
        for future in futures.values():
            future.result(30)
        del admin, futures  # its librdkafka handle would keep calling the stopped daemon
        orders: list = []
        for n in range(ORDERS_ROUNDS):
            orders += _produce_round(daemon, "orders", n, None)
        events: list = []
        old = int(time.time() * 1000) - TWO_DAYS_MS
        for n in range(EVENTS_OLD_ROUNDS):
            events += _produce_round(daemon, "events", n, old + n)
        events += _produce_round(daemon, "events", EVENTS_OLD_ROUNDS, None)
        assert daemon.stop() == 0, daemon.log()[-3000:]
        yield Dataset(Path(daemon.store_url.removeprefix("file://")), orders, events)
    finally:
        factory.close()


@pytest.fixture(scope="module")
def dags(airflow_db: Path) -> dict[str, Any]:
    """The DAGs, parsed and in the metadata database, unpaused (as ``kfs run`` leaves them).

    A paused DAG gets no asset-triggered runs queued, so validation must be unpaused
    for compaction's asset event to queue it.
    """
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import update

    manager = DagBundlesManager()
    with create_session() as session:
        manager.sync_bundles_to_db(session=session)
    (bundle,) = [b for b in manager.get_all_dag_bundles() if Path(b.path) == REPO / "dags"]
    bundle.initialize()
    bag = BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)
    assert bag.import_errors == {}
    sync_bag_to_db(bag, bundle.name, bundle.version)
    with create_session() as session:
        session.execute(
            update(DagModel).where(DagModel.dag_id.in_(bag.dag_ids)).values(is_paused=False)
        )
    return bag.dags


@pytest.fixture
def store_url(dataset: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A copy of the dataset's store, and kfs_default / spark_default pointing at it."""
    copy = tmp_path / "store"
    shutil.copytree(dataset.store_dir, copy)
    url = copy.as_uri()
    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env(url, namespace=NS))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_CONNECTION)
    return url


def _task_states(dag_run: Any) -> dict[str, list[str | None]]:
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = dag_run.get_task_instances(session=session)
        states: dict[str, list[str | None]] = {}
        for ti in sorted(tis, key=lambda t: (t.task_id, t.map_index)):
            state = getattr(ti.state, "value", ti.state)  # an enum member or its str value
            states.setdefault(ti.task_id, []).append(state)
        return states


def _map_labels(dag_run: Any, task_id: str) -> list[str | None]:
    """How the UI names a mapped task's instances (their rendered map index)."""
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = [t for t in dag_run.get_task_instances(session=session) if t.task_id == task_id]
        return [t.rendered_map_index for t in sorted(tis, key=lambda t: t.map_index)]


def _xcom(dag_run: Any, task_id: str, key: str = "summary") -> list[Any]:
    """The XCom values of a task (one per map index), in map index order."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(XComModel.map_index, XComModel.value)
            .where(
                XComModel.dag_id == dag_run.dag_id,
                XComModel.run_id == dag_run.run_id,
                XComModel.task_id == task_id,
                XComModel.key == key,
            )
            .order_by(XComModel.map_index)
        ).all()
    return [XComModel.deserialize_value(row) for row in rows]


def _run(dag: Any, **conf: Any) -> Any:
    return dag.test(run_conf=conf or None)


def _records(daemon_factory: DaemonFactory, store_url: str, topic: str, count: int) -> list:
    daemon = daemon_factory.start(name=f"reader-{topic}", store_url=store_url)
    try:
        return consume_confluent(daemon.bootstrap, topic, 1, count)
    finally:
        assert daemon.stop() == 0


# --- compaction, then validation on its output -------------------------------------------


def test_compaction_merges_segments_emits_the_asset_and_validation_passes(
    dags: dict[str, Any], dataset: Dataset, store_url: str, tmp_path: Path
) -> None:
    from airflow.models.asset import AssetDagRunQueue, AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    assert len(_state(store_url, "orders").segments) == ORDERS_ROUNDS
    run = _run(dags["kfs_compaction"])
    states = _task_states(run)
    assert str(run.state) == "success", states
    # One mapped Spark task per topic of the catalog.
    assert states["compact"] == ["success", "success"]
    assert _map_labels(run, "compact") == ["events", "orders"]
    assert states["announce"] == ["success"]
    summaries = _xcom(run, "compact")
    assert [s["topics"] for s in summaries] == [["events"], ["orders"]]
    assert all(s["status"] == "ok" for s in summaries)

    orders = _state(store_url, "orders")
    assert len(orders.segments) == 1  # 5 small segments merged
    assert orders.high_watermark == ORDERS_ROUNDS * RECORDS_PER_ROUND
    factory = DaemonFactory(tmp_path / "readers")
    try:
        got = _records(factory, store_url, "orders", len(dataset.orders))
    finally:
        factory.close()
    assert by_partition(got) == by_partition(dataset.orders)  # same offsets, same bytes

    with create_session() as session:
        events = session.scalars(
            select(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(
                AssetModel.name == "kfs_compacted_segments", AssetEvent.source_run_id == run.run_id
            )
        ).all()
        assert len(events) == 1
        assert events[0].extra["topics"] == ["events", "orders"]
        assert events[0].extra["segments_in"] > events[0].extra["segments_out"]
        queued = session.scalars(
            select(AssetDagRunQueue.target_dag_id).where(
                AssetDagRunQueue.asset_id == events[0].asset_id
            )
        ).all()
        assert "kfs_validation" in queued  # a scheduler would now start validation

    run = _run(dags["kfs_validation"])
    states = _task_states(run)
    assert str(run.state) == "success", states
    assert states["index_repair_needed"] == ["skipped"]
    assert states["trigger_index_rebuild"] == ["skipped"]
    (summary,) = _xcom(run, "validate")
    assert summary["status"] == "ok", summary["message"]
    report_key = summary["details"]["report_key"]
    assert report_key.startswith(f"{NS}/_reports/validation/{summary['run_id']}/")
    store = open_store(store_url)
    try:
        report = json.loads(store.get(report_key))
        assert store.exists(summary["report_key"])
    finally:
        store.close()
    assert report["success"] is True
    assert report["counts"]["segments"] == 2  # one per topic after compaction


# --- retention, checkpoint -----------------------------------------------------------------


def test_retention_drops_expired_segments_of_the_requested_topic(
    dags: dict[str, Any], store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.dag_processing.dagbag import DagBag

    # No grace period, so that the expired objects are deleted in this very run.
    monkeypatch.setenv("KFS_JOB_ARGS_RETENTION", "--delete-grace 0s")
    dag = DagBag(dag_folder=str(REPO / "dags" / "kfs_retention.py"), safe_mode=False).dags[
        "kfs_retention"
    ]
    before = _state(store_url, "events")
    assert len(before.segments) == EVENTS_OLD_ROUNDS + 1
    run = _run(dag, topics="events")
    states = _task_states(run)
    assert str(run.state) == "success", states
    assert states["retain"] == ["success"]  # only the topic asked for
    (summary,) = _xcom(run, "retain")
    assert summary["counts"]["segments_removed"] == EVENTS_OLD_ROUNDS

    after = _state(store_url, "events")
    assert [s.key for s in after.segments] == [before.segments[-1].key]
    assert after.log_start_offset == before.segments[-1].base_offset
    store = open_store(store_url)
    try:
        for gone in before.segments[:-1]:
            assert not store.exists(f"{NS}/{gone.key}")
            assert not store.exists(f"{NS}/{gone.index_key}")
    finally:
        store.close()
    assert len(_state(store_url, "orders").segments) == ORDERS_ROUNDS  # not asked for


def test_checkpoint_takes_a_snapshot_of_the_namespace(dags: dict[str, Any], store_url: str) -> None:
    run = _run(dags["kfs_checkpoint"])
    states = _task_states(run)
    assert str(run.state) == "success", states
    (summary,) = _xcom(run, "checkpoint")
    assert summary["counts"]["snapshots_taken"] == 1
    assert summary["counts"]["partitions"] >= 2
    store = open_store(store_url)
    try:
        (snapshot,) = snaps.list_snapshots(store, NS)
    finally:
        store.close()
    assert snapshot.name.startswith("auto-")
    assert {t.name for t in snapshot.topics} == {"orders", "events"}


# --- failing validation ------------------------------------------------------------------


def test_index_only_failure_fails_validation_and_triggers_a_rebuild_that_repairs_it(
    dags: dict[str, Any], store_url: str
) -> None:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    victim = _state(store_url, "orders").segments[1]
    index_path = Path(store_url.removeprefix("file://")) / NS / victim.index_key
    original = index_path.read_bytes()
    index_path.unlink()
    with create_session() as session:
        earlier = set(
            session.scalars(select(DagRun.run_id).where(DagRun.dag_id == "kfs_index_rebuild"))
        )

    run = _run(dags["kfs_validation"])
    states = _task_states(run)
    assert str(run.state) == "failed", states
    assert states["validate"] == ["failed"]
    assert states["report"] == ["upstream_failed"]
    assert states["index_repair_needed"] == ["success"]
    assert states["trigger_index_rebuild"] == ["success"]
    (summary,) = _xcom(run, "validate")
    assert summary["status"] == "failed"
    assert summary["details"]["index_only_failure"] is True
    assert "index_present" in summary["details"]["critical_failures"]

    with create_session() as session:
        triggered = [
            r
            for r in session.scalars(select(DagRun).where(DagRun.dag_id == "kfs_index_rebuild"))
            if r.run_id not in earlier
        ]
        assert len(triggered) == 1
        conf = dict(triggered[0].conf)
    assert conf == {"topics": "orders", "dry_run": False}

    # What the scheduler would run next: the triggered index_rebuild, with its conf.
    run = _run(dags["kfs_index_rebuild"], **conf)
    states = _task_states(run)
    assert str(run.state) == "success", states
    assert states["rebuild"] == ["success"]
    assert index_path.read_bytes() == original


def test_a_damaged_segment_fails_validation_without_triggering_a_rebuild(
    dags: dict[str, Any], store_url: str
) -> None:
    victim = _state(store_url, "orders").segments[2]
    path = Path(store_url.removeprefix("file://")) / NS / victim.key
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit in the middle of the body
    path.write_bytes(bytes(data))

    run = _run(dags["kfs_validation"], topics="orders")
    states = _task_states(run)
    assert str(run.state) == "failed", states
    assert states["validate"] == ["failed"]
    assert states["index_repair_needed"] == ["success"]
    assert states["trigger_index_rebuild"] == ["skipped"]
    (summary,) = _xcom(run, "validate")
    assert summary["details"]["index_only_failure"] is False
    assert "body_crc" in summary["details"]["critical_failures"]


# --- tables ------------------------------------------------------------------------------


def test_the_tables_dag_appends_a_table_enabled_topic_once(
    dags: dict[str, Any], dataset: Dataset, store_url: str
) -> None:
    from kfs_core.catalog import TopicRegistry
    from kfs_core.tables import covered_offsets, open_catalog

    store = open_store(store_url)
    try:
        TopicRegistry(store, NS).alter_configs("orders", {"kfs.table.enabled": "true"})
    finally:
        store.close()
    run = _run(dags["kfs_tables"])
    states = _task_states(run)
    assert str(run.state) == "success", states
    (summary,) = _xcom(run, "append")
    counts = summary["counts"]
    assert counts["records"] == counts["rows"] == len(dataset.orders)
    assert counts["dead_letters"] == len(dataset.orders)  # "orders-0-1" is not JSON
    table = open_catalog(store_url, NS).load_table((NS, "orders"))
    rows = table.scan(selected_fields=("_offset", "_value")).to_arrow().to_pylist()
    assert sorted((r["_offset"], r["_value"]) for r in rows) == sorted(
        (offset, value) for _, offset, value in dataset.orders
    )
    assert covered_offsets(table) == {0: ORDERS_ROUNDS * RECORDS_PER_ROUND}
    again = _run(dags["kfs_tables"])
    (summary,) = _xcom(again, "append")
    assert summary["counts"]["commits"] == 0 and summary["counts"]["lag"] == 0
