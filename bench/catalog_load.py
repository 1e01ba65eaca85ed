"""How long a cold load of a partition's catalog takes after a busy day of commits.

At the default 500 ms flush a busy partition commits twice a second: about
170,000 commits a day.  `bench_catalog_load` writes that many commits through
the real `PartitionCatalog` (each adds one small segment; after every 32 adds
one replace merges the 32 oldest small segments, as compaction would), on a
simulated clock that advances 500 ms per commit so tombstones age as they
would over the day.  Every `expire_every` commits it expires old commit files,
as the checkpoint job would (that also keeps a moto server's memory bounded).
Then a fresh `PartitionCatalog` loads the state cold, and the bench reports
the load time and the store requests the load made.

    python bench/catalog_load.py [--commits N] [--backend local|s3|both]

S3 runs against a ``python -m moto.server`` started on a free loopback port
(`testkit.moto_s3.moto_server`).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kfs_core.catalog import PartitionCatalog, SegmentEntry
from kfs_core.storage.base import ObjectStore
from testkit.moto_s3 import moto_server

FLUSH_MS = 500
SMALL_SEGMENT_RECORDS = 100
SMALL_SEGMENT_BYTES = 4 << 20
MERGE_EVERY = 32


#: When the benchmarks' filled-in segments were made: long ago, so nothing
#: (a producer-state rebuild, retention by time) wants to read them.
OLD_MS = 1_700_000_000_000


def bench_segment(
    topic: str,
    partition: int,
    base_offset: int,
    created_ms: int,
    *,
    min_timestamp: int | None = None,
) -> SegmentEntry:
    """A segment entry of `SMALL_SEGMENT_RECORDS` records from ``base_offset`` (no object behind it)."""
    return SegmentEntry.for_partition(
        topic,
        partition,
        base_offset=base_offset,
        last_offset=base_offset + SMALL_SEGMENT_RECORDS - 1,
        record_count=SMALL_SEGMENT_RECORDS,
        size_bytes=SMALL_SEGMENT_BYTES,
        index_size_bytes=28,
        min_timestamp=created_ms if min_timestamp is None else min_timestamp,
        max_timestamp=created_ms,
        codec=4,
        created_ms=created_ms,
    )


def fill_partition(catalog: PartitionCatalog, segments: int) -> None:
    """Commit ``segments`` more entries after the partition's high watermark, 100 a commit.

    Entries only, made at `OLD_MS`: a partition as long as weeks of traffic
    make it, for benchmarks that only add at its end.
    """
    for first in range(0, segments, 100):
        offset = catalog.state.high_watermark
        catalog.add_segments(
            [
                bench_segment(
                    catalog.topic, catalog.partition, offset + i * SMALL_SEGMENT_RECORDS, OLD_MS
                )
                for i in range(min(100, segments - first))
            ]
        )


def bench_catalog_load(
    store: ObjectStore,
    commits: int = 170_000,
    *,
    namespace: str = "bench",
    topic: str = "busy",
    checkpoint_interval: int = 10,
    expire_every: int = 1000,
    loads: int = 5,
    progress: bool = False,
) -> dict[str, Any]:
    """Write ``commits`` commits, then time ``loads`` cold loads; a dict of the figures."""
    now = [time.time_ns() // 1_000_000 - commits * FLUSH_MS]
    writer = PartitionCatalog(
        store,
        namespace,
        topic,
        0,
        checkpoint_interval=checkpoint_interval,
        clock=lambda: now[0],
        writer="bench",
    )
    writer.load()
    small: list[SegmentEntry] = []
    next_offset = 0
    adds_since_merge = 0
    started = time.perf_counter()
    for version in range(commits):
        now[0] += FLUSH_MS
        if adds_since_merge == MERGE_EVERY:
            inputs, small = small[:MERGE_EVERY], small[MERGE_EVERY:]
            writer.replace(inputs, [_merged(topic, inputs, now[0])])
            adds_since_merge = 0
        else:
            segment = bench_segment(topic, 0, next_offset, now[0], min_timestamp=now[0] - FLUSH_MS)
            writer.add_segments([segment])
            small.append(segment)
            next_offset += SMALL_SEGMENT_RECORDS
            adds_since_merge += 1
        if expire_every and version % expire_every == expire_every - 1:
            writer.expire_commits(version - 2 * checkpoint_interval, min_age_ms=0)
        if progress and version % 10_000 == 9_999:
            rate = (version + 1) / (time.perf_counter() - started)
            print(f"  {version + 1:,} commits ({rate:,.0f}/s)", file=sys.stderr, flush=True)
    write_seconds = time.perf_counter() - started
    expected = writer.state

    timings = []
    stats = None
    for _ in range(loads):
        reader = PartitionCatalog(
            store, namespace, topic, 0, checkpoint_interval=checkpoint_interval
        )
        start = time.perf_counter()
        state = reader.load()
        timings.append(time.perf_counter() - start)
        if state != expected:
            raise AssertionError("a cold load disagrees with the writer's state")
        stats = reader.io_stats()
    assert stats is not None
    pointer_version = int(store.get(writer.pointer_key).split(b'"version":')[1].split(b",")[0])
    checkpoint_bytes = store.head(writer.checkpoint_key(pointer_version)).size
    return {
        "backend": type(store).__name__,
        "commits": commits,
        "write_seconds": write_seconds,
        "commits_per_second": commits / write_seconds if write_seconds else float("inf"),
        "load_seconds": statistics.median(timings),
        "load_seconds_min": min(timings),
        "gets": stats.gets,
        "gets_not_found": stats.misses,
        "lists": stats.lists,
        "bytes_read": stats.bytes_read,
        "version": expected.version,
        "live_segments": len(expected.segments),
        "tombstones": len(expected.tombstones),
        "checkpoint_bytes": checkpoint_bytes,
    }


def bench_commit_cost(
    store: ObjectStore,
    live_segments: int,
    commits: int = 200,
    *,
    namespace: str = "bench",
    topic: str = "long",
    checkpoint_interval: int = 10,
) -> dict[str, Any]:
    """What a flush's catalog work costs in a partition of ``live_segments`` segments.

    The partition is filled first (in commits of 100 segments), then
    ``commits`` flush commits each add one segment, as the daemon's flusher
    does: the commit (every ``checkpoint_interval``-th writes a checkpoint of
    every live segment), the state it returns, and on the event loop the
    adoption of that state (`PartitionState.gone_since`, `PartitionState.holds`);
    a long partition's checkpoint stretches the interval (`checkpoint_stretch`).
    Each is timed in this thread's CPU time, and a commit's also without the
    store's writes (``catalog_seconds``); a dict of the figures.
    """
    catalog = PartitionCatalog(
        store, namespace, topic, 0, checkpoint_interval=checkpoint_interval, writer="bench"
    )
    catalog.load()
    fill_partition(catalog, live_segments)
    state = catalog.state
    # The store's own CPU (creating, writing and fsyncing files, which on a
    # filesystem that has freed many inodes lately is most of it) is timed
    # apart, so the catalog's own work can be seen.
    in_store = [0.0]

    def timed(put: Callable[[str, bytes], None]) -> Callable[[str, bytes], None]:
        def run(key: str, data: bytes) -> None:
            started = time.thread_time()
            try:
                put(key, data)
            finally:
                in_store[0] += time.thread_time() - started

        return run

    # Wrapping the bound methods: mypy compares the wrapper with the unbound signature.
    catalog._files.put = timed(catalog._files.put)  # type: ignore[method-assign,assignment]
    catalog._files.put_if_absent = timed(catalog._files.put_if_absent)  # type: ignore[method-assign,assignment]
    own: list[float] = []
    plain: list[float] = []
    checkpointing: list[float] = []
    checkpoint_bytes = 0
    for _ in range(commits):
        segment = bench_segment(topic, 0, state.high_watermark, OLD_MS)
        started, store_before = time.thread_time(), in_store[0]
        result = catalog.add_segments([segment])
        new = catalog.state
        if new.gone_since(state) or not new.holds(segment):
            raise AssertionError("a flush's commit lost a segment")
        state = new
        spent = time.thread_time() - started
        (checkpointing if result.checkpointed else plain).append(spent)
        if not result.checkpointed:
            own.append(spent - (in_store[0] - store_before))
        if result.checkpointed:
            checkpoint_bytes = store.head(catalog.checkpoint_key(result.version)).size
    return {
        "live_segments": live_segments,
        "commit_seconds": statistics.mean(plain),
        "catalog_seconds": statistics.mean(own),  # of a commit, without the store's writes
        "checkpoint_commit_seconds": statistics.mean(checkpointing) if checkpointing else 0.0,
        "mean_seconds": statistics.mean(plain + checkpointing),
        "checkpoint_bytes": checkpoint_bytes,
        "checkpoint_every": catalog.checkpoint_every(checkpoint_bytes),
    }


def _merged(topic: str, inputs: list[SegmentEntry], now_ms: int) -> SegmentEntry:
    return SegmentEntry.for_partition(
        topic,
        0,
        base_offset=inputs[0].base_offset,
        last_offset=inputs[-1].last_offset,
        record_count=sum(s.record_count for s in inputs),
        size_bytes=sum(s.size_bytes for s in inputs),
        index_size_bytes=sum(s.index_size_bytes for s in inputs),
        min_timestamp=min(s.min_timestamp for s in inputs),
        max_timestamp=max(s.max_timestamp for s in inputs),
        codec=4,
        created_ms=now_ms,
        key_suffix="-c1",  # segments are immutable: the output needs a key of its own
    )


@contextlib.contextmanager
def moto_store(endpoint_url: str | None = None) -> Iterator[ObjectStore]:
    """An `S3ObjectStore` on a fresh bucket (of a given moto endpoint, or a new server)."""
    import boto3

    from kfs_core.storage.s3 import S3ObjectStore

    with contextlib.ExitStack() as stack:
        endpoint = endpoint_url or stack.enter_context(moto_server())
        bucket = f"kfs-bench-{uuid.uuid4().hex[:8]}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
            Bucket=bucket
        )
        store = S3ObjectStore(bucket, prefix="bench", endpoint_url=endpoint)
        stack.callback(store.close)
        yield store


def _report(result: dict[str, Any]) -> None:
    print(
        f"{result['backend']:>16}: {result['commits']:,} commits written in "
        f"{result['write_seconds']:.1f} s ({result['commits_per_second']:,.0f}/s); "
        f"cold load {result['load_seconds'] * 1000:.1f} ms (best "
        f"{result['load_seconds_min'] * 1000:.1f} ms) with {result['gets']} GETs "
        f"({result['gets_not_found']} not found), {result['lists']} LISTs, "
        f"{result['bytes_read']:,} bytes; state v{result['version']}: "
        f"{result['live_segments']:,} live segments, {result['tombstones']:,} tombstones, "
        f"checkpoint {result['checkpoint_bytes']:,} bytes",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=170_000)
    parser.add_argument("--backend", choices=["local", "s3", "both"], default="both")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args()
    from kfs_core.storage.local import LocalObjectStore

    if args.backend in ("local", "both"):
        with tempfile.TemporaryDirectory() as tmp:
            _report(
                bench_catalog_load(
                    LocalObjectStore(tmp), commits=args.commits, progress=not args.quiet
                )
            )
    if args.backend in ("s3", "both"):
        with moto_store() as store:
            _report(bench_catalog_load(store, commits=args.commits, progress=not args.quiet))


if __name__ == "__main__":
    main()
