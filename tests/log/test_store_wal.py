"""The ``store`` durability mode's WAL: `StoreWal` (one object per interval) and its reader.

Every test runs on a real store -- the local-directory store in a temporary
directory, S3 on a moto server for the round trip -- wrapped in a thin
`CountingStore` that counts PUTs, GETs and deletes and can hold or fail a
PUT, so the tests see exactly what reaches the store and when.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import crc32c
import pytest

from kfs_core.catalog.actions import AddSegment, SetLeaderEpochStart
from kfs_core.catalog.partition import PartitionCatalog
from kfs_core.cluster.leases import Acquired
from kfs_core.config import Settings
from kfs_core.errors import (
    CorruptWal,
    NotLeaderOrFollower,
    ObjectStoreError,
    StoreWalUnavailable,
    WalClosed,
    WalNotRecovered,
)
from kfs_core.formats.wal import encode_record_frame
from kfs_core.log import LogManager
from kfs_core.log.appender import MOVED_GRACE_S, AppendResult
from kfs_core.log.producer_state import OutOfOrderSequence
from kfs_core.log.wal import StoreWal, StoreWalReader, WalAppend, WalPosition
from kfs_core.log.wal.store import (
    decode_header,
    encode_header,
    wal_object_key,
    wal_prefix,
)
from kfs_core.records.batch import assign_offsets_into
from kfs_core.storage.base import ByteRange, ObjectInfo, ObjectStore
from kfs_core.storage.local import LocalObjectStore
from testkit.batches import make_batch
from testkit.waiting import wait_for
from tests.log.log_helpers import MANUAL_FLUSH, TOPIC, offsets_and_values, read_all, run
from tests.log.log_helpers import make_batch as log_batch

NS = "ns"
Buffer = bytes | bytearray | memoryview


class CountingStore(ObjectStore):
    """Delegates to ``inner``; counts calls, and can hold or fail the PUTs."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.url = inner.url
        self.puts: list[str] = []
        self.gets: list[tuple[str, ByteRange | None, int]] = []
        self.deletes: list[str] = []
        self.fail_puts: BaseException | None = None
        self.fail_deletes: BaseException | None = None
        self.fail_after_put: BaseException | None = None
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()
        self.ghosts: list[ObjectInfo] = []  # listed, but gone by the time they are read

    def put(self, key: str, data: bytes) -> ObjectInfo:
        return self.put_parts(key, [data])

    def put_parts(self, key: str, parts: Sequence[Buffer]) -> ObjectInfo:
        if key.startswith(wal_prefix(NS)):
            self.entered.set()
            assert self.hold.wait(30), "a held PUT was never released"
            if self.fail_puts is not None:
                raise self.fail_puts
            self.puts.append(key)
            if self.fail_after_put is not None:  # the PUT landed, its answer was lost
                self.inner.put_parts(key, parts)
                raise self.fail_after_put
        return self.inner.put_parts(key, parts)

    def put_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        return self.inner.put_if_absent(key, data)

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        data = self.inner.get(key, byte_range)
        self.gets.append((key, byte_range, len(data)))
        return data

    def head(self, key: str) -> ObjectInfo:
        return self.inner.head(key)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        ghosts = [g for g in self.ghosts if g.key.startswith(prefix)]
        return iter(sorted([*self.inner.list(prefix, start_after), *ghosts], key=lambda i: i.key))

    def delete(self, key: str) -> None:
        if self.fail_deletes is not None:
            raise self.fail_deletes
        self.deletes.append(key)
        self.inner.delete(key)

    def wal_keys(self) -> builtins.list[str]:
        return [info.key for info in self.inner.list(wal_prefix(NS))]


@pytest.fixture
def store(local_store: LocalObjectStore) -> CountingStore:
    return CountingStore(local_store)


@pytest.fixture
def open_wal(store: CountingStore, tmp_path: Path) -> Iterator[Callable[..., StoreWal]]:
    opened: list[StoreWal] = []

    def open_(incarnation: str = "inc-a", node_id: int = 1, **options: object) -> StoreWal:
        wal = StoreWal(
            store,
            NS,
            node_id,
            incarnation,
            tmp_path / "data" / incarnation,
            **options,  # type: ignore[arg-type]
        )
        wal.recover()
        opened.append(wal)
        return wal

    yield open_
    for wal in opened:
        wal.close()


def appended(wal: StoreWal, partition: int, base: int, topic: str = "t", **kw: int) -> bytes:
    """Append one batch and wait for it; the batch bytes."""
    batch = make_batch(partition, base, **kw)
    wal.append_group([WalAppend(topic, partition, base, batch)]).result(timeout=30)
    return batch


# --- the writer --------------------------------------------------------------


def test_appends_from_several_threads_queued_together_become_one_object(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    wal = open_wal()
    store.hold.clear()
    first = wal.append_group([WalAppend("t", 0, 0, make_batch(0, 0))])
    assert store.entered.wait(30)  # the writer is inside the first PUT: the rest queue up
    futures: list[Future[list[WalPosition]]] = []
    lock = threading.Lock()

    def produce(partition: int) -> None:
        future = wal.append_group([WalAppend("t", partition, 0, make_batch(partition, 0))])
        with lock:
            futures.append(future)

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(1, 9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wait_for(lambda: wal.pending_frames == 8, what="eight queued frames")
    store.hold.set()
    first.result(timeout=30)
    positions = [f.result(timeout=30) for f in futures]
    assert len(store.puts) == 2
    assert {p[0].file_seq for p in positions} == {1}
    header = decode_header(store.inner.get(store.puts[1]), store.puts[1])
    assert sorted(e.partition for e in header.entries) == list(range(1, 9))
    assert wal.metrics.objects == 2
    assert wal.metrics.frames == 9


def test_queued_appends_wait_for_the_window_and_close_writes_them_as_one_object(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    wal = open_wal(interval_ms=600_000)
    futures = [wal.append_group([WalAppend("t", p, 0, make_batch(p, 0))]) for p in range(5)]
    assert wal.pending_frames == 5
    assert not store.puts
    wal.close()
    assert len(store.puts) == 1
    assert all(f.result(timeout=0) for f in futures)
    with pytest.raises(WalClosed):
        wal.append_group([WalAppend("t", 0, 1, make_batch(0, 1))])


def test_futures_complete_only_once_the_object_is_in_the_store(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    wal = open_wal()
    store.hold.clear()
    future = wal.append_group([WalAppend("t", 0, 0, make_batch(0, 0))])
    assert store.entered.wait(30)
    assert not future.done()
    assert not store.wal_keys()
    store.hold.set()
    (position,) = future.result(timeout=30)
    key = wal_object_key(NS, 1, "inc-a", position.file_seq)
    assert store.wal_keys() == [key]
    assert store.inner.get(key, ByteRange(position.position, position.size)) == (
        encode_record_frame("t", 0, make_batch(0, 0), base_offset=0)
    )


def test_the_interval_counts_from_the_first_append(open_wal: Callable[..., StoreWal]) -> None:
    wal = open_wal(interval_ms=80)
    started = time.monotonic()
    appended(wal, 0, 0)
    elapsed = time.monotonic() - started
    assert 0.08 <= elapsed < 5


def test_an_append_whose_lease_ended_is_not_acknowledged(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    lost = {("t", 1)}
    wal = open_wal(lease_valid=lambda t, p: (t, p) not in lost, epoch_of=lambda t, p: 7)
    group = wal.append_group(
        [WalAppend("t", 0, 0, make_batch(0, 0)), WalAppend("t", 1, 0, make_batch(1, 0))]
    )
    with pytest.raises(NotLeaderOrFollower) as caught:
        group.result(timeout=30)
    assert caught.value.retriable and caught.value.kafka_error_code == 6
    assert caught.value.fields == {"topic": "t", "partition": 1}
    # Written all the same (after the PUT is too late to take it back), at its epoch.
    (key,) = store.wal_keys()
    assert {e.leader_epoch for e in decode_header(store.inner.get(key), key).entries} == {7}
    assert appended(wal, 0, 1)
    assert wal.metrics.lease_refusals == 1


def test_an_append_queued_under_another_epoch_is_not_acknowledged(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    """Queued while the lease had lapsed (no epoch), completed once a new lease holds: refused."""
    epoch = {"now": 0}
    wal = open_wal(epoch_of=lambda t, p: epoch["now"])
    store.hold.clear()
    queued = wal.append_group([WalAppend("t", 0, 0, make_batch(0, 0))])
    assert store.entered.wait(30)
    epoch["now"] = 3
    store.hold.set()
    with pytest.raises(NotLeaderOrFollower):
        queued.result(timeout=30)
    appended(wal, 0, 0)  # queued under epoch 3: acknowledged


def test_frames_queued_by_a_dropped_partition_are_never_written(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    """The log drops a partition on a failed PUT; its frames queued above the hole stay out.

    Offset 0's PUT fails; offset 1 was queued meanwhile.  The log hears of
    the failure and drops the partition (`forget_partition`) before the
    writer takes offset 1 -- the order in which a takeover would otherwise
    find offset 1 in the store with offset 0 missing below it.
    """
    wal = open_wal()
    store.hold.clear()
    lost = wal.append_group([WalAppend("t", 0, 0, make_batch(0, 0))])
    assert store.entered.wait(30)  # the writer is in offset 0's PUT
    above = wal.append_group([WalAppend("t", 0, 1, make_batch(0, 1))])
    other = wal.append_group([WalAppend("t", 1, 0, make_batch(1, 0))])

    def dropped(_: object) -> None:  # the log's answer, before the writer goes on
        store.fail_puts = None
        wal.forget_partition("t", 0)

    lost.add_done_callback(dropped)
    store.fail_puts = ObjectStoreError("connection reset")
    store.hold.set()
    with pytest.raises(StoreWalUnavailable):
        lost.result(timeout=30)
    with pytest.raises(StoreWalUnavailable, match="dropped the partition"):
        above.result(timeout=30)
    other.result(timeout=30)
    written = [decode_header(store.inner.get(key), key) for key in store.wal_keys()]
    assert [(e.topic, e.partition) for h in written for e in h.entries] == [("t", 1)]
    # The partition opened again starts from the store's end: offset 0 onwards.
    appended(wal, 0, 0)
    appended(wal, 0, 1)
    chain = StoreWalReader(store, NS).read_partition("t", 0, 0)
    assert [b.base_offset for b in chain] == [0, 1]


def test_a_lease_check_that_raises_refuses_the_append_and_the_wal_goes_on(
    open_wal: Callable[..., StoreWal],
) -> None:
    def broken(topic: str, partition: int) -> bool:
        raise RuntimeError("lease table gone")

    wal = open_wal(lease_valid=broken)
    with pytest.raises(NotLeaderOrFollower):
        wal.append_group([WalAppend("t", 0, 0, make_batch(0, 0))]).result(timeout=30)
    assert wal.failure is None


def test_a_failed_put_is_retriable_and_later_appends_succeed(
    store: CountingStore, open_wal: Callable[..., StoreWal], caplog: pytest.LogCaptureFixture
) -> None:
    wal = open_wal()
    store.fail_puts = ObjectStoreError("the store is down")
    with caplog.at_level(logging.ERROR, "kfs_core.log.wal.store"):
        for partition in (0, 1):
            with pytest.raises(StoreWalUnavailable) as caught:
                wal.append_group([WalAppend("t", partition, 0, make_batch(partition, 0))]).result(
                    timeout=30
                )
            assert caught.value.retriable and caught.value.kafka_error_code == 56
    assert len([r for r in caplog.records if "PUT of" in r.getMessage()]) == 1  # once per outage
    assert wal.failure is None
    store.fail_puts = None
    # Offsets 0.. of partition 0 were lost: a frame above them would sit over a hole.
    with pytest.raises(StoreWalUnavailable, match="offsets from 0"):
        wal.append_group([WalAppend("t", 0, 1, make_batch(0, 1))]).result(timeout=30)
    appended(wal, 0, 0)  # the log starts again from the lost offset
    appended(wal, 0, 1)
    appended(wal, 1, 0)
    wal.forget_partition("t", 2)
    assert wal.metrics.put_failures == 2
    reader = StoreWalReader(store, NS)
    assert [b.base_offset for b in reader.read_partition("t", 0, 0)] == [0, 1]


def test_a_group_refused_over_a_hole_leaves_a_hole_in_its_other_partitions_too(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    wal = open_wal()
    store.fail_puts = ObjectStoreError("down")
    with pytest.raises(StoreWalUnavailable):
        wal.append_group([WalAppend("t", 0, 0, make_batch(0, 0))]).result(timeout=30)
    store.fail_puts = None
    with pytest.raises(StoreWalUnavailable):
        wal.append_group(
            [WalAppend("t", 1, 0, make_batch(1, 0)), WalAppend("t", 0, 5, make_batch(0, 5))]
        ).result(timeout=30)
    with pytest.raises(StoreWalUnavailable, match="t-1: offsets from 0"):
        wal.append_group([WalAppend("t", 1, 1, make_batch(1, 1))]).result(timeout=30)


def test_a_put_that_failed_after_landing_loses_to_the_rewrite_and_is_deleted(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    wal = open_wal(delete_retry_s=0.01)
    store.fail_deletes = ObjectStoreError("down")
    store.fail_after_put = ObjectStoreError("connection reset")
    with pytest.raises(StoreWalUnavailable):
        wal.append_group([WalAppend("t", 0, 0, make_batch(0, 0, size=100))]).result(timeout=30)
    store.fail_after_put = None
    rewritten = appended(wal, 0, 0, size=300)
    landed = wal_object_key(NS, 1, "inc-a", 0)
    assert store.wal_keys() == [landed, wal_object_key(NS, 1, "inc-a", 1)]
    (batch,) = StoreWalReader(store, NS).read_partition("t", 0, 0)
    assert batch.batch == rewritten  # same epoch, same offset: the later object of the writer
    store.fail_deletes = None
    wait_for(lambda: landed not in store.wal_keys(), what="the landed failed object deleted")


def test_checkpoints_delete_the_objects_they_flush(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    wal = open_wal()
    wal.append_group(
        [WalAppend("t", 0, 0, make_batch(0, 0)), WalAppend("t", 1, 0, make_batch(1, 0))]
    ).result(timeout=30)
    appended(wal, 0, 1)
    first, second = store.wal_keys()
    assert wal.wal_files() == [first, second]
    wal.checkpoint("t", 0, 1)
    wait_for(lambda: store.wal_keys() == [first], what="the object holding only t-0 deleted")
    assert wal.flushed_offset("t", 0) == 1 and wal.flushed_offset("t", 1) == -1
    wal.checkpoint("t", 0, 0)  # lower: changes nothing
    assert wal.flushed_offsets == {("t", 0): 1}
    wal.checkpoint("t", 1, 0)
    wait_for(lambda: not store.wal_keys(), what="both objects deleted")
    assert wal.wal_files() == []
    wait_for(lambda: wal.metrics.files_deleted == 2, what="deletions counted")


def test_deletions_retry_while_the_store_refuses_them(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    wal = open_wal(delete_retry_s=0.01)
    appended(wal, 0, 0)
    store.fail_deletes = ObjectStoreError("down")
    wal.checkpoint("t", 0, 0)
    wait_for(lambda: wal.metrics.delete_failures >= 2, what="a retried deletion")
    assert store.wal_keys()
    store.fail_deletes = None
    wait_for(lambda: not store.wal_keys(), what="the deletion once the store is back")


def test_the_writer_is_a_drop_in_for_wal_writer(store: CountingStore, tmp_path: Path) -> None:
    wal = StoreWal(store, NS, 3, "inc", tmp_path / "d")
    with pytest.raises(WalNotRecovered):
        wal.append_group([WalAppend("t", 0, 0, make_batch(0, 0))])
    recovery = wal.recover()
    assert list(recovery) == [] and recovery.files == [] and recovery.torn_tail is None
    assert Path(wal.directory).is_dir()
    assert wal.durability == "store" and not wal.out_of_space and wal.failure is None
    heard: list[object] = []
    wal.add_failure_listener(heard.append)
    (position,) = wal.append_group([WalAppend("t", 0, 0, make_batch(0, 0))]).result(timeout=30)
    assert position.file_seq == 0
    metrics = wal.metrics
    assert (metrics.objects, metrics.writes, metrics.frames, metrics.fsyncs) == (1, 1, 1, 0)
    assert metrics.bytes == store.inner.head(store.puts[0]).size
    assert metrics.put_seconds > 0
    wal.close()
    wal.close()
    assert heard == []
    assert len(store.puts) == 1  # nothing queued: no empty object


def test_from_settings_takes_the_daemons_node_interval_and_data_dir(
    store: CountingStore, tmp_path: Path
) -> None:
    settings = Settings(
        data_dir=str(tmp_path / "data"), node_id=4, store_wal_interval_ms=5, namespace=NS
    )
    wal = StoreWal.from_settings(settings, store, "abc")
    assert wal.prefix == f"{NS}/_wal/4/abc/"
    assert wal.directory == str(tmp_path / "data" / "wal")


# --- the reader: replay and sweep -------------------------------------------------


def test_replay_follows_the_chain_across_incarnations(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    old = open_wal("a", node_id=1, epoch_of=lambda t, p: 1)
    new = open_wal("b", node_id=2, epoch_of=lambda t, p: 2)
    batches = {o: appended(old, 0, o) for o in range(3)}
    appended(old, 1, 0)  # another partition, same writer
    batches |= {o: appended(new, 0, o) for o in (3, 4)}
    reader = StoreWalReader(store, NS)
    chain = reader.read_partition("t", 0, 1)
    assert [(b.base_offset, b.last_offset) for b in chain] == [(1, 1), (2, 2), (3, 3), (4, 4)]
    assert [b.batch for b in chain] == [batches[o] for o in (1, 2, 3, 4)]
    assert chain[0].position.file_seq == 1
    # The caller's own incarnation is not read.
    assert [b.base_offset for b in reader.read_partition("t", 0, 1, exclude_incarnation="b")] == [
        1,
        2,
    ]
    assert reader.read_partition("t", 0, 5) == []
    assert reader.read_partition("t", 9, 0) == []


def test_calls_made_during_a_listing_share_the_next_one_and_miss_nothing(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    wal = open_wal("a", node_id=1)
    appended(wal, 0, 0)
    listings: list[int] = []
    first_listing = threading.Event()
    release = threading.Event()
    plain_list = store.list

    def slow_list(prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        listings.append(len(listings))
        if len(listings) == 1:
            first_listing.set()
            assert release.wait(30)
        return plain_list(prefix, start_after)

    store.list = slow_list  # type: ignore[method-assign]
    reader = StoreWalReader(store, NS)
    results: dict[str, list[int]] = {}

    def replay(name: str) -> None:
        results[name] = [b.base_offset for b in reader.read_partition("t", 0, 0)]

    first = threading.Thread(target=replay, args=("first",))
    first.start()
    assert first_listing.wait(30)
    # Asked while the first listing is under way, after another object landed.
    appended(wal, 0, 1)
    waiting = [threading.Thread(target=replay, args=(f"w{i}",)) for i in range(4)]
    for thread in waiting:
        thread.start()
    wait_for(lambda: reader._tickets == 5, what="four calls waiting")
    release.set()
    for thread in (first, *waiting):
        thread.join(30)
    assert len(listings) == 2  # the first, and one the four share
    assert all(results[f"w{i}"] == [0, 1] for i in range(4)), results
    appended(wal, 0, 2)
    assert [b.base_offset for b in reader.read_partition("t", 0, 0)] == [0, 1, 2]
    assert len(listings) == 3  # a call after the last listing lists again


def test_a_ticket_taken_with_the_lease_lets_the_replay_read_the_listing_made_then(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    wal = open_wal("a", node_id=1)
    appended(wal, 0, 0)
    appended(wal, 0, 1)
    listings: list[str] = []
    plain_list = store.list

    def counted_list(prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        listings.append(prefix)
        return plain_list(prefix, start_after)

    store.list = counted_list  # type: ignore[method-assign]
    reader = StoreWalReader(store, NS)
    ticket = reader.ticket()  # the lease is held from here on
    reader.list_for(ticket)  # while the catalog loads: the listing, and both headers
    assert len(listings) == 1
    header_reads = len(store.gets)
    assert header_reads == 2
    appended(wal, 0, 2)  # landed after the ticket: the new holder's own, say
    replayed = reader.read_partition("t", 0, 0, ticket=ticket)
    assert [b.base_offset for b in replayed] == [0, 1]
    assert len(listings) == 1  # no second listing, no header read again
    assert all(rng is not None and rng.start > 0 for _, rng, _ in store.gets[header_reads:])
    # A call without a ticket lists again, and sees the later object.
    assert [b.base_offset for b in reader.read_partition("t", 0, 0)] == [0, 1, 2]
    assert len(listings) == 2


def test_the_header_cache_keeps_only_what_the_last_listing_showed(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    wal = open_wal("a", node_id=1)
    appended(wal, 0, 0)
    appended(wal, 0, 1)
    reader = StoreWalReader(store, NS)
    assert [b.base_offset for b in reader.read_partition("t", 0, 0)] == [0, 1]
    assert len(reader._headers) == 2
    wal.checkpoint("t", 0, 2)  # both committed: the writer deletes its objects
    wait_for(lambda: not list(store.inner.list(wal_prefix(NS))), what="the objects deleted")
    assert reader.read_partition("t", 0, 2) == []
    assert reader._headers == {}


def test_replay_starts_inside_a_frame_of_several_batches(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    wal = open_wal()
    two = make_batch(0, 0) + make_batch(0, 1)
    wal.append_group([WalAppend("t", 0, 0, two)]).result(timeout=30)
    appended(wal, 0, 2)
    chain = StoreWalReader(store, NS).read_partition("t", 0, 1)
    assert [(b.base_offset, b.last_offset) for b in chain] == [(0, 1), (2, 2)]
    assert chain[0].batch == two  # `Appender.replay` skips the batch below the catalog's end


def test_replay_leaves_out_what_a_deposed_holder_wrote_after_a_later_epoch_began(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    deposed = open_wal("a", epoch_of=lambda t, p: 3)
    appended(deposed, 0, 0)  # acknowledged under epoch 3
    appended(deposed, 0, 1)  # written by the holder of epoch 3 after epoch 4 began at 1
    reader = StoreWalReader(store, NS)
    everything = reader.read_partition("t", 0, 0)
    assert [b.base_offset for b in everything] == [0, 1]
    history = [(3, 0), (4, 1)]
    assert [b.base_offset for b in reader.read_partition("t", 0, 0, epochs=history)] == [0]
    assert reader.read_partition("t", 0, 1, epochs=history) == []


def test_replay_prefers_the_higher_epoch_and_never_goes_back_to_a_lower_one(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    deposed = open_wal("a", epoch_of=lambda t, p: 3)
    owner = open_wal("b", epoch_of=lambda t, p: 4)
    appended(deposed, 0, 0)
    winner = appended(owner, 0, 1, size=100)
    late = appended(deposed, 0, 1, size=300)  # the deposed owner's write, never acknowledged
    appended(deposed, 0, 2)  # continues the deposed chain: must not be replayed
    chain = StoreWalReader(store, NS).read_partition("t", 0, 0)
    assert [b.base_offset for b in chain] == [0, 1]
    assert chain[1].batch == winner != late


def test_replay_stops_at_a_gap(store: CountingStore, open_wal: Callable[..., StoreWal]) -> None:
    wal = open_wal()
    for offset in (0, 1, 3):
        appended(wal, 0, offset)
    assert [b.base_offset for b in StoreWalReader(store, NS).read_partition("t", 0, 0)] == [0, 1]


def test_a_long_chain_is_read_several_objects_at_once_and_kept_in_order(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    wal = open_wal()
    batches = [appended(wal, 0, offset) for offset in range(12)]  # an object each
    reader = StoreWalReader(store, NS)
    reader.list_for(reader.ticket())  # the headers read: only frame reads follow
    # Each frame read waits for another to be under way: read one at a time, it would fail.
    together = threading.Barrier(2, timeout=30)
    inner_get = store.get

    def get(key: str, byte_range: ByteRange | None = None) -> bytes:
        together.wait()
        return inner_get(key, byte_range)

    store.get = get  # type: ignore[method-assign]
    chain = reader.read_partition("t", 0, 0)
    assert [b.batch for b in chain] == batches
    assert [b.base_offset for b in chain] == list(range(12))


def test_replay_skips_objects_by_their_header(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    wal = open_wal()
    for offset in range(4):
        appended(wal, 1, offset, size=5000)  # objects with nothing for partition 0
    wanted = appended(wal, 0, 0, size=5000)
    store.gets.clear()
    reader = StoreWalReader(store, NS, header_read_bytes=256)
    (batch,) = reader.read_partition("t", 0, 0)
    assert batch.batch == wanted
    # One 256-byte header read per object, then the one frame.
    assert [n for _, _, n in store.gets[:5]] == [256] * 5
    assert len(store.gets) == 6
    assert store.gets[5][2] == batch.position.size
    # Headers are cached: the next partition costs no header read.
    store.gets.clear()
    assert len(reader.read_partition("t", 1, 2)) == 2
    assert len(store.gets) == 2


def test_a_header_longer_than_the_first_read_costs_one_more_get(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    wal = open_wal()
    wal.append_group([WalAppend(f"topic-{i}", 0, 0, make_batch(0, 0)) for i in range(10)]).result(
        timeout=30
    )
    store.gets.clear()
    reader = StoreWalReader(store, NS, header_read_bytes=64)
    assert len(reader.read_partition("topic-7", 0, 0)) == 1
    assert len(store.gets) == 3  # 64 bytes, the rest of the header, the frame


def test_objects_deleted_since_the_listing_are_skipped(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    wal = open_wal()
    batch = appended(wal, 0, 0)
    gone = wal_object_key(NS, 1, "inc-a", 99)
    store.ghosts.append(ObjectInfo(gone, 500, "etag", 0.0))
    reader = StoreWalReader(store, NS)
    assert [b.batch for b in reader.read_partition("t", 0, 0)] == [batch]
    assert reader.sweep(lambda t, p: 0, set()) == 0


def test_a_damaged_object_is_reported_with_its_key(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    wal = open_wal()
    appended(wal, 0, 0)
    (key,) = store.wal_keys()
    data = bytearray(store.inner.get(key))
    data[-20] ^= 0xFF  # inside the batch: the frame's data CRC
    store.inner.put(key, bytes(data))
    with pytest.raises(CorruptWal) as caught:
        StoreWalReader(store, NS).read_partition("t", 0, 0)
    assert caught.value.object_name == key
    assert caught.value.offset == decode_header(data, key).entries[0].position
    data[14] ^= 0xFF  # the node id: the header CRC
    store.inner.put(key, bytes(data))
    with pytest.raises(CorruptWal, match="header CRC") as caught:
        StoreWalReader(store, NS).read_partition("t", 0, 0)
    assert caught.value.object_name == key


def test_sweep_deletes_dead_incarnations_objects_that_nothing_needs(
    store: CountingStore, open_wal: Callable[..., StoreWal], caplog: pytest.LogCaptureFixture
) -> None:
    dead = open_wal("dead")
    live = open_wal("live")
    appended(dead, 0, 0)  # object 0
    dead.append_group(
        [WalAppend("t", 0, 1, make_batch(0, 1)), WalAppend("gone", 0, 0, make_batch(0, 0))]
    ).result(timeout=30)  # object 1
    appended(live, 0, 2)
    appended(dead, 5, 0)  # object 2, damaged below
    damaged = wal_object_key(NS, 1, "dead", 2)
    store.inner.put(damaged, b"KFWO" + bytes(100))
    committed: dict[tuple[str, int], int | None] = {("t", 0): 1, ("gone", 0): None, ("t", 5): 9}
    reader = StoreWalReader(store, NS)
    with caplog.at_level(logging.ERROR, "kfs_core.log.wal.store"):
        assert reader.sweep(lambda t, p: committed[(t, p)], {"live"}) == 1
    assert any(damaged in r.getMessage() for r in caplog.records)
    assert wal_object_key(NS, 1, "dead", 0) not in store.wal_keys()
    committed[("t", 0)] = 2
    assert reader.sweep(lambda t, p: committed[(t, p)], {"live"}) == 1
    assert store.wal_keys() == [damaged, wal_object_key(NS, 1, "live", 0)]


# --- the format ----------------------------------------------------------------


def test_golden_bytes_of_a_tiny_object(
    store: CountingStore, open_wal: Callable[..., StoreWal]
) -> None:
    wal = open_wal("ab", node_id=7, epoch_of=lambda t, p: 2)
    wal.append_group([WalAppend("t", 0, 5, b"hello", last_offset=5)]).result(timeout=30)
    (key,) = store.wal_keys()
    assert key == "ns/_wal/7/ab/00000000000000000000.wal"
    frame = encode_record_frame("t", 0, b"hello", base_offset=5)
    # The local WAL's RECORD frame, unchanged (its own golden bytes: tests/formats).
    assert frame == bytes.fromhex(
        "00000015"  # payload length 21
        "6dc898b4"  # header CRC-32C
        "01"
        "0001"
        "74"
        "00000000"
        "0000000000000005"  # record, topic "t", partition 0, base 5
        "68656c6c6f"  # the batch bytes
        "0f21c8d2"  # data CRC-32C
        "4b465731"  # b"KFW1"
    )
    header_fields = b"".join(
        [
            b"KFWO",  # magic
            struct.pack(">H", 1),  # format version
            struct.pack(">H", 0),  # flags
            struct.pack(">I", 74),  # header length, the CRC included
            struct.pack(">i", 7),  # node id
            struct.pack(">Q", 0),  # sequence number
            struct.pack(">B", 2),  # incarnation length
            b"ab",  # incarnation
            struct.pack(">I", 1),  # one entry
            struct.pack(">H", 1),  # topic length
            b"t",  # topic
            struct.pack(">i", 0),  # partition
            struct.pack(">i", 2),  # leader epoch
            struct.pack(">q", 5),  # first offset
            struct.pack(">q", 5),  # last offset
            struct.pack(">Q", 74),  # frame position: right after the header
            struct.pack(">I", len(frame)),  # frame size
        ]
    )
    assert crc32c.crc32c(header_fields) == 0xF5BBC770
    expected = header_fields + struct.pack(">I", 0xF5BBC770) + frame
    assert store.inner.get(key) == expected
    assert encode_header(7, "ab", 0, [("t", 0, 2, 5, 5, len(frame))]) == expected[:74]
    header = decode_header(expected, key)
    assert (header.node_id, header.incarnation, header.seq, header.length) == (7, "ab", 0, 74)
    assert [
        (e.topic, e.partition, e.leader_epoch, e.first_offset, e.last_offset)
        for e in header.entries
    ] == [("t", 0, 2, 5, 5)]


@pytest.mark.parametrize(
    ("index", "value", "reason"),
    [(0, 0x00, "not a WAL object"), (5, 0x02, "format version 2")],
)
def test_a_wrong_magic_or_version_is_corruption(index: int, value: int, reason: str) -> None:
    data = bytearray(encode_header(1, "x", 0, [("t", 0, 0, 0, 0, 20)]))
    data[index] = value
    with pytest.raises(CorruptWal, match=reason):
        decode_header(bytes(data), "k")


# --- S3 ------------------------------------------------------------------------


@pytest.mark.integration
def test_round_trip_on_s3(s3_store: ObjectStore, tmp_path: Path) -> None:
    wal = StoreWal(s3_store, NS, 1, "s3inc", tmp_path / "d", epoch_of=lambda t, p: 1)
    wal.recover()
    try:
        batches = [make_batch(p, 0) for p in range(3)]
        wal.append_group([WalAppend("t", p, 0, batch) for p, batch in enumerate(batches)]).result(
            timeout=60
        )
        more = appended(wal, 1, 1)
    finally:
        wal.close()
    reader = StoreWalReader(s3_store, NS)
    chain = reader.read_partition("t", 1, 0)
    assert [b.batch for b in chain] == [batches[1], more]
    assert reader.sweep(lambda t, p: 5, set()) == 2
    assert not list(s3_store.list(wal_prefix(NS)))


# --- under the partition log ---------------------------------------------------


def test_the_partition_log_runs_on_a_store_wal_and_a_takeover_replays_it(
    store: CountingStore, tmp_path: Path
) -> None:
    """`LogManager` with a `StoreWal` where a `WalWriter` would be, then a takeover.

    The takeover is what a store-mode daemon does for a partition it takes
    from a dead holder: open it (catalog end), replay the chain above it
    through `Appender.replay`, flush -- `LogManager.start`'s replay loop.
    """
    manual: dict[str, Any] = dict(MANUAL_FLUSH)
    settings = Settings(**manual)

    async def body() -> None:
        wal_a = StoreWal(store, NS, 1, "a", tmp_path / "a", interval_ms=5)
        holder = LogManager(store, NS, wal_a, settings)  # type: ignore[arg-type]
        await holder.start()
        await holder.create_topic(TOPIC, partitions=2)
        for n in range(3):
            await holder.append(TOPIC, 0, log_batch(2, tag=f"p0-{n}-"), timeout_s=10)
        await holder.flush()
        await asyncio.to_thread(wait_for, lambda: not store.wal_keys(), what="objects deleted")
        for n in range(3):
            for partition in (0, 1):
                await holder.append(TOPIC, partition, log_batch(2, tag=f"x{n}-"), timeout_s=10)
        acked = {p: await read_all(holder, TOPIC, p) for p in (0, 1)}
        assert len(store.wal_keys()) >= 3
        await holder.close(flush=False)  # the holder dies: its records are in its WAL only
        wal_a.close()

        wal_b = StoreWal(store, NS, 2, "b", tmp_path / "b", interval_ms=5)
        owner = LogManager(store, NS, wal_b, settings)  # type: ignore[arg-type]
        await owner.start()
        reader = StoreWalReader(store, NS)
        for partition in (0, 1):
            p = await owner._table.open(TOPIC, partition)
            for record in reader.read_partition(
                TOPIC, partition, p.next_offset, exclude_incarnation="b"
            ):
                owner._appender.replay(p, record)
            p.high_watermark = p.next_offset
            await owner._flusher.flush_all([p])
        assert {p: await read_all(owner, TOPIC, p) for p in (0, 1)} == acked
        assert reader.sweep(lambda t, p: len(offsets_and_values(acked[p])), {"b"}) >= 3
        assert not store.wal_keys()
        await owner.close()
        wal_b.close()

    run(body())


class CatalogLeases:
    """A daemon's partition leases as `LeaseKeeper` takes them: ``lease`` commits in the catalog.

    No heartbeats: the tests say when a daemon holds what.  ``epoch_of`` and
    ``lease_valid`` are what the daemon hands its `StoreWal`.
    """

    def __init__(self, store: ObjectStore, node_id: int, incarnation: str) -> None:
        self._store = store
        self._node_id = node_id
        self._incarnation = incarnation
        self.held: dict[tuple[str, int], int] = {}
        self.refusing = False  # another daemon holds every partition: each take is refused

    def recovered(self, keys: Any) -> None:
        pass

    async def acquire(self, topic: str, partition: int, *, recovering: bool = False) -> Any:
        if self.refusing:
            raise NotLeaderOrFollower(f"{topic}-{partition}: live node 9 holds it")
        if (topic, partition) not in self.held:
            catalog = PartitionCatalog(self._store, NS, topic, partition)
            before = await asyncio.to_thread(catalog.refresh)
            state = await asyncio.to_thread(catalog.take_lease, self._node_id, self._incarnation)
            self.held[(topic, partition)] = state.leader_epoch
            moved = before.leader_node_id not in (None, -1, self._node_id)
            return Acquired(state.leader_epoch, moved=moved)
        return Acquired(self.held[(topic, partition)])

    def local_epoch(self, topic: str, partition: int) -> int | None:
        return self.held.get((topic, partition))

    def lost(self, topic: str, partition: int) -> None:
        self.held.pop((topic, partition), None)

    def epoch_of(self, topic: str, partition: int) -> int:
        return self.held.get((topic, partition), 0)

    def lease_valid(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self.held


PRODUCER = 4711


def idempotent(seq: int, tag: str) -> bytes:
    """Two records of producer `PRODUCER` (epoch 0) from sequence ``seq``."""
    return log_batch(2, tag=tag, producer_id=PRODUCER, producer_epoch=0, base_sequence=seq)


async def store_mode_daemon(
    store: ObjectStore, tmp_path: Path, node_id: int, incarnation: str
) -> tuple[LogManager, StoreWal]:
    """A store-mode daemon's log: leases in the catalog, the store WAL, replay on takeover."""
    leases = CatalogLeases(store, node_id, incarnation)
    wal = StoreWal(
        store,
        NS,
        node_id,
        incarnation,
        tmp_path / incarnation,
        interval_ms=5,
        epoch_of=leases.epoch_of,
        lease_valid=leases.lease_valid,
    )
    logs = LogManager(
        store,
        NS,
        wal,
        Settings(**dict[str, Any](MANUAL_FLUSH)),
        ownership=leases,
        previous_holders=StoreWalReader(store, NS),
    )
    await logs.start()
    return logs, wal


def values(data: bytes) -> list[bytes | None]:
    return [value for _, value in offsets_and_values(data)]


def test_a_takeover_leaves_out_a_refused_batch_above_a_lost_one_and_the_retries_append_both(
    store: CountingStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The store WAL holds an idempotent producer's batch N+1 while its batch N never landed.

    Holder A acknowledged the producer's sequences 0..1 and another
    producer's records; both are committed.  Its WAL object that the next
    holder finds above the catalog's end holds the producer's sequences
    4..5 -- a batch A refused (its PUT landed after the lease lapsed), whose
    predecessor, sequences 2..3, never reached the store.  Replayed, it would
    make the producer's retry of 2..3 out of order (fatal to a Kafka client).
    The takeover leaves it out; the retries of 2..3 and 4..5 then append in
    order, each once.
    """

    async def body() -> None:
        holder, wal_a = await store_mode_daemon(store, tmp_path, 1, "a")
        await holder.create_topic(TOPIC, partitions=1)
        await holder.append(TOPIC, 0, idempotent(0, "n0-"), timeout_s=10)  # offsets 0..1
        await holder.append(TOPIC, 0, log_batch(2, tag="q-"), timeout_s=10)  # 2..3
        await holder.flush()
        await holder.close()
        wal_a.close()
        # What A's refused append left in the store: sequences 4..5 at offset 4.
        left = StoreWal(store, NS, 1, "a-refused", tmp_path / "left", epoch_of=lambda t, p: 1)
        left.recover()
        refused = bytearray(idempotent(4, "n2-"))
        assign_offsets_into(refused, 4, object_name="refused")
        left.append_group([WalAppend(TOPIC, 0, 4, refused)]).result(timeout=30)
        left.close()

        owner, wal_b = await store_mode_daemon(store, tmp_path, 2, "b")
        with caplog.at_level(logging.WARNING, "kfs_core.log.appender"):
            retry_n = await owner.append(TOPIC, 0, idempotent(2, "n1-"), timeout_s=10)
        assert any("replay stops here" in r.getMessage() for r in caplog.records)
        retry_n1 = await owner.append(TOPIC, 0, idempotent(4, "n2-"), timeout_s=10)
        assert (retry_n.base_offset, retry_n1.base_offset) == (4, 6)
        again = await owner.append(TOPIC, 0, idempotent(4, "n2-"), timeout_s=10)
        assert again.base_offset == 6  # a retry of the last batch is a duplicate
        expected = [
            *values(log_batch(2, tag="n0-")),
            *values(log_batch(2, tag="q-")),
            *values(log_batch(2, tag="n1-")),
            *values(log_batch(2, tag="n2-")),
        ]
        assert values(await read_all(owner, TOPIC, 0)) == expected
        await owner.close()
        wal_b.close()

    run(body())


async def taker_after_a_batch(store: ObjectStore, tmp_path: Path) -> tuple[LogManager, StoreWal]:
    """Daemon 2, about to take the partition daemon 1 wrote `PRODUCER`'s sequences 0..1 to."""
    holder, wal_a = await store_mode_daemon(store, tmp_path, 1, "a")
    await holder.create_topic(TOPIC, partitions=1)
    await holder.append(TOPIC, 0, idempotent(0, "n0-"), timeout_s=10)
    await holder.flush()
    await holder.close()
    wal_a.close()
    return await store_mode_daemon(store, tmp_path, 2, "b")


async def holder_dies_with_a_batch_in_its_wal(store: ObjectStore, tmp_path: Path) -> AppendResult:
    """Daemon 1 commits `PRODUCER`'s sequences 0..1, then dies with 2..3 in its WAL only."""
    holder, wal_a = await store_mode_daemon(store, tmp_path, 1, "a")
    await holder.create_topic(TOPIC, partitions=1)
    await holder.append(TOPIC, 0, idempotent(0, "n0-"), timeout_s=10)
    await holder.flush()
    acked = await holder.append(TOPIC, 0, idempotent(2, "n1-"), timeout_s=10)
    await holder.close(flush=False)
    wal_a.close()
    return acked


def test_a_takeover_commits_where_its_epoch_begins_with_the_replayed_batches(
    store: CountingStore, tmp_path: Path
) -> None:
    """One commit: the replayed batches' segment, and the new epoch's start above them."""

    async def body() -> None:
        await holder_dies_with_a_batch_in_its_wal(store, tmp_path)

        taker, wal_b = await store_mode_daemon(store, tmp_path, 2, "b")
        state = await taker.catalog_state(TOPIC, 0)
        assert state.high_watermark == 4
        assert [(e.epoch, e.start_offset) for e in state.leader_epochs][-2:] == [(1, 0), (2, 4)]
        catalog = PartitionCatalog(store, NS, TOPIC, 0)
        catalog.refresh()
        commits = catalog.read_commits(0, catalog.state.version + 1)
        starts = [c for c in commits if any(isinstance(a, SetLeaderEpochStart) for a in c.actions)]
        assert len(starts) == 1
        assert [type(a) for a in starts[0].actions] == [SetLeaderEpochStart, AddSegment]
        await taker.close()
        wal_b.close()

    run(body())


def test_a_gap_behind_a_batch_refused_here_as_not_led_is_refused_the_same_way(
    store: CountingStore, tmp_path: Path
) -> None:
    """A pipelined produce that meets the take of its partition between two requests.

    The first (sequences 2..3) is refused: another daemon holds the
    partition.  The next (4..5) arrives once this daemon holds it: its gap
    is this daemon's own retriable refusal, so it is refused the same way
    (not OUT_OF_ORDER_SEQUENCE_NUMBER, on which librdkafka bumps the
    producer's epoch), and the client's retries append both in order.
    """

    async def body() -> None:
        taker, wal_b = await taker_after_a_batch(store, tmp_path)
        leases = taker._table.ownership
        assert isinstance(leases, CatalogLeases)
        leases.refusing = True
        with pytest.raises(NotLeaderOrFollower, match="live node 9"):
            await taker.append(TOPIC, 0, idempotent(2, "n1-"), timeout_s=10)
        leases.refusing = False
        with pytest.raises(NotLeaderOrFollower, match="refused here as not led"):
            await taker.append(TOPIC, 0, idempotent(4, "n2-"), timeout_s=10)
        assert (await taker.append(TOPIC, 0, idempotent(2, "n1-"), timeout_s=10)).base_offset == 2
        assert (await taker.append(TOPIC, 0, idempotent(4, "n2-"), timeout_s=10)).base_offset == 4
        # A gap no refusal explains, past the grace after the move, is out of
        # order, as Kafka answers it.
        moved_at = taker._table.partitions[(TOPIC, 0)].moved_at
        assert moved_at is not None
        taker._table.partitions[(TOPIC, 0)].moved_at = moved_at - MOVED_GRACE_S
        with pytest.raises(OutOfOrderSequence):
            await taker.append(TOPIC, 0, idempotent(8, "n4-"), timeout_s=10)
        expected = [values(log_batch(2, tag=t)) for t in ("n0-", "n1-", "n2-")]
        assert values(await read_all(taker, TOPIC, 0)) == [v for vs in expected for v in vs]
        await taker.close()
        wal_b.close()

    run(body())


def test_a_gap_soon_after_a_partition_moved_here_is_refused_as_not_led(
    store: CountingStore, tmp_path: Path
) -> None:
    """The batch before it was refused by the previous holder, on its way out.

    The client retries that batch at the new holder; until then the one
    behind it gets NOT_LEADER_OR_FOLLOWER, not OUT_OF_ORDER_SEQUENCE_NUMBER.
    """

    async def body() -> None:
        taker, wal_b = await taker_after_a_batch(store, tmp_path)
        with pytest.raises(NotLeaderOrFollower, match=r"moved here .* s ago"):
            await taker.append(TOPIC, 0, idempotent(4, "n2-"), timeout_s=10)
        assert (await taker.append(TOPIC, 0, idempotent(2, "n1-"), timeout_s=10)).base_offset == 2
        assert (await taker.append(TOPIC, 0, idempotent(4, "n2-"), timeout_s=10)).base_offset == 4
        # A new epoch that does not start at sequence 0 is no gap: out of order at once.
        bumped = log_batch(2, producer_id=PRODUCER, producer_epoch=1, base_sequence=3)
        with pytest.raises(OutOfOrderSequence):
            await taker.append(TOPIC, 0, bumped, timeout_s=10)
        await taker.close()
        wal_b.close()

    run(body())


def test_a_takeover_replays_a_producer_batch_that_continues_its_sequence(
    store: CountingStore, tmp_path: Path
) -> None:
    """The other side: an acknowledged batch above the catalog's end is replayed, its retry a duplicate."""

    async def body() -> None:
        acked = await holder_dies_with_a_batch_in_its_wal(store, tmp_path)

        owner, wal_b = await store_mode_daemon(store, tmp_path, 2, "b")
        retry = await owner.append(TOPIC, 0, idempotent(2, "n1-"), timeout_s=10)
        assert retry.base_offset == acked.base_offset == 2
        following = await owner.append(TOPIC, 0, idempotent(4, "n2-"), timeout_s=10)
        assert following.base_offset == 4
        expected = [values(log_batch(2, tag=t)) for t in ("n0-", "n1-", "n2-")]
        assert values(await read_all(owner, TOPIC, 0)) == [v for vs in expected for v in vs]
        await owner.close()
        wal_b.close()

    run(body())
