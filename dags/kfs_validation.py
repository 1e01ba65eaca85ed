"""# KFS validation.

Checks every live segment and index of the namespace - magic, header and
footer, body and batch CRCs, offset continuity, index entries against the
batches, catalog against objects, orphans - and publishes a Great Expectations
data-quality report. It never modifies anything. The job is
`spark_jobs/validation.py`.

Runs daily, and after every compaction run that rewrote segments (the
`kfs_compacted_segments` asset that **kfs_compaction** emits).

**Tasks**

1. `validate` - `spark-submit spark_jobs/validation.py` over the namespace (or
   the `topics` param), in the `kfs_spark` pool. It fails - without retries -
   when a critical expectation fails (`--fail-on critical`; set
   `KFS_JOB_ARGS_VALIDATION` to e.g. `--fail-on any --max-orphans 10`).
2. `report` - logs the headline and returns where the report is. It only runs
   when validation passed, and it is what makes a failed validation a failed
   DAG run (the repair branch below succeeds even then).
3. `index_repair_needed` -> `trigger_index_rebuild` - only when `validate`
   failed and every critical failure is one an index rebuild repairs (missing
   or inconsistent `.index` objects): triggers **kfs_index_rebuild** for the
   topics the report names. Otherwise skipped: a damaged segment needs a person.

**Params** (Trigger DAG w/ config): `topics` - comma-separated, empty for all;
`dry_run` - check, but write only the run summary (no report, no Data Docs).

**Reading the outcome.** The run is *success* when no critical expectation
failed and *failed* when one did. The `validate` task's XCom `summary` (also its
`return_value` on success) has `message` (e.g. "2 of 14 expectations failed (1
critical: index_ok)"), `counts` (segments, partitions, crc failures, orphans)
and, under `details`, `critical_failures`, `failed_expectations`,
`index_only_failure` and `report_key`: the full report with every failing row,
`{ns}/_reports/validation/<run-id>/report.json`, next to the Data Docs
(`.../data_docs/index.html`).

Schedule: `KFS_SCHEDULE_VALIDATION` (default daily at 04:40 UTC) or the asset.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, TriggerRule, get_current_context, task
from kfs_airflow import dags_support as kfs
from kfs_airflow.operators import KfsSparkJobOperator

with DAG(
    dag_id="kfs_validation",
    schedule=kfs.validation_schedule(),
    **kfs.dag_kwargs(kfs.VALIDATION_JOB, doc_md=__doc__),
):
    validate = KfsSparkJobOperator(
        task_id="validate",
        topics="{{ params.topics }}",
        **kfs.spark_task_kwargs(kfs.VALIDATION_JOB),
    )

    @task
    def report(summary: dict[str, Any]) -> str | None:
        """The headline and the report's key (the run's state follows this task)."""
        print(f"kfs validation: {summary['message']}")
        report_key: str | None = summary["details"].get("report_key")
        return report_key

    @task.short_circuit(trigger_rule=TriggerRule.ALL_FAILED)
    def index_repair_needed() -> dict[str, Any] | None:
        """index_rebuild's conf when every critical failure is index-only, else None (skip)."""
        summary = get_current_context()["ti"].xcom_pull(task_ids="validate", key="summary")
        return kfs.index_repair_conf(summary)

    # Airflow hands the task the summary an XComArg stands for; its stubs type the call's
    # arguments as the function's own.
    report(validate.output)  # type: ignore[arg-type]
    repair = index_repair_needed()
    validate >> repair
    repair >> TriggerDagRunOperator(
        task_id="trigger_index_rebuild",
        trigger_dag_id="kfs_index_rebuild",
        conf=repair,  # type: ignore[arg-type]  # the XComArg resolves to the conf dict
        note="Triggered by kfs_validation: the failed expectations were index-only.",
    )
