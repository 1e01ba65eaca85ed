"""Spark plumbing: the key map as a shuffle (`drop_offsets`) and the rewrites (`rewrite_partitions`).

Every executor-side function here is a thin loop over `spark_jobs.compaction.tasks`,
with one `ReadThrottle` per Spark task; the functions are shipped by
reference to this importable module (see `spark_jobs/compaction/__main__.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from kfs_core.errors import KfsError
from kfs_core.storage import ObjectStore
from spark_jobs.compaction.tasks import (
    KEY_SCHEMA,
    KeyScanTask,
    RewriteResult,
    RewriteTask,
    rewrite_group,
    scan_keys,
)
from spark_jobs.compaction.throttle import ReadThrottle

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext
    from pyspark.sql import SparkSession


def _scan_partition(
    store: ObjectStore, tasks: Iterable[KeyScanTask], errors: Any
) -> Iterator[tuple[Any, ...]]:
    throttle = ReadThrottle()
    try:
        for task in tasks:
            try:
                yield from scan_keys(store, task, throttle)
            except (KfsError, OSError, ValueError) as exc:
                # The partition is not committed (see `rewrite_partitions`); the rows
                # already emitted only ever make the rewrite keep more.
                errors.add([(task.segment.topic, task.segment.partition, f"{exc}")])
    finally:
        store.close()


def _rewrite_partition(
    store: ObjectStore, items: Iterable[tuple[int, tuple[RewriteTask, list[int] | None]]]
) -> Iterator[RewriteResult]:
    throttle = ReadThrottle()
    try:
        for _, (task, drop) in items:
            yield rewrite_group(store, task, drop, throttle)
    finally:
        store.close()


class _ListParam:
    """A Spark accumulator of lists (duck-typed ``AccumulatorParam``: pyspark stays a lazy import)."""

    def zero(self, value: list[Any]) -> list[Any]:
        return []

    def addInPlace(self, value1: list[Any], value2: list[Any]) -> list[Any]:  # Spark's name
        value1.extend(value2)
        return value1


def _list_accumulator(sc: SparkContext) -> Any:
    return sc.accumulator([], _ListParam())  # type: ignore[arg-type]


def drop_offsets(
    spark: SparkSession, store: ObjectStore, scans: Sequence[KeyScanTask], errors: Any
) -> RDD[tuple[int, list[int]]]:
    """Per group id, the offsets key compaction drops: the key map as a Spark shuffle.

    Lazy: nothing is read until the result is used.  ``errors`` (a list
    accumulator) collects ``(topic, partition, message)`` of unreadable segments.
    """
    from pyspark.sql import functions as F

    sc = spark.sparkContext
    slices = min(len(scans), max(1, sc.defaultParallelism * 4))
    rows = sc.parallelize(list(scans), slices).mapPartitions(
        lambda part: _scan_partition(store, part, errors)
    )
    frame = spark.createDataFrame(rows, KEY_SCHEMA)
    latest = (
        frame.where(~F.col("clean"))
        .groupBy("topic", "partition", "map_key")
        .agg(F.max("offset").alias("latest"))
    )
    superseded = F.col("latest").isNotNull() & (F.col("offset") < F.col("latest"))
    drops = (
        frame.join(latest, ["topic", "partition", "map_key"], "left")
        .where(superseded | F.col("expired"))
        .groupBy("grp")
        .agg(F.collect_list("offset").alias("offsets"))
    )
    return drops.rdd.map(lambda row: (int(row["grp"]), list(row["offsets"])))


def rewrite_partitions(
    spark: SparkSession,
    store: ObjectStore,
    tasks: Sequence[RewriteTask],
    scans: Sequence[KeyScanTask],
) -> tuple[list[RewriteResult], list[tuple[str, int, str]]]:
    """Run every rewrite task (joined with its group's drop offsets); results in task order.

    Also returns ``(topic, partition, message)`` for segments the key scan
    could not read: those partitions must not be committed.
    """
    if not tasks:
        return [], []
    sc = spark.sparkContext
    slices = min(len(tasks), max(1, sc.defaultParallelism * 4))
    errors = _list_accumulator(sc)
    keyed = sc.parallelize([(t.group_id, t) for t in tasks], slices)
    if scans:
        joined = keyed.leftOuterJoin(drop_offsets(spark, store, scans, errors), slices)
    else:
        joined = keyed.mapValues(lambda task: (task, None))
    results = joined.mapPartitions(lambda part: _rewrite_partition(store, part)).collect()
    order = {t.group_id: i for i, t in enumerate(tasks)}
    results.sort(key=lambda r: order[r.group_id])
    return results, sorted(set(errors.value))
