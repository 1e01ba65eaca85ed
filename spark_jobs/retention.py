r"""Retention: drop whole segments past retention.ms / retention.bytes, delete removed objects later.

For every partition of every topic (or of ``--topics``), on the driver:

1. Plan, as Kafka's log cleaner does for ``cleanup.policy`` ``delete``, always
   a prefix of the live segments (oldest first) so the log has no holes:

   - segments wholly below the log start offset (any policy, as in Kafka);
   - then, with ``delete`` in ``cleanup.policy``, segments whose newest
     timestamp (``max_timestamp``; ``created_ms`` if the batches carried none)
     is more than ``retention.ms`` old (-1: never);
   - then the oldest segments while the partition stays at or above
     ``retention.bytes`` without them (-1: unlimited).  This is Kafka's rule:
     a segment goes only if the remaining live bytes still reach the limit,
     so a partition never drops below ``retention.bytes`` and may exceed it
     by less than one segment.

   The newest live segment is never removed.  It holds the high watermark -
   1 (the daemon seals segments, so there is no "active" one to protect as in
   Kafka), and keeping it means the log start offset, moved to the base of the
   first segment left, never passes the high watermark.

2. Commit: one catalog commit per partition removes the segments (they become
   tombstones with the run's time) and advances the log start offset.  A lost
   race is retried by `PartitionCatalog` against the newer state (a segment the
   daemon added meanwhile stays); if a segment to remove was replaced or
   removed meanwhile (compaction, another run), the commit aborts for that
   partition and the run reports a conflict; the next run plans again.

Then, in Spark executors, one task per partition (`sweep_partition`): list the
partition's directory, load the catalog, and physically delete

- the objects of tombstones removed at least ``--delete-grace`` ago (default
  1 h; at most the catalog's tombstone retention, 1 h, because the catalog
  forgets tombstones after that and could not honour a longer grace);
- orphans: ``.kfs``/``.index`` objects in the partition's directory that
  neither a live segment nor a tombstone names (a crash between upload and
  commit, a tombstone forgotten before its objects went), once the object is
  at least ``--orphan-grace`` old by its last-modified time (default 24 h,
  never less than 1 h: the daemon uploads before it commits).

The listing happens before the catalog load, so an object committed before the
load is known to be live; the catalog is refreshed once more just before
deleting, and anything live (or a young tombstone) then is spared.  A live
object is never deleted.  ``_log/`` (commit expiry is the checkpoint job's) and
files of other kinds are never touched.

``--dry-run`` plans, lists and reports what would go; it commits and deletes
nothing.  The emergency pause flag stops the job before it starts, before the
commits and in every executor task before it deletes.  Every step is
idempotent: a killed run leaves a consistent catalog, and a rerun continues.

    spark-submit spark_jobs/retention.py --store-url s3://bucket/kfs --namespace prod \
        [--topics a,b] [--delete-grace 1h] [--orphan-grace 24h] [--dry-run]
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kfs_core.catalog import (
    TOMBSTONE_RETENTION_MS,
    PartitionCatalog,
    PartitionState,
    SegmentEntry,
    TopicConfig,
    TopicRegistry,
    layout,
)
from kfs_core.clock import now_ms
from kfs_core.errors import (
    CatalogCommitConflict,
    InvalidCatalogAction,
    KfsError,
    ReplaceConflict,
)
from kfs_core.maintenance_pause import is_paused
from kfs_core.reports import RETENTION_JOB
from kfs_core.storage import ObjectStore
from spark_jobs import common
from spark_jobs.common import (
    STATUS_PAUSED,
    JobContext,
    JobOptions,
    JobResult,
    UsageError,
    conclude,
)

JOB = RETENTION_JOB

HOUR_MS = 3_600_000
DEFAULT_DELETE_GRACE_MS = HOUR_MS
DEFAULT_ORPHAN_GRACE_MS = 24 * HOUR_MS
MIN_ORPHAN_GRACE_MS = HOUR_MS
_DRIVER_THREADS = 16
#: Plans per partition when every retry of a commit lost to other writers.
_PLAN_ATTEMPTS = 3

Clock = Callable[[], int]


# --- options ------------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": HOUR_MS, "d": 24 * HOUR_MS}


def parse_duration_ms(text: str) -> int:
    """``"90s"``, ``"30m"``, ``"1h"``, ``"7d"``, ``"250ms"`` or plain milliseconds, in ms."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(
            f"not a duration: {text!r} (use e.g. 500ms, 90s, 30m, 1h, 7d or milliseconds)"
        )
    return int(match.group(1)) * _UNIT_MS[match.group(2) or "ms"]


def format_duration_ms(ms: int) -> str:
    for unit in ("d", "h", "m", "s"):
        if ms and ms % _UNIT_MS[unit] == 0:
            return f"{ms // _UNIT_MS[unit]}{unit}"
    return f"{ms}ms"


def duration_arg(text: str) -> int:
    """The argparse ``type`` for durations."""
    try:
        return parse_duration_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@dataclass(frozen=True)
class RetentionOptions(JobOptions):
    """`JobOptions` plus the two grace periods (milliseconds)."""

    delete_grace_ms: int = DEFAULT_DELETE_GRACE_MS
    orphan_grace_ms: int = DEFAULT_ORPHAN_GRACE_MS

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.orphan_grace_ms < MIN_ORPHAN_GRACE_MS:
            raise UsageError(
                f"--orphan-grace {format_duration_ms(self.orphan_grace_ms)} is too short: "
                f"the minimum is {format_duration_ms(MIN_ORPHAN_GRACE_MS)}, because the daemon "
                "uploads segments before it commits them"
            )
        if not 0 <= self.delete_grace_ms <= TOMBSTONE_RETENTION_MS:
            raise UsageError(
                f"--delete-grace {format_duration_ms(self.delete_grace_ms)} is out of range: "
                f"0 to {format_duration_ms(TOMBSTONE_RETENTION_MS)} (the catalog forgets "
                "removed segments after that, so a longer grace could not be honoured)"
            )


def build_parser() -> argparse.ArgumentParser:
    parser = common.job_parser(JOB, __doc__)
    parser.add_argument(
        "--delete-grace",
        dest="delete_grace_ms",
        type=duration_arg,
        metavar="DURATION",
        default=DEFAULT_DELETE_GRACE_MS,
        help="delete removed segments' objects this long after their removal (default 1h)",
    )
    parser.add_argument(
        "--orphan-grace",
        dest="orphan_grace_ms",
        type=duration_arg,
        metavar="DURATION",
        default=DEFAULT_ORPHAN_GRACE_MS,
        help="delete uncommitted objects this old (default 24h, at least 1h)",
    )
    return parser


# --- planning (pure) ---------------------------------------------------------------


@dataclass(frozen=True)
class RetentionPlan:
    """The segments one partition loses (oldest first) and why, and its new log start offset."""

    topic: str
    partition: int
    version: int
    remove: tuple[SegmentEntry, ...]
    reasons: tuple[str, ...]  # per removed segment: "log_start", "time" or "size"
    log_start_offset: int
    new_log_start_offset: int | None  # None: unchanged

    @property
    def bytes(self) -> int:
        return sum(s.size_bytes for s in self.remove)


def segment_time_ms(segment: SegmentEntry) -> int:
    """The time retention.ms is measured from: the newest record timestamp, else the seal time."""
    return segment.max_timestamp if segment.max_timestamp >= 0 else segment.created_ms


def plan_retention(state: PartitionState, config: TopicConfig, now_ms: int) -> RetentionPlan:
    """What retention removes from ``state`` at ``now_ms`` (see the module docstring)."""
    segments = state.segments
    candidates = segments[:-1]  # the newest live segment always stays
    remove: list[SegmentEntry] = []
    reasons: list[str] = []

    def take_while(reason: str, predicate: Callable[[SegmentEntry], bool]) -> None:
        while len(remove) < len(candidates) and predicate(candidates[len(remove)]):
            remove.append(candidates[len(remove)])
            reasons.append(reason)

    take_while("log_start", lambda s: s.last_offset < state.log_start_offset)
    if config.deletes and config.retention_ms >= 0:
        take_while("time", lambda s: now_ms - segment_time_ms(s) > config.retention_ms)
    if config.deletes and config.retention_bytes >= 0:
        excess = [sum(s.size_bytes for s in segments[len(remove) :]) - config.retention_bytes]

        def over_limit(s: SegmentEntry) -> bool:
            if excess[0] - s.size_bytes < 0:
                return False
            excess[0] -= s.size_bytes
            return True

        take_while("size", over_limit)
    new_start = None
    if remove and segments[len(remove)].base_offset > state.log_start_offset:
        new_start = segments[len(remove)].base_offset
    return RetentionPlan(
        topic=state.topic,
        partition=state.partition,
        version=state.version,
        remove=tuple(remove),
        reasons=tuple(reasons),
        log_start_offset=state.log_start_offset,
        new_log_start_offset=new_start,
    )


# --- committing (driver) ----------------------------------------------------------------


@dataclass(frozen=True)
class RemovalOutcome:
    """What the commit step did to one partition.

    ``status``: ``removed``, ``would_remove`` (dry run), ``nothing``,
    ``conflict`` (the partition changed under the commit; nothing changed) or
    ``error``.
    """

    plan: RetentionPlan
    status: str
    version: int
    message: str = ""


def apply_retention(
    store: ObjectStore,
    namespace: str,
    topic: str,
    partition: int,
    config: TopicConfig,
    now_ms: int,
    *,
    dry_run: bool = False,
) -> RemovalOutcome:
    """Load, plan and (unless ``dry_run``) commit retention for one partition.

    Never raises for a catalog conflict or error: they are the outcome's status.
    """
    catalog = PartitionCatalog(store, namespace, topic, partition, clock=lambda: now_ms)
    for attempt in range(1, _PLAN_ATTEMPTS + 1):
        try:
            plan = plan_retention(catalog.refresh(), config, now_ms)
        except KfsError as exc:
            empty = RetentionPlan(topic, partition, -1, (), (), 0, None)
            return RemovalOutcome(empty, "error", -1, f"{type(exc).__name__}: {exc}")
        if not plan.remove:
            return RemovalOutcome(plan, "nothing", plan.version)
        if dry_run:
            return RemovalOutcome(plan, "would_remove", plan.version)
        try:
            result = catalog.remove(
                plan.remove, removed_ms=now_ms, log_start_offset=plan.new_log_start_offset
            )
        except CatalogCommitConflict as exc:
            # Lost every race of one commit's retries (a very busy partition): plan again.
            if attempt < _PLAN_ATTEMPTS:
                continue
            return _conflict(plan, exc)
        except (ReplaceConflict, InvalidCatalogAction) as exc:
            return _conflict(plan, exc)
        except KfsError as exc:
            return RemovalOutcome(plan, "error", plan.version, f"{type(exc).__name__}: {exc}")
        return RemovalOutcome(plan, "removed", result.version)
    raise AssertionError("unreachable")  # pragma: no cover


def _conflict(plan: RetentionPlan, exc: KfsError) -> RemovalOutcome:
    return RemovalOutcome(
        plan,
        "conflict",
        plan.version,
        f"{plan.topic}/{plan.partition} changed while retention committed ({exc}); nothing "
        "removed, the next run plans again",
    )


# --- sweeping (executors) ----------------------------------------------------------------


@dataclass(frozen=True)
class SweepTask:
    """One partition to sweep: picklable, shipped to an executor."""

    namespace: str
    topic: str
    partition: int
    now_ms: int
    delete_grace_ms: int
    orphan_grace_ms: int
    dry_run: bool


@dataclass
class SweepResult:
    """What `sweep_partition` deleted (or, in a dry run, would delete) in one partition."""

    topic: str
    partition: int
    deleted: list[str] = field(default_factory=list)  # tombstones' objects past the grace
    orphans_deleted: list[str] = field(default_factory=list)
    pending: int = 0  # tombstones' objects still within the grace
    young_orphans: int = 0  # untracked objects younger than the orphan grace
    unknown: list[str] = field(default_factory=list)  # other files: never touched
    missing_live: list[str] = field(default_factory=list)  # live objects not in the listing
    paused: bool = False
    error: str = ""


def _is_kfs_object(name: str) -> bool:
    return name.endswith((layout.SEGMENT_SUFFIX, layout.INDEX_SUFFIX))


def sweep_partition(store: ObjectStore, task: SweepTask) -> SweepResult:
    """Delete one partition's tombstoned objects past the grace and old orphans (an executor task).

    Errors are returned in the result, not raised (one bad partition must not
    fail the Spark job).
    """
    result = SweepResult(task.topic, task.partition)
    try:
        _sweep(store, task, result)
    except (KfsError, OSError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result


def _sweep(store: ObjectStore, task: SweepTask, result: SweepResult) -> None:
    ns = task.namespace
    prefix = layout.join(ns, layout.partition_dir(task.topic, task.partition)) + "/"
    # List first: whatever was committed before the catalog load below is known to it.
    listed = {info.key: info for info in store.list(prefix) if "/" not in info.key[len(prefix) :]}
    catalog = PartitionCatalog(store, ns, task.topic, task.partition, clock=lambda: task.now_ms)
    state = catalog.load()

    def live_keys(s: PartitionState) -> set[str]:
        return {layout.join(ns, k) for seg in s.segments for k in (seg.key, seg.index_key)}

    def tombstones(s: PartitionState) -> dict[str, int]:
        return {
            layout.join(ns, k): t.removed_ms for t in s.tombstones for k in (t.key, t.index_key)
        }

    live = live_keys(state)
    tombstoned = tombstones(state)
    # Not listed but live: committed after the listing, or really missing.
    result.missing_live = sorted(k for k in live - listed.keys() if not store.exists(k))
    expired: list[str] = []
    orphans: list[str] = []
    for key, info in listed.items():
        if key in live:
            continue
        if key in tombstoned:
            if task.now_ms - tombstoned[key] >= task.delete_grace_ms:
                expired.append(key)
            else:
                result.pending += 1
        elif not _is_kfs_object(key[len(prefix) :]):
            result.unknown.append(key)
        elif task.now_ms - int(info.last_modified * 1000) >= task.orphan_grace_ms:
            orphans.append(key)
        else:
            result.young_orphans += 1
    if not expired and not orphans:
        return
    # Spare anything that became live (or a young tombstone) since the load.
    fresh = catalog.refresh()
    spared = live_keys(fresh) | {
        k
        for k, removed in tombstones(fresh).items()
        if task.now_ms - removed < task.delete_grace_ms
    }
    expired = sorted(k for k in expired if k not in spared)
    orphans = sorted(k for k in orphans if k not in spared)
    if task.dry_run:
        result.deleted, result.orphans_deleted = expired, orphans
        return
    if is_paused(store, ns):
        result.paused = True
        return
    for key in expired:
        store.delete(key)
        result.deleted.append(key)
    for key in orphans:
        store.delete(key)
        result.orphans_deleted.append(key)


# --- the job -------------------------------------------------------------------------------


def _topic_configs(
    store: ObjectStore, namespace: str, topics: Sequence[str] | None
) -> list[tuple[str, int, TopicConfig]]:
    registry = TopicRegistry(store, namespace)
    names = sorted(set(topics)) if topics is not None else registry.list_topics()
    pairs: list[tuple[str, int, TopicConfig]] = []
    for name in names:
        description = registry.describe(name)  # UnknownTopic for a typo
        pairs.extend((name, p, description.config) for p in range(description.partitions))
    return pairs


def _partition_report(outcome: RemovalOutcome, sweep: SweepResult | None) -> dict[str, Any]:
    plan = outcome.plan
    doc: dict[str, Any] = {
        "topic": plan.topic,
        "partition": plan.partition,
        "status": outcome.status,
        "version": outcome.version,
    }
    if outcome.message:
        doc["message"] = outcome.message
    if plan.remove:
        doc["removed"] = [
            {
                "key": s.key,
                "base_offset": s.base_offset,
                "last_offset": s.last_offset,
                "size_bytes": s.size_bytes,
                "max_timestamp": s.max_timestamp,
                "reason": reason,
            }
            for s, reason in zip(plan.remove, plan.reasons, strict=True)
        ]
        doc["log_start_offset"] = {"from": plan.log_start_offset, "to": plan.new_log_start_offset}
    if sweep is not None:
        for name in ("deleted", "orphans_deleted", "unknown", "missing_live"):
            if getattr(sweep, name):
                doc[name] = getattr(sweep, name)
        for name in ("pending", "young_orphans"):
            if getattr(sweep, name):
                doc[name] = getattr(sweep, name)
        if sweep.error:
            doc["sweep_error"] = sweep.error
    return doc


def _interesting(doc: dict[str, Any]) -> bool:
    return doc["status"] != "nothing" or any(
        k in doc for k in ("deleted", "orphans_deleted", "unknown", "missing_live", "sweep_error")
    )


def _print_dry_run(
    outcomes: Sequence[RemovalOutcome], sweeps: Sequence[SweepResult | None]
) -> None:
    """One line per segment or object a real run would remove or delete."""
    for outcome, sweep in zip(outcomes, sweeps, strict=True):
        plan = outcome.plan
        for segment, reason in zip(plan.remove, plan.reasons, strict=True):
            common.say(
                f"would remove {segment.key} (offsets {segment.base_offset}..{segment.last_offset}, "
                f"{segment.size_bytes} bytes, {reason})"
            )
        if plan.new_log_start_offset is not None:
            common.say(
                f"would move the log start offset of {plan.topic}/{plan.partition} from "
                f"{plan.log_start_offset} to {plan.new_log_start_offset}"
            )
        if sweep is not None:
            for key in sweep.deleted:
                common.say(f"would delete {key} (removed, grace passed)")
            for key in sweep.orphans_deleted:
                common.say(f"would delete {key} (orphan)")


def _body(ctx: JobContext, options: RetentionOptions, clock: Clock) -> JobResult:
    now_ms = clock()
    store, ns = ctx.store, ctx.namespace
    with ctx.phase("plan"):
        pairs = _topic_configs(store, ns, options.topics)
    if ctx.check_paused():
        return JobResult(STATUS_PAUSED, "emergency pause flag set before the commits; nothing done")
    with ctx.phase("commit"):

        def one(item: tuple[str, int, TopicConfig]) -> RemovalOutcome:
            topic, partition, config = item
            return apply_retention(
                store, ns, topic, partition, config, now_ms, dry_run=options.dry_run
            )

        with ThreadPoolExecutor(_DRIVER_THREADS) as pool:
            outcomes = list(pool.map(one, pairs))
    if ctx.check_paused():
        sweeps: list[SweepResult | None] = [None] * len(outcomes)
        paused = True
    else:
        tasks = [
            SweepTask(
                ns,
                topic,
                partition,
                now_ms,
                options.delete_grace_ms,
                options.orphan_grace_ms,
                options.dry_run,
            )
            for topic, partition, _ in pairs
        ]
        with ctx.phase("sweep"):
            results = (
                common.map_in_executors(ctx.spark, store, tasks, sweep_partition) if tasks else []
            )
        sweeps = list(results)
        paused = any(s.paused for s in results)

    if options.dry_run:
        _print_dry_run(outcomes, sweeps)
    removed = [o for o in outcomes if o.status in ("removed", "would_remove")]
    done = [s for s in sweeps if s is not None]
    counts = {
        "partitions": len(outcomes),
        "segments_removed": sum(len(o.plan.remove) for o in removed),
        "bytes_removed": sum(o.plan.bytes for o in removed),
        "log_start_advanced": sum(1 for o in removed if o.plan.new_log_start_offset is not None),
        "conflicts": sum(1 for o in outcomes if o.status == "conflict"),
        "objects_deleted": sum(len(s.deleted) for s in done),
        "orphans_deleted": sum(len(s.orphans_deleted) for s in done),
        "objects_pending": sum(s.pending for s in done),
        "missing_live_objects": sum(len(s.missing_live) for s in done),
        "errors": sum(1 for o in outcomes if o.status == "error") + sum(1 for s in done if s.error),
    }
    reports = [_partition_report(o, s) for o, s in zip(outcomes, sweeps, strict=True)]
    details = {
        "now_ms": now_ms,
        "delete_grace_ms": options.delete_grace_ms,
        "orphan_grace_ms": options.orphan_grace_ms,
        "partitions": [r for r in reports if _interesting(r)],
    }
    verb = "would remove" if options.dry_run else "removed"
    gone = "would delete" if options.dry_run else "deleted"
    message = (
        f"{verb} {counts['segments_removed']} segments ({counts['bytes_removed']} bytes) from "
        f"{counts['partitions']} partitions; {gone} {counts['objects_deleted']} removed and "
        f"{counts['orphans_deleted']} orphaned objects"
    )
    return conclude(
        message,
        counts,
        details,
        paused=paused,
        failed_partitions=counts["errors"],
        conflicts=counts["conflicts"],
    )


def run(
    options: JobOptions | argparse.Namespace | Sequence[str] | None = None,
    spark: Any = None,
    *,
    clock: Clock | None = None,
) -> dict[str, Any]:
    """Run retention once; the run summary.  ``clock`` (ms) fixes "now" (tests, backfills)."""
    opts = common.coerce_options(options, build_parser(), RetentionOptions)
    return common.execute(JOB, opts, lambda ctx: _body(ctx, opts, clock or now_ms), spark)


def main(argv: Sequence[str] | None = None) -> int:
    return common.main(run, build_parser(), argv)


if __name__ == "__main__":
    # Run the importable module, not this __main__ copy, so executors unpickle
    # the per-partition functions by reference to spark_jobs.retention.
    from spark_jobs.retention import main as _main

    common.exit_driver(_main())
