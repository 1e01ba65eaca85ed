"""The KFS page's read model: what one namespace holds and what its maintenance jobs reported.

`read_overview(hook)` gathers, through the namespace's `KfsHook` (which does
every store read, `kfs_airflow.hooks`):

- topics and, per partition, the catalog version, live segments, bytes,
  records, log start offset and high watermark (`KfsHook.topics`,
  `KfsHook.partition_state`, as ``kfs catalog show`` reads them);
- recent compaction runs and what they saved, from their run summaries
  (`KfsHook.report_history`, `kfs_core.reports.RunSummary`);
- recent validation runs and their data-quality reports
  (`KfsHook.validation_report`, `kfs_core.reports.ValidationReport`): pass/fail
  per expectation, and where the run's Great Expectations Data Docs live
  (``<run-id>/data_docs/``, `KfsHook.validation_page`).

The consumer groups live in the daemon, not in the store: the page fills
``groups`` from `KfsAdminHook.consumer_groups` (`kfs_core.kafka_admin`), and
``groups_problem`` says why it could not (no daemon address, no answer).

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

from kfs_core.errors import ObjectNotFound
from kfs_core.kafka_admin import ConsumerGroup
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

__all__ = [
    "COMPACTION_JOB",
    "VALIDATION_JOB",
    "CompactionRun",
    "CompactionSavings",
    "ExpectationResult",
    "Overview",
    "PartitionSummary",
    "ReadPartition",
    "TopicSummary",
    "ValidationRun",
    "data_docs_key",
    "describe_error",
    "partition_summary",
    "read_overview",
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
    error: str | None = None


class TopicSummary(BaseModel):
    name: str
    partition_count: int = 0
    cleanup_policy: str = ""
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
) -> Overview:
    """Topics, partitions and the recent compaction and validation runs of the hook's namespace.

    ``read_partition`` gives one partition's summary (default: a full catalog
    load through ``hook``); it must not raise.  ``planned`` hears how many
    partitions are about to be read, once the topics are listed.
    """
    overview = Overview(
        namespace=hook.namespace, store_url=redact_url(hook.get_conn().url), generated_at=_now()
    )
    try:
        overview.topics = read_topics(hook, read_partition, planned)
    except Exception as exc:  # noqa: BLE001 - the page shows it instead of failing
        overview.problems.append(f"cannot list the topics: {describe_error(exc)}")
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
    return PartitionSummary(
        topic=topic,
        partition=partition,
        catalog_version=state.version,
        segments=len(state.segments),
        size_bytes=state.size_bytes,
        record_count=state.record_count,
        log_start_offset=state.log_start_offset,
        high_watermark=state.high_watermark,
    )


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
