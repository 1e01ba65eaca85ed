"""The KFS page's read model: what one namespace holds and what its maintenance jobs reported.

`read_overview(store, namespace)` gathers, through ``kfs_core`` only:

- topics and, per partition, the catalog version, live segments, bytes,
  records, log start offset and high watermark (`TopicRegistry`,
  `PartitionCatalog`, as ``kfs catalog show`` reads them);
- recent compaction runs and what they saved, from the run summaries
  ``{ns}/_reports/compaction/<run-id>.json`` (`spark_jobs.compaction`);
- recent validation runs, from ``{ns}/_reports/validation/<run-id>.json``,
  whose ``details.report`` is the data-quality report (else the run's
  ``report.json``): pass/fail per expectation, and where the run's Great
  Expectations Data Docs live (``<run-id>/data_docs/``).

The consumer groups live in the daemon, not in the store: the page fills
``groups`` from `KfsHook.consumer_groups` (`kfs_airflow.groups`), and
``groups_problem`` says why it could not (no daemon address, no answer).

Nothing here writes, and nothing raises for bad data: a partition whose
catalog cannot be read, an unreadable report or an unreachable store becomes a
message in the `Overview` (``error`` fields and ``problems``), so the page
always renders.  Run ids begin with their UTC start time
(`spark_jobs.common.new_run_id`), so key order is time order.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel, Field, computed_field

from kfs_airflow.groups import ConsumerGroup
from kfs_core.catalog import PartitionCatalog, TopicRegistry, layout
from kfs_core.errors import ObjectNotFound
from kfs_core.storage import ObjectStore
from spark_jobs.common import REPORTS_DIR, redact_url

__all__ = [
    "COMPACTION_JOB",
    "VALIDATION_JOB",
    "CompactionRun",
    "CompactionSavings",
    "ExpectationResult",
    "Overview",
    "PartitionSummary",
    "TopicSummary",
    "ValidationRun",
    "data_docs_key",
    "describe_error",
    "read_overview",
    "unavailable",
]

COMPACTION_JOB = "compaction"
VALIDATION_JOB = "validation"
#: Runs read for the compaction table and the data-quality trend.
DEFAULT_MAX_RUNS = 20
_CATALOG_THREADS = 16
#: A run id as it may appear in an object key: one safe path segment.
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


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

    @computed_field  # type: ignore[prop-decorator]
    @property
    def segments(self) -> int:
        return sum(p.segments for p in self.partitions)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def size_bytes(self) -> int:
        return sum(p.size_bytes for p in self.partitions)

    @computed_field  # type: ignore[prop-decorator]
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

    @computed_field  # type: ignore[prop-decorator]
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
    store: ObjectStore,
    namespace: str,
    *,
    max_runs: int = DEFAULT_MAX_RUNS,
) -> Overview:
    """Topics, partitions and the recent compaction and validation runs of ``namespace``."""
    overview = Overview(namespace=namespace, store_url=redact_url(store.url), generated_at=_now())
    try:
        overview.topics = read_topics(store, namespace)
    except Exception as exc:  # noqa: BLE001 - the page shows it instead of failing
        overview.problems.append(f"cannot list the topics: {describe_error(exc)}")
    overview.compaction = read_compaction(store, namespace, max_runs=max_runs)
    try:
        overview.validation = read_validation(store, namespace, max_runs=max_runs)
    except Exception as exc:  # noqa: BLE001
        overview.problems.append(f"cannot list the validation reports: {describe_error(exc)}")
    latest = overview.latest_report
    if latest is not None and latest.data_docs_index is not None:
        try:
            overview.latest_validation_page = find_validation_page(store, namespace, latest.run_id)
        except Exception as exc:  # noqa: BLE001
            overview.problems.append(f"cannot list the Data Docs: {describe_error(exc)}")
    return overview


# --- catalog ------------------------------------------------------------------------


def read_topics(store: ObjectStore, namespace: str) -> list[TopicSummary]:
    """Every topic with its partitions' catalog state; per-topic and per-partition errors kept."""
    registry = TopicRegistry(store, namespace)
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
    if pairs:
        with ThreadPoolExecutor(min(_CATALOG_THREADS, len(pairs))) as pool:
            summaries = list(
                pool.map(
                    lambda pair: _read_partition(store, namespace, pair[0].name, pair[1]), pairs
                )
            )
        for (topic, _), summary in zip(pairs, summaries, strict=True):
            topic.partitions.append(summary)
    return topics


def _read_partition(
    store: ObjectStore, namespace: str, topic: str, partition: int
) -> PartitionSummary:
    try:
        state = PartitionCatalog(store, namespace, topic, partition).load()
    except Exception as exc:  # noqa: BLE001 - one damaged catalog must not hide the others
        return PartitionSummary(
            topic=topic, partition=partition, error=f"catalog unreadable: {describe_error(exc)}"
        )
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


def reports_prefix(namespace: str, job: str) -> str:
    """``{ns}/_reports/{job}/``."""
    return layout.join(namespace, REPORTS_DIR, job) + "/"


def list_run_ids(store: ObjectStore, namespace: str, job: str) -> list[str]:
    """Run ids with a summary ``<run-id>.json`` under the job's report prefix, newest first."""
    prefix = reports_prefix(namespace, job)
    run_ids = []
    for info in store.list(prefix):
        name = info.key[len(prefix) :]
        if "/" not in name and name.endswith(".json"):
            run_id = name[: -len(".json")]
            if RUN_ID.match(run_id):
                run_ids.append(run_id)
    return sorted(run_ids, reverse=True)


def _read_json(store: ObjectStore, key: str) -> dict[str, Any]:
    doc = json.loads(store.get(key))
    if not isinstance(doc, dict):
        raise ValueError(f"{key} holds a JSON {type(doc).__name__}, not an object")
    return doc


def _read_summaries(
    store: ObjectStore, namespace: str, job: str, run_ids: Sequence[str]
) -> list[tuple[str, dict[str, Any] | None, str | None]]:
    """``(run_id, summary or None, error or None)`` per run, in the given order."""
    prefix = reports_prefix(namespace, job)

    def read(run_id: str) -> tuple[str, dict[str, Any] | None, str | None]:
        try:
            return run_id, _read_json(store, f"{prefix}{run_id}.json"), None
        except Exception as exc:  # noqa: BLE001
            return run_id, None, f"summary unreadable: {describe_error(exc)}"

    if not run_ids:
        return []
    with ThreadPoolExecutor(min(8, len(run_ids))) as pool:
        return list(pool.map(read, run_ids))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def read_compaction(
    store: ObjectStore, namespace: str, *, max_runs: int = DEFAULT_MAX_RUNS
) -> CompactionSavings:
    """The newest compaction runs and the bytes they saved (dry runs save nothing)."""
    savings = CompactionSavings()
    try:
        run_ids = list_run_ids(store, namespace, COMPACTION_JOB)[:max_runs]
    except Exception as exc:  # noqa: BLE001
        savings.problems.append(f"cannot list the compaction reports: {describe_error(exc)}")
        return savings
    for run_id, summary, error in _read_summaries(store, namespace, COMPACTION_JOB, run_ids):
        if summary is None:
            savings.runs.append(CompactionRun(run_id=run_id, status="unreadable", error=error))
            continue
        savings.runs.append(compaction_run(run_id, summary))
    done = [r for r in savings.runs if not r.dry_run and r.error is None]
    savings.total_bytes_in = sum(r.bytes_in for r in done)
    savings.total_bytes_saved = sum(r.bytes_saved for r in done)
    return savings


def compaction_run(run_id: str, summary: dict[str, Any]) -> CompactionRun:
    """A compaction run summary (``spark_jobs.common`` envelope, compaction's counts)."""
    counts = _dict(summary.get("counts"))
    storage = _dict(_dict(summary.get("details")).get("storage"))
    dry_run = summary.get("dry_run") is True
    bytes_in = _int(counts.get("bytes_in"))
    bytes_saved = 0 if dry_run else _int(counts.get("bytes_saved"))
    ratio = storage.get("saved_ratio")
    if not isinstance(ratio, (int, float)) or isinstance(ratio, bool):
        ratio = bytes_saved / bytes_in if bytes_in and not dry_run else 0.0
    return CompactionRun(
        run_id=run_id,
        status=_str(summary.get("status")) or "",
        message=_str(summary.get("message")) or "",
        started_at=_str(summary.get("started_at")),
        finished_at=_str(summary.get("finished_at")),
        dry_run=dry_run,
        partitions_merged=_int(counts.get("partitions_merged")),
        partitions_compacted=_int(counts.get("partitions_compacted")),
        segments_in=_int(counts.get("segments_in")),
        segments_out=0 if dry_run else _int(counts.get("segments_out")),
        bytes_in=bytes_in,
        bytes_out=0 if dry_run else _int(counts.get("bytes_out")),
        bytes_saved=bytes_saved,
        saved_ratio=float(ratio),
        records_removed=_int(counts.get("records_removed")),
    )


def read_validation(
    store: ObjectStore, namespace: str, *, max_runs: int = DEFAULT_MAX_RUNS
) -> list[ValidationRun]:
    """The newest validation runs with their data-quality reports, newest first."""
    run_ids = list_run_ids(store, namespace, VALIDATION_JOB)[:max_runs]
    runs: list[ValidationRun] = []
    for run_id, summary, error in _read_summaries(store, namespace, VALIDATION_JOB, run_ids):
        if summary is None:
            runs.append(ValidationRun(run_id=run_id, status="unreadable", error=error))
            continue
        runs.append(validation_run(store, namespace, run_id, summary))
    return runs


def validation_run(
    store: ObjectStore, namespace: str, run_id: str, summary: dict[str, Any]
) -> ValidationRun:
    """A validation run from its summary; the report from ``details.report`` or ``report.json``."""
    details = _dict(summary.get("details"))
    run = ValidationRun(
        run_id=run_id,
        status=_str(summary.get("status")) or "",
        message=_str(summary.get("message")) or "",
        started_at=_str(summary.get("started_at")),
        finished_at=_str(summary.get("finished_at")),
        dry_run=summary.get("dry_run") is True,
        counts={
            k: v
            for k, v in _dict(summary.get("counts")).items()
            if isinstance(v, int) and not isinstance(v, bool)
        },
    )
    report = _dict(details.get("report"))
    report_key = _str(details.get("report_key"))
    if not report and report_key:
        try:
            report = _read_json(store, report_key)
        except ObjectNotFound:
            run.error = f"report {report_key} is missing"
        except Exception as exc:  # noqa: BLE001
            run.error = f"report unreadable: {describe_error(exc)}"
    if not report:
        return run  # a paused or failed-to-start run: no data-quality report
    expectations = [
        _expectation(item) for item in report.get("expectations") or [] if isinstance(item, dict)
    ]
    statistics = _dict(report.get("statistics"))
    run.expectations = expectations
    run.evaluated = _int(statistics.get("evaluated_expectations")) or len(expectations)
    run.successful = _int(statistics.get("successful_expectations")) or sum(
        1 for e in expectations if e.success
    )
    run.failed_expectations = [str(x) for x in report.get("failed_expectations") or []]
    run.critical_failures = [str(x) for x in report.get("critical_failures") or []]
    success = report.get("success")
    run.success = success if isinstance(success, bool) else not run.failed_expectations
    index_key = _str(report.get("data_docs_index")) or _str(details.get("data_docs_index"))
    run.data_docs_index = _docs_path(namespace, run_id, index_key)
    return run


def _expectation(item: dict[str, Any]) -> ExpectationResult:
    observed = item.get("observed_value")
    if not isinstance(observed, (str, int, float, bool, type(None))):
        observed = json.dumps(observed, default=str)[:200]
    unexpected = item.get("unexpected_count")
    return ExpectationResult(
        id=str(item.get("id") or ""),
        expectation=str(item.get("expectation") or ""),
        column=_str(item.get("column")),
        description=str(item.get("description") or ""),
        critical=item.get("critical") is True,
        success=item.get("success") is True,
        observed_value=observed,
        unexpected_count=unexpected if isinstance(unexpected, int) else None,
        exception=_str(item.get("exception")),
    )


# --- Data Docs -------------------------------------------------------------------------


def data_docs_prefix(namespace: str, run_id: str) -> str:
    """``{ns}/_reports/validation/<run-id>/data_docs/``."""
    return f"{reports_prefix(namespace, VALIDATION_JOB)}{run_id}/data_docs/"


def _docs_path(namespace: str, run_id: str, key: str | None) -> str | None:
    prefix = data_docs_prefix(namespace, run_id)
    if key is None or not key.startswith(prefix):
        return None
    return key[len(prefix) :] or None


def find_validation_page(store: ObjectStore, namespace: str, run_id: str) -> str | None:
    """Path inside the run's data_docs/ of its validation result page (one per run)."""
    prefix = data_docs_prefix(namespace, run_id)
    for info in store.list(prefix + "validations/"):
        if info.key.endswith(".html"):
            return info.key[len(prefix) :]
    return None


def data_docs_key(namespace: str, run_id: str, path: str) -> str | None:
    """The store key of a Data Docs file, or None if ``run_id``/``path`` try to leave it.

    ``path`` is relative to the run's ``data_docs/``; empty, ``.`` and ``..``
    segments, backslashes, NULs and absolute paths are refused, so a request
    can only ever name an object under ``{ns}/_reports/validation/<run-id>/data_docs/``.
    """
    if not RUN_ID.match(run_id) or ".." in run_id:
        return None
    segments = path.split("/")
    if not path or any(s in ("", ".", "..") for s in segments):
        return None
    if any(c in path for c in ("\\", "\0")):
        return None
    return data_docs_prefix(namespace, run_id) + path


def chart_points(runs: Iterable[ValidationRun]) -> list[ValidationRun]:
    """The runs with a report, oldest first: what the trend chart draws."""
    return sorted((r for r in runs if r.success is not None), key=lambda r: r.run_id)
