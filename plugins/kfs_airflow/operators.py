"""`KfsSparkJobOperator`: one KFS maintenance job (``spark_jobs/<job>.py``) through spark-submit.

It is the Apache Spark provider's `SparkSubmitOperator` with the application
filled in (``spark_jobs/<job>.py`` of the installed ``spark_jobs`` package);
the run itself is the hook's (`KfsHook.run_job`, `kfs_airflow.hooks`):

- arguments     store URL, namespace, S3 endpoint of the ``kfs_default``
                connection, ``--topics``, ``--dry-run``, the job's own flags
                (``job_args``) and ``--run-id``, which names the run's summary
                object ``{ns}/_reports/<job>/<run-id>.json``;
- where         the job server the connection's extra names (``"jobs_server":
                "http://127.0.0.1:7079"``; killing the task cancels the run
                there), else spark-submit with the connection's AWS settings in
                its environment;
- Spark         the ``spark_default`` connection, or ``local[*]`` when it does not
                exist, with this interpreter for a local master
                (`kfs_airflow.hooks.spark_submit`).

After the run the operator asks the hook for the run's summary
(`KfsHook.run_summary`, a `kfs_core.reports.RunSummary`) and returns it,
trimmed to what fits an XCom (`compact_summary`), also under the XCom key
``summary`` - pushed before the task fails, too, so downstream tasks with a
trigger rule can see why.  The job's exit status decides the outcome:

- ``ok`` / ``paused`` (exit 0): success;
- ``failed`` (exit 1: the job ran and found or left problems, e.g. a failed
  critical expectation): `AirflowFailException`, so the task fails *without
  retries* - running it again would find the same problems;
- bad arguments (exit 2, e.g. an unknown topic): `AirflowFailException` as well;
- anything else (the job or Spark broke, the store was unreachable): an ordinary
  failure, retried with the task's retry policy.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from kfs_airflow.hooks import JobRunFailed, KfsHook
from kfs_airflow.hooks.spark_submit import for_kfs_job, spark_connection_exists
from kfs_core.reports import (
    EXIT_USAGE,
    JOBS,
    STATUS_FAILED,
    STATUS_OK,
    RunSummary,
    report_key,
)
from kfs_core.reports import job_application as _job_application

if TYPE_CHECKING:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.sdk import Context

__all__ = [
    "JOBS",
    "KfsSparkJobOperator",
    "compact_summary",
    "job_application",
]

_SUMMARY_KEYS = (
    "job",
    "run_id",
    "status",
    "message",
    "exit_code",
    "namespace",
    "topics",
    "dry_run",
    "started_at",
    "finished_at",
    "duration_s",
    "counts",
    "report_key",
)
_MAX_XCOM_LIST = 50


def job_application(job: str) -> str:
    """The application spark-submit runs for ``job`` (`kfs_core.reports.job_application`)."""
    if job not in JOBS:
        raise ValueError(f"unknown KFS job {job!r}; jobs: {', '.join(JOBS)}")
    return str(_job_application(job))


def _is_small(value: Any) -> bool:
    if value is None or isinstance(value, str | int | float | bool):
        return True
    if isinstance(value, list | tuple):
        return len(value) <= _MAX_XCOM_LIST and all(
            v is None or isinstance(v, str | int | float | bool) for v in value
        )
    return False


def compact_summary(summary: RunSummary | Mapping[str, Any]) -> dict[str, Any]:
    """A job summary without its bulky parts (per-partition lists, the validation report).

    Keeps the common keys and the ``details`` entries that are scalars or short
    lists of scalars (validation's ``index_only_failure``, ``critical_failures``,
    ``report_key``, ...).  The full summary stays in the store at ``report_key``.
    A key the summary does not hold is None.
    """
    if isinstance(summary, RunSummary):
        summary = summary.model_dump(exclude_unset=True)
    doc = {key: summary.get(key) for key in _SUMMARY_KEYS}
    details = summary.get("details") or {}
    doc["details"] = {k: v for k, v in details.items() if _is_small(v)}
    return doc


def _as_bool(value: Any) -> bool:
    """Booleans from templates arrive as strings ("True", "false", "")."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _topics_arg(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = value.split(",")
    topics = [str(t).strip() for t in value if str(t).strip()]
    return topics or None


def _exit_code(exc: BaseException) -> int | None:
    """The job's exit status: the job server's, or the one in spark-submit's error message."""
    if isinstance(exc, JobRunFailed):
        return exc.exit_code
    match = re.search(r"Error code is: (-?\d+)", str(exc))
    return int(match.group(1)) if match else None


def _airflow_run_id(context: Context, now: _dt.datetime | None = None) -> str:
    """A job run id for this task try: UTC start time (sorts) + a digest of the try's key."""
    ti = context["ti"]
    key = f"{ti.dag_id}\0{ti.run_id}\0{ti.task_id}\0{ti.map_index}\0{ti.try_number}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    now = now or _dt.datetime.now(_dt.UTC)
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-af{digest}"


class KfsSparkJobOperator(SparkSubmitOperator):
    """Run the KFS maintenance job ``job`` on the namespace of a ``kfs`` connection.

    :param job: ``compaction``, ``index_rebuild``, ``retention``, ``checkpoint`` or
        ``validation``.
    :param topics: topics to work on, a list or a comma-separated string; empty or
        None: every topic of the namespace (templated).
    :param dry_run: report what would change, change nothing; booleans and their
        string forms ("True", "false") (templated).
    :param job_args: the job's own flags, e.g. ``["--min-inputs", "4"]`` (templated).
    :param kfs_conn_id: the ``kfs`` connection naming the store and namespace.
    :param conn_id: the Spark connection (default ``spark_default``).

    Every other `SparkSubmitOperator` argument (``conf``, ``driver_memory``,
    ``py_files``, ...) passes through.  Returns `compact_summary` of the run.
    """

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "topics",
        "job_dry_run",
        "job_args",
    )
    ui_color = "#e8f1fb"

    def __init__(
        self,
        *,
        job: str,
        topics: str | Sequence[str] | None = None,
        dry_run: bool | str = False,
        job_args: Sequence[str] | None = None,
        kfs_conn_id: str = KfsHook.default_conn_name,
        conn_id: str = "spark_default",
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("application", job_application(job))
        kwargs.setdefault("name", f"kfs-{job}")
        super().__init__(conn_id=conn_id, **kwargs)
        self.job = job
        self.topics = topics
        self.job_dry_run = dry_run  # not "dry_run": BaseOperator has a method of that name
        self.job_args = list(job_args or [])
        self.kfs_conn_id = kfs_conn_id
        self._kfs: KfsHook | None = None  # the running task's hook (`on_kill` asks it)

    def _get_hook(self) -> SparkSubmitHook:
        # SparkSubmitOperator's hook factory: the provider's hook, set up for a KFS job.
        connection_found = spark_connection_exists(self._conn_id)
        return for_kfs_job(super()._get_hook(), connection_found=connection_found)

    # SparkSubmitOperator.execute returns None; this one returns the run summary (the XCom).
    def execute(self, context: Context) -> dict[str, Any]:  # type: ignore[override]
        kfs = self._kfs = KfsHook(kfs_conn_id=self.kfs_conn_id)
        ti = context["ti"]
        run_id = _airflow_run_id(context)
        ti.xcom_push(key="kfs_run_id", value=run_id)

        def spark_submit(args: list[str], env: dict[str, str]) -> None:
            self.application_args = args
            self.env_vars = {**env, **(self.env_vars or {})}
            self._hook = None  # built with the arguments and environment above
            super(KfsSparkJobOperator, self).execute(context)

        try:
            kfs.run_job(
                self.job,
                run_id=run_id,
                topics=_topics_arg(self.topics),
                dry_run=_as_bool(self.job_dry_run),
                extra_args=[str(a) for a in self.job_args],
                spark_submit=spark_submit,
            )
        except Exception as exc:
            summary = self._read_summary(kfs, run_id)
            if summary is not None:
                ti.xcom_push(key="summary", value=summary)
            elif _exit_code(exc) != EXIT_USAGE:
                raise  # no summary: spark-submit or the job broke before it wrote one
            raise self._failure(summary, exc) from exc
        summary = self._read_summary(kfs, run_id)
        if summary is None:
            raise AirflowException(
                f"kfs {self.job}: spark-submit succeeded but run {run_id} left no summary "
                f"at {self._summary_key(kfs, run_id)}"
            )
        ti.xcom_push(key="summary", value=summary)
        level = logging.INFO if summary["status"] == STATUS_OK else logging.WARNING  # e.g. paused
        self.log.log(level, "kfs %s %s: %s", self.job, summary["status"], summary["message"])
        self._describe_outlet_events(context, summary)
        return summary

    def on_kill(self) -> None:
        kfs = getattr(self, "_kfs", None)
        if kfs is None or not kfs.cancel_job():
            super().on_kill()

    def _failure(self, summary: Mapping[str, Any] | None, exc: BaseException) -> AirflowException:
        if summary is None:
            text = f"kfs {self.job}: bad arguments (exit {EXIT_USAGE}); see the log above"
        else:
            text = (
                f"kfs {self.job} {summary.get('status')}: {summary.get('message')} "
                f"(summary {summary.get('report_key')})"
            )
        if _exit_code(exc) == EXIT_USAGE or (summary or {}).get("status") == STATUS_FAILED:
            return AirflowFailException(text)  # the same input fails the same way: no retry
        return AirflowException(text)

    def _summary_key(self, kfs: KfsHook, run_id: str) -> str:
        return report_key(kfs.namespace, self.job, run_id)

    def _read_summary(self, kfs: KfsHook, run_id: str) -> dict[str, Any] | None:
        """The run's stored summary, compacted; None when the run never wrote one."""
        try:
            summary = kfs.run_summary(self.job, run_id)
        except Exception:  # the task's own error is the one to report
            self.log.exception("could not read the run summary %s", self._summary_key(kfs, run_id))
            return None
        finally:
            kfs.close()
        return None if summary is None else compact_summary(summary)

    def _describe_outlet_events(self, context: Context, summary: Mapping[str, Any]) -> None:
        """Put the run's headline into the extra of every asset event this task emits."""
        for outlet in self.outlets or ():
            if isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra.update(
                    {
                        "job": self.job,
                        "run_id": summary.get("run_id"),
                        "status": summary.get("status"),
                        "topics": summary.get("topics"),
                        "counts": summary.get("counts"),
                        "report_key": summary.get("report_key"),
                    }
                )
