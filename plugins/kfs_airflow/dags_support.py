"""What the KFS maintenance DAGs share: defaults, schedules, params, assets, the pool, helpers.

The DAG files in ``dags/`` are wiring and documentation; the choices live here
so that every DAG gets them the same way, and so that importing a DAG file
costs no more than Airflow's own imports (no pyspark, and of ``kfs_core``
only the `kfs_core.reports` contract, which the operators import as well: the
helpers that need more import it when a task runs).  The DAG files name their
job by `kfs_core.reports`'s constants, re-exported here (`CHECKPOINT_JOB`, ...).

Settings, read from the environment when a DAG file is parsed:

``KFS_SCHEDULE_<JOB>``
    cron expression or preset (``@hourly``) of the DAG of ``<JOB>``
    (``COMPACTION``, ``RETENTION``, ``CHECKPOINT``, ``INDEX_REBUILD``,
    ``VALIDATION``); ``none`` or ``off``: manual (and, for validation, asset)
    runs only.  Defaults: `DEFAULT_SCHEDULES`.
``KFS_JOB_ARGS_<JOB>``
    the job's own flags, shell-quoted (``--min-inputs 8``); default
    `DEFAULT_JOB_ARGS`.
``KFS_SPARK_POOL``, ``KFS_SPARK_POOL_SLOTS``
    the pool bounding concurrent Spark jobs (default ``kfs_spark``, 2 slots).
    This module is its one definition: `ensure_spark_pool` creates it for
    ``kfs run``, docker-compose's airflow-init and `SparkPoolListener`, which
    the plugin registers.
``KFS_TOPICS_PER_TASK``
    topics per mapped Spark task (default 1: one task, one spark-submit, per
    topic; more topics per task save JVM start-ups when there are many small ones).
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.listeners import hookimpl
from airflow.sdk import Asset, AssetOrTimeSchedule, CronTriggerTimetable, Param

from kfs_airflow.hooks import KfsHook
from kfs_core.reports import (
    CHECKPOINT_JOB,
    COMPACTION_JOB,
    INDEX_REBUILD_JOB,
    RETENTION_JOB,
    TABLES_JOB,
    VALIDATION_JOB,
)

if TYPE_CHECKING:
    from airflow.sdk.execution_time.context import OutletEventAccessor

__all__ = [
    "CHECKPOINT_JOB",
    "COMPACTED_SEGMENTS",
    "COMPACTION_JOB",
    "DEFAULT_JOB_ARGS",
    "DEFAULT_SCHEDULES",
    "INDEX_REBUILD_JOB",
    "OWNER",
    "RETENTION_JOB",
    "SPARK_POOL",
    "TABLES_JOB",
    "VALIDATION_JOB",
    "SparkPoolListener",
    "announce_compaction",
    "dag_kwargs",
    "ensure_spark_pool",
    "index_repair_conf",
    "job_args",
    "schedule",
    "spark_task_kwargs",
    "topic_batches",
    "validation_schedule",
]

log = logging.getLogger(__name__)

OWNER = "kfs"
TAGS = ("kfs", "maintenance")
START_DATE = _dt.datetime(2024, 1, 1, tzinfo=_dt.UTC)
TIMEZONE = "UTC"

#: Cron schedules (UTC), spread over the hour so that jobs rarely queue on the pool.
DEFAULT_SCHEDULES: Mapping[str, str] = {
    COMPACTION_JOB: "5 * * * *",  # hourly
    RETENTION_JOB: "35 * * * *",  # hourly
    CHECKPOINT_JOB: "50 */6 * * *",  # every 6 hours
    INDEX_REBUILD_JOB: "20 3 * * *",  # daily
    VALIDATION_JOB: "40 4 * * *",  # daily, and after every compaction that changed data
    TABLES_JOB: "*/5 * * * *",  # every 5 minutes: tables a few minutes behind their topics
}

#: The jobs' own flags unless ``KFS_JOB_ARGS_<JOB>`` says otherwise.
DEFAULT_JOB_ARGS: Mapping[str, Sequence[str]] = {
    COMPACTION_JOB: (),
    RETENTION_JOB: (),
    CHECKPOINT_JOB: ("--snapshot-every", "1d", "--keep-auto-snapshots", "14"),
    INDEX_REBUILD_JOB: (),
    VALIDATION_JOB: ("--fail-on", "critical"),
    TABLES_JOB: (),
}

#: How long one Spark task may run before Airflow kills it (and retries).
EXECUTION_TIMEOUTS: Mapping[str, _dt.timedelta] = {
    COMPACTION_JOB: _dt.timedelta(hours=2),
    RETENTION_JOB: _dt.timedelta(hours=1),
    CHECKPOINT_JOB: _dt.timedelta(hours=1),
    INDEX_REBUILD_JOB: _dt.timedelta(hours=1),
    VALIDATION_JOB: _dt.timedelta(hours=2),
    TABLES_JOB: _dt.timedelta(hours=1),
}

SPARK_POOL = os.environ.get("KFS_SPARK_POOL", "").strip() or "kfs_spark"
SPARK_POOL_SLOTS = int(os.environ.get("KFS_SPARK_POOL_SLOTS", "").strip() or 2)
SPARK_POOL_DESCRIPTION = "KFS Spark maintenance jobs (spark-submit processes at a time)"

#: Spark settings every job gets; the rest belongs in spark-defaults.conf.
SPARK_CONF: Mapping[str, str] = {"spark.ui.showConsoleProgress": "false"}

#: Emitted when a compaction run rewrote segments; the validation DAG is scheduled on it.
COMPACTED_SEGMENTS = Asset(
    name="kfs_compacted_segments",
    uri="kfs://kfs_default/segments/compacted",
    group="kfs",
    extra={"connection": KfsHook.default_conn_name},
)


# --- schedules and defaults ---------------------------------------------------------


def _env_key(job: str) -> str:
    return job.upper().replace("-", "_")


def schedule(job: str) -> str | None:
    """The cron schedule of ``job``'s DAG: ``KFS_SCHEDULE_<JOB>`` or the default."""
    value = os.environ.get(f"KFS_SCHEDULE_{_env_key(job)}", DEFAULT_SCHEDULES[job]).strip()
    return None if value.lower() in ("", "none", "off", "manual") else value


def validation_schedule() -> AssetOrTimeSchedule | Asset:
    """Validation runs on its cron schedule and after every compaction that changed data."""
    cron = schedule(VALIDATION_JOB)
    if cron is None:
        return COMPACTED_SEGMENTS
    return AssetOrTimeSchedule(
        timetable=CronTriggerTimetable(cron, timezone=TIMEZONE), assets=COMPACTED_SEGMENTS
    )


def job_args(job: str) -> list[str]:
    """The job's own flags: ``KFS_JOB_ARGS_<JOB>`` (shell syntax) or `DEFAULT_JOB_ARGS`."""
    value = os.environ.get(f"KFS_JOB_ARGS_{_env_key(job)}")
    return shlex.split(value) if value is not None else list(DEFAULT_JOB_ARGS[job])


def default_args() -> dict[str, Any]:
    """Owner and retry policy of every KFS task."""
    return {
        "owner": OWNER,
        "retries": 2,
        "retry_delay": _dt.timedelta(minutes=2),
        "retry_exponential_backoff": 2.0,  # 2 min, then 4 min ...
        "max_retry_delay": _dt.timedelta(minutes=30),
        "execution_timeout": _dt.timedelta(minutes=10),  # helper tasks; Spark tasks: their own
    }


def params() -> dict[str, Param]:
    """The params of a manual run ("Trigger DAG w/ config")."""
    return {
        "topics": Param(
            "",
            type="string",
            title="Topics",
            description="Comma-separated topics to work on; empty: every topic of the namespace.",
        ),
        "dry_run": Param(
            False,
            type="boolean",
            title="Dry run",
            description="Report what the job would change and change nothing.",
        ),
    }


def dag_kwargs(job: str, *, doc_md: str | None) -> dict[str, Any]:
    """Keyword arguments every KFS DAG takes (everything but its id and schedule)."""
    return {
        "start_date": START_DATE,
        "catchup": False,
        "max_active_runs": 1,
        "default_args": default_args(),
        "params": params(),
        "tags": [*TAGS, job],
        "doc_md": doc_md,
    }


def spark_task_kwargs(job: str) -> dict[str, Any]:
    """Arguments of a `KfsSparkJobOperator` task: pool, timeout, conf, the job's flags."""
    return {
        "job": job,
        "job_args": job_args(job),
        "dry_run": "{{ params.dry_run }}",
        "pool": SPARK_POOL,
        "execution_timeout": EXECUTION_TIMEOUTS[job],
        "conf": dict(SPARK_CONF),
        # A mapped task shows its topics in the UI instead of a bare index.
        "map_index_template": "{{ task.topics or 'all topics' }}",
    }


# --- run time helpers (called inside tasks) ---------------------------------------------


def _split(topics: str | Sequence[str] | None) -> list[str]:
    if topics is None:
        return []
    if isinstance(topics, str):
        topics = topics.split(",")
    return list(dict.fromkeys(t.strip() for t in topics if t and t.strip()))


def topic_batches(
    requested: str | Sequence[str] | None,
    *,
    kfs_conn_id: str = KfsHook.default_conn_name,
    per_task: int | None = None,
) -> list[str]:
    """The topics a run works on, grouped for mapped tasks (comma-separated groups).

    ``requested`` (the ``topics`` param) empty: every topic the catalog lists.
    A requested topic the catalog does not know fails the task without retries.
    """
    from airflow.sdk.exceptions import AirflowFailException

    with KfsHook(kfs_conn_id=kfs_conn_id) as hook:
        known = hook.list_topics()
    wanted = _split(requested)
    if wanted:
        unknown = [t for t in wanted if t not in known]
        if unknown:
            raise AirflowFailException(
                f"unknown topics {', '.join(unknown)} in namespace {hook.namespace!r}"
            )
    topics = wanted or known
    if per_task is None:
        per_task = max(1, int(os.environ.get("KFS_TOPICS_PER_TASK", "1") or 1))
    return [",".join(topics[i : i + per_task]) for i in range(0, len(topics), per_task)]


def announce_compaction(
    summaries: Iterable[Mapping[str, Any] | None], outlet: OutletEventAccessor
) -> dict[str, Any]:
    """Describe a compaction run in its asset event; skip when nothing was rewritten.

    Skipping this task means no `COMPACTED_SEGMENTS` event, so validation is not
    triggered by a run that changed nothing.
    """
    from airflow.sdk.exceptions import AirflowSkipException

    done = [s for s in summaries if s]
    counts: dict[str, int] = {}
    for summary in done:
        for name, value in (summary.get("counts") or {}).items():
            if isinstance(value, int):
                counts[name] = counts.get(name, 0) + value
    rewritten = counts.get("partitions_merged", 0) + counts.get("partitions_compacted", 0)
    if not rewritten or any(s.get("dry_run") for s in done):
        raise AirflowSkipException("compaction rewrote nothing: no asset event, no validation")
    topics = sorted({t for s in done for t in (s.get("topics") or [])})
    extra: dict[str, Any] = {
        "topics": topics,
        "partitions_rewritten": rewritten,
        "segments_in": counts.get("segments_in", 0),
        "segments_out": counts.get("segments_out", 0),
        "records_removed": counts.get("records_removed", 0),
        "bytes_saved": counts.get("bytes_saved", 0),
        "summaries": [s.get("report_key") for s in done],
    }
    outlet.extra.update(extra)
    return extra


def index_repair_conf(
    summary: Mapping[str, Any] | None, *, kfs_conn_id: str = KfsHook.default_conn_name
) -> dict[str, Any] | None:
    """The conf of an index_rebuild run that repairs what a failed validation found.

    None (nothing to trigger) unless the validation summary says every critical
    failure is one index_rebuild can repair (``index_only_failure``).  The topics
    are those of the report's problem rows; all topics when the list was truncated.
    """
    details = (summary or {}).get("details") or {}
    if not details.get("index_only_failure"):
        return None
    topics: list[str] = []
    report_key = details.get("report_key")
    if report_key:
        with KfsHook(kfs_conn_id=kfs_conn_id) as hook:
            report = hook.read_validation_report(report_key)
        if not report.problems_truncated:
            topics = report.problem_topics()
    return {"topics": ",".join(topics), "dry_run": False}


# --- the pool ---------------------------------------------------------------------------


def ensure_spark_pool(
    name: str | None = None, slots: int = SPARK_POOL_SLOTS, *, session: Any = None
) -> bool:
    """Create the Spark pool if it does not exist (never changes an existing one).

    Airflow 3.3's scheduler never queues a task whose pool is missing (it logs
    "Tasks using non-existent pool ... will not be scheduled" and the task waits
    forever), so every KFS Spark task depends on this pool.  This runs where the
    metadata database is reachable (the ``kfs run`` launcher, `SparkPoolListener`
    in the scheduler, tests), never inside a task.  True if it created the pool.
    """
    from airflow.models.pool import Pool
    from airflow.utils.session import create_session

    name = name or SPARK_POOL

    def create(sess: Any) -> bool:
        if Pool.get_pool(name, session=sess) is not None:
            return False
        Pool.create_or_update_pool(
            name, slots, SPARK_POOL_DESCRIPTION, include_deferred=False, session=sess
        )
        return True

    if session is not None:
        return create(session)
    with create_session() as sess:
        return create(sess)


class SparkPoolListener:
    """An Airflow listener that creates the Spark pool when a scheduler (or any job) starts.

    `KfsPlugin` registers it, so a deployment that never created the pool still
    runs the KFS DAGs; a pool someone created or resized is left as it is.
    Task processes call ``on_starting`` too (with a ``TaskRunnerMarker``), but
    they may not use the metadata database: only Airflow's jobs (scheduler,
    dag-processor, triggerer) create the pool.
    """

    @hookimpl
    def on_starting(self, component: Any) -> None:
        # A Job exists only where its module is loaded: no import here, which in a
        # task process would load the ORM for nothing.
        job_module = sys.modules.get("airflow.jobs.job")
        if job_module is None or not isinstance(component, job_module.Job):
            return
        if ensure_spark_pool(SPARK_POOL):
            log.info("created pool %s with %d slots", SPARK_POOL, SPARK_POOL_SLOTS)
