"""# KFS compaction.

Merges small segments into `segment.bytes`-sized ones (recompressing into large
batches) and key-compacts topics with `cleanup.policy=compact`, as Kafka's log
cleaner does. Offsets are never renumbered; data newer than
`min.compaction.lag.ms` is not touched. The job is the package `spark_jobs/compaction/`.

**Tasks**

1. `list_topics` - the topics of the `kfs_default` connection's namespace (or
   the `topics` param), one mapped task per topic (`KFS_TOPICS_PER_TASK`).
2. `compact` - one `spark-submit spark_jobs/compaction/__main__.py --topics <topic>` per
   topic, in the `kfs_spark` pool (at most as many Spark jobs at once as it has
   slots). Job flags: `KFS_JOB_ARGS_COMPACTION` (e.g. `--min-inputs 8`).
3. `announce` - when any partition was rewritten, emits the asset event
   `kfs_compacted_segments`, which triggers **kfs_validation**. Skipped when
   nothing was rewritten (or on a dry run): no event, no validation.

**Params** (Trigger DAG w/ config): `topics` - comma-separated, empty for all;
`dry_run` - plan and report, change nothing.

**Reading the outcome.** Each `compact` task's XCom (`return_value`, also
`summary`) holds the run summary: `status`, `message` (e.g. "merged 2 and
key-compacted 0 of 3 partitions: 12 segments ... became 2"), `counts`
(`segments_in`, `segments_out`, `records_removed`, `bytes_saved`, `conflicts`,
`errors`) and `report_key`, the full summary in the store
(`{ns}/_reports/compaction/<run-id>.json`). A partition that another writer
changed meanwhile is counted in `conflicts` and retried by the next run; a
partition that failed makes the task fail without retries (the summary says
which). Spark or store trouble fails the task with retries (exponential backoff).

Schedule: `KFS_SCHEDULE_COMPACTION` (default hourly at :05, UTC).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import DAG, get_current_context, task
from kfs_airflow import dags_support as kfs
from kfs_airflow.operators import KfsSparkJobOperator

with DAG(
    dag_id="kfs_compaction",
    schedule=kfs.schedule(kfs.COMPACTION_JOB),
    **kfs.dag_kwargs(kfs.COMPACTION_JOB, doc_md=__doc__),
):

    @task
    def list_topics() -> list[str]:
        """Topics to compact: the `topics` param, else every topic in the catalog."""
        return kfs.topic_batches(get_current_context()["params"]["topics"])

    compact = KfsSparkJobOperator.partial(
        task_id="compact", **kfs.spark_task_kwargs(kfs.COMPACTION_JOB)
    ).expand(topics=list_topics())

    @task(outlets=[kfs.COMPACTED_SEGMENTS])
    def announce(summaries: list[dict[str, Any]]) -> dict[str, Any]:
        """Emit `kfs_compacted_segments` (validation's trigger) if anything was rewritten."""
        outlet = get_current_context()["outlet_events"][kfs.COMPACTED_SEGMENTS]
        # The context types its accessors by their Protocol; this one is an OutletEventAccessor.
        return kfs.announce_compaction(summaries, outlet)  # type: ignore[arg-type]

    # Airflow hands the task the summaries the XComArg stands for; its stubs type the
    # call's arguments as the function's own.
    announce(compact.output)  # type: ignore[arg-type]
