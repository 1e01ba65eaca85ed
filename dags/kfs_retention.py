"""# KFS retention.

Drops whole segments past each topic's `retention.ms` / `retention.bytes`
(topics with `delete` in `cleanup.policy`), advances the log start offset, and
deletes the objects of removed segments once the grace period (`--delete-grace`,
default 1 h) has passed, plus orphans older than `--orphan-grace` (default 24 h).
The newest segment of a partition is never removed. The job is
`spark_jobs/retention.py`.

**Tasks**

1. `list_topics` - the topics of the `kfs_default` connection's namespace (or
   the `topics` param), one mapped task per topic (`KFS_TOPICS_PER_TASK`).
2. `retain` - one `spark-submit spark_jobs/retention.py --topics <topic>` per
   topic, in the `kfs_spark` pool. Job flags: `KFS_JOB_ARGS_RETENTION`
   (e.g. `--delete-grace 2h`).

**Params** (Trigger DAG w/ config): `topics` - comma-separated, empty for all;
`dry_run` - plan, list and report, commit and delete nothing.

**Reading the outcome.** Each `retain` task's XCom (`return_value`, also
`summary`) holds the run summary: `message`, `counts` (`segments_removed`,
`bytes_removed`, `log_start_advanced`, `objects_deleted`, `orphans_deleted`,
`conflicts`, `errors`) and `report_key`, the full summary in the store
(`{ns}/_reports/retention/<run-id>.json`). Conflicts (compaction replaced a
segment meanwhile) are planned again by the next run. A failed partition fails
the task without retries; Spark or store trouble is retried with exponential
backoff.

Schedule: `KFS_SCHEDULE_RETENTION` (default hourly at :35, UTC).
"""

from __future__ import annotations

from airflow.sdk import DAG, get_current_context, task
from kfs_airflow import dags_support as kfs
from kfs_airflow.operators import KfsSparkJobOperator

with DAG(
    dag_id="kfs_retention",
    schedule=kfs.schedule(kfs.RETENTION_JOB),
    **kfs.dag_kwargs(kfs.RETENTION_JOB, doc_md=__doc__),
):

    @task
    def list_topics() -> list[str]:
        """Topics to sweep: the `topics` param, else every topic in the catalog."""
        return kfs.topic_batches(get_current_context()["params"]["topics"])

    KfsSparkJobOperator.partial(
        task_id="retain", **kfs.spark_task_kwargs(kfs.RETENTION_JOB)
    ).expand(topics=list_topics())
