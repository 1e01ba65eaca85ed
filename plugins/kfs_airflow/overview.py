"""The KFS page's read model: what one namespace holds and what its maintenance jobs reported.

`read_overview(hook)` gathers, through the namespace's `KfsHook` (which does
every store read, `kfs_airflow.hooks`):

- topics and, per partition, the catalog version, live segments, bytes,
  records, log start offset and high watermark (`KfsHook.topics`,
  `KfsHook.partition_state`, as ``kfs catalog show`` reads them);
- the daemons serving the namespace and each partition's lease
  (`read_cluster`, on `kfs_core.cluster.status` as ``kfs cluster status|leases``
  read them): every heartbeat with its wall-clock state, the leases from the
  catalog states just read, which partitions no live daemon holds, and for
  ``durability=store`` daemons the offsets their store WAL objects hold above
  each catalog's end (acknowledged, not yet in segments);
- recent compaction runs and what they saved, from their run summaries
  (`KfsHook.report_history`, `kfs_core.reports.RunSummary`);
- recent validation runs and their data-quality reports
  (`KfsHook.validation_report`, `kfs_core.reports.ValidationReport`): pass/fail
  per expectation, and where the run's Great Expectations Data Docs live
  (``<run-id>/data_docs/``, `KfsHook.validation_page`).

The consumer groups live in the daemon, not in the store: the page fills
``groups`` from `KfsAdminHook.consumer_groups` (`kfs_core.kafka_admin`), and
``groups_problem`` says why it could not (no daemon address, no answer); the
open transactions too (``transactions``, ``transactions_problem``, from
`KfsAdminHook.open_transactions`).

`read_overview` reads everything afresh; the page reads through the cache in
`kfs_airflow.overview_cache`, which passes its own ``read_partition`` (kept
`PartitionCatalog` objects, refreshed incrementally) and fills ``as_of``,
``age_s`` and ``refreshing`` when it answers with a copy read earlier.

Nothing here writes, and nothing raises for bad data: a partition whose
catalog cannot be read, an unreadable report or an unreachable store becomes a
message in the `Overview` (``error`` fields and ``problems``), so the page
always renders.  Run ids begin with their UTC start time
(`kfs_core.reports.new_run_id`), so key order is time order.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, computed_field

from kfs_core.clock import now_ms
from kfs_core.cluster.status import (
    DEFAULT_SESSION_TIMEOUT_MS,
    PartitionLease,
    daemon_statuses,
    lease_holder,
    lease_of,
)
from kfs_core.errors import ObjectNotFound
from kfs_core.kafka_admin import ConsumerGroup, OpenTransaction
from kfs_core.reports import (
    COMPACTION_JOB,
    VALIDATION_JOB,
    ExpectationOutcome,
    RunSummary,
    data_docs_key,
    data_docs_prefix,
    redact_url,
)

if TYPE_CHECKING:
    from kfs_airflow.hooks import KfsHook
    from kfs_core.catalog import PartitionState
    from kfs_core.log.wal.store import WalObjectHeader

__all__ = [
    "COMPACTION_JOB",
    "VALIDATION_JOB",
    "ClusterSummary",
    "CompactionRun",
    "CompactionSavings",
    "DaemonSummary",
    "ExpectationResult",
    "HeldPartition",
    "LeaseRow",
    "LeaseTopic",
    "Overview",
    "PartitionSummary",
    "ReadPartition",
    "TableSummary",
    "TopicSummary",
    "ValidationRun",
    "data_docs_key",
    "describe_error",
    "partition_summary",
    "read_cluster",
    "read_overview",
    "read_tables",
    "unavailable",
    "unreadable_partition",
]

#: Runs read for the compaction table and the data-quality trend.
DEFAULT_MAX_RUNS = 20
_CATALOG_THREADS = 16


class PartitionSummary(BaseModel):
    topic: str
    partition: int
    catalog_version: int = -1
    segments: int = 0
    size_bytes: int = 0
    record_count: int = 0
    log_start_offset: int = 0
    high_watermark: int = 0
    #: The newest commit's wall clock (ms since the epoch; 0: no commits).
    commit_ms: int = 0
    #: The newest lease (`kfs_core.cluster.status.lease_of`): epoch 0 when never taken.
    leader_epoch: int = 0
    leader_node_id: int = -1
    leader_incarnation: str = ""
    error: str | None = None


class TopicSummary(BaseModel):
    name: str
    partition_count: int = 0
    cleanup_policy: str = ""
    table_enabled: bool = False  # kfs.table.enabled
    partitions: list[PartitionSummary] = Field(default_factory=list)
    error: str | None = None

    @computed_field  # type: ignore[prop-decorator]  # mypy: no decorators over @property; pydantic's documented ignore
    @property
    def segments(self) -> int:
        return sum(p.segments for p in self.partitions)

    @computed_field  # type: ignore[prop-decorator]  # mypy: no decorators over @property; pydantic's documented ignore
    @property
    def size_bytes(self) -> int:
        return sum(p.size_bytes for p in self.partitions)

    @computed_field  # type: ignore[prop-decorator]  # mypy: no decorators over @property; pydantic's documented ignore
    @property
    def record_count(self) -> int:
        return sum(p.record_count for p in self.partitions)


class CompactionRun(BaseModel):
    run_id: str
    status: str = ""
    message: str = ""
    started_at: str | None = None
    finished_at: str | None = None
    dry_run: bool = False
    partitions_merged: int = 0
    partitions_compacted: int = 0
    segments_in: int = 0
    segments_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    bytes_saved: int = 0
    saved_ratio: float = 0.0
    records_removed: int = 0
    error: str | None = None


class CompactionSavings(BaseModel):
    runs: list[CompactionRun] = Field(default_factory=list)  # newest first
    total_bytes_in: int = 0
    total_bytes_saved: int = 0
    problems: list[str] = Field(default_factory=list)


class ExpectationResult(BaseModel):
    id: str
    expectation: str = ""
    column: str | None = None
    description: str = ""
    critical: bool = False
    success: bool = False
    observed_value: Any = None
    unexpected_count: int | None = None
    exception: str | None = None


class ValidationRun(BaseModel):
    run_id: str
    status: str = ""
    message: str = ""
    started_at: str | None = None
    finished_at: str | None = None
    dry_run: bool = False
    success: bool | None = None  # None: the run produced no report
    evaluated: int = 0
    successful: int = 0
    failed_expectations: list[str] = Field(default_factory=list)
    critical_failures: list[str] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)
    expectations: list[ExpectationResult] = Field(default_factory=list)
    #: Path of the Data Docs index inside ``<run-id>/data_docs/`` ("index.html"), if built.
    data_docs_index: str | None = None
    error: str | None = None

    @computed_field  # type: ignore[prop-decorator]  # mypy: no decorators over @property; pydantic's documented ignore
    @property
    def unsuccessful(self) -> int:
        return self.evaluated - self.successful


class TableSummary(BaseModel):
    """A topic's Iceberg table as its newest KFS snapshot describes it (`kfs_core.tables`)."""

    topic: str
    table: str = ""  # "namespace.table"
    format: str = "iceberg"
    snapshot_id: int | None = None  # None: no snapshot yet
    committed_at: str | None = None
    offsets: str = ""  # what the snapshot added: "0: 10-19, 1: 12-20"
    rows: int = 0
    lag: int = 0  # records of the topic's segments not yet in the table
    report_success: bool | None = None  # None: no report (or unreadable)
    report_run_id: str | None = None
    report_commit: str | None = None
    data_docs_index: str | None = None  # path inside the report's data_docs/
    error: str | None = None


class HeldPartition(BaseModel):
    topic: str
    partition: int
    epoch: int


class DaemonSummary(BaseModel):
    """One daemon by its heartbeat (`kfs_core.cluster.status.DaemonStatus`), as of the read."""

    node_id: int
    #: "running", "stopped" or "dead" (running by its heartbeat, written longer ago than
    #: the session timeout by the page's wall clock).
    state: str
    heartbeat_ms: int = -1  # the daemon's wall clock when it wrote the heartbeat; -1: none
    heartbeat_age_s: float | None = None
    incarnation: str = ""
    seq: int = 0
    durability: str = ""
    listeners: list[str] = Field(default_factory=list)  # "PLAINTEXT://host:port"
    rack: str | None = None
    held: list[HeldPartition] = Field(default_factory=list)
    #: ``durability=store``: its WAL objects in the store, their bytes, and the offsets
    #: they hold above the catalogs' ends (acknowledged, not yet in segments).  None: its
    #: WAL is on its own disk, which the store does not show.
    wal_objects: int | None = None
    wal_bytes: int | None = None
    unflushed_offsets: int | None = None


class LeaseRow(BaseModel):
    """One partition's lease from its catalog, and whether a live daemon holds it."""

    topic: str
    partition: int
    epoch: int = 0
    node_id: int = -1
    incarnation: str = ""
    #: `kfs_core.cluster.status.HolderState`: live, no-lease, dead, stopped,
    #: no-heartbeat, released; "unknown" when the catalog could not be read.
    holder: str = "no-lease"
    high_watermark: int = 0
    commit_age_s: float | None = None  # since the newest catalog commit; None: no commits
    #: The offset after the last one any store WAL object holds of it; None: none does.
    wal_end_offset: int | None = None
    #: Offsets in store WAL objects above the catalog's end: acknowledged, not yet in segments.
    unflushed_offsets: int = 0
    error: str | None = None

    @computed_field  # type: ignore[prop-decorator]  # mypy: no decorators over @property; pydantic's documented ignore
    @property
    def live(self) -> bool:
        return self.holder == "live"


class LeaseTopic(BaseModel):
    name: str
    partitions: list[LeaseRow] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]  # mypy: no decorators over @property; pydantic's documented ignore
    @property
    def without_live_holder(self) -> int:
        return sum(not p.live for p in self.partitions)


class ClusterSummary(BaseModel):
    """The daemons serving the namespace and the partitions' leases, from the store."""

    #: A running daemon whose heartbeat is older than this is shown dead.
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    daemons: list[DaemonSummary] = Field(default_factory=list)  # by node id
    #: Per topic, every partition's lease; empty while no daemon has written a heartbeat
    #: or taken a lease (a namespace no daemon serves).
    topics: list[LeaseTopic] = Field(default_factory=list)
    #: Corrupt heartbeats, damaged WAL objects, listings that failed.
    problems: list[str] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]  # mypy: no decorators over @property; pydantic's documented ignore
    @property
    def without_live_holder(self) -> int:
        return sum(t.without_live_holder for t in self.topics)


class Overview(BaseModel):
    """Everything the KFS page shows, as of ``generated_at``."""

    namespace: str
    store_url: str
    generated_at: str
    topics: list[TopicSummary] = Field(default_factory=list)
    compaction: CompactionSavings = Field(default_factory=CompactionSavings)
    validation: list[ValidationRun] = Field(default_factory=list)  # newest first
    #: Path inside the latest report's data_docs/ of its validation result page.
    latest_validation_page: str | None = None
    #: What could not be read at all (the store, the topic list, the report listings).
    problems: list[str] = Field(default_factory=list)
    #: The daemon's Kafka address the groups were read from ("" when not configured).
    bootstrap_servers: str = ""
    #: The daemon's consumer groups, sorted by id.
    groups: list[ConsumerGroup] = Field(default_factory=list)
    #: Why the groups could not be read (no daemon address, the daemon did not answer).
    groups_problem: str | None = None
    #: The daemons' open transactions, longest open first; a hanging one is past its timeout.
    transactions: list[OpenTransaction] = Field(default_factory=list)
    #: Why the transactions could not be read.
    transactions_problem: str | None = None
    #: The Iceberg tables of topics with ``kfs.table.enabled=true``.
    tables: list[TableSummary] = Field(default_factory=list)
    #: The daemons' heartbeats and the partitions' leases.
    cluster: ClusterSummary = Field(default_factory=ClusterSummary)
    #: When the store state shown was read, if this answer is a copy the page's cache
    #: read earlier (``generated_at`` is then when it was served); None: read for this answer.
    as_of: str | None = None
    #: Seconds between ``as_of`` and ``generated_at`` (None with ``as_of``).
    age_s: float | None = None
    #: A background refresh was running when this copy was served: reload for newer data.
    refreshing: bool = False
    #: Nothing was read yet (a first read still under way): the page shows how far it got.
    loading: bool = False
    #: While ``loading``: partitions whose catalog was read, of ``partitions_total``
    #: (None until the topics are listed).
    partitions_read: int = 0
    partitions_total: int | None = None

    @property
    def latest_report(self) -> ValidationRun | None:
        """The newest validation run that produced a data-quality report."""
        return next((run for run in self.validation if run.success is not None), None)


def describe_error(exc: BaseException) -> str:
    """One line for the page: the exception's class and message."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def unavailable(namespace: str, store_url: str, problem: str) -> Overview:
    """The overview of a namespace whose store could not even be opened."""
    return Overview(
        namespace=namespace,
        store_url=redact_url(store_url) if store_url else "",
        generated_at=_now(),
        problems=[problem],
    )


def read_overview(
    hook: KfsHook,
    *,
    max_runs: int = DEFAULT_MAX_RUNS,
    read_partition: ReadPartition | None = None,
    planned: Callable[[int], None] | None = None,
    wal_headers: dict[str, WalObjectHeader] | None = None,
) -> Overview:
    """Topics, partitions, the daemons and the recent compaction and validation runs of the namespace.

    ``read_partition`` gives one partition's summary (default: a full catalog
    load through ``hook``); it must not raise.  ``planned`` hears how many
    partitions are about to be read, once the topics are listed.
    ``wal_headers`` is the caller's cache of store WAL headers (`read_cluster`).
    """
    overview = Overview(
        namespace=hook.namespace, store_url=redact_url(hook.get_conn().url), generated_at=_now()
    )
    try:
        overview.topics = read_topics(hook, read_partition, planned)
    except Exception as exc:  # noqa: BLE001 - the page shows it instead of failing
        overview.problems.append(f"cannot list the topics: {describe_error(exc)}")
    overview.cluster = read_cluster(hook, overview.topics, wal_headers=wal_headers)
    overview.tables = read_tables(hook, overview.topics)
    overview.compaction = read_compaction(hook, max_runs=max_runs)
    try:
        overview.validation = read_validation(hook, max_runs=max_runs)
    except Exception as exc:  # noqa: BLE001
        overview.problems.append(f"cannot list the validation reports: {describe_error(exc)}")
    latest = overview.latest_report
    if latest is not None and latest.data_docs_index is not None:
        try:
            overview.latest_validation_page = hook.validation_page(latest.run_id)
        except Exception as exc:  # noqa: BLE001
            overview.problems.append(f"cannot list the Data Docs: {describe_error(exc)}")
    return overview


# --- tables of topics -------------------------------------------------------------


def read_tables(hook: KfsHook, topics: Iterable[TopicSummary]) -> list[TableSummary]:
    """The table of every table-enabled topic: snapshot, offsets, lag, last report."""
    wanted = [t for t in topics if t.table_enabled]
    if not wanted:
        return []
    try:
        catalog = hook.table_catalog()
    except Exception as exc:  # noqa: BLE001 - the page shows it instead of failing
        return [TableSummary(topic=t.name, error=describe_error(exc)) for t in wanted]
    return [_read_table(hook, catalog, topic) for topic in wanted]


def _read_table(hook: KfsHook, catalog: Any, topic: TopicSummary) -> TableSummary:
    from kfs_core.tables import table_identifier, table_state

    summary = TableSummary(
        topic=topic.name, table=".".join(table_identifier(hook.namespace, topic.name))
    )
    try:
        state = table_state(catalog, hook.namespace, topic.name)
    except Exception as exc:  # noqa: BLE001
        summary.error = describe_error(exc)
        return summary
    ends = {p.partition: p.high_watermark for p in topic.partitions if p.error is None}
    if state is None:
        summary.lag = sum(ends.values())
        return summary
    summary.snapshot_id = state.snapshot_id
    if state.committed_ms is not None:
        committed = _dt.datetime.fromtimestamp(state.committed_ms / 1000, _dt.UTC)
        summary.committed_at = committed.isoformat(timespec="seconds")
    summary.offsets = ", ".join(f"{p}: {s}-{e - 1}" for p, (s, e) in state.offsets.items() if s < e)
    summary.rows = state.rows
    summary.lag = state.lag(ends)
    if state.report:
        _read_table_report(hook, state.report, summary)
    return summary


def _read_table_report(hook: KfsHook, key: str, summary: TableSummary) -> None:
    """The report's verdict and where its Data Docs are (a missing report leaves them None)."""
    parts = key.split("/")  # {ns}/_reports/tables/<run-id>/<table>/<commit>/report.json
    if len(parts) < 5:
        return
    summary.report_run_id, summary.report_commit = parts[-4], parts[-2]
    try:
        report = hook.table_report(key)
    except ObjectNotFound:
        return
    except Exception as exc:  # noqa: BLE001
        summary.error = f"report unreadable: {describe_error(exc)}"
        return
    summary.report_success = bool(report.get("success"))
    index = report.get("data_docs_index")
    if isinstance(index, str) and "/data_docs/" in index:
        summary.data_docs_index = index.split("/data_docs/", 1)[1]


# --- catalog ------------------------------------------------------------------------


#: One partition's summary, ``(topic, partition) -> PartitionSummary``; never raises.
ReadPartition = Callable[[str, int], PartitionSummary]


def read_topics(
    hook: KfsHook,
    read_partition: ReadPartition | None = None,
    planned: Callable[[int], None] | None = None,
) -> list[TopicSummary]:
    """Every topic with its partitions' catalog state; per-topic and per-partition errors kept."""
    read = read_partition or (lambda topic, partition: _read_partition(hook, topic, partition))
    registry = hook.topics()
    topics: list[TopicSummary] = []
    pairs: list[tuple[TopicSummary, int]] = []
    for name in registry.list_topics():
        topic = TopicSummary(name=name)
        topics.append(topic)
        try:
            description = registry.describe(name)
        except Exception as exc:  # noqa: BLE001
            topic.error = describe_error(exc)
            continue
        topic.partition_count = description.partitions
        topic.cleanup_policy = description.effective_configs.get("cleanup.policy", "")
        topic.table_enabled = description.config.kfs_table_enabled
        pairs.extend((topic, p) for p in range(description.partitions))
    if planned is not None:
        planned(len(pairs))
    if pairs:
        with ThreadPoolExecutor(min(_CATALOG_THREADS, len(pairs))) as pool:
            summaries = list(pool.map(lambda pair: read(pair[0].name, pair[1]), pairs))
        for (topic, _), summary in zip(pairs, summaries, strict=True):
            topic.partitions.append(summary)
    return topics


def _read_partition(hook: KfsHook, topic: str, partition: int) -> PartitionSummary:
    try:
        state = hook.partition_state(topic, partition)
    except Exception as exc:  # noqa: BLE001 - one damaged catalog must not hide the others
        return unreadable_partition(topic, partition, exc)
    return partition_summary(topic, partition, state)


def unreadable_partition(topic: str, partition: int, exc: BaseException) -> PartitionSummary:
    """The row of a partition whose catalog could not be read."""
    return PartitionSummary(
        topic=topic, partition=partition, error=f"catalog unreadable: {describe_error(exc)}"
    )


def partition_summary(topic: str, partition: int, state: PartitionState) -> PartitionSummary:
    """The row of a partition from its catalog state."""
    lease = lease_of(state)
    return PartitionSummary(
        topic=topic,
        partition=partition,
        catalog_version=state.version,
        segments=len(state.segments),
        size_bytes=state.size_bytes,
        record_count=state.record_count,
        log_start_offset=state.log_start_offset,
        high_watermark=state.high_watermark,
        commit_ms=state.timestamp_ms,
        leader_epoch=lease.epoch,
        leader_node_id=lease.node_id,
        leader_incarnation=lease.incarnation,
    )


# --- the cluster: heartbeats, leases, the store WAL ----------------------------------------


def read_cluster(
    hook: KfsHook,
    topics: list[TopicSummary],
    *,
    wal_headers: dict[str, WalObjectHeader] | None = None,
    now: int | None = None,
) -> ClusterSummary:
    """The daemons by their heartbeats and each partition's lease, as `kfs cluster status` reads them.

    The leases come from ``topics`` (the catalog states just read); a lease
    is held live when its node's heartbeat is running and lists the partition
    (`kfs_core.cluster.status.lease_holder`).  For ``durability=store`` daemons,
    what they acknowledged and have not yet sealed into segments is readable
    in the store: the offsets their WAL objects hold above each catalog's end
    (`KfsHook.store_wal_headers`).  A daemon with a local WAL shows only its
    heartbeat's age: what its own disk holds beyond the catalog is not in the
    store, and its heartbeat does not say.  ``wal_headers`` (key -> header)
    is kept by the caller between reads: objects never change, so only new
    ones are read; it is left holding the headers of the objects listed now.
    ``now`` is the wall clock (ms) the ages count to (default: now).
    """
    now = now_ms() if now is None else now
    cluster = ClusterSummary()
    timeout = hook.session_timeout_ms
    if isinstance(timeout, str):
        cluster.problems.append(
            f"connection extra broker_session_timeout_ms={timeout!r} is not a positive number "
            f"of milliseconds; using {DEFAULT_SESSION_TIMEOUT_MS}"
        )
        timeout = DEFAULT_SESSION_TIMEOUT_MS
    cluster.session_timeout_ms = timeout
    try:
        heartbeats, corrupt = hook.heartbeats()
    except Exception as exc:  # noqa: BLE001 - the page shows it
        cluster.problems.append(f"cannot read the heartbeats: {describe_error(exc)}")
        heartbeats, corrupt = [], []
    cluster.problems += [f"skipping a corrupt heartbeat: {message}" for message in corrupt]
    statuses = {s.info.node_id: s for s in daemon_statuses(heartbeats, timeout, now)}

    # The store WAL: per writer node and partition, the offset after the last one it holds.
    wal_ends: dict[int, dict[tuple[str, int], int]] = {}
    wal_counts: dict[int, tuple[int, int]] = {}
    try:
        objects, damaged = hook.store_wal_headers(wal_headers)
    except Exception as exc:  # noqa: BLE001
        cluster.problems.append(f"cannot list the store WAL objects: {describe_error(exc)}")
        objects, damaged = [], []
    else:
        if wal_headers is not None:
            wal_headers.clear()
            wal_headers.update((info.key, header) for info, header in objects)
    cluster.problems += [f"damaged store WAL object: {message}" for message in damaged]
    for info, header in objects:
        ends = wal_ends.setdefault(header.node_id, {})
        for entry in header.entries:
            tp = (entry.topic, entry.partition)
            ends[tp] = max(ends.get(tp, 0), entry.last_offset + 1)
        count, size = wal_counts.get(header.node_id, (0, 0))
        wal_counts[header.node_id] = (count + 1, size + info.size)

    catalog_ends = {
        (p.topic, p.partition): p.high_watermark
        for t in topics
        for p in t.partitions
        if p.error is None
    }

    def unflushed(ends: dict[tuple[str, int], int]) -> int:
        return sum(max(0, end - catalog_ends[tp]) for tp, end in ends.items() if tp in catalog_ends)

    for node_id, status in sorted(statuses.items()):
        node = status.info
        daemon = DaemonSummary(
            node_id=node_id,
            state=status.state,
            heartbeat_ms=status.heartbeat_ms,
            heartbeat_age_s=None if status.age_ms is None else round(status.age_ms / 1000, 1),
            incarnation=node.incarnation,
            seq=node.seq,
            durability=node.durability,
            listeners=[
                f"{name}://{host}:{port}" for name, (host, port) in sorted(node.listeners.items())
            ],
            rack=node.rack,
            held=[
                HeldPartition(topic=t, partition=p, epoch=e)
                for (t, p), e in sorted(node.held.items())
            ],
        )
        if node.durability == "store" or node_id in wal_counts:
            daemon.wal_objects, daemon.wal_bytes = wal_counts.get(node_id, (0, 0))
            daemon.unflushed_offsets = unflushed(wal_ends.get(node_id, {}))
        cluster.daemons.append(daemon)

    any_lease = any(p.leader_epoch > 0 for t in topics for p in t.partitions)
    if not statuses and not any_lease:
        return cluster  # no daemon has served this namespace: no lease table
    partition_ends: dict[tuple[str, int], int] = {}
    for ends in wal_ends.values():
        for tp, end in ends.items():
            partition_ends[tp] = max(partition_ends.get(tp, 0), end)
    for topic in topics:
        rows = LeaseTopic(name=topic.name)
        for p in topic.partitions:
            tp = (p.topic, p.partition)
            row = LeaseRow(
                topic=p.topic, partition=p.partition, wal_end_offset=partition_ends.get(tp)
            )
            if p.error is not None:
                row.holder, row.error = "unknown", p.error
                rows.partitions.append(row)
                continue
            lease = PartitionLease(
                p.topic, p.partition, p.leader_epoch, p.leader_node_id, p.leader_incarnation
            )
            row.epoch, row.node_id, row.incarnation = lease.epoch, lease.node_id, lease.incarnation
            row.holder = lease_holder(lease, statuses)
            row.high_watermark = p.high_watermark
            if p.commit_ms > 0:
                row.commit_age_s = round(max(0, now - p.commit_ms) / 1000, 1)
            if row.wal_end_offset is not None:
                row.unflushed_offsets = max(0, row.wal_end_offset - p.high_watermark)
            rows.partitions.append(row)
        cluster.topics.append(rows)
    return cluster


# --- run summaries --------------------------------------------------------------------


def _unreadable(error: Exception | None) -> str:
    return f"summary unreadable: {describe_error(error) if error else 'no summary'}"


def read_compaction(hook: KfsHook, *, max_runs: int = DEFAULT_MAX_RUNS) -> CompactionSavings:
    """The newest compaction runs and the bytes they saved (dry runs save nothing)."""
    savings = CompactionSavings()
    try:
        history = hook.report_history(COMPACTION_JOB, max_runs=max_runs)
    except Exception as exc:  # noqa: BLE001
        savings.problems.append(f"cannot list the compaction reports: {describe_error(exc)}")
        return savings
    for run in history:
        if run.summary is None:
            savings.runs.append(
                CompactionRun(run_id=run.run_id, status="unreadable", error=_unreadable(run.error))
            )
            continue
        savings.runs.append(compaction_run(run.run_id, run.summary))
    done = [r for r in savings.runs if not r.dry_run and r.error is None]
    savings.total_bytes_in = sum(r.bytes_in for r in done)
    savings.total_bytes_saved = sum(r.bytes_saved for r in done)
    return savings


def compaction_run(run_id: str, summary: RunSummary) -> CompactionRun:
    """A compaction run from its summary (the common envelope, compaction's counts)."""
    counts = summary.counts
    storage = summary.details.get("storage")
    storage = storage if isinstance(storage, dict) else {}
    dry_run = summary.dry_run
    bytes_in = counts.get("bytes_in", 0)
    bytes_saved = 0 if dry_run else counts.get("bytes_saved", 0)
    ratio = storage.get("saved_ratio")
    if not isinstance(ratio, (int, float)) or isinstance(ratio, bool):
        ratio = bytes_saved / bytes_in if bytes_in and not dry_run else 0.0
    return CompactionRun(
        run_id=run_id,
        status=summary.status,
        message=summary.message,
        started_at=summary.started_at,
        finished_at=summary.finished_at,
        dry_run=dry_run,
        partitions_merged=counts.get("partitions_merged", 0),
        partitions_compacted=counts.get("partitions_compacted", 0),
        segments_in=counts.get("segments_in", 0),
        segments_out=0 if dry_run else counts.get("segments_out", 0),
        bytes_in=bytes_in,
        bytes_out=0 if dry_run else counts.get("bytes_out", 0),
        bytes_saved=bytes_saved,
        saved_ratio=float(ratio),
        records_removed=counts.get("records_removed", 0),
    )


def read_validation(hook: KfsHook, *, max_runs: int = DEFAULT_MAX_RUNS) -> list[ValidationRun]:
    """The newest validation runs with their data-quality reports, newest first."""
    runs: list[ValidationRun] = []
    for run in hook.report_history(VALIDATION_JOB, max_runs=max_runs):
        if run.summary is None:
            runs.append(
                ValidationRun(run_id=run.run_id, status="unreadable", error=_unreadable(run.error))
            )
            continue
        runs.append(validation_run(hook, run.run_id, run.summary))
    return runs


def validation_run(hook: KfsHook, run_id: str, summary: RunSummary) -> ValidationRun:
    """A validation run from its summary; the report from ``details.report`` or ``report.json``."""
    run = ValidationRun(
        run_id=run_id,
        status=summary.status,
        message=summary.message,
        started_at=summary.started_at,
        finished_at=summary.finished_at,
        dry_run=summary.dry_run,
        counts=dict(summary.counts),
    )
    try:
        report = hook.validation_report(summary)
    except ObjectNotFound:
        run.error = f"report {summary.detail_str('report_key')} is missing"
        return run
    except Exception as exc:  # noqa: BLE001
        run.error = f"report unreadable: {describe_error(exc)}"
        return run
    if report is None:
        return run  # a paused or failed-to-start run: no data-quality report
    expectations = [_expectation(item) for item in report.expectations]
    statistics = report.statistics
    run.expectations = expectations
    run.evaluated = statistics.evaluated_expectations or len(expectations)
    run.successful = statistics.successful_expectations or sum(1 for e in expectations if e.success)
    run.failed_expectations = list(report.failed_expectations)
    run.critical_failures = list(report.critical_failures)
    run.success = report.success if report.success is not None else not run.failed_expectations
    index_key = report.data_docs_index or summary.detail_str("data_docs_index")
    run.data_docs_index = _docs_path(hook.namespace, run_id, index_key)
    return run


def _expectation(item: ExpectationOutcome) -> ExpectationResult:
    observed = item.observed_value
    if not isinstance(observed, (str, int, float, bool, type(None))):
        observed = json.dumps(observed, default=str)[:200]
    return ExpectationResult(
        id=item.id,
        expectation=item.expectation,
        column=item.column,
        description=item.description,
        critical=item.critical,
        success=item.success,
        observed_value=observed,
        unexpected_count=item.unexpected_count,
        exception=item.exception,
    )


# --- Data Docs -------------------------------------------------------------------------


def _docs_path(namespace: str, run_id: str, key: str | None) -> str | None:
    prefix = data_docs_prefix(namespace, run_id)
    if key is None or not key.startswith(prefix):
        return None
    return key[len(prefix) :] or None


def chart_points(runs: Iterable[ValidationRun]) -> list[ValidationRun]:
    """The runs with a report, oldest first: what the trend chart draws."""
    return sorted((r for r in runs if r.success is not None), key=lambda r: r.run_id)
