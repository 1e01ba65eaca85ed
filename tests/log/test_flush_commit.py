"""A flush's catalog commit on retry: its own earlier commit is success, another's is a conflict."""

from __future__ import annotations

import pytest

from kfs_core.catalog import PartitionCatalog, SegmentEntry
from kfs_core.errors import InvalidCatalogAction
from kfs_core.log.flusher import _commit_segments
from kfs_core.storage.base import ObjectStore
from tests.catalog.conftest import NS, PARTITION, TOPIC, seg


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
    with pytest.raises(InvalidCatalogAction, match="segment key"):
        _commit_segments(catalog(local_store), [seg(0, 20)])


def test_another_tombstone_under_our_key_is_a_conflict(local_store: ObjectStore) -> None:
    writer = catalog(local_store)
    writer.add_segments([seg(0, 15)])
    writer.replace([seg(0, 15)], [seg(0, 15, suffix="-c1")])
    with pytest.raises(InvalidCatalogAction, match="segment key"):
        _commit_segments(catalog(local_store), [seg(0, 20)])
