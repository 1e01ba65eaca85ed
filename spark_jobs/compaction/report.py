"""The run summary: counts, storage saved and a report per partition (`run_result`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spark_jobs.common import STATUS_OK, JobResult, conclude
from spark_jobs.compaction.commit import (
    COMPACTED,
    CONFLICT,
    ERROR,
    MERGED,
    SKIPPED,
    PartitionOutcome,
)
from spark_jobs.compaction.plan import KIND_MERGE, SKIP, PartitionPlan

#: Partition reports kept in the summary (the counts cover all of them).
MAX_REPORTED = 1000


def plan_report(plan: PartitionPlan) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "topic": plan.topic,
        "partition": plan.partition,
        "action": plan.action,
        "catalog_version": plan.version,
    }
    if plan.reason:
        doc["reason"] = plan.reason
    if plan.groups:
        doc["inputs"] = [d.key for d in plan.inputs]
        doc["input_bytes"] = plan.input_bytes
        doc["groups"] = len(plan.groups)
    if plan.compacted:
        doc.update(
            clean_bytes=plan.clean_bytes,
            dirty_bytes=plan.dirty_bytes,
            dirty_ratio=plan.dirty_ratio,
            cleaning_point_ms=plan.cleaning_point_ms,
            tombstone_horizon_ms=plan.horizon_ms,
            first_uncleanable_offset=plan.first_uncleanable_offset,
        )
    return doc


def outcome_report(outcome: PartitionOutcome) -> dict[str, Any]:
    doc = plan_report(outcome.plan)
    doc["status"] = outcome.status
    if outcome.message:
        doc["message"] = outcome.message
    if outcome.version >= 0:
        doc["committed_version"] = outcome.version
    if outcome.results:
        doc.update(
            outputs=[e.key for e in outcome.outputs],
            output_bytes=outcome.total("bytes_out"),
            records_in=outcome.total("records_in"),
            records_out=outcome.total("records_out"),
            batches_in=outcome.total("batches_in"),
            batches_out=outcome.total("batches_out"),
            batches_copied=outcome.total("batches_copied"),
        )
        if outcome.total("aborted_batches"):
            doc["aborted_batches_removed"] = outcome.total("aborted_batches")
        if outcome.total("removed_markers"):
            doc["transaction_markers_removed"] = outcome.total("removed_markers")
    if outcome.orphans:
        doc["orphans"] = outcome.orphans
    return doc


def storage_report(outcomes: Sequence[PartitionOutcome]) -> dict[str, Any]:
    done = [o for o in outcomes if o.committed]
    bytes_in = sum(o.total("bytes_in") for o in done)
    bytes_out = sum(o.total("bytes_out") for o in done)
    index_in = sum(o.total("index_bytes_in") for o in done)
    index_out = sum(o.total("index_bytes_out") for o in done)
    return {
        "input_bytes": bytes_in,
        "output_bytes": bytes_out,
        "saved_bytes": bytes_in - bytes_out,
        "saved_ratio": round((bytes_in - bytes_out) / bytes_in, 6) if bytes_in else 0.0,
        "input_index_bytes": index_in,
        "output_index_bytes": index_out,
    }


def summary_counts(
    plans: Sequence[PartitionPlan], outcomes: Sequence[PartitionOutcome]
) -> dict[str, int]:
    done = [o for o in outcomes if o.committed]
    storage = storage_report(outcomes)
    return {
        "partitions": len(plans),
        "partitions_planned": sum(1 for p in plans if p.action != SKIP),
        "partitions_merged": sum(1 for o in outcomes if o.status == MERGED),
        "partitions_compacted": sum(1 for o in outcomes if o.status == COMPACTED),
        "segments_in": sum(len(o.plan.inputs) for o in done),
        "segments_out": sum(len(o.outputs) for o in done),
        "bytes_in": storage["input_bytes"],
        "bytes_out": storage["output_bytes"],
        "bytes_saved": storage["saved_bytes"],
        "records_in": sum(o.total("records_in") for o in done),
        "records_out": sum(o.total("records_out") for o in done),
        "records_removed": sum(o.total("records_in") - o.total("records_out") for o in done),
        "conflicts": sum(1 for o in outcomes if o.status == CONFLICT),
        "errors": sum(1 for o in outcomes if o.status == ERROR),
        "orphaned_objects": sum(len(o.orphans) for o in outcomes),
    }


def dry_run_result(plans: Sequence[PartitionPlan]) -> JobResult:
    work = [p for p in plans if p.action != SKIP]
    counts = {
        "partitions": len(plans),
        "partitions_planned": len(work),
        "segments_in": sum(len(p.inputs) for p in work),
        "bytes_in": sum(p.input_bytes for p in work),
    }
    details = {
        "partitions": [plan_report(p) for p in plans][:MAX_REPORTED],
    }
    merges = sum(1 for p in work if p.action == KIND_MERGE)
    message = (
        f"would merge {merges} and key-compact {len(work) - merges} of {len(plans)} partitions "
        f"({counts['segments_in']} segments, {counts['bytes_in']} bytes) (dry run)"
    )
    return JobResult(STATUS_OK, message, counts, details)


def run_result(
    plans: Sequence[PartitionPlan],
    outcomes: Sequence[PartitionOutcome],
    *,
    paused: bool,
    now_ms: int,
) -> JobResult:
    counts = summary_counts(plans, outcomes)
    storage = storage_report(outcomes)
    order = {(p.topic, p.partition): i for i, p in enumerate(plans)}
    reports = [
        outcome_report(o)
        for o in sorted(outcomes, key=lambda o: order[(o.plan.topic, o.plan.partition)])
        if o.status != SKIPPED or o.plan.dirty_bytes
    ]
    details = {
        "now_ms": now_ms,
        "storage": storage,
        "partitions": reports[:MAX_REPORTED],
    }
    message = (
        f"merged {counts['partitions_merged']} and key-compacted "
        f"{counts['partitions_compacted']} of {counts['partitions']} partitions: "
        f"{counts['segments_in']} segments ({counts['bytes_in']} bytes) became "
        f"{counts['segments_out']} ({counts['bytes_out']} bytes), "
        f"{counts['records_removed']} records removed, {counts['bytes_saved']} bytes saved"
    )
    return conclude(
        message,
        counts,
        details,
        paused=paused,
        failed_partitions=counts["errors"],
        conflicts=counts["conflicts"],
    )
