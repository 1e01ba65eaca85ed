"""The pins document: its bytes, its conditional updates, and a daemon's cheap reads of it."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from kfs_core.cluster.reassignments import (
    KEEP_VERSIONS,
    CorruptReassignments,
    ReassignmentFollower,
    Reassignments,
    ReassignmentStore,
    decode_reassignments,
    encode_reassignments,
    reassignments_prefix,
)
from kfs_core.errors import CorruptionError, ObjectNotFound, TransientStoreError
from kfs_core.storage import ByteRange, LocalObjectStore, ObjectInfo, ObjectStore

NS = "ns"


class CountingStore(ObjectStore):
    """A store that counts its calls by kind and fails every one while ``down`` is set."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.url = inner.url
        self.calls: list[str] = []
        self.down = False

    def _call(self, kind: str) -> None:
        self.calls.append(kind)
        if self.down:
            raise TransientStoreError(f"{kind}: connection refused")

    def put(self, key: str, data: bytes) -> ObjectInfo:
        self._call("put")
        return self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        self._call("put_if_absent")
        return self.inner.put_if_absent(key, data)

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        self._call("get")
        return self.inner.get(key, byte_range)

    def head(self, key: str) -> ObjectInfo:
        self._call("head")
        return self.inner.head(key)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        self._call("list")
        return self.inner.list(prefix, start_after)

    def delete(self, key: str) -> None:
        self._call("delete")
        self.inner.delete(key)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CountingStore]:
    inner = LocalObjectStore(tmp_path / "store")
    yield CountingStore(inner)
    inner.close()


def pin(*entries: tuple[str, int, int]) -> dict[tuple[str, int], int]:
    return {(topic, partition): node for topic, partition, node in entries}


# --- the document -------------------------------------------------------------------------


def test_the_document_round_trips_and_its_bytes_are_pinned() -> None:
    pins = Reassignments(3, pin(("orders", 1, 2), ("audit", 0, 5)))
    data = encode_reassignments(pins, updated_ms=1764300000000)
    # Sorted keys, no spaces, partitions in (topic, partition) order: every writer agrees.
    assert data == (
        b'{"partitions":[{"node_id":5,"partition":0,"topic":"audit"},'
        b'{"node_id":2,"partition":1,"topic":"orders"}],'
        b'"updated_ms":1764300000000,"version":3}'
    )
    assert decode_reassignments(data) == pins
    assert pins.of_topic("orders") == {1: 2}
    assert pins.of_topic("missing") == {}
    assert decode_reassignments(b'{"version":0,"partitions":[]}') == Reassignments(0, {})


@pytest.mark.parametrize(
    ("data", "offset", "message"),
    [
        (b'{"version": 1, "partitions": [', 30, "not JSON"),
        (b"{\"version\": \"\xff\"}", 13, "not UTF-8"),
        (b"[]", 0, "not a JSON object"),
        (b'{"partitions": []}', 0, "'version' is None"),
        (b'{"version": -1, "partitions": []}', 0, "'version' is -1"),
        (b'{"version": true, "partitions": []}', 0, "'version' is True"),
        (b'{"version": 1, "partitions": {}}', 0, "'partitions' is {}"),
        (b'{"version": 1, "partitions": [{"partition": 0, "node_id": 1}]}', 0, "entry"),
        (b'{"version": 1, "partitions": [{"topic": "t", "partition": "0", "node_id": 1}]}',
         0, "'partition' is '0'"),
        (b'{"version": 1, "partitions": [{"topic": "t", "partition": 0}]}', 0, "'node_id'"),
        (b'{"version": 1, "partitions": [{"topic": "t", "partition": 0, "node_id": 1},'
         b' {"topic": "t", "partition": 0, "node_id": 2}]}', 0, "t-0 is pinned twice"),
    ],
)  # fmt: skip
def test_a_bad_document_is_a_corruption_error_naming_the_object_and_offset(
    data: bytes, offset: int, message: str
) -> None:
    with pytest.raises(CorruptReassignments) as caught:
        decode_reassignments(data, "ns/_cluster/reassignments/x.json")
    assert isinstance(caught.value, CorruptionError)
    assert caught.value.object_name == "ns/_cluster/reassignments/x.json"
    assert caught.value.offset == offset
    assert message in str(caught.value)
    assert str(caught.value).startswith(
        f"ns/_cluster/reassignments/x.json: corrupt at byte {offset}"
    )


def test_a_version_under_another_versions_key_is_corrupt(store: CountingStore) -> None:
    documents = ReassignmentStore(store, NS)
    store.put(documents.key(4), encode_reassignments(Reassignments(3, pin(("t", 0, 1)))))
    with pytest.raises(CorruptReassignments, match="holds version 3"):
        documents.read(4)
    with pytest.raises(ObjectNotFound):
        documents.read(5)


# --- changes: put-if-absent versions ------------------------------------------------------


def test_updates_write_the_next_version_and_keep_the_newest_ten(store: CountingStore) -> None:
    documents = ReassignmentStore(store, NS)
    assert documents.newest() == Reassignments()
    for node in range(KEEP_VERSIONS + 5):
        written = documents.update(lambda current, node=node: {**current.targets, ("t", 0): node})
        assert written == Reassignments(node, pin(("t", 0, node)))
    assert documents.versions() == list(range(5, KEEP_VERSIONS + 5))
    assert all(k.key.startswith(reassignments_prefix(NS)) for k in store.inner.list(""))
    # A change that changes nothing writes nothing.
    store.calls.clear()
    assert documents.update(lambda current: current.targets).version == KEEP_VERSIONS + 4
    assert "put_if_absent" not in store.calls


def test_two_operators_never_lose_each_others_pins(store: CountingStore) -> None:
    documents = ReassignmentStore(store, NS)
    other = ReassignmentStore(store, NS)
    documents.update(lambda current: pin(("t", 0, 1)))
    seen: list[Reassignments] = []

    def add_t1(current: Reassignments) -> dict[tuple[str, int], int]:
        seen.append(current)
        if len(seen) == 1:
            # Another operator's change lands between our read and our write.
            other.update(lambda theirs: {**theirs.targets, ("t", 2): 3})
        return {**current.targets, ("t", 1): 2}

    written = documents.update(add_t1)
    assert [s.version for s in seen] == [0, 1]  # lost the race once, re-read, applied again
    assert written == Reassignments(2, pin(("t", 0, 1), ("t", 1, 2), ("t", 2, 3)))
    assert documents.newest() == written


def test_the_newest_readable_version_wins_and_the_next_write_passes_a_corrupt_one(
    store: CountingStore,
) -> None:
    documents = ReassignmentStore(store, NS)
    documents.update(lambda current: pin(("t", 0, 1)))
    store.put(documents.key(1), b"garbage")
    skipped: list[int] = []
    assert documents.newest(on_corrupt=lambda v, exc: skipped.append(v)) == Reassignments(
        0, pin(("t", 0, 1))
    )
    assert skipped == [1]
    written = documents.update(lambda current: {**current.targets, ("t", 1): 2}, lambda v, e: None)
    assert written == Reassignments(2, pin(("t", 0, 1), ("t", 1, 2)))


# --- a daemon's reads ---------------------------------------------------------------------


def test_a_follower_lists_once_then_gets_one_object_per_read(store: CountingStore) -> None:
    documents = ReassignmentStore(store, NS)
    follower = ReassignmentFollower(ReassignmentStore(store, NS), relist_reads=1000)
    assert follower.read() == Reassignments()  # nothing written yet
    assert store.calls == ["list"]
    for _ in range(5):
        store.calls.clear()
        assert follower.read().version == -1
        assert store.calls == ["get"]
    documents.update(lambda current: pin(("t", 0, 1)))
    store.calls.clear()
    assert follower.read() == Reassignments(0, pin(("t", 0, 1)))
    assert store.calls == ["get", "get"]  # version 0, then the absent version 1
    # Several changes between two reads: caught up in one read.
    documents.update(lambda current: pin(("t", 0, 2)))
    documents.update(lambda current: pin(("t", 0, 3)))
    assert follower.read() == Reassignments(2, pin(("t", 0, 3)))
    store.calls.clear()
    follower.read()
    assert store.calls == ["get"]


def test_a_follower_keeps_the_last_good_pins_through_an_outage_and_says_so_once(
    store: CountingStore, caplog: pytest.LogCaptureFixture
) -> None:
    documents = ReassignmentStore(store, NS)
    documents.update(lambda current: pin(("t", 0, 1)))
    follower = ReassignmentFollower(documents)
    good = follower.read()
    store.down = True
    with caplog.at_level(logging.INFO, logger="kfs_core.cluster.reassignments"):
        for _ in range(5):
            assert follower.read() == good
        store.down = False
        documents.update(lambda current: pin(("t", 0, 2)))
        assert follower.read() == Reassignments(1, pin(("t", 0, 2)))
    failed = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].levelno == logging.WARNING
    assert "keeping version 0" in failed[0].getMessage()
    assert any("works again" in r.getMessage() for r in caplog.records)


def test_a_follower_passes_a_corrupt_version_keeping_the_last_good_pins(
    store: CountingStore, caplog: pytest.LogCaptureFixture
) -> None:
    documents = ReassignmentStore(store, NS)
    documents.update(lambda current: pin(("t", 0, 1)))
    follower = ReassignmentFollower(documents, relist_reads=3)
    good = follower.read()
    store.put(documents.key(1), b'{"version": 1')
    with caplog.at_level(logging.WARNING, logger="kfs_core.cluster.reassignments"):
        for _ in range(7):  # probes and relists alike
            assert follower.read() == good
    [warning] = caplog.records
    assert "corrupt" in warning.getMessage() and "keeping version 0" in warning.getMessage()
    # A newly started daemon comes to the same pins.
    assert ReassignmentFollower(documents).read() == good
    # The next change passes the corrupt version; every follower takes it.
    documents.update(lambda current: {**current.targets, ("t", 1): 2}, lambda v, e: None)
    assert follower.read() == Reassignments(2, pin(("t", 0, 1), ("t", 1, 2)))


def test_a_follower_far_behind_catches_up_at_its_next_listing(store: CountingStore) -> None:
    documents = ReassignmentStore(store, NS)
    documents.update(lambda current: pin(("t", 0, 0)))
    follower = ReassignmentFollower(documents, relist_reads=4)
    follower.read()  # a listing: version 0
    for node in range(1, KEEP_VERSIONS + 3):  # version 1 is pruned before the follower looks
        documents.update(lambda current, node=node: pin(("t", 0, node)))
    assert follower.read().version == 0  # the next version is gone: it cannot tell yet
    follower.read()
    follower.read()
    assert follower.read() == Reassignments(KEEP_VERSIONS + 2, pin(("t", 0, KEEP_VERSIONS + 2)))


def test_a_follower_follows_documents_removed_and_written_anew(store: CountingStore) -> None:
    documents = ReassignmentStore(store, NS)
    for node in range(3):
        documents.update(lambda current, node=node: pin(("t", 0, node)))
    follower = ReassignmentFollower(documents, relist_reads=2)
    assert follower.read().version == 2
    for version in documents.versions():
        store.delete(documents.key(version))
    documents.update(lambda current: pin(("t", 5, 1)))
    follower.read()
    assert follower.read() == Reassignments(0, pin(("t", 5, 1)))
    assert json.loads(store.get(documents.key(0)))["partitions"] == [
        {"node_id": 1, "partition": 5, "topic": "t"}
    ]
