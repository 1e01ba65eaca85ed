"""WAL recovery: leftover temp files, torn tails, corruption, and `recover_wal` on its own.

Most tests restart a `WalWriter` on a directory they damaged, since
`WalWriter.recover` is what the daemon calls; the last ones call
`recover_wal` directly, to pin down what it hands the writer.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from kfs_core.errors import CorruptWal, WalNotRecovered
from kfs_core.log.wal import WalPosition, WalWriter, recover_wal, wal_file_name
from testkit.batches import make_batch
from testkit.waiting import wait_for
from tests.log.wal_helpers import SMALL, recovered, recovered_map, reopen, wal_paths

# --- leftover temp files -------------------------------------------------------


def test_leftover_temp_files_are_removed(wal_dir: Path) -> None:
    wal_dir.mkdir(parents=True)
    (wal_dir / (wal_file_name(3) + ".tmp")).write_bytes(b"\x01" * 64)
    manager, recovery = reopen(wal_dir)
    manager.close()
    assert recovery.removed_temp_files == [wal_file_name(3) + ".tmp"]
    assert [p.name for p in wal_dir.iterdir()] == [wal_file_name(0)]


def test_a_spare_left_by_a_crash_is_removed_and_the_active_file_stays_last(
    wal_dir: Path,
) -> None:
    wal, _ = reopen(wal_dir)
    wal.append("t", 0, 0, make_batch(0, 0))
    wait_for((wal_dir / (wal_file_name(1) + ".tmp")).exists, timeout=10, what="spare")
    # A crash now leaves the spare; restart on a copy of the directory as it is.
    crashed = wal_dir.parent / "crashed"
    crashed.mkdir()
    for path in wal_dir.iterdir():
        (crashed / path.name).write_bytes(path.read_bytes())
    wal.close()
    restarted, recovery = reopen(crashed)
    restarted.close()
    assert recovery.removed_temp_files == [wal_file_name(1) + ".tmp"]
    assert [r.base_offset for r in recovery] == [0]


# --- torn tails ----------------------------------------------------------------


def _write_frames(wal_dir: Path, count: int) -> list[WalPosition]:
    """``count`` frames over a few small files, closed cleanly; returns their positions."""
    writer = WalWriter(wal_dir, file_size=SMALL)
    writer.recover()
    positions = [writer.append("t", 0, o, make_batch(0, o, size=300)) for o in range(count)]
    writer.close()
    return positions


CUTS = [0, 1, 3, 4, 7, 8, 9, 20, 100, -9, -5, -4, -1]  # bytes of the last frame that reached disk


@pytest.mark.parametrize("how", ["zeros", "truncated"])
@pytest.mark.parametrize("cut", CUTS)
def test_torn_tail_of_the_last_file_is_cut_and_appends_continue(
    wal_dir: Path, cut: int, how: str
) -> None:
    positions = _write_frames(wal_dir, 30)
    last = positions[-1]
    cut = cut % last.size  # negative: that many bytes short of the whole frame
    path = wal_dir / last.file_name
    assert path == wal_paths(wal_dir)[-1] and last.file_seq > 0
    original = path.read_bytes()
    written = original[last.position : last.position + cut]
    if how == "zeros":  # the crash left the preallocated zeros after the written part
        data = bytearray(original)
        data[last.position + cut : last.end] = bytes(last.size - cut)
        path.write_bytes(bytes(data))
    else:  # a file cut short (copied off a dying disk, say)
        os.truncate(path, last.position + cut)

    manager, recovery = reopen(wal_dir, file_size=SMALL)
    try:
        assert [r.base_offset for r in recovery] == list(range(29))
        if any(written):  # a nonzero byte of the torn frame made it to disk
            torn = recovery.torn_tail
            assert torn is not None
            assert (torn.path, torn.position) == (str(path), last.position)
            assert 0 < torn.discarded_bytes <= cut
        else:
            assert recovery.torn_tail is None
        repaired = path.read_bytes()
        assert len(repaired) == SMALL
        assert repaired[: last.position] == original[: last.position]
        assert not any(repaired[last.position :])

        # The file is reused from the cut; enough appends to seal it and roll on.
        new_positions = [
            manager.append("t", 0, o, make_batch(0, o, size=300)) for o in range(29, 60)
        ]
        assert new_positions[0] == WalPosition(last.file_seq, last.position, last.size)
        assert new_positions[-1].file_seq > last.file_seq
    finally:
        manager.close()
    again, recovery = reopen(wal_dir, file_size=SMALL)
    again.close()
    assert recovery.torn_tail is None
    assert recovered_map(recovery) == {("t", 0, o): make_batch(0, o, size=300) for o in range(60)}


def test_garbage_after_the_last_frame_is_zeroed_and_reported(wal_dir: Path) -> None:
    positions = _write_frames(wal_dir, 10)
    last = positions[-1]
    path = wal_dir / last.file_name
    with open(path, "r+b") as f:
        f.seek(last.end)
        f.write(b"\xab" * 30)  # a header whose CRC is wrong, and nothing valid after it
    manager, recovery = reopen(wal_dir, file_size=SMALL)
    manager.close()
    assert recovery.torn_tail is not None
    assert last.end + 30 <= SMALL
    assert (recovery.torn_tail.position, recovery.torn_tail.discarded_bytes) == (last.end, 30)
    assert "header CRC" in recovery.torn_tail.reason
    assert not any(path.read_bytes()[last.end :])
    assert len(recovery) == 10


# --- corruption ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("frame_index", "byte_in_frame", "what"),
    [
        (2, 1, "length field"),
        (2, 5, "header CRC"),
        (2, 40, "payload"),
        (2, -6, "data CRC"),
        (2, -2, "trailer"),
        (-1, 40, "payload of the last frame of a sealed file"),
    ],
)
def test_a_flipped_bit_in_a_sealed_file_refuses_to_start(
    wal_dir: Path, frame_index: int, byte_in_frame: int, what: str
) -> None:
    positions = _write_frames(wal_dir, 30)
    first_file = [p for p in positions if p.file_seq == 0]
    assert positions[-1].file_seq > 0, "the damaged file must not be the last one"
    frame = first_file[frame_index]
    path = wal_dir / frame.file_name
    data = bytearray(path.read_bytes())
    data[frame.position + byte_in_frame % frame.size] ^= 0x10
    path.write_bytes(bytes(data))

    manager = WalWriter(wal_dir, file_size=SMALL)
    with pytest.raises(CorruptWal) as info:
        manager.recover()
    assert info.value.object_name == str(path)
    assert info.value.offset == frame.position
    assert str(path) in str(info.value) and f"byte {frame.position}" in str(info.value)
    # Nothing was repaired or started: the damaged bytes are still there for the operator.
    assert path.read_bytes() == bytes(data)
    with pytest.raises(WalNotRecovered):
        manager.append("t", 0, 99, make_batch(0, 99))
    restored = pickle.loads(pickle.dumps(info.value))
    assert (restored.object_name, restored.offset) == (str(path), frame.position)


def test_corruption_in_the_middle_of_the_last_file_is_not_a_torn_tail(wal_dir: Path) -> None:
    positions = _write_frames(wal_dir, 30)
    last_file = [p for p in positions if p.file_seq == positions[-1].file_seq]
    assert len(last_file) >= 2
    victim = last_file[0]
    path = wal_dir / victim.file_name
    data = bytearray(path.read_bytes())
    data[victim.position + 30] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptWal) as info:
        WalWriter(wal_dir, file_size=SMALL).recover()
    assert (info.value.object_name, info.value.offset) == (str(path), victim.position)


@pytest.mark.parametrize("where", ["sealed", "last"])
def test_accept_loss_cuts_the_wal_at_the_damage_and_says_so(
    wal_dir: Path, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    positions = _write_frames(wal_dir, 30)
    files = sorted({p.file_seq for p in positions})
    seq = files[0] if where == "sealed" else files[-1]
    in_file = [i for i, p in enumerate(positions) if p.file_seq == seq]
    victim_index = in_file[1]  # the second frame of the file: one frame before it survives
    victim = positions[victim_index]
    path = wal_dir / victim.file_name
    data = bytearray(path.read_bytes())
    data[victim.position + 40] ^= 0x04
    path.write_bytes(bytes(data))
    later = [wal_dir / wal_file_name(s) for s in files if s > seq]

    manager = WalWriter(wal_dir, file_size=SMALL, accept_loss=True)
    recovery = manager.recover()
    try:
        assert [r.base_offset for r in recovery] == list(range(victim_index))
        cut = recovery.cut
        assert cut is not None
        assert (cut.path, cut.position) == (str(path), victim.position)
        assert cut.removed_files == [str(p) for p in later]
        assert not any(p.exists() for p in later)
        assert path.read_bytes()[victim.position :].strip(b"\0") == b""
        assert f"damaged at byte {victim.position}" in caplog.text
        # Appends continue at the cut, and the next offset is the first one lost.
        at = manager.append("t", 0, victim_index, make_batch(0, victim_index))
        assert (at.file_seq, at.position) == (seq, victim.position)
    finally:
        manager.close()
    again, clean = reopen(wal_dir)
    again.close()
    assert clean.cut is None and clean.torn_tail is None
    assert [r.base_offset for r in clean] == list(range(victim_index + 1))


def test_without_accept_loss_nothing_is_cut(wal_dir: Path) -> None:
    positions = _write_frames(wal_dir, 30)
    path = wal_dir / positions[0].file_name
    data = bytearray(path.read_bytes())
    data[positions[0].position + 40] ^= 0x04
    path.write_bytes(bytes(data))
    names = sorted(p.name for p in wal_dir.iterdir())
    with pytest.raises(CorruptWal):
        WalWriter(wal_dir, file_size=SMALL).recover()
    assert sorted(p.name for p in wal_dir.iterdir()) == names
    assert path.read_bytes() == bytes(data)


# --- recover_wal on its own ----------------------------------------------------


def test_recover_wal_hands_over_the_files_and_the_append_position(wal_dir: Path) -> None:
    writer = WalWriter(wal_dir, file_size=SMALL)
    writer.recover()
    expected_max: dict[int, dict[tuple[str, int], int]] = {}
    for offset in range(12):
        for partition in (0, 1):
            position = writer.append("t", partition, offset, make_batch(partition, offset))
            expected_max.setdefault(position.file_seq, {})["t", partition] = offset
    last = writer.checkpoint("t", 0, 11)
    writer.close()
    assert last.end + 30 <= SMALL
    with open(wal_dir / last.file_name, "r+b") as f:  # a torn frame after the last one
        f.seek(last.end)
        f.write(b"\xab" * 30)

    found = recover_wal(wal_dir, SMALL)

    assert sorted(found.files) == [int(p.stem) for p in wal_paths(wal_dir)]
    assert all(f.path == str(wal_dir / wal_file_name(seq)) for seq, f in found.files.items())
    assert {seq: f.max_offsets for seq, f in found.files.items() if f.max_offsets} == expected_max
    assert found.recovery.torn_tail is not None
    assert found.end == found.recovery.torn_tail.position == last.end
    assert found.recovery.flushed_offsets == {("t", 0): 11}
    assert [(r.partition, r.base_offset) for r in found.recovery] == [(1, o) for o in range(12)]
    # Recovery repairs and reports; creating files and spares is the writer's job.
    assert not list(wal_dir.glob("*.tmp"))
    assert recovered(wal_dir, file_size=SMALL).records == found.recovery.records


def test_recover_wal_on_a_new_directory_creates_only_the_directory(tmp_path: Path) -> None:
    wal_dir = tmp_path / "new" / "wal"
    found = recover_wal(wal_dir, SMALL)
    assert (found.files, found.end, len(found.recovery), found.recovery.files) == ({}, 0, 0, [])
    assert list(wal_dir.iterdir()) == []
