"""The job: plan every partition, rewrite in Spark, commit per partition, summarize (`run`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kfs_core.catalog import TopicConfig, TopicRegistry
from kfs_core.clock import now_ms
from kfs_core.storage import ObjectStore
from spark_jobs import common
from spark_jobs.common import STATUS_PAUSED, JobContext, JobOptions, JobResult
from spark_jobs.compaction.commit import PAUSED, SKIPPED, PartitionOutcome, commit_one
from spark_jobs.compaction.options import JOB, CompactionOptions, build_parser
from spark_jobs.compaction.plan import SKIP, PartitionPlan, plan_partition
from spark_jobs.compaction.report import dry_run_result, run_result
from spark_jobs.compaction.spark import rewrite_partitions
from spark_jobs.compaction.tasks import RewriteResult, build_tasks

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Clock = Callable[[], int]


def _topic_configs(
    store: ObjectStore, namespace: str, topics: Sequence[str] | None
) -> dict[str, TopicConfig]:
    registry = TopicRegistry(store, namespace)
    names = sorted(set(topics)) if topics is not None else registry.list_topics()
    return {name: registry.describe(name).config for name in names}  # UnknownTopic for a typo


def _body(
    ctx: JobContext,
    options: CompactionOptions,
    clock: Clock,
    before_commit: Callable[[PartitionPlan], None] | None,
) -> JobResult:
    now_ms = clock()
    store, ns = ctx.store, ctx.namespace
    with ctx.phase("catalog"):
        configs = _topic_configs(store, ns, options.topics)
        states = common.load_partitions(store, ns, list(configs))
    with ctx.phase("plan"):
        plans = [
            plan_partition(
                state,
                configs[state.topic],
                ns,
                now_ms,
                min_inputs=options.min_inputs,
                batch_bytes=options.batch_bytes,
            )
            for state in states
        ]
    if options.dry_run:
        return dry_run_result(plans)
    work = [p for p in plans if p.action != SKIP]
    skipped = [PartitionOutcome(p, SKIPPED, p.reason) for p in plans if p.action == SKIP]
    if not work:
        return run_result(plans, skipped, paused=False, now_ms=now_ms)
    if ctx.check_paused():
        return JobResult(STATUS_PAUSED, "emergency pause flag set before rewriting; nothing done")
    spark = ctx.spark
    per_slot = options.read_bytes_per_s / max(1, spark.sparkContext.defaultParallelism)
    tasks, scans = build_tasks(work, ns, ctx.run_id, per_slot, options.compression_level)
    with ctx.phase("rewrite"):
        results, scan_errors = rewrite_partitions(spark, store, tasks, scans)
    by_partition: dict[tuple[str, int], list[RewriteResult]] = {}
    for result in results:
        by_partition.setdefault((result.topic, result.partition), []).append(result)
    unreadable: dict[tuple[str, int], str] = {}
    for topic, partition, message in scan_errors:
        unreadable.setdefault((topic, partition), message)
    outcomes: list[PartitionOutcome] = []
    paused = False
    with ctx.phase("commit"):
        for plan in work:
            mine = by_partition.get((plan.topic, plan.partition), [])
            outcomes.append(commit_one(ctx, plan, mine, unreadable, paused, before_commit))
            paused = paused or outcomes[-1].status == PAUSED
    return run_result(plans, skipped + outcomes, paused=paused, now_ms=now_ms)


def run(
    options: CompactionOptions | JobOptions | argparse.Namespace | Sequence[str] | None = None,
    spark: SparkSession | None = None,
    *,
    clock: Clock | None = None,
    before_commit: Callable[[PartitionPlan], None] | None = None,
) -> dict[str, Any]:
    """Compact a namespace once; the run summary.

    ``clock`` (ms) fixes "now" for ``min.compaction.lag.ms``; ``before_commit``
    is called on the driver with each partition's plan just before its
    replace (tests race other writers there).
    """
    opts = common.coerce_options(options, build_parser(), CompactionOptions)
    return common.execute(
        JOB, opts, lambda ctx: _body(ctx, opts, clock or now_ms, before_commit), spark
    )


def main(argv: Sequence[str] | None = None) -> int:
    return common.main(run, build_parser(), argv)
