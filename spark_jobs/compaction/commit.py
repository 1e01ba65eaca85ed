"""Committing, on the driver: one catalog replace per partition, and each partition's outcome.

Outputs were uploaded by the executors; `commit_partition` swaps a plan's
inputs for them in one ``PartitionCatalog.replace``.  A conflict (retention or
another run changed the partition, found at the commit or as a rewrite that
could not read an input retention had removed meanwhile) or a failed rewrite
leaves the outputs as orphans for retention's orphan sweep, and the other
partitions go on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from kfs_core.catalog import PartitionCatalog, SegmentEntry, carry_transactions, layout
from kfs_core.errors import CatalogCommitConflict, KfsError, ReplaceConflict
from kfs_core.storage import ObjectStore
from spark_jobs.common import JobContext
from spark_jobs.compaction.plan import KIND_MERGE, PartitionPlan
from spark_jobs.compaction.tasks import RewriteResult

# Outcome statuses of a partition.
MERGED = "merged"
COMPACTED = "compacted"
SKIPPED = "skipped"
CONFLICT = "conflict"
ERROR = "error"
PAUSED = "paused"


@dataclass
class PartitionOutcome:
    """What the run did to one partition; ``status`` is one of the outcome constants."""

    plan: PartitionPlan
    status: str
    message: str = ""
    version: int = -1
    results: list[RewriteResult] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)

    @property
    def outputs(self) -> list[SegmentEntry]:
        return [entry for r in self.results for entry in r.outputs]

    @property
    def committed(self) -> bool:
        return self.status in (MERGED, COMPACTED)

    def total(self, name: str) -> int:
        return sum(getattr(r, name) for r in self.results)


def _object_keys(namespace: str, entries: Iterable[SegmentEntry]) -> list[str]:
    return [layout.join(namespace, k) for e in entries for k in (e.key, e.index_key)]


def commit_partition(
    store: ObjectStore,
    namespace: str,
    plan: PartitionPlan,
    results: Sequence[RewriteResult],
) -> PartitionOutcome:
    """Swap the plan's inputs for the results' outputs in one catalog replace.

    Never raises for a catalog conflict or error: a `ReplaceConflict` (an
    input was removed or replaced meanwhile) or a lost race is ``conflict``,
    anything else ``error``; either way the uploaded outputs are orphans.
    """
    outcome = PartitionOutcome(plan, ERROR, results=list(results))
    outputs = outcome.outputs
    catalog = PartitionCatalog(store, namespace, plan.topic, plan.partition)
    inputs = [d.entry for d in plan.inputs]
    try:
        removed = frozenset(o for r in results for o in r.removed_abort_markers)
        commit = catalog.replace(inputs, carry_transactions(inputs, outputs, removed))
    except (ReplaceConflict, CatalogCommitConflict) as exc:
        outcome.status = CONFLICT
        outcome.message = (
            f"{plan.topic}/{plan.partition} changed since planning ({exc}); nothing replaced, "
            f"{len(outputs)} outputs left as orphans, the next run plans again"
        )
    except (KfsError, ValueError) as exc:
        outcome.message = f"commit failed: {type(exc).__name__}: {exc}"
    else:
        outcome.status = MERGED if plan.action == KIND_MERGE else COMPACTED
        outcome.version = commit.version
        return outcome
    outcome.orphans = _object_keys(namespace, outputs)
    return outcome


def commit_one(
    ctx: JobContext,
    plan: PartitionPlan,
    results: list[RewriteResult],
    unreadable: dict[tuple[str, int], str],
    paused: bool,
    before_commit: Callable[[PartitionPlan], None] | None,
) -> PartitionOutcome:
    ns = ctx.namespace
    outcome = PartitionOutcome(plan, ERROR, results=results)
    failed = [r.error for r in results if r.error]
    if (plan.topic, plan.partition) in unreadable:
        failed.insert(0, f"key scan: {unreadable[(plan.topic, plan.partition)]}")
    if paused or any(r.paused for r in results) or ctx.check_paused():
        outcome.status, outcome.message = PAUSED, "emergency pause flag set; not committed"
    elif failed and _inputs_removed(ctx.store, ns, plan):
        # Retention (or another run) removed an input while it was being read: the
        # read failed because the partition moved on, as a commit would have found.
        outcome.status = CONFLICT
        outcome.message = (
            f"{plan.topic}/{plan.partition} changed during the rewrite (an input left the "
            f"catalog: {failed[0]}); nothing replaced, the next run plans again"
        )
    elif failed:
        outcome.message = "; ".join(failed[:3])
    elif len(results) != len(plan.groups):
        outcome.message = f"{len(results)} of {len(plan.groups)} rewrite results came back"
    else:
        if before_commit is not None:
            before_commit(plan)
        return commit_partition(ctx.store, ns, plan, results)
    outcome.orphans = _object_keys(ns, outcome.outputs)
    return outcome


def _inputs_removed(store: ObjectStore, namespace: str, plan: PartitionPlan) -> bool:
    """Whether any of the plan's inputs has left the partition's catalog since planning."""
    try:
        live = PartitionCatalog(store, namespace, plan.topic, plan.partition).load().segments
    except KfsError:
        return False  # cannot tell: the failure stays an error
    keys = {entry.key for entry in live}
    return any(d.entry.key not in keys for d in plan.inputs)
