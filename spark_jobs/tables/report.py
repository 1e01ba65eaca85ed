"""A data-quality report for every snapshot the tables job commits (Great Expectations).

The snapshot's rows are read back from the table (the offsets it added, at
that snapshot) and checked:

- ``rows`` - as many rows as the commit wrote: every record of the range
  (for a compacted topic, each key's latest record that is not a tombstone);
- ``offsets_unique`` - no (``_partition``, ``_offset``) twice;
- ``keys`` - ``_key`` is never null, for a compacted topic or a range whose
  records carry keys;
- ``no_dead_letters`` - ``_error`` is null: every value fit the schema
  (a failure lists the reasons; the rows are in the table);
- ``freshness`` - the newest record was at most ``--freshness-s`` (default
  one hour) old when the snapshot was committed.

Schema changes (the columns the commit added) are listed in the report.
The report goes to ``{ns}/_reports/tables/<run-id>/<table>/<n>/report.json``
with GX's Data Docs beside it (``data_docs/index.html``); the snapshot's
summary names it (``kfs.report``), so the KFS page links each table's last one.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from kfs_core.reports import table_report_prefix

if TYPE_CHECKING:
    import pandas as pd
    from pyiceberg.table import Table

    from spark_jobs.common import JobContext
    from spark_jobs.tables.job import CommitPlan
    from spark_jobs.tables.schema import Rows

FRESHNESS_S: Final = 3600
_COLUMNS: Final = ("_partition", "_offset", "_timestamp", "_key", "_error")


@dataclass(frozen=True)
class SnapshotReport:
    """Where the report is, and whether every expectation held."""

    key: str
    success: bool
    docs_index: str | None


def report_prefix(ctx: JobContext, table: str, commit: int) -> str:
    """``{ns}/_reports/tables/<run-id>/<table>/<commit>/``: one snapshot's report files."""
    return table_report_prefix(ctx.namespace, ctx.run_id, table, commit)


def _snapshot_rows(table: Table, plan: CommitPlan) -> pd.DataFrame:
    from pyiceberg import expressions

    ex: Any = expressions  # its predicates are pydantic models whose __init__ mypy misreads
    ranges = [
        ex.And(
            ex.EqualTo("_partition", p),
            ex.GreaterThanOrEqual("_offset", s),
            ex.LessThan("_offset", e),
        )
        for p, (s, e) in sorted(plan.ranges.items())
        if s < e
    ]
    condition: Any = ranges[0]
    for more in ranges[1:]:
        condition = ex.Or(condition, more)
    snapshot = table.current_snapshot()
    scan = table.scan(
        row_filter=condition,
        selected_fields=_COLUMNS,
        snapshot_id=snapshot.snapshot_id if snapshot else None,
    )
    return scan.to_arrow().to_pandas()


def report_snapshot(
    ctx: JobContext,
    table: Table,
    topic: str,
    rows: Rows,
    plan: CommitPlan,
    changes: Sequence[str],
    *,
    prefix: str,
    compacted: bool,
    freshness_s: int = FRESHNESS_S,
) -> SnapshotReport:
    """Check the snapshot just committed; the report and its Data Docs go under ``prefix``."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.checkpoint.actions import UpdateDataDocsAction
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.base import ProgressBarsConfig
    from great_expectations.expectations.core.expect_column_min_to_be_between import (
        ExpectColumnMinToBeBetween,
    )
    from great_expectations.expectations.core.expect_column_values_to_be_null import (
        ExpectColumnValuesToBeNull,
    )
    from great_expectations.expectations.core.expect_column_values_to_not_be_null import (
        ExpectColumnValuesToNotBeNull,
    )
    from great_expectations.expectations.core.expect_compound_columns_to_be_unique import (
        ExpectCompoundColumnsToBeUnique,
    )
    from great_expectations.expectations.core.expect_table_row_count_to_equal import (
        ExpectTableRowCountToEqual,
    )

    from spark_jobs import validation_docs

    snapshot = table.current_snapshot()
    committed = _dt.datetime.fromtimestamp(
        (snapshot.timestamp_ms if snapshot else 0) / 1000, _dt.UTC
    )
    frame = _snapshot_rows(table, plan)
    frame["_age_s"] = (committed - frame["_timestamp"]).dt.total_seconds()
    expected_rows = _expected_rows(rows, compacted)
    keyed = compacted or any(r["_key"] is not None for r in rows.rows)
    checks: list[tuple[str, Any]] = [
        ("rows", ExpectTableRowCountToEqual(value=expected_rows)),
        ("offsets_unique", ExpectCompoundColumnsToBeUnique(column_list=["_partition", "_offset"])),
        ("no_dead_letters", ExpectColumnValuesToBeNull(column="_error")),
        ("freshness", ExpectColumnMinToBeBetween(column="_age_s", max_value=freshness_s)),
    ]
    if keyed:
        checks.insert(2, ("keys", ExpectColumnValuesToNotBeNull(column="_key")))
    for check_id, expectation in checks:
        expectation.meta = {"check": check_id}
    name = f"kfs_table_{topic}"
    context = gx.get_context(mode="ephemeral")
    context.enable_analytics(False)
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    with tempfile.TemporaryDirectory(prefix="kfs-gx-") as docs_dir:
        context.add_data_docs_site(
            site_name="kfs", site_config=validation_docs.site_config(docs_dir)
        )
        validation_docs.compile_templates()
        batch = (
            context.data_sources.add_pandas("kfs")
            .add_dataframe_asset(table.name()[-1])
            .add_batch_definition_whole_dataframe("snapshot")
        )
        suite = context.suites.add(gx.ExpectationSuite(name=name, meta={"notes": _notes(changes)}))
        for _, expectation in checks:
            suite.add_expectation(expectation)
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name=name, data=batch, suite=suite)
        )
        checkpoint = context.checkpoints.add(
            gx.Checkpoint(
                name=name,
                validation_definitions=[definition],
                actions=[UpdateDataDocsAction(name="data_docs", site_names=["kfs"])],
                result_format={"result_format": "SUMMARY"},
            )
        )
        run_name = f"{ctx.run_id}-{snapshot.snapshot_id if snapshot else 0}"
        result = checkpoint.run(
            batch_parameters={"dataframe": frame},
            run_id=RunIdentifier(run_name=run_name, run_time=committed),
        )
        docs_index = validation_docs.upload_site(ctx.store, prefix + "data_docs/", Path(docs_dir))
    outcomes = [
        {
            "id": item.expectation_config.meta.get("check"),
            "expectation": item.expectation_config.type,
            "success": bool(item.success),
            "observed_value": _plain((item.result or {}).get("observed_value")),
            "unexpected_count": _plain((item.result or {}).get("unexpected_count")),
        }
        for validation in result.run_results.values()
        for item in validation.results
        if item.expectation_config is not None
    ]
    success = all(o["success"] for o in outcomes)
    doc = {
        "topic": topic,
        "table": ".".join(table.name()),
        "snapshot_id": snapshot.snapshot_id if snapshot else None,
        "committed_at": committed.isoformat(timespec="milliseconds"),
        "offsets": {str(p): list(r) for p, r in sorted(plan.ranges.items())},
        "records": len(rows.rows),
        "rows": expected_rows,
        "dead_letters": rows.dead_letters,
        "dead_letter_reasons": rows.reasons,
        "schema_changes": list(changes),
        "success": success,
        "expectations": outcomes,
        "data_docs_index": docs_index,
    }
    key = prefix + "report.json"
    ctx.store.put(key, json.dumps(doc, indent=2, sort_keys=True).encode("utf-8"))
    return SnapshotReport(key, success, docs_index)


def _expected_rows(rows: Rows, compacted: bool) -> int:
    return len(rows.merged()) if compacted else len(rows.rows)


def _notes(changes: Sequence[str]) -> str:
    if not changes:
        return "No schema change."
    return "Columns added: " + ", ".join(changes)


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    return str(value)
