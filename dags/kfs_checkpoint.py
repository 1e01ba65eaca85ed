"""# KFS checkpoint.

Keeps every partition's catalog quick to load and restorable: writes a
checkpoint where at least `--min-commits` (10) commits piled up since the last
one, expires commits that are neither among the newest 100 versions nor younger
than 7 days (keeping a checkpoint before the cut), and takes an automatic named
snapshot of the namespace's catalog once a day, keeping the newest 14
(`--snapshot-every 1d --keep-auto-snapshots 14`). The job is
`spark_jobs/checkpoint.py`.

One Spark task covers the namespace: the work is catalog metadata only, cheap
per partition, and a snapshot must cover all topics at once to be consistent -
so it is not split per topic like compaction.

**Tasks**

1. `checkpoint` - `spark-submit spark_jobs/checkpoint.py` in the `kfs_spark`
   pool. Job flags: `KFS_JOB_ARGS_CHECKPOINT` (replaces the defaults above;
   e.g. `--retain 3d --snapshot-every 12h --keep-auto-snapshots 28`).

**Params** (Trigger DAG w/ config): `topics` - comma-separated, empty for all
(a snapshot then covers those topics only); `dry_run` - report what would be
checkpointed, expired and snapshotted.

**Reading the outcome.** The task's XCom (`return_value`, also `summary`) holds
the run summary: `message` (e.g. "checkpoint 3 of 6 partitions, expire 40
commit files, take snapshot 'auto-20240102T030405Z'"), `counts`
(`checkpoints_written`, `commit_files_expired`, `snapshots_taken`,
`snapshots_deleted`, `errors`) and `report_key`
(`{ns}/_reports/checkpoint/<run-id>.json`). Snapshots are listed and restored
with `kfs catalog snapshots` / `kfs catalog restore`.

Schedule: `KFS_SCHEDULE_CHECKPOINT` (default every 6 hours at :50, UTC).
"""

from __future__ import annotations

from airflow.sdk import DAG
from kfs_airflow import dags_support as kfs
from kfs_airflow.operators import KfsSparkJobOperator

with DAG(
    dag_id="kfs_checkpoint",
    schedule=kfs.schedule(kfs.CHECKPOINT_JOB),
    **kfs.dag_kwargs(kfs.CHECKPOINT_JOB, doc_md=__doc__),
):
    KfsSparkJobOperator(
        task_id="checkpoint",
        topics="{{ params.topics }}",
        **kfs.spark_task_kwargs(kfs.CHECKPOINT_JOB),
    )
