"""Compaction, retention and checkpoint while the daemon keeps appending: Invariants 2, 3 and 4.

A writer thread plays the daemon on a ``cleanup.policy=delete`` topic with two
partitions: every flush cycle it seals one or two small segments per partition
with `SegmentWriter` (keys from `SegmentEntry.for_sealed`), puts each segment
and then its index, and commits the cycle's segments with one
`PartitionCatalog.add_segments`.  A plain-Python model records every
acknowledged record ``(partition, offset, key, value)`` once its commit has
returned.

Meanwhile the main thread runs the three mutating jobs, interleaved, for
several rounds, with settings under which each of them really changes the
store:

- compaction merges runs of small segments (``min_inputs=2``); its
  ``before_commit`` hook waits until the writer has committed to the partition
  after the plan was made, so every replace lands on a newer catalog version
  than it was planned on;
- retention keeps ``retention.bytes`` per partition and deletes removed
  objects with no grace (``delete_grace_ms=0``), so removed data is physically
  gone within the same run (the orphan grace stays at its 1 h minimum: the
  writer's uploads are orphans until their commit lands);
- checkpoint writes checkpoints and expires commits with no age floor
  (``min_commit_age_ms=0``, which the API allows for tests) but keeps the
  newest ``RETAIN_VERSIONS`` versions, far more than the writer's cached
  state can be behind.

Between jobs, while the writer runs, a fresh catalog load must succeed, see
every commit acknowledged before it started, and keep ``log start <= high
watermark`` with neither ever moving back.  At the end (writer stopped) every
live segment and index is read from the store and checked against the model:
offsets strictly increasing, no duplicates, every record at or above the log
start offset present with its offset, key and value (records are compared
decoded: merging recompresses), nothing the model lacks.  Records below the
log start offset may be gone: retention removed them legitimately.

Waits are on conditions the writer signals (with timeouts that fail the
test); the writer's ``stop.wait`` between cycles only paces it (about the
daemon's flush rate, scaled up), it synchronises nothing.
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from kfs_core.catalog import PartitionCatalog, PartitionState, SegmentEntry, TopicRegistry, layout
from kfs_core.formats.index import IndexReader
from kfs_core.formats.index_check import check_index
from kfs_core.formats.segment import SegmentReader, SegmentWriter
from kfs_core.records import (
    CODEC_GZIP,
    CODEC_NONE,
    CODEC_ZSTD,
    Record,
    decode_batch,
    encode_batch,
)
from kfs_core.storage import ObjectStore
from spark_jobs import checkpoint, compaction, retention
from spark_jobs.checkpoint import CheckpointOptions
from spark_jobs.compaction import CompactionOptions, PartitionPlan
from spark_jobs.retention import RetentionOptions

pytestmark = [pytest.mark.spark, pytest.mark.slow]

NS = "ns"
TOPIC = "events"
PARTITIONS = 2
ROUNDS = 4
#: Writer commits (all partitions) that must land before each job starts.
COMMITS_BETWEEN_JOBS = 6
#: Pause between the writer's flush cycles: pacing only.
CYCLE_S = 0.004
WAIT_S = 60.0
RETAIN_VERSIONS = 30
TOPIC_CONFIGS = {
    "cleanup.policy": "delete",  # merge only: no record may legitimately disappear
    "segment.bytes": str(16 * 1024),  # writer segments are ~0.3-2 KiB: merges take many
    "retention.bytes": str(24 * 1024),  # a few merged segments: retention removes every round
    "retention.ms": "-1",
}


# --- the writer (the daemon's flush path) and the model ---------------------------------------


@dataclass(frozen=True)
class ModelRecord:
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass
class Writer:
    """Appends to every partition as the daemon's flush does; records what it acknowledged."""

    store: ObjectStore
    seed: int
    stop: threading.Event = field(default_factory=threading.Event)
    cond: threading.Condition = field(default_factory=threading.Condition)
    model: dict[int, list[ModelRecord]] = field(
        default_factory=lambda: {p: [] for p in range(PARTITIONS)}
    )
    commits: dict[int, int] = field(default_factory=lambda: dict.fromkeys(range(PARTITIONS), 0))
    segments: int = 0
    error: BaseException | None = None
    catalogs: dict[int, PartitionCatalog] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.catalogs = {p: PartitionCatalog(self.store, NS, TOPIC, p) for p in range(PARTITIONS)}
        self._rng = random.Random(self.seed)
        self._next = dict.fromkeys(range(PARTITIONS), 0)
        self._thread = threading.Thread(target=self._run, name="kfs-test-writer", daemon=True)

    # -- thread --

    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        self.stop.set()
        self._thread.join(timeout=WAIT_S)
        assert not self._thread.is_alive(), "the writer thread did not stop"
        if self.error is not None:
            raise AssertionError("the writer failed") from self.error

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                for partition in range(PARTITIONS):
                    self._flush(partition)
                self.stop.wait(CYCLE_S)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            with self.cond:
                self.error = exc
                self.cond.notify_all()

    def _flush(self, partition: int) -> None:
        """One flush cycle of one partition: seal 1-2 segments, upload, commit them together."""
        rng = self._rng
        entries: list[SegmentEntry] = []
        appended: list[ModelRecord] = []
        for _ in range(rng.choice((1, 1, 2))):
            base = self._next[partition]
            writer = SegmentWriter(base)
            offset = base
            for _ in range(rng.randint(1, 3)):
                records = []
                for _ in range(rng.randint(1, 8)):
                    key = None if rng.random() < 0.1 else f"k{rng.randrange(50)}".encode()
                    value = f"p{partition}-o{offset}-".encode() + rng.randbytes(rng.randint(0, 60))
                    records.append(Record(offset, int(time.time() * 1000), key, value))
                    appended.append(ModelRecord(offset, key, value))
                    offset += 1
                codec = rng.choice((CODEC_NONE, CODEC_NONE, CODEC_GZIP, CODEC_ZSTD))
                writer.append(encode_batch(records, base_offset=records[0].offset, codec=codec))
            sealed = writer.finish()
            entry = SegmentEntry.for_sealed(TOPIC, partition, sealed)
            # Segment, then index, then commit: what the daemon does.
            self.store.put(layout.join(NS, entry.key), sealed.data)
            self.store.put(layout.join(NS, entry.index_key), sealed.index)
            entries.append(entry)
            self._next[partition] = offset
        self.catalogs[partition].add_segments(entries)
        with self.cond:  # acknowledged: only now does the model have it
            self.model[partition].extend(appended)
            self.commits[partition] += 1
            self.segments += len(entries)
            self.cond.notify_all()

    # -- the main thread's view --

    def total_commits(self) -> int:
        with self.cond:
            return sum(self.commits.values())

    def acked_high_watermark(self, partition: int) -> int:
        with self.cond:
            records = self.model[partition]
            return records[-1].offset + 1 if records else 0

    def wait_until(self, what: str, predicate: Callable[[], bool]) -> None:
        """Wait for the writer to make ``predicate`` true (it notifies after every commit)."""
        with self.cond:
            ok = self.cond.wait_for(lambda: self.error is not None or predicate(), timeout=WAIT_S)
            if self.error is not None:
                raise AssertionError("the writer failed") from self.error
            assert ok, f"timed out after {WAIT_S}s waiting for the writer: {what}"

    def wait_for_commits(self, n: int) -> None:
        target = self.total_commits() + n
        self.wait_until(f"{n} more commits", lambda: sum(self.commits.values()) >= target)

    def wait_for_commit_to(self, partition: int) -> None:
        with self.cond:
            target = self.commits[partition] + 1
        self.wait_until(
            f"a commit to partition {partition}", lambda: self.commits[partition] >= target
        )


# --- reading the store back ------------------------------------------------------------------


def fresh_state(store: ObjectStore, partition: int) -> PartitionState:
    return PartitionCatalog(store, NS, TOPIC, partition).load()


def read_live_records(store: ObjectStore, state: PartitionState) -> list[ModelRecord]:
    """Every record of every live segment, each segment verified and its index checked."""
    records: list[ModelRecord] = []
    for entry in state.segments:
        name = layout.join(NS, entry.key)
        reader = SegmentReader(store.get(name), name)
        meta = reader.verify()
        assert (meta.base_offset, meta.last_offset, meta.record_count, meta.size) == (
            entry.base_offset,
            entry.last_offset,
            entry.record_count,
            entry.size_bytes,
        ), entry.key
        index_name = layout.join(NS, entry.index_key)
        index = IndexReader(store.get(index_name), index_name)
        assert check_index(reader, index) == [], entry.key
        for position, _ in reader.iter_batches():
            batch = decode_batch(reader.data, position, object_name=name)
            records.extend(ModelRecord(r.offset, r.key, r.value) for r in batch.records)
    return records


# --- the jobs ----------------------------------------------------------------------------------


@dataclass
class Tally:
    merged: int = 0
    segments_merged: int = 0
    compaction_conflicts: int = 0
    segments_removed: int = 0
    objects_deleted: int = 0
    log_start_advanced: int = 0
    retention_conflicts: int = 0
    checkpoints_written: int = 0
    commits_expired: int = 0
    replaces_raced: int = 0


def run_compaction(store: ObjectStore, spark: Any, writer: Writer, tally: Tally) -> None:
    def before_commit(plan: PartitionPlan) -> None:
        # Let the daemon commit after the plan was made: the replace must land on top of it.
        writer.wait_for_commit_to(plan.partition)
        tally.replaces_raced += 1

    options = CompactionOptions(
        store_url=store.url, namespace=NS, min_inputs=2, max_read_mb_per_s=0
    )
    summary = compaction.run(options, spark, before_commit=before_commit)
    counts = summary["counts"]
    assert summary["status"] == "ok", summary["message"]
    assert counts["errors"] == 0, summary["details"]
    assert counts["records_removed"] == 0, summary["details"]  # merging never drops a record
    tally.merged += counts["partitions_merged"]
    tally.segments_merged += counts["segments_in"]
    tally.compaction_conflicts += counts["conflicts"]


def run_retention(store: ObjectStore, spark: Any, tally: Tally) -> None:
    options = RetentionOptions(store_url=store.url, namespace=NS, delete_grace_ms=0)
    summary = retention.run(options, spark)
    counts = summary["counts"]
    assert summary["status"] == "ok", summary["message"]
    assert counts["errors"] == 0, summary["details"]
    assert counts["missing_live_objects"] == 0, summary["details"]
    tally.segments_removed += counts["segments_removed"]
    tally.objects_deleted += counts["objects_deleted"]
    tally.log_start_advanced += counts["log_start_advanced"]
    tally.retention_conflicts += counts["conflicts"]


def run_checkpoint(store: ObjectStore, spark: Any, tally: Tally) -> None:
    options = CheckpointOptions(
        store_url=store.url,
        namespace=NS,
        min_commits=1,
        retain_versions=RETAIN_VERSIONS,
        retain_ms=0,
        min_commit_age_ms=0,
    )
    summary = checkpoint.run(options, spark)
    counts = summary["counts"]
    assert summary["status"] == "ok", summary["message"]
    assert counts["errors"] == 0, summary["details"]
    tally.checkpoints_written += counts["checkpoints_written"]
    tally.commits_expired += counts["commit_files_expired"]


@dataclass
class Watermarks:
    """Log start and high watermark per partition as fresh loads saw them, never moving back."""

    log_start: dict[int, int] = field(default_factory=lambda: dict.fromkeys(range(PARTITIONS), 0))
    high: dict[int, int] = field(default_factory=lambda: dict.fromkeys(range(PARTITIONS), 0))

    def check(self, store: ObjectStore, writer: Writer, after: str) -> None:
        for p in range(PARTITIONS):
            acked = writer.acked_high_watermark(p)  # acknowledged before the load starts
            state = fresh_state(store, p)
            where = f"{TOPIC}/{p} after {after}"
            assert state.high_watermark >= acked, f"{where}: an acknowledged commit is not visible"
            assert state.log_start_offset <= state.high_watermark, f"{where}: log start > HW"
            assert state.log_start_offset >= self.log_start[p], f"{where}: log start moved back"
            assert state.high_watermark >= self.high[p], f"{where}: high watermark moved back"
            # No holes: the writer assigns contiguous offsets and merging drops nothing, so the
            # live segments cover log start .. HW - 1 exactly, each offset once.
            segments = state.segments
            assert segments, f"{where}: no live segment"
            assert segments[0].base_offset == state.log_start_offset, where
            assert segments[-1].last_offset + 1 == state.high_watermark, where
            for a, b in itertools.pairwise(segments):
                assert a.last_offset + 1 == b.base_offset, f"{where}: {a.key} then {b.key}"
            assert sum(s.record_count for s in segments) == (
                state.high_watermark - state.log_start_offset
            ), where
            self.log_start[p], self.high[p] = state.log_start_offset, state.high_watermark


# --- the test ----------------------------------------------------------------------------------


def test_jobs_interleaved_with_a_writer_lose_and_duplicate_nothing(
    spark: Any, store: ObjectStore
) -> None:
    TopicRegistry(store, NS).create_topic(TOPIC, PARTITIONS, TOPIC_CONFIGS)
    seed = int(os.environ.get("KFS_TEST_SEED") or random.randrange(2**32))
    writer = Writer(store, seed=seed)
    tally = Tally()
    marks = Watermarks()
    jobs: list[tuple[str, Callable[[], None]]] = [
        ("compaction", lambda: run_compaction(store, spark, writer, tally)),
        ("retention", lambda: run_retention(store, spark, tally)),
        ("checkpoint", lambda: run_checkpoint(store, spark, tally)),
    ]
    writer.start()
    try:
        for round_ in range(ROUNDS):
            order = jobs if round_ % 2 == 0 else jobs[::-1]  # vary the interleaving
            for name, job in order:
                writer.wait_for_commits(COMMITS_BETWEEN_JOBS)
                job()
                marks.check(store, writer, f"{name} in round {round_}")
    finally:
        writer.finish()

    context = f"seed {writer.seed}, {tally}, {writer.segments} segments written"
    print(context)  # shown with -rP / -s: what the jobs did
    # The jobs really did their work, so the checks below could fail.
    assert tally.merged >= 1 and tally.replaces_raced >= 1, context
    assert tally.segments_removed >= 1 and tally.log_start_advanced >= 1, context
    assert tally.objects_deleted >= 1, context
    assert tally.commits_expired >= 1, context

    for p in range(PARTITIONS):
        where = f"{TOPIC}/{p} ({context})"
        state = fresh_state(store, p)
        # The catalog loads identically however it is reached.
        assert state == fresh_state(store, p) == writer.catalogs[p].refresh(), where
        model = writer.model[p]
        hw = model[-1].offset + 1
        assert state.high_watermark == hw, where
        assert 0 <= state.log_start_offset <= state.high_watermark, where
        assert state.segments and state.segments[-1].last_offset == hw - 1, where
        offsets = [s.base_offset for s in state.segments]
        assert offsets == sorted(set(offsets)), where
        assert all(
            a.last_offset < b.base_offset
            for a, b in zip(state.segments, state.segments[1:], strict=False)
        ), where

        records = read_live_records(store, state)
        read_offsets = [r.offset for r in records]
        assert all(a < b for a, b in itertools.pairwise(read_offsets)), (
            f"{where}: offsets not strictly increasing (or duplicated)"
        )
        by_offset = {r.offset: r for r in model}
        strangers = [r for r in records if by_offset.get(r.offset) != r]
        assert not strangers, f"{where}: records the writer never wrote: {strangers[:3]}"
        present = {r.offset for r in records}
        lost = [
            r.offset
            for r in model
            if r.offset >= state.log_start_offset and r.offset not in present
        ]
        assert not lost, f"{where}: {len(lost)} acknowledged records lost, first {lost[:5]}"
        # Retention took a prefix, so the log is exactly the model from the log start on.
        assert records == [r for r in model if r.offset >= state.log_start_offset], where
        assert state.log_start_offset > 0, where  # retention did remove from this partition
