"""# KFS tables.

Keeps an Iceberg table of every topic with `kfs.table.enabled=true` up to
date: each run appends what the topic's segments gained since the table's
last snapshot, exactly once per offset range (the range is in the snapshot's
summary, committed with the rows), and writes a Great Expectations report for
every snapshot. The job is `spark_jobs/tables/`.

Turn a topic's table on with Kafka's own tools, for example
`kafka-configs --bootstrap-server localhost:9092 --alter --entity-type topics
--entity-name orders --add-config kfs.table.enabled=true,kfs.table.partition.by=day(_timestamp)`.

**Tasks**

1. `append` - `spark-submit spark_jobs/tables/__main__.py` in the `kfs_spark`
   pool. Job flags: `KFS_JOB_ARGS_TABLES` (e.g. `--max-records 100000
   --catalog glue`).

**Params** (Trigger DAG w/ config): `topics` - comma-separated, empty for every
table-enabled topic; `dry_run` - report how far behind each table is, write
nothing.

**The tables.** Namespace `<kfs namespace>`, table `<topic>` (dots become
`_`), in the embedded SQLite catalog beside the store or the pyiceberg catalog
named `kfs` in `~/.pyiceberg.yaml` / `PYICEBERG_CATALOG__KFS__*`. Columns:
`_partition`, `_offset`, `_timestamp`, `_key`, the JSON value's fields (new
fields become new nullable columns), and the dead-letter columns `_error` and
`_value` for values that do not fit. A compacted topic's table holds each
key's latest value; a delete topic's table appends.

**Reading the outcome.** The task's XCom (`return_value`, also `summary`) holds
the run summary: `message` (e.g. "appended 120 records to 2 table(s) in 2
commit(s); 3 dead letters (_error column)"), `counts` (`records`, `rows`,
`commits`, `dead_letters`, `lag`, `failed_topics`, `failed_reports`) and, under
`details.tables`, per table its schema changes, reports and lag. The run fails
when a table could not be written (the others are still written); dead letters
and failed expectations are reported, not failures. The KFS page shows each
table's snapshot, offsets, lag and last report.

Schedule: `KFS_SCHEDULE_TABLES` (default every 5 minutes, UTC).
"""

from __future__ import annotations

from airflow.sdk import DAG
from kfs_airflow import dags_support as kfs
from kfs_airflow.operators import KfsSparkJobOperator

with DAG(
    dag_id="kfs_tables",
    schedule=kfs.schedule(kfs.TABLES_JOB),
    **kfs.dag_kwargs(kfs.TABLES_JOB, doc_md=__doc__),
):
    KfsSparkJobOperator(
        task_id="append",
        topics="{{ params.topics }}",
        **kfs.spark_task_kwargs(kfs.TABLES_JOB),
    )
