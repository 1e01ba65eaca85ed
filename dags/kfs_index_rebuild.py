"""# KFS index rebuild.

Finds `.index` objects that are missing, unreadable or inconsistent with their
segment's batches and writes them again from the segment (only `.index`
objects are written; segments are only read). The job is
`spark_jobs/index_rebuild.py`.

Runs on its schedule, on demand, and when **kfs_validation** fails only on
index expectations: that run triggers this DAG with `topics` set to the topics
the validation report names.

**Tasks**

1. `list_topics` - the topics of the `kfs_default` connection's namespace (or
   the `topics` param), one mapped task per topic (`KFS_TOPICS_PER_TASK`).
2. `rebuild` - one `spark-submit spark_jobs/index_rebuild.py --topics <topic>`
   per topic, in the `kfs_spark` pool. Job flags: `KFS_JOB_ARGS_INDEX_REBUILD`.

**Params** (Trigger DAG w/ config): `topics` - comma-separated, empty for all;
`dry_run` - inspect and report what would be rebuilt.

**Reading the outcome.** Each `rebuild` task's XCom (`return_value`, also
`summary`) holds the run summary: `message`, `counts` (segments inspected,
indexes rebuilt, unfixable) and `report_key`, the full summary with every
finding (`{ns}/_reports/index_rebuild/<run-id>.json`). An index whose segment
is missing or too damaged to walk is *unfixable*: the task fails without
retries and the segment needs a look (kfs_validation's report says what is
wrong with it).

Schedule: `KFS_SCHEDULE_INDEX_REBUILD` (default daily at 03:20 UTC).
"""

from __future__ import annotations

from airflow.sdk import DAG, get_current_context, task
from kfs_airflow import dags_support as kfs
from kfs_airflow.operators import KfsSparkJobOperator

with DAG(
    dag_id="kfs_index_rebuild",
    schedule=kfs.schedule(kfs.INDEX_REBUILD_JOB),
    **kfs.dag_kwargs(kfs.INDEX_REBUILD_JOB, doc_md=__doc__),
):

    @task
    def list_topics() -> list[str]:
        """Topics to inspect: the `topics` param, else every topic in the catalog."""
        return kfs.topic_batches(get_current_context()["params"]["topics"])

    KfsSparkJobOperator.partial(
        task_id="rebuild", **kfs.spark_task_kwargs(kfs.INDEX_REBUILD_JOB)
    ).expand(topics=list_topics())
