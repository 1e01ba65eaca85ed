"""A flush's catalog commit on retry: its own earlier commit is success, another's is a conflict."""

from __future__ import annotations

from pathlib import Path

import pytest

from kfs_core.catalog import PartitionCatalog, SegmentEntry
from kfs_core.errors import SegmentConflict
from kfs_core.log.flusher import _commit_segments
from kfs_core.storage.base import ObjectStore
from tests.catalog.conftest import NS, PARTITION, TOPIC, seg
from tests.log.log_helpers import Harness, make_batch, offsets_and_values, read_all, run


def catalog(store: ObjectStore) -> PartitionCatalog:
    return PartitionCatalog(store, NS, TOPIC, PARTITION)


def test_a_retry_after_its_commit_landed_succeeds(local_store: ObjectStore) -> None:
    entries = [seg(0), seg(10)]
    first = catalog(local_store)
    _commit_segments(first, entries)
    # The retry runs in a writer that never saw the reply: same entries again.
    state = _commit_segments(catalog(local_store), entries)
    assert list(state.segments) == entries
    assert state.version == 0  # nothing was committed twice


def test_a_retry_after_its_segments_were_compacted_succeeds(local_store: ObjectStore) -> None:
    entries = [seg(0), seg(10)]
    writer = catalog(local_store)
    _commit_segments(writer, entries)
    merged = seg(0, 20, suffix="-c1")
    writer.replace(entries, [merged])
    state = _commit_segments(catalog(local_store), entries)
    assert list(state.segments) == [merged]
    assert {t.key for t in state.tombstones} == {e.key for e in entries}


@pytest.mark.parametrize(
    "other",
    [
        seg(0, 15),  # the same key, fewer offsets: ours through 19 would be lost
        seg(0, 20, size=999),  # the same key and offsets, other bytes
        seg(0, 20, created_ms=1_600_000_000_000),  # another cycle's object
    ],
    ids=["fewer-offsets", "other-size", "other-cycle"],
)
def test_another_entry_under_our_key_is_a_conflict(
    local_store: ObjectStore, other: SegmentEntry
) -> None:
    writer = catalog(local_store)
    writer.add_segments([other])
    with pytest.raises(SegmentConflict, match=r"segment key .* second daemon"):
        _commit_segments(catalog(local_store), [seg(0, 20)])


def test_another_tombstone_under_our_key_is_a_conflict(local_store: ObjectStore) -> None:
    writer = catalog(local_store)
    writer.add_segments([seg(0, 15)])
    writer.replace([seg(0, 15)], [seg(0, 15, suffix="-c1")])
    with pytest.raises(SegmentConflict, match=r"segment key .* second daemon"):
        _commit_segments(catalog(local_store), [seg(0, 20)])


def test_a_second_writer_on_the_partition_ends_the_wait_for_its_flush_and_the_wal_keeps_it(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    """Two daemons on one partition: the flush that loses cannot land, and nobody waits on it."""

    async def body() -> list[tuple[int, bytes | None]]:
        first, second = Harness(local_store, tmp_path / "a"), Harness(local_store, tmp_path / "b")
        a = await first.open()
        await a.create_topic(TOPIC)
        b = await second.open()
        for values in ([b"b0", b"b1"], [b"b2", b"b3"]):
            await b.append(TOPIC, PARTITION, make_batch(values), timeout_s=10)
        await a.append(TOPIC, PARTITION, make_batch([b"a0", b"a1"]), timeout_s=10)
        await a.flush()  # segment-0 holds offsets 0-1, a's
        with pytest.raises(SegmentConflict, match="second daemon"):
            await b.flush()  # its segment-0 would hold 0-3: the key is taken
        with pytest.raises(SegmentConflict):
            await b.close()  # gives up on the partition instead of waiting forever
        b.wal.close()
        second.open_managers.remove(b)
        # The WAL kept b's batches; on restart those below the catalog's high
        # watermark give way to the catalog, the rest are committed after a's.
        b = await second.open()
        await b.flush()
        got = offsets_and_values(await read_all(b, TOPIC, PARTITION, start=2))
        await second.shutdown(b)
        await first.shutdown(a)
        return got

    assert run(body(), timeout=30) == [(2, b"b2"), (3, b"b3")]
