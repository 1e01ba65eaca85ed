"""WalWriter: rolls, group commit, durability modes, checkpoints, kill -9.

Torn tails, corruption and leftover temp files: test_wal_recovery.py.
"""

from __future__ import annotations

import asyncio
import errno
import os
import pickle
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from kfs_core.config import Settings
from kfs_core.errors import (
    CorruptRecordBatch,
    WalClosed,
    WalError,
    WalNotRecovered,
    WalWriteFailed,
)
from kfs_core.formats.wal import FRAME_OVERHEAD, FrameType, scan_wal
from kfs_core.log.wal import (
    WalAppend,
    WalPosition,
    WalWriter,
    wal_file_name,
)
from kfs_core.log.wal import ring as wal_ring
from kfs_core.log.wal import writer as wal_writer
from kfs_core.log.wal.ring import FileRing
from kfs_core.maintenance_pause import is_paused
from kfs_core.storage.local import LocalObjectStore
from testkit.batches import make_batch
from testkit.waiting import wait_for
from tests.log.conftest import FsyncGate
from tests.log.wal_helpers import SMALL, recovered, recovered_map, reopen, wal_paths

ROOT = Path(__file__).resolve().parents[2]

OpenWal = Callable[..., WalWriter]


def join_all(threads: list[threading.Thread], timeout: float = 60) -> None:
    """Join producer threads; one still blocked in an append fails the test.

    Test threads are daemons, so a WAL that never answers fails here instead of
    hanging the test process at exit.
    """
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in threads if t.is_alive()]
    assert not stuck, f"appends never returned: {stuck}"


# --- append / recover -------------------------------------------------------


def test_append_recover_round_trip_across_rolls(open_wal: OpenWal, wal_dir: Path) -> None:
    wal = open_wal(file_size=SMALL)
    written = []
    for offset in range(0, 120, 3):  # three-record batches: last offset = base + 2
        for partition in (0, 1):
            batch = make_batch(partition, offset, size=150, count=3)
            position = wal.append("orders", partition, offset, batch)
            written.append(("orders", partition, offset, batch, position))
    wal.close()
    assert len(wal_paths(wal_dir)) > 5

    restarted, recovery = reopen(wal_dir, file_size=SMALL)
    try:
        assert recovery.torn_tail is None
        assert [(r.topic, r.partition, r.base_offset, r.batch, r.position) for r in recovery] == [
            (t, p, o, b, pos) for t, p, o, b, pos in written
        ]
        assert all(r.last_offset == r.base_offset + 2 for r in recovery)
        assert recovery.files == [p.name for p in wal_paths(wal_dir)]
    finally:
        restarted.close()


def test_files_are_fixed_size_numbered_and_frames_never_span_them(
    open_wal: OpenWal, wal_dir: Path
) -> None:
    wal = open_wal(file_size=SMALL)
    positions = [wal.append("t", 0, o, make_batch(0, o, size=300)) for o in range(60)]
    wal.close()
    paths = wal_paths(wal_dir)
    assert [p.name for p in paths] == [wal_file_name(i) for i in range(len(paths))]
    assert all(len(p.stem) == 20 for p in paths)
    assert all(p.stat().st_size == SMALL for p in paths)
    for position in positions:
        assert position.end <= SMALL
    # Every file but the last is a sealed, valid file on its own: no frame is cut in two.
    by_file = defaultdict(list)
    for position in positions:
        by_file[position.file_seq].append(position.position)
    for path in paths[:-1]:
        scan = scan_wal(path.read_bytes(), str(path), sealed=True)
        assert [f.position for f in scan.frames] == by_file[int(path.stem)]


def test_a_frame_larger_than_the_file_size_gets_a_file_of_its_own(
    open_wal: OpenWal, wal_dir: Path
) -> None:
    wal = open_wal(file_size=SMALL)
    small = wal.append("t", 0, 0, make_batch(0, 0, size=100))
    huge_batch = make_batch(0, 1, size=3 * SMALL)
    huge = wal.append("t", 0, 1, huge_batch)
    after = wal.append("t", 0, 2, make_batch(0, 2, size=100))
    wal.close()
    assert (small.file_seq, huge.file_seq, after.file_seq) == (0, 1, 2)
    assert huge.position == 0
    assert (wal_dir / huge.file_name).stat().st_size == huge.size > SMALL
    assert (wal_dir / after.file_name).stat().st_size == SMALL

    restarted, recovery = reopen(wal_dir, file_size=SMALL)
    restarted.close()
    assert [r.base_offset for r in recovery] == [0, 1, 2]
    assert recovery.records[1].batch == huge_batch


def test_append_checks_the_batch_it_is_given(open_wal: OpenWal) -> None:
    wal = open_wal()
    with pytest.raises(ValueError, match="base_offset 5 differs"):
        wal.append("t", 0, 5, make_batch(0, 4))
    with pytest.raises(CorruptRecordBatch):
        wal.append("t", 0, 0, b"not a record batch at all, not even close to one" * 2)
    with pytest.raises(CorruptRecordBatch):
        wal.append("t", 0, 0, make_batch(0, 0)[:-1])  # cut short
    two = make_batch(0, 0, count=2) + make_batch(0, 2, count=3)  # concatenated batches
    wal.append("t", 0, 0, two)
    assert wal.metrics.frames == 1


def test_a_group_is_one_write_and_one_fsync_with_a_frame_per_append(
    open_wal: OpenWal, wal_dir: Path
) -> None:
    wal = open_wal()
    batches = [make_batch(p, 10 * p, count=2) for p in range(4)]
    appends = [WalAppend("t", p, 10 * p, b) for p, b in enumerate(batches)]
    appends[2] = WalAppend("t", 2, 20, batches[2], last_offset=21)  # known: not parsed again
    positions = wal.append_group(appends).result(timeout=10)
    assert [p.position for p in positions] == [0, *(p.end for p in positions[:-1])]
    metrics = wal.metrics
    assert (metrics.frames, metrics.writes, metrics.fsyncs) == (4, 1, 1)
    wal.close()
    recovery = recovered(wal_dir)
    assert [(r.partition, r.base_offset, r.last_offset, r.batch) for r in recovery] == [
        (p, 10 * p, 10 * p + 1, b) for p, b in enumerate(batches)
    ]
    assert [r.position for r in recovery] == positions


def test_a_group_may_span_a_roll_and_completes_once_all_of_it_is_durable(
    open_wal: OpenWal, wal_dir: Path
) -> None:
    wal = open_wal(file_size=SMALL)
    batches = [make_batch(p, 0, size=1500) for p in range(5)]  # two fit in a file
    positions = wal.append_group([WalAppend("t", p, 0, b) for p, b in enumerate(batches)]).result(
        timeout=10
    )
    assert [p.file_seq for p in positions] == [0, 0, 1, 1, 2]
    wal.close()
    assert [(r.partition, r.batch) for r in recovered(wal_dir, file_size=SMALL)] == list(
        enumerate(batches)
    )


def test_a_bad_append_refuses_the_whole_group(open_wal: OpenWal) -> None:
    wal = open_wal()
    with pytest.raises(ValueError, match="base_offset 5 differs"):
        wal.append_group(
            [WalAppend("t", 0, 0, make_batch(0, 0)), WalAppend("t", 1, 5, make_batch(1, 4))]
        )
    with pytest.raises(ValueError, match="at least one"):
        wal.append_group([])
    assert wal.metrics.frames == 0


def test_the_next_file_is_prepared_ahead_and_removed_on_close(
    open_wal: OpenWal, wal_dir: Path
) -> None:
    wal = open_wal(file_size=SMALL)
    wait_for((wal_dir / (wal_file_name(1) + ".tmp")).exists, timeout=10, what="the spare")
    assert wal_paths(wal_dir) == [wal_dir / wal_file_name(0)]  # not a WAL file before the roll
    for offset in range(4):
        wal.append("t", 0, offset, make_batch(0, offset, size=1500))
    assert wal.active_file == wal_file_name(1)
    assert wal.metrics.files_created == 2
    wait_for((wal_dir / (wal_file_name(2) + ".tmp")).exists, timeout=10, what="the next spare")
    wal.close()
    assert sorted(p.name for p in wal_dir.iterdir()) == [wal_file_name(0), wal_file_name(1)]


def test_every_spare_is_prepared_on_one_worker_thread_that_close_stops(
    open_wal: OpenWal, wal_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A thread started at every roll made the roll wait for it to start.
    preparers: list[threading.Thread] = []
    prepare = FileRing._spare_file

    def recording(self: FileRing, path: str) -> None:
        preparers.append(threading.current_thread())
        prepare(self, path)

    monkeypatch.setattr(FileRing, "_spare_file", recording)
    wal = open_wal(file_size=SMALL)
    for offset in range(12):
        wal.append("t", 0, offset, make_batch(0, offset, size=1500))
    assert wal.metrics.files_created >= 4
    wait_for(lambda: len(preparers) >= 4, timeout=10, what="four spares")
    assert len({id(thread) for thread in preparers}) == 1
    assert preparers[0].name.startswith("kfs-wal-spare")
    wal.close()
    assert not preparers[0].is_alive()


def test_constructor_rejects_bad_settings(wal_dir: Path) -> None:
    with pytest.raises(ValueError, match="durability"):
        WalWriter(wal_dir, durability="reckless")
    with pytest.raises(ValueError, match="minimum"):
        WalWriter(wal_dir, file_size=100)
    with pytest.raises(ValueError, match="normal_sync_frames"):
        WalWriter(wal_dir, normal_sync_frames=0)


def test_from_settings_uses_data_dir_wal_and_durability(tmp_path: Path) -> None:
    settings = Settings(data_dir=str(tmp_path / "data"), durability="normal")
    manager = WalWriter.from_settings(settings, file_size=SMALL)
    assert manager.directory == str(tmp_path / "data" / "wal")
    assert (manager.durability, manager.file_size) == ("normal", SMALL)


def test_lifecycle_errors(wal_dir: Path) -> None:
    manager = WalWriter(wal_dir)
    with pytest.raises(WalNotRecovered, match="recover"):
        manager.append("t", 0, 0, make_batch(0, 0))
    manager.recover()
    with pytest.raises(WalError, match="once"):
        manager.recover()
    manager.append("t", 0, 0, make_batch(0, 0))
    manager.close()
    manager.close()  # idempotent
    with pytest.raises(WalClosed):
        manager.append("t", 0, 1, make_batch(0, 1))
    with pytest.raises(WalClosed):
        manager.checkpoint("t", 0, 0)
    with pytest.raises(WalClosed):
        asyncio.run(manager.append_async("t", 0, 1, make_batch(0, 1)))


# --- group commit (cautious, emergency) ------------------------------------


@pytest.mark.parametrize("durability", ["cautious", "emergency"])
def test_appends_queued_during_an_fsync_share_the_next_one(
    open_wal: OpenWal, fsync_gate: FsyncGate, wal_dir: Path, durability: str
) -> None:
    wal = open_wal(durability=durability)
    producers = 16
    positions: dict[int, WalPosition] = {}

    def produce(partition: int) -> None:
        positions[partition] = wal.append("t", partition, 0, make_batch(partition, 0))

    first = threading.Thread(target=produce, args=(0,), daemon=True)
    first.start()
    assert fsync_gate.entered.wait(10), "the writer never fsynced the first append"
    rest = [threading.Thread(target=produce, args=(p,), daemon=True) for p in range(1, producers)]
    for thread in rest:
        thread.start()
    wait_for(lambda: wal.pending_frames == producers - 1, timeout=10, what="queued appends")
    # Nobody is acknowledged while the fsync that covers them has not returned.
    assert first.is_alive() and all(t.is_alive() for t in rest)
    assert positions == {}
    fsync_gate.release.set()
    join_all([first, *rest])
    metrics = wal.metrics
    assert (metrics.frames, metrics.fsyncs, metrics.writes) == (producers, 2, 2)
    assert metrics.max_frames_per_fsync == producers - 1
    wal.close()
    recovery = recovered(wal_dir)
    assert recovered_map(recovery) == {("t", p, 0): make_batch(p, 0) for p in range(producers)}


def test_many_concurrent_producers_need_far_fewer_fsyncs_than_frames(
    open_wal: OpenWal, wal_dir: Path
) -> None:
    wal = open_wal(file_size=64 * 1024)
    threads, per_thread = 16, 60
    errors: list[BaseException] = []

    def produce(partition: int) -> None:
        try:
            for offset in range(per_thread):
                wal.append("t", partition, offset, make_batch(partition, offset, size=200))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=produce, args=(p,), daemon=True) for p in range(threads)]
    for worker in workers:
        worker.start()
    join_all(workers)
    assert errors == []
    metrics = wal.metrics
    frames = threads * per_thread
    assert metrics.frames == frames  # no checkpoints: nothing carried into new files
    assert metrics.fsyncs <= frames // 2, metrics
    wal.close()
    recovery = recovered(wal_dir, file_size=64 * 1024)
    assert recovered_map(recovery) == {
        ("t", p, o): make_batch(p, o, size=200) for p in range(threads) for o in range(per_thread)
    }


def test_cautious_single_producer_fsyncs_every_append(open_wal: OpenWal) -> None:
    wal = open_wal()
    for offset in range(20):
        wal.append("t", 0, offset, make_batch(0, offset))
    assert (wal.metrics.frames, wal.metrics.fsyncs) == (20, 20)


# --- normal mode -------------------------------------------------------------


def test_normal_mode_fsyncs_at_most_every_50_frames(open_wal: OpenWal, wal_dir: Path) -> None:
    synced_frames: list[int] = []
    latencies: list[float] = []

    def observe(seconds: float, frames: int) -> None:
        latencies.append(seconds)
        synced_frames.append(frames)

    wal = open_wal(durability="normal", file_size=64 * 1024, fsync_observer=observe)
    threads, per_thread = 8, 150

    def produce(partition: int) -> None:
        for offset in range(per_thread):
            wal.append("t", partition, offset, make_batch(partition, offset, size=100))

    workers = [threading.Thread(target=produce, args=(p,), daemon=True) for p in range(threads)]
    for worker in workers:
        worker.start()
    join_all(workers)
    wal.close()
    frames = threads * per_thread
    assert sum(synced_frames) == frames == wal.metrics.frames
    assert max(synced_frames) <= 50
    assert wal.metrics.max_frames_per_fsync <= 50
    assert len(synced_frames) == wal.metrics.fsyncs < frames // 5
    assert all(s >= 0 for s in latencies)
    recovery = recovered(wal_dir, file_size=64 * 1024)
    assert len(recovery) == frames


def test_normal_mode_splits_a_large_group_into_fsyncs_of_at_most_50_frames(
    open_wal: OpenWal, fsync_gate: FsyncGate, wal_dir: Path
) -> None:
    synced_frames: list[int] = []
    wal = open_wal(
        durability="normal",
        normal_sync_ms=10**6,
        fsync_observer=lambda seconds, frames: synced_frames.append(frames),
    )
    # 50 appends return after their writes; the 50th starts an fsync, held shut.
    for offset in range(50):
        wal.append("t", 0, offset, make_batch(0, offset))
    assert fsync_gate.entered.wait(10)
    # 120 producers queue up behind it and are drained as one group.
    producers = [
        threading.Thread(target=wal.append, args=("t", p, 0, make_batch(p, 0)), daemon=True)
        for p in range(1, 121)
    ]
    for thread in producers:
        thread.start()
    wait_for(lambda: wal.pending_frames == 120, timeout=10, what="queued appends")
    fsync_gate.release.set()
    join_all(producers)
    wal.close()
    assert synced_frames == [50, 50, 50, 20]
    assert len(recovered(wal_dir)) == 170


def test_normal_mode_returns_after_the_write_and_syncs_within_10ms(
    open_wal: OpenWal, fsync_gate: FsyncGate, wal_dir: Path
) -> None:
    wal = open_wal(durability="normal", normal_sync_frames=1000, normal_sync_ms=10)
    # The fsync is held shut, yet the append returns: it waited for the write only.
    wal.append("t", 0, 0, make_batch(0, 0))
    assert wal.metrics.fsyncs == 0
    # No further appends: the 10 ms timer alone starts the fsync.
    assert fsync_gate.entered.wait(10)
    fsync_gate.release.set()
    wait_for(lambda: wal.metrics.fsyncs == 1, timeout=10, what="the timed fsync")
    assert wal.metrics.max_frames_per_fsync == 1


def test_close_writes_and_fsyncs_what_normal_mode_has_not_synced(
    open_wal: OpenWal, wal_dir: Path
) -> None:
    wal = open_wal(durability="normal", normal_sync_frames=10**6, normal_sync_ms=10**7)
    for offset in range(300):
        wal.append("t", 0, offset, make_batch(0, offset))
    assert wal.metrics.fsyncs == 0
    wal.close()
    assert (wal.metrics.fsyncs, wal.metrics.max_frames_per_fsync) == (1, 300)
    recovery = recovered(wal_dir)
    assert [r.base_offset for r in recovery] == list(range(300))


def test_close_writes_frames_still_queued_and_answers_their_producers(
    open_wal: OpenWal, fsync_gate: FsyncGate, wal_dir: Path
) -> None:
    wal = open_wal()
    positions: dict[int, WalPosition] = {}

    def produce(partition: int) -> None:
        positions[partition] = wal.append("t", partition, 0, make_batch(partition, 0))

    first = threading.Thread(target=produce, args=(0,), daemon=True)
    first.start()
    assert fsync_gate.entered.wait(10)
    queued = [threading.Thread(target=produce, args=(p,), daemon=True) for p in range(1, 9)]
    for thread in queued:
        thread.start()
    wait_for(lambda: wal.pending_frames == 8, timeout=10, what="queued appends")
    closer = threading.Thread(target=wal.close, daemon=True)
    closer.start()
    fsync_gate.release.set()
    join_all([first, *queued, closer])
    assert sorted(positions) == list(range(9))
    with pytest.raises(WalClosed):
        wal.append("t", 0, 1, make_batch(0, 1))
    assert recovered_map(recovered(wal_dir)) == {("t", p, 0): make_batch(p, 0) for p in range(9)}


# --- asyncio -----------------------------------------------------------------


def test_append_async_from_an_event_loop(open_wal: OpenWal, wal_dir: Path) -> None:
    wal = open_wal(file_size=16 * 1024)

    async def produce() -> list[WalPosition]:
        return await asyncio.gather(
            *(
                wal.append_async("t", p, o, make_batch(p, o, size=300))
                for p in range(4)
                for o in range(25)
            )
        )

    positions = asyncio.run(produce())
    assert len({(p.file_seq, p.position) for p in positions}) == 100
    assert wal.metrics.fsyncs < 100  # the gathered appends shared fsyncs

    async def flush() -> WalPosition:
        return await wal.checkpoint_async("t", 0, 24)

    asyncio.run(flush())
    wal.close()
    recovery = recovered(wal_dir, file_size=16 * 1024)
    assert recovery.flushed_offsets == {("t", 0): 24}
    assert sorted(recovered_map(recovery)) == [("t", p, o) for p in (1, 2, 3) for o in range(25)]


def test_a_cancelled_append_async_is_still_written(
    open_wal: OpenWal, fsync_gate: FsyncGate, wal_dir: Path
) -> None:
    wal = open_wal()

    async def cancel_while_syncing() -> None:
        task = asyncio.ensure_future(wal.append_async("t", 0, 0, make_batch(0, 0)))
        assert await asyncio.to_thread(fsync_gate.entered.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        fsync_gate.release.set()

    asyncio.run(cancel_while_syncing())
    wal.close()
    recovery = recovered(wal_dir)
    assert recovered_map(recovery) == {("t", 0, 0): make_batch(0, 0)}


# --- checkpoints and file deletion ------------------------------------------


@pytest.mark.parametrize("from_a_loop", [False, True], ids=["checkpoint", "checkpoint_async"])
def test_checkpoint_deletes_fully_flushed_files_but_never_the_active_one(
    open_wal: OpenWal, wal_dir: Path, from_a_loop: bool
) -> None:
    wal = open_wal(file_size=SMALL)
    if from_a_loop:
        wal.checkpoint = lambda *args: asyncio.run(wal.checkpoint_async(*args))  # type: ignore[method-assign]
    positions: dict[tuple[int, int], WalPosition] = {}
    for offset in range(40):
        for partition in (0, 1):
            positions[partition, offset] = wal.append(
                "t", partition, offset, make_batch(partition, offset, size=150)
            )
    files_before = wal.wal_files()
    assert len(files_before) > 4

    # Partition 0 fully flushed: partition 1 still holds every file.
    wal.checkpoint("t", 0, 39)
    assert wal.wal_files() == files_before

    # Partition 1 flushed up to 19: the files holding only offsets <= 19 of it go.
    wal.checkpoint("t", 1, 19)
    last_of_1 = defaultdict(lambda: -1)
    for (partition, offset), position in positions.items():
        if partition == 1:
            last_of_1[position.file_seq] = max(last_of_1[position.file_seq], offset)
    active = wal.active_file
    expected = [
        wal_file_name(seq)
        for seq in sorted({p.file_seq for p in positions.values()})
        if last_of_1[seq] > 19 or wal_file_name(seq) == active
    ]
    assert wal.wal_files() == expected
    assert wal.metrics.files_recycled + wal.metrics.files_deleted == len(files_before) - len(
        expected
    )
    assert sorted(p.name for p in wal_paths(wal_dir)) == expected

    # Everything flushed: only the active file is left, even though all of it is flushed.
    wal.checkpoint("t", 1, 39)
    assert wal.wal_files() == [active] == [p.name for p in wal_paths(wal_dir)]
    # Two wait to become later files (no roll took one meanwhile); the rest are gone.
    assert wal.metrics.files_recycled == wal_ring.RECYCLED_FILES
    assert wal.metrics.files_deleted == len(files_before) - 1 - wal_ring.RECYCLED_FILES
    assert len(list(wal_dir.glob("*.wal.tmp"))) == wal_ring.RECYCLED_FILES + 1  # and the spare
    assert wal.metrics.checkpoints == 3

    wal.append("t", 0, 40, make_batch(0, 40))
    wal.close()
    assert not list(wal_dir.glob("*.tmp"))  # neither the spare nor the files kept for reuse
    recovery = recovered(wal_dir, file_size=SMALL)
    assert [(r.partition, r.base_offset) for r in recovery] == [(0, 40)]
    assert recovery.flushed_offsets == {("t", 0): 39, ("t", 1): 39}


def _fill_until_active(wal: WalWriter, seq: int, partition: int, offset: int) -> int:
    """Append batches of ``partition`` from ``offset`` until file ``seq`` is active; the next offset."""
    while wal.active_file != wal_file_name(seq):
        wal.append("t", partition, offset, make_batch(partition, offset, size=150))
        offset += 1
    return offset


def test_a_flushed_file_is_zeroed_and_reused_as_a_later_one(
    open_wal: OpenWal, wal_dir: Path
) -> None:
    wal = open_wal(file_size=SMALL)
    offset = _fill_until_active(wal, 1, 0, 0)  # file 0 sealed; spare 2 created meanwhile
    inode = (wal_dir / wal_file_name(0)).stat().st_ino
    wal.checkpoint("t", 0, offset - 1)  # file 0 holds nothing unflushed
    assert wal.wal_files() == [wal_file_name(1)]
    assert wal.metrics.files_recycled == 1 and wal.metrics.files_deleted == 0
    assert (wal_dir / (wal_file_name(0) + ".tmp")).stat().st_ino == inode

    # The roll into file 2 prepares spare 3 from file 0; the roll into 3 takes it.
    first_in_3 = _fill_until_active(wal, 2, 1, 0)
    last = _fill_until_active(wal, 3, 1, first_in_3)
    reused = wal_dir / wal_file_name(3)
    assert reused.stat().st_ino == inode
    assert reused.stat().st_size == SMALL
    assert not (wal_dir / (wal_file_name(0) + ".tmp")).exists()
    # Partition 0's carried checkpoint and the frame that rolled into it, then
    # zeros: none of file 0's frames.
    frames = [f.record() for f in scan_wal(reused.read_bytes()).frames]
    assert [(r.frame_type, r.partition, r.base_offset) for r in frames] == [
        (FrameType.CHECKPOINT, 0, offset),
        (FrameType.RECORD_BATCH, 1, last - 1),
    ]
    wal.close()
    assert not list(wal_dir.glob("*.tmp"))
    recovery = recovered(wal_dir, file_size=SMALL)
    assert [(r.partition, r.base_offset) for r in recovery] == [(1, o) for o in range(last)]


@pytest.mark.parametrize("error", [errno.EOPNOTSUPP, errno.EIO])
def test_a_file_that_cannot_be_zeroed_is_deleted_and_a_new_one_made(
    open_wal: OpenWal, wal_dir: Path, monkeypatch: pytest.MonkeyPatch, error: int
) -> None:
    def refuse(fd: int, size: int) -> None:
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(wal_ring, "zero_range", refuse)
    wal = open_wal(file_size=SMALL)
    offset = _fill_until_active(wal, 1, 0, 0)
    wal.checkpoint("t", 0, offset - 1)
    last = _fill_until_active(wal, 3, 1, 0)
    assert not (wal_dir / (wal_file_name(0) + ".tmp")).exists()
    frames = [f.record() for f in scan_wal((wal_dir / wal_file_name(3)).read_bytes()).frames]
    assert [(r.frame_type, r.partition, r.base_offset) for r in frames] == [
        (FrameType.CHECKPOINT, 0, offset),
        (FrameType.RECORD_BATCH, 1, last - 1),
    ]
    # A filesystem without the call stops the recycling; another error drops one file.
    wal.checkpoint("t", 1, last - 1)
    kept = 0 if error == errno.EOPNOTSUPP else 2
    assert wal.metrics.files_recycled == 1 + kept
    assert len(list(wal_dir.glob("*.wal.tmp"))) == kept + 1  # and the spare
    wal.append("t", 1, last, make_batch(1, last))
    wal.close()
    assert [(r.partition, r.base_offset) for r in recovered(wal_dir, file_size=SMALL)] == [
        (1, last)
    ]


def test_recovery_returns_only_unflushed_batches(open_wal: OpenWal, wal_dir: Path) -> None:
    wal = open_wal(file_size=SMALL)
    for offset in range(0, 30, 3):
        for partition in (0, 1, 2):
            wal.append("t", partition, offset, make_batch(partition, offset, size=100, count=3))
    # A checkpoint in the middle of a batch (3..5): the batch is returned, the daemon
    # skips what the catalog already has.
    wal.checkpoint("t", 0, 4)
    wal.checkpoint("t", 1, 29)
    wal.checkpoint("t", 1, 10)  # an older checkpoint arriving late changes nothing
    wal.close()
    recovery = recovered(wal_dir, file_size=SMALL)
    assert recovery.flushed_offsets == {("t", 0): 4, ("t", 1): 29}
    assert [(r.partition, r.base_offset, r.last_offset) for r in recovery] == [
        (p, o, o + 2) for o in range(0, 30, 3) for p in (0, 2) if not (p == 0 and o + 2 <= 4)
    ]


def test_a_checkpoint_survives_deletion_of_the_file_that_held_it(
    open_wal: OpenWal, wal_dir: Path
) -> None:
    wal = open_wal(file_size=SMALL)
    # File 0: partition 1 (never flushed, keeps file 0 alive) and partition 0.
    wal.append("t", 1, 0, make_batch(1, 0, size=100))
    offset = 0
    while wal.active_file == wal_file_name(0):
        wal.append("t", 0, offset, make_batch(0, offset, size=100))
        offset += 1
    flushed_0 = offset - 1
    wal.checkpoint("t", 0, flushed_0)  # its frame lands in the current file ...
    checkpoint_file = wal.active_file
    for filler in range(40):  # ... which fills up with partition 2 and is sealed
        wal.append("t", 2, filler, make_batch(2, filler, size=150))
    wal.checkpoint("t", 2, 39)  # partition 2 flushed: the checkpoint's file goes
    assert checkpoint_file not in wal.wal_files()
    assert wal_file_name(0) in wal.wal_files()
    wal.close()
    recovery = recovered(wal_dir, file_size=SMALL)
    # Partition 0's flushed batches in file 0 are not replayed: a newer file carries
    # its checkpoint forward.
    assert [(r.partition, r.base_offset) for r in recovery] == [(1, 0)]
    assert recovery.flushed_offsets[("t", 0)] == flushed_0
    carried = [
        f.record()
        for path in wal_paths(wal_dir)[1:]
        for f in scan_wal(path.read_bytes()).frames
        if f.record().frame_type is FrameType.CHECKPOINT
    ]
    assert any(r.partition == 0 and r.base_offset == flushed_0 + 1 for r in carried)


def test_checkpoint_rejects_offsets_below_minus_one(open_wal: OpenWal) -> None:
    wal = open_wal()
    with pytest.raises(ValueError, match="below -1"):
        wal.checkpoint("t", 0, -2)
    wal.checkpoint("t", 0, -1)  # nothing flushed yet: allowed, harmless


# --- failures ------------------------------------------------------------------


def test_a_failed_fsync_fails_every_waiter_and_stops_the_wal(
    open_wal: OpenWal, monkeypatch: pytest.MonkeyPatch
) -> None:
    wal = open_wal()
    wal.append("t", 0, 0, make_batch(0, 0))
    gate = FsyncGate(hold=1, fail=OSError(errno.EIO, "Input/output error"))
    monkeypatch.setattr(wal_writer, "_fdatasync", gate)
    outcomes: dict[int, BaseException | WalPosition] = {}

    def produce(offset: int) -> None:
        try:
            outcomes[offset] = wal.append("t", offset, 1, make_batch(offset, 1))
        except BaseException as exc:  # noqa: BLE001 - inspected below
            outcomes[offset] = exc

    first = threading.Thread(target=produce, args=(1,), daemon=True)
    first.start()
    assert gate.entered.wait(10)
    queued = [threading.Thread(target=produce, args=(p,), daemon=True) for p in range(2, 6)]
    for thread in queued:
        thread.start()
    wait_for(lambda: wal.pending_frames == 4, timeout=10, what="queued appends")
    gate.release.set()
    join_all([first, *queued])
    assert sorted(outcomes) == [1, 2, 3, 4, 5]
    assert all(isinstance(o, WalWriteFailed) for o in outcomes.values()), outcomes
    with pytest.raises(WalWriteFailed, match="restart"):
        wal.append("t", 0, 1, make_batch(0, 1))
    failure = outcomes[1]
    assert isinstance(failure, WalWriteFailed)
    assert pickle.loads(pickle.dumps(failure)).path == failure.path
    wal.close()  # already failed before close: close itself does not raise
    with pytest.raises(WalClosed):
        wal.append("t", 0, 1, make_batch(0, 1))


def test_a_failing_fsync_observer_does_not_stop_the_wal(open_wal: OpenWal) -> None:
    def broken(seconds: float, frames: int) -> None:
        raise RuntimeError("metrics bug")

    wal = open_wal(fsync_observer=broken)
    for offset in range(3):
        wal.append("t", 0, offset, make_batch(0, offset))
    assert wal.metrics.fsyncs == 3


def test_metrics_count_frames_bytes_and_files(open_wal: OpenWal) -> None:
    wal = open_wal(file_size=SMALL)
    positions = [wal.append("t", 0, o, make_batch(0, o, size=500)) for o in range(20)]
    metrics = wal.metrics
    assert metrics.frames == 20
    assert metrics.bytes == sum(p.size for p in positions)
    assert all(p.size > FRAME_OVERHEAD + 500 for p in positions)
    assert metrics.files_created == len(wal.wal_files()) == positions[-1].file_seq + 1
    assert metrics.fsync_seconds > 0


# --- the emergency pause flag -------------------------------------------------


def test_the_manager_sets_the_flag_in_emergency_mode_and_clears_it_otherwise(
    tmp_path: Path, wal_dir: Path
) -> None:
    store = LocalObjectStore(tmp_path / "store")
    emergency, _ = reopen(wal_dir, durability="emergency", control_store=store, namespace="ns")
    assert is_paused(store, "ns")
    for offset in range(5):
        emergency.append("t", 0, offset, make_batch(0, offset))
    assert emergency.metrics.fsyncs == 5  # cautious durability underneath
    emergency.close()
    assert is_paused(store, "ns")  # still paused until the daemon runs in another mode
    cautious, recovery = reopen(wal_dir, control_store=store, namespace="ns")
    cautious.close()
    assert not is_paused(store, "ns")
    assert len(recovery) == 5


# --- kill -9 ----------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys, threading, time
    from kfs_core.log.wal import WalWriter
    from kfs_core.log.wal import active_file
    from testkit.batches import make_batch

    if sys.argv[2] == "slow":  # a slow disk: the kill lands while writes are in flight
        write = active_file._pwrite_all

        def slow_write(fd, buffers, offset):
            time.sleep(0.001)
            write(fd, buffers, offset)

        active_file._pwrite_all = slow_write

    wal = WalWriter(sys.argv[1], durability="cautious", file_size=64 * 1024)
    next_offset = {p: 0 for p in range(4)}
    for r in wal.recover():
        next_offset[r.partition] = max(next_offset[r.partition], r.last_offset + 1)
    print("ready", flush=True)
    lock = threading.Lock()

    def produce(partition):
        offset = next_offset[partition]
        while True:
            wal.append("t", partition, offset, make_batch(partition, offset))
            with lock:
                print(partition, offset, flush=True)
            offset += 1

    for p in range(4):
        threading.Thread(target=produce, args=(p,), daemon=True).start()
    threading.Event().wait()
    """
)


def _run_and_kill(
    script: Path, wal_dir: Path, disk: str, acks_wanted: int
) -> list[tuple[int, int]]:
    """Run the child until it has acknowledged ``acks_wanted`` appends, then SIGKILL it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    stderr_path = script.with_suffix(".stderr")
    with open(stderr_path, "wb") as stderr:
        child = subprocess.Popen(
            [sys.executable, str(script), str(wal_dir), disk],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            cwd=ROOT,
            text=True,
        )
    assert child.stdout is not None
    stdout = child.stdout
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in stdout:
            lines.put(line)
        lines.put(None)  # end of file: the child is gone

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    acks: list[tuple[int, int]] = []
    try:
        line = lines.get(timeout=60)
        assert line == "ready\n", (line, stderr_path.read_text())
        while len(acks) < acks_wanted:
            line = lines.get(timeout=60)
            assert line is not None, f"the child died: {stderr_path.read_text()}"
            partition, offset = line.split()
            acks.append((int(partition), int(offset)))
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
        reader.join(30)  # it sees end of file now; close the pipe only after it has
        stdout.close()
    assert not reader.is_alive()
    assert child.returncode == -signal.SIGKILL, stderr_path.read_text()
    return acks


@pytest.mark.integration
@pytest.mark.parametrize("disk", ["plain", "slow"])
def test_every_acknowledged_append_survives_kill_9(
    tmp_path: Path, wal_dir: Path, disk: str
) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    acks: list[tuple[int, int]] = []
    for _ in range(3):  # each run recovers what the killed one left, and goes on
        acks += _run_and_kill(script, wal_dir, disk, 400)
    assert len(wal_paths(wal_dir)) > 3  # the runs rolled files

    manager, recovery = reopen(wal_dir, file_size=64 * 1024)
    try:
        found = recovered_map(recovery)
        for partition, offset in acks:
            assert found.get(("t", partition, offset)) == make_batch(partition, offset), (
                partition,
                offset,
            )
        # Frames written but not acknowledged before the kill may be there too, whole.
        for (_, partition, offset), batch in found.items():
            assert batch == make_batch(partition, offset)
        by_partition = defaultdict(list)
        for _, partition, offset in found:
            by_partition[partition].append(offset)
        for offsets in by_partition.values():  # per partition: a prefix, no holes
            assert sorted(offsets) == list(range(len(offsets)))
        # And the recovered WAL takes appends again.
        resumed = manager.append("t", 0, len(by_partition[0]), make_batch(0, len(by_partition[0])))
    finally:
        manager.close()
    again = recovered(wal_dir, file_size=64 * 1024)
    assert again.records[-1].position == resumed
