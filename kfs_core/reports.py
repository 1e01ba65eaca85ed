"""Maintenance-job reports: job names, run statuses, exit codes, report keys and their models.

The contract between the Spark jobs (``spark_jobs``), which write a summary of
every run, and their readers (the Airflow plugin's `KfsHook`, the KFS page, the
tests).  Both sides import it; nothing here does I/O.

Where a namespace keeps its reports::

    {ns}/_reports/{job}/{run_id}.json                   the run summary (`RunSummary`)
    {ns}/_reports/{job}/{run_id}/                       the run's other files
    {ns}/_reports/validation/{run_id}/report.json       the data-quality report
                                                        (`ValidationReport`)
    {ns}/_reports/validation/{run_id}/data_docs/...     Great Expectations Data Docs

Run ids begin with their UTC start time (`new_run_id`), so key order is time
order.  A run ends in one of the statuses `STATUS_OK`, `STATUS_FAILED` (it ran
and found or left problems), `STATUS_PAUSED` (the emergency pause flag stopped
it) or `STATUS_ERROR` (it broke); `exit_code_for` maps a status to the
process's exit code, and `EXIT_USAGE` is the exit code of a bad request.

The models describe exactly the JSON the jobs write: a job builds its summary
as a `RunSummary` and stores `RunSummary.to_json`, so a new summary field is
one new field here.  Every field has a default, so a summary that an older or
a killed run left behind still reads; fields a newer writer adds are kept
(``extra="allow"``).
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import json
import re
import secrets
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kfs_core.namespace import REPORTS_DIR

__all__ = [
    "CHECKPOINT_JOB",
    "COMPACTION_JOB",
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "INDEX_REBUILD_JOB",
    "JOBS",
    "REPORTS_DIR",
    "RETENTION_JOB",
    "RUN_ID_PATTERN",
    "STATUS_ERROR",
    "STATUS_FAILED",
    "STATUS_OK",
    "STATUS_PAUSED",
    "TABLES_JOB",
    "VALIDATION_JOB",
    "ExpectationOutcome",
    "RunSummary",
    "SparkInfo",
    "StoredRun",
    "ValidationReport",
    "ValidationStatistics",
    "data_docs_key",
    "data_docs_prefix",
    "exit_code_for",
    "is_run_id",
    "job_application",
    "new_run_id",
    "redact_url",
    "report_key",
    "reports_prefix",
    "run_files_prefix",
    "run_id_of",
    "table_docs_key",
    "table_report_prefix",
    "validation_report_key",
]

# --- jobs, statuses, exit codes ---------------------------------------------------------

CHECKPOINT_JOB = "checkpoint"
COMPACTION_JOB = "compaction"
INDEX_REBUILD_JOB = "index_rebuild"
RETENTION_JOB = "retention"
TABLES_JOB = "tables"
VALIDATION_JOB = "validation"
#: The maintenance jobs, as named in ``spark_jobs/<job>.py`` and in report keys.
JOBS = (
    CHECKPOINT_JOB,
    COMPACTION_JOB,
    INDEX_REBUILD_JOB,
    RETENTION_JOB,
    TABLES_JOB,
    VALIDATION_JOB,
)


def job_application(job: str) -> Path:
    """The file spark-submit runs for ``job``.

    That is ``spark_jobs/<job>.py``, or ``spark_jobs/<job>/__main__.py`` for a
    job that is a package (compaction).

    Found, not imported: the scheduler side (the Airflow plugin, ``kfs jobs``)
    shares only this contract with the jobs.  `ValueError` when spark_jobs is
    not installed.
    """
    spec = importlib.util.find_spec("spark_jobs")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the spark_jobs package is not installed")
    root = Path(next(iter(spec.submodule_search_locations)))
    package_main = root / job / "__main__.py"
    return package_main if package_main.is_file() else root / f"{job}.py"


STATUS_OK = "ok"
STATUS_FAILED = "failed"
STATUS_PAUSED = "paused"
STATUS_ERROR = "error"

EXIT_OK = 0
#: The job ran and found or left problems: running it again finds the same.
EXIT_FAILED = 1
#: Bad arguments (an unknown topic, an unusable store URL).
EXIT_USAGE = 2
#: The job itself broke.
EXIT_ERROR = 3


def exit_code_for(status: str, *, paused_exit_code: int = EXIT_OK) -> int:
    """The exit code of a run that ended in ``status`` (a paused run: ``paused_exit_code``)."""
    return {
        STATUS_OK: EXIT_OK,
        STATUS_FAILED: EXIT_FAILED,
        STATUS_PAUSED: paused_exit_code,
    }.get(status, EXIT_ERROR)


# --- run ids and keys -------------------------------------------------------------------

#: What a run id may be: it becomes one segment of report object keys.
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def new_run_id(now: _dt.datetime | None = None) -> str:
    """``20240102T030405Z-1a2b3c``: UTC time (sorts by start) and 24 random bits."""
    now = now or _dt.datetime.now(_dt.UTC)
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


def is_run_id(value: str) -> bool:
    """True if ``value`` can name a run (one safe key segment, `RUN_ID_PATTERN`)."""
    return RUN_ID_PATTERN.fullmatch(value) is not None


def _key(*parts: str) -> str:
    # As kfs_core.catalog.layout.join, which this contract does not import (the DAG
    # files import it through the operators, and must stay cheap to parse).
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def reports_prefix(namespace: str, job: str) -> str:
    """``{ns}/_reports/{job}/``: where the job's run summaries live."""
    return _key(namespace, REPORTS_DIR, job) + "/"


def report_key(namespace: str, job: str, run_id: str) -> str:
    """``{ns}/_reports/{job}/{run_id}.json``: where a run's summary is stored."""
    return _key(namespace, REPORTS_DIR, job, f"{run_id}.json")


def run_files_prefix(namespace: str, job: str, run_id: str) -> str:
    """``{ns}/_reports/{job}/{run_id}/``: where a run keeps its other files."""
    return _key(namespace, REPORTS_DIR, job, run_id) + "/"


def run_id_of(namespace: str, job: str, key: str) -> str | None:
    """The run id of a summary key under `reports_prefix`; None for any other key."""
    prefix = reports_prefix(namespace, job)
    if not key.startswith(prefix) or not key.endswith(".json"):
        return None
    run_id = key[len(prefix) : -len(".json")]
    return run_id if is_run_id(run_id) else None


def validation_report_key(namespace: str, run_id: str) -> str:
    """``{ns}/_reports/validation/{run_id}/report.json``: the run's data-quality report."""
    return run_files_prefix(namespace, VALIDATION_JOB, run_id) + "report.json"


def data_docs_prefix(namespace: str, run_id: str) -> str:
    """``{ns}/_reports/validation/{run_id}/data_docs/``: the run's Data Docs."""
    return run_files_prefix(namespace, VALIDATION_JOB, run_id) + "data_docs/"


def data_docs_key(namespace: str, run_id: str, path: str) -> str | None:
    """The store key of a Data Docs file, or None if ``run_id``/``path`` try to leave it.

    ``path`` is relative to the run's ``data_docs/``; empty, ``.`` and ``..``
    segments, backslashes, NULs and absolute paths are refused, so a request
    can only ever name an object under ``{ns}/_reports/validation/<run-id>/data_docs/``.
    """
    if not is_run_id(run_id) or ".." in run_id or not _inside(path):
        return None
    return data_docs_prefix(namespace, run_id) + path


def table_report_prefix(namespace: str, run_id: str, table: str, commit: int) -> str:
    """``{ns}/_reports/tables/{run_id}/{table}/{commit}/``: one table snapshot's report files."""
    return f"{run_files_prefix(namespace, TABLES_JOB, run_id)}{table}/{commit}/"


def table_docs_key(namespace: str, run_id: str, table: str, commit: str, path: str) -> str | None:
    """The key of a file of a table snapshot's Data Docs; None if the request tries to leave them."""
    if not is_run_id(run_id) or ".." in run_id or not commit.isdigit():
        return None
    if not _TABLE_NAME.fullmatch(table) or table in (".", "..") or not _inside(path):
        return None
    return table_report_prefix(namespace, run_id, table, int(commit)) + "data_docs/" + path


_TABLE_NAME = re.compile(r"[a-zA-Z0-9_-]+")  # a topic name with its dots made underscores


def _inside(path: str) -> bool:
    """A relative path with no empty, ``.`` or ``..`` segment, backslash or NUL."""
    segments = path.split("/")
    if not path or any(s in ("", ".", "..") for s in segments):
        return False
    return not any(c in path for c in ("\\", "\0"))


def redact_url(url: str) -> str:
    """``url`` without any user:password part (for reports and logs)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=host))


# --- models -----------------------------------------------------------------------------


def _to_json(doc: dict[str, Any]) -> bytes:
    # The layout every report has always had: sorted keys, two-space indent, and
    # str() for whatever JSON has no type for.
    return json.dumps(doc, indent=2, sort_keys=True, default=str).encode("utf-8")


class _Report(BaseModel):
    model_config = ConfigDict(extra="allow")

    def to_json(self) -> bytes:
        """The stored form (what `model_validate_json` reads back)."""
        return _to_json(self.model_dump())


class SparkInfo(BaseModel):
    """The Spark session a run used."""

    model_config = ConfigDict(extra="allow")

    master: str = ""
    app_id: str | None = None


class RunSummary(_Report):
    """What every job run stores at `report_key` and returns: the envelope, and ``details``.

    ``counts`` are the job's headline numbers (by the job's own names);
    ``details`` is the job's own document (a validation run's holds the
    `ValidationReport` under ``report``).
    """

    job: str = ""
    run_id: str = ""
    status: str = ""
    message: str = ""
    exit_code: int | None = None
    namespace: str = ""
    #: The store URL without credentials (`redact_url`).
    store_url: str = ""
    topics: list[str] | None = None
    dry_run: bool = False
    #: The job's options (`JobOptions.as_dict`).
    options: dict[str, Any] = Field(default_factory=dict)
    #: ISO 8601, UTC, milliseconds.
    started_at: str | None = None
    finished_at: str | None = None
    duration_s: float = 0.0
    #: Seconds per phase of the run.
    timings: dict[str, float] = Field(default_factory=dict)
    counts: dict[str, int] = Field(default_factory=dict)
    #: None: the run started no Spark session (paused, or nothing to do).
    spark: SparkInfo | None = None
    details: dict[str, Any] = Field(default_factory=dict)
    report_key: str = ""

    def detail_str(self, name: str) -> str | None:
        """``details[name]`` if it is a string (report keys and the like), else None."""
        value = self.details.get(name)
        return value if isinstance(value, str) else None


class ValidationStatistics(_Report):
    evaluated_expectations: int = 0
    successful_expectations: int = 0
    unsuccessful_expectations: int = 0


class ExpectationOutcome(_Report):
    """One expectation of the validation suite, as the run found it."""

    id: str = ""
    #: The Great Expectations type, e.g. ``expect_column_values_to_be_in_set``.
    expectation: str = ""
    column: str | None = None
    description: str = ""
    #: A failure makes the run fail (``--fail-on critical``).
    critical: bool = False
    #: index_rebuild can repair what this expectation finds.
    index: bool = False
    success: bool = False
    observed_value: Any = None
    element_count: int | None = None
    unexpected_count: int | None = None
    exception: str | None = None
    #: The first failing rows: row_type, topic, partition, key, error.
    failing_rows: list[dict[str, Any]] = Field(default_factory=list)


class ValidationReport(_Report):
    """The data-quality report of a validation run (``report.json``, and ``details.report``)."""

    run_id: str = ""
    job: str = VALIDATION_JOB
    namespace: str = ""
    topics: list[str] | None = None
    #: None: a report that does not say (readers fall back to ``failed_expectations``).
    success: bool | None = None
    fail_on: str = ""
    failed_expectations: list[str] = Field(default_factory=list)
    critical_failures: list[str] = Field(default_factory=list)
    #: Every critical failure is one index_rebuild can repair.
    index_only_failure: bool = False
    statistics: ValidationStatistics = Field(default_factory=ValidationStatistics)
    counts: dict[str, int] = Field(default_factory=dict)
    expectations: list[ExpectationOutcome] = Field(default_factory=list)
    #: Result rows with an error (``spark_jobs.validation.RESULT_SCHEMA``), the first ones.
    problems: list[dict[str, Any]] = Field(default_factory=list)
    #: More rows had errors than ``problems`` lists.
    problems_truncated: bool = False
    #: Store key of the Data Docs ``index.html`` (None: none were built).
    data_docs_index: str | None = None
    timings: dict[str, float] = Field(default_factory=dict)

    def problem_topics(self) -> list[str]:
        """The topics of the listed problem rows, sorted."""
        return sorted({str(row["topic"]) for row in self.problems if row.get("topic")})


@dataclass(frozen=True)
class StoredRun:
    """A run's summary as a reader found it: the summary, or why it could not be read."""

    run_id: str
    summary: RunSummary | None = None
    error: Exception | None = None
