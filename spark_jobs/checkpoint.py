r"""Checkpoint: write catalog checkpoints, expire old commits, take named snapshots of the catalog.

Per partition, in a Spark executor task (`checkpoint_partition`):

1. Checkpoint.  A partition with at least ``--min-commits`` (default 10)
   commits since its last checkpoint (the ``_last_checkpoint`` pointer) gets
   one at its newest version (`PartitionCatalog.checkpoint`).  The daemon
   checkpoints every 10 commits itself; this catches up where it could not,
   and where other writers (compaction, retention) committed last.

2. Expire.  Commits are kept while they are among the last
   ``--retain-versions`` (default 100) versions *or* younger than
   ``--retain`` (default 7d, measured on commit timestamps); older ones go.
   Keeping the union means a quiet partition keeps its last 100 versions
   however old, and a busy one keeps a week of history for `state_at`.  The
   cut is the newest version outside both; `PartitionCatalog.expire_commits`
   keeps the newest checkpoint at or before it, points the pointer at it and
   deletes older files oldest first, so the catalog is readable at every
   instant.  Files younger than ``--min-commit-age`` (default 1h, at least
   10m) are never deleted, whatever the cut: a writer holding an older state
   could otherwise recreate an expired version.  ``--retain-versions 0`` or
   ``--retain 0`` drops that criterion.

Then, on request, a named snapshot of the namespace's catalog (see
`kfs_core.catalog.snapshots`): ``--snapshot NAME`` takes snapshot NAME (a name
in use is refused); ``--snapshot-every 1d`` takes one named
``auto-<UTC time>`` when the newest automatic snapshot is at least that old,
and ``--keep-auto-snapshots N`` then deletes all but the newest N automatic
ones (default 0: keep all).  The partition copies run in executors, the
manifest that makes the snapshot exist is written last, on the driver.

``--dry-run`` reports what would be checkpointed, expired and snapshotted and
writes nothing.  The emergency pause flag stops the job before it starts,
before the snapshot, and in every executor task.  Every step is idempotent
and a killed run leaves a readable catalog (an interrupted snapshot stays
invisible; running it again with the same name completes it).

    spark-submit spark_jobs/checkpoint.py --store-url s3://bucket/kfs --namespace prod \
        [--min-commits 10] [--retain-versions 100] [--retain 7d] \
        [--snapshot NAME | --snapshot-every 1d [--keep-auto-snapshots 14]] [--dry-run]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kfs_core.catalog import PartitionCatalog, TopicRegistry, layout
from kfs_core.catalog import snapshots as snaps
from kfs_core.catalog.checkpoints import COMMIT_EXPIRY_MIN_AGE_MS
from kfs_core.catalog.loader import HEAD_RECHECK_MS
from kfs_core.catalog.state import decode_pointer
from kfs_core.clock import now_ms
from kfs_core.errors import CatalogVersionNotFound, KfsError, ObjectNotFound
from kfs_core.maintenance_pause import is_paused
from kfs_core.reports import CHECKPOINT_JOB
from kfs_core.storage import ObjectStore
from spark_jobs import common
from spark_jobs.common import (
    JobContext,
    JobOptions,
    JobResult,
    UsageError,
    conclude,
)
from spark_jobs.retention import duration_arg, format_duration_ms

JOB = CHECKPOINT_JOB

DEFAULT_MIN_COMMITS = 10
DEFAULT_RETAIN_VERSIONS = 100
DEFAULT_RETAIN_MS = 7 * 24 * 3_600_000
#: The shortest ``--min-commit-age`` the command line accepts: a reader that
#: stops at a missing commit re-reads the pointer only if its newest commit is
#: older than `HEAD_RECHECK_MS`.
MIN_COMMIT_AGE_FLOOR_MS = HEAD_RECHECK_MS

Clock = Callable[[], int]


# --- options -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointOptions(JobOptions):
    """`JobOptions` plus checkpoint, expiry and snapshot settings (durations in ms).

    ``min_commit_age_ms`` below `MIN_COMMIT_AGE_FLOOR_MS` is refused on the
    command line; the API accepts it for tests and offline repairs, when no
    writer or reader can be running.
    """

    min_commits: int = DEFAULT_MIN_COMMITS
    retain_versions: int = DEFAULT_RETAIN_VERSIONS
    retain_ms: int = DEFAULT_RETAIN_MS
    min_commit_age_ms: int = COMMIT_EXPIRY_MIN_AGE_MS
    snapshot: str | None = None
    snapshot_every_ms: int | None = None
    keep_auto_snapshots: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("retain_versions", "retain_ms", "min_commit_age_ms", "keep_auto_snapshots"):
            if getattr(self, name) < 0:
                raise UsageError(f"--{name.replace('_', '-')} must not be negative")
        if self.min_commits < 1:
            raise UsageError(f"--min-commits must be at least 1, got {self.min_commits}")
        if self.snapshot_every_ms is not None and self.snapshot_every_ms <= 0:
            raise UsageError("--snapshot-every must be a positive duration")
        if self.snapshot is not None:
            try:
                snaps.validate_snapshot_name(self.snapshot)
            except snaps.InvalidSnapshotName as exc:
                raise UsageError(str(exc)) from None
            if self.snapshot.startswith(snaps.AUTO_PREFIX):
                raise UsageError(
                    f"snapshot names starting with {snaps.AUTO_PREFIX!r} are reserved for "
                    "--snapshot-every"
                )


def _min_commit_age(text: str) -> int:
    value = duration_arg(text)
    if value < MIN_COMMIT_AGE_FLOOR_MS:
        raise argparse.ArgumentTypeError(
            f"{text} is too short: the minimum is {format_duration_ms(MIN_COMMIT_AGE_FLOOR_MS)}"
        )
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = common.job_parser(JOB, __doc__)
    parser.add_argument(
        "--min-commits",
        type=int,
        metavar="N",
        default=DEFAULT_MIN_COMMITS,
        help="checkpoint partitions with at least this many commits since the last checkpoint",
    )
    parser.add_argument(
        "--retain-versions",
        type=int,
        metavar="N",
        default=DEFAULT_RETAIN_VERSIONS,
        help="keep commits among the newest N versions (default 100; 0: no such rule)",
    )
    parser.add_argument(
        "--retain",
        dest="retain_ms",
        type=duration_arg,
        metavar="DURATION",
        default=DEFAULT_RETAIN_MS,
        help="... or younger than this (default 7d; 0: no such rule)",
    )
    parser.add_argument(
        "--min-commit-age",
        dest="min_commit_age_ms",
        type=_min_commit_age,
        metavar="DURATION",
        default=COMMIT_EXPIRY_MIN_AGE_MS,
        help="never delete commit files younger than this (default 1h, at least 10m)",
    )
    parser.add_argument(
        "--snapshot", default=None, metavar="NAME", help="take a snapshot with this name"
    )
    parser.add_argument(
        "--snapshot-every",
        dest="snapshot_every_ms",
        type=duration_arg,
        metavar="DURATION",
        default=None,
        help="take an automatic snapshot when the newest one is this old (e.g. 1d)",
    )
    parser.add_argument(
        "--keep-auto-snapshots",
        type=int,
        metavar="N",
        default=0,
        help="delete all but the newest N automatic snapshots (default 0: keep all)",
    )
    return parser


# --- per partition (executors) --------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointTask:
    """One partition to checkpoint and expire: picklable, shipped to an executor."""

    namespace: str
    topic: str
    partition: int
    now_ms: int
    min_commits: int
    retain_versions: int
    retain_ms: int
    min_commit_age_ms: int
    dry_run: bool


@dataclass
class CheckpointResult:
    """What `checkpoint_partition` did (or, in a dry run, would do) to one partition."""

    topic: str
    partition: int
    version: int = -1  # the newest catalog version
    last_checkpoint: int = -1  # the pointer's version before this run
    checkpointed: int = -1  # the version checkpointed now (-1: none)
    cut: int = -1  # expiry cut (-1: nothing may expire)
    kept_checkpoint: int = -1  # the checkpoint the log now starts from
    expired: int = 0  # commit and checkpoint files deleted
    complete: bool = True  # False: files younger than min_commit_age stopped the expiry
    paused: bool = False
    error: str = ""


def _pointer_version(store: ObjectStore, catalog: PartitionCatalog) -> int:
    try:
        data = store.get(catalog.pointer_key)
    except ObjectNotFound:
        return -1
    try:
        return decode_pointer(data, catalog.pointer_key).version
    except KfsError:
        return -1  # an unreadable pointer is only a hint; a checkpoint rewrites it


def expiry_cut(
    catalog: PartitionCatalog, head: int, now_ms: int, retain_versions: int, retain_ms: int
) -> int:
    """The newest version that may be expired; -1 if every version must stay.

    A version stays while it is among the last ``retain_versions`` or younger
    than ``retain_ms`` (commit timestamps).

    Finds the age boundary by binary search over commit timestamps (a commit
    that no longer exists was expired, so it is old): about log2(versions) GETs.
    """
    cut = head - retain_versions
    if cut < 0:
        return -1
    if retain_ms <= 0:
        return cut
    cutoff = now_ms - retain_ms

    def old(version: int) -> bool:
        try:
            return catalog.read_commit(version).timestamp_ms < cutoff
        except CatalogVersionNotFound:
            return True

    if old(cut):
        return cut
    lo, hi = -1, cut  # old(lo) (a virtual -1), not old(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if old(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _plan_expiry(store: ObjectStore, catalog: PartitionCatalog, cut: int) -> tuple[int, int]:
    """(checkpoint kept, files below it) as `expire_commits` would see them; for dry runs."""
    prefix = layout.log_prefix(catalog.namespace, catalog.topic, catalog.partition)
    entries: list[tuple[int, bool]] = []
    for info in store.list(prefix):
        parsed = layout.parse_log_name(info.key[len(prefix) :])
        if parsed is None:
            continue
        if parsed[0] > cut:
            break
        entries.append(parsed)
    checkpoints = [v for v, is_checkpoint in entries if is_checkpoint]
    if not checkpoints:
        return -1, 0
    keep = checkpoints[-1]
    return keep, sum(1 for v, _ in entries if v < keep)


def checkpoint_partition(store: ObjectStore, task: CheckpointTask) -> CheckpointResult:
    """Checkpoint and expire one partition (an executor task); errors go into the result."""
    result = CheckpointResult(task.topic, task.partition)
    try:
        _checkpoint(store, task, result)
    except (KfsError, OSError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result


def _checkpoint(store: ObjectStore, task: CheckpointTask, result: CheckpointResult) -> None:
    catalog = PartitionCatalog(
        store, task.namespace, task.topic, task.partition, clock=lambda: task.now_ms
    )
    state = catalog.load()
    result.version = state.version
    if state.version < 0:
        return
    if not task.dry_run and is_paused(store, task.namespace):
        result.paused = True
        return
    result.last_checkpoint = _pointer_version(store, catalog)
    if state.version - result.last_checkpoint >= task.min_commits:
        result.checkpointed = state.version if task.dry_run else catalog.checkpoint()
    result.cut = expiry_cut(
        catalog, state.version, task.now_ms, task.retain_versions, task.retain_ms
    )
    if result.cut < 0:
        return
    if task.dry_run:
        result.kept_checkpoint, result.expired = _plan_expiry(store, catalog, result.cut)
        return
    expired = catalog.expire_commits(result.cut, min_age_ms=task.min_commit_age_ms)
    result.kept_checkpoint = expired.checkpoint_version
    result.expired = expired.deleted
    result.complete = expired.complete


# --- snapshots (driver + executors) ------------------------------------------------------------


def _snapshot_name(
    ctx: JobContext, options: CheckpointOptions, now_ms: int
) -> tuple[str | None, list[snaps.SnapshotManifest]]:
    """The snapshot this run takes (None: none) and the existing automatic snapshots."""
    autos = [
        m
        for m in snaps.list_snapshots(ctx.store, ctx.namespace)
        if m.name.startswith(snaps.AUTO_PREFIX)
    ]
    if options.snapshot is not None:
        return options.snapshot, autos
    if options.snapshot_every_ms is None:
        return None, autos
    if autos and now_ms - autos[-1].created_ms < options.snapshot_every_ms:
        return None, autos
    name = snaps.auto_snapshot_name(now_ms)
    return (None if any(m.name == name for m in autos) else name), autos


def _take_snapshot(
    ctx: JobContext, options: CheckpointOptions, name: str, now_ms: int
) -> dict[str, Any]:
    store, ns = ctx.store, ctx.namespace
    if options.dry_run:
        registry = TopicRegistry(store, ns)
        topics = sorted(set(options.topics)) if options.topics else registry.list_topics()
        partitions = sum(registry.get(t).partitions for t in topics)
        return {"name": name, "taken": False, "topics": len(topics), "partitions": partitions}
    records, tasks = snaps.prepare_snapshot(store, ns, name, options.topics)
    summaries = (
        common.map_in_executors(ctx.spark, store, tasks, snaps.snapshot_partition) if tasks else []
    )
    manifest = snaps.finish_snapshot(
        store, ns, name, records, list(zip(tasks, summaries, strict=True)), created_ms=now_ms
    )
    return {
        "name": name,
        "taken": True,
        "topics": len(manifest.topics),
        "partitions": manifest.partition_count,
        "segments": manifest.segment_count,
        "size_bytes": manifest.size_bytes,
    }


def _prune_auto_snapshots(
    ctx: JobContext, options: CheckpointOptions, autos: list[str]
) -> list[str]:
    """Names of the automatic snapshots beyond the newest ``keep_auto_snapshots`` (deleted)."""
    if options.keep_auto_snapshots <= 0 or len(autos) <= options.keep_auto_snapshots:
        return []
    doomed = autos[: len(autos) - options.keep_auto_snapshots]
    if not options.dry_run:
        for name in doomed:
            snaps.delete_snapshot(ctx.store, ctx.namespace, name)
    return doomed


# --- the job ----------------------------------------------------------------------------------


def _body(ctx: JobContext, options: CheckpointOptions, clock: Clock) -> JobResult:
    now_ms = clock()
    store, ns = ctx.store, ctx.namespace
    with ctx.phase("plan"):
        pairs = common.list_partitions(store, ns, options.topics)
    tasks = [
        CheckpointTask(
            ns,
            topic,
            partition,
            now_ms,
            options.min_commits,
            options.retain_versions,
            options.retain_ms,
            options.min_commit_age_ms,
            options.dry_run,
        )
        for topic, partition in pairs
    ]
    with ctx.phase("checkpoint"):
        results = (
            common.map_in_executors(ctx.spark, store, tasks, checkpoint_partition) if tasks else []
        )
    paused = any(r.paused for r in results)
    snapshot: dict[str, Any] | None = None
    pruned: list[str] = []
    if not paused:
        name, autos = _snapshot_name(ctx, options, now_ms)
        if name is not None:
            if not options.dry_run and ctx.check_paused():
                paused = True
            else:
                with ctx.phase("snapshot"):
                    snapshot = _take_snapshot(ctx, options, name, now_ms)
        auto_names = [m.name for m in autos]
        if snapshot is not None and name is not None and name.startswith(snaps.AUTO_PREFIX):
            auto_names.append(name)
        if not paused:
            pruned = _prune_auto_snapshots(ctx, options, auto_names)

    errors = [r for r in results if r.error]
    counts = {
        "partitions": len(results),
        "checkpoints_written": sum(1 for r in results if r.checkpointed >= 0),
        "commit_files_expired": sum(r.expired for r in results),
        "partitions_expiry_incomplete": sum(1 for r in results if not r.complete),
        "snapshots_taken": 1 if snapshot is not None and snapshot["taken"] else 0,
        "snapshots_deleted": 0 if options.dry_run else len(pruned),
        "errors": len(errors),
    }
    details: dict[str, Any] = {
        "now_ms": now_ms,
        "partitions": [
            {k: v for k, v in vars(r).items() if k not in ("paused",)}
            for r in results
            if r.checkpointed >= 0 or r.expired or r.error or not r.complete
        ],
    }
    if snapshot is not None:
        details["snapshot"] = snapshot
    if pruned:
        details["auto_snapshots_deleted"] = pruned
    would = "would " if options.dry_run else ""
    message = (
        f"{would}checkpoint {counts['checkpoints_written']} of {counts['partitions']} "
        f"partitions, {would}expire {counts['commit_files_expired']} commit files"
    )
    if snapshot is not None:
        message += f", {would}take snapshot {snapshot['name']!r}"
    if pruned:
        message += f", {would}delete {len(pruned)} automatic snapshots"
    first = f"{errors[0].topic}/{errors[0].partition}: {errors[0].error}" if errors else ""
    return conclude(
        message,
        counts,
        details,
        paused=paused,
        failed_partitions=len(errors),
        first_failure=first,
    )


def _refuse_existing_snapshot(options: CheckpointOptions) -> None:
    """A snapshot name in use is a usage error, refused before the run starts."""
    assert options.snapshot is not None
    try:
        store = options.open_store()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        taken = store.exists(snaps.manifest_key(options.namespace, options.snapshot))
    finally:
        store.close()
    if taken:
        raise UsageError(f"snapshot {options.snapshot!r} already exists; choose another name")


def run(
    options: JobOptions | argparse.Namespace | Sequence[str] | None = None,
    spark: Any = None,
    *,
    clock: Clock | None = None,
) -> dict[str, Any]:
    """Run the checkpoint job once; the run summary.  ``clock`` (ms) fixes "now" (tests)."""
    opts = common.coerce_options(options, build_parser(), CheckpointOptions)
    if opts.snapshot is not None:
        _refuse_existing_snapshot(opts)
    return common.execute(JOB, opts, lambda ctx: _body(ctx, opts, clock or now_ms), spark)


def main(argv: Sequence[str] | None = None) -> int:
    return common.main(run, build_parser(), argv)


if __name__ == "__main__":
    # Run the importable module, not this __main__ copy, so executors unpickle
    # the per-partition functions by reference to spark_jobs.checkpoint.
    from spark_jobs.checkpoint import main as _main

    common.exit_driver(_main())
