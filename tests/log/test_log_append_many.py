"""LogManager.append_many: one produce request, several partitions, one WAL group."""

from __future__ import annotations

from pathlib import Path

from kfs_core.errors import CorruptMessage, UnknownTopicOrPartition
from kfs_core.log import LogManager
from kfs_core.log.log_manager import AppendResult
from kfs_core.log.wal import WalWriter
from kfs_core.records.batch import iter_batch_headers
from kfs_core.storage.base import ObjectStore
from tests.log.log_helpers import (
    TOPIC,
    WAL_FILE_SIZE,
    Harness,
    make_batch,
    offsets_and_values,
    read_all,
    run_harness,
)


def _base_offsets(outcomes: list[AppendResult | Exception]) -> list[int | str]:
    return [o.base_offset if isinstance(o, AppendResult) else type(o).__name__ for o in outcomes]


def test_a_request_for_several_partitions_is_one_wal_entry(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC, partitions=3)
        await logs.append(TOPIC, 1, make_batch(2), timeout_s=10)
        before = logs.wal.metrics
        outcomes = await logs.append_many(
            [(TOPIC, p, make_batch(3, tag=f"p{p}")) for p in range(3)], timeout_s=10
        )
        assert _base_offsets(outcomes) == [0, 2, 0]
        after = logs.wal.metrics
        # One frame per partition, written with one pwritev and covered by one fsync.
        assert (after.frames - before.frames, after.writes - before.writes) == (3, 1)
        assert after.fsyncs - before.fsyncs == 1
        for p, first in ((0, 0), (1, 2), (2, 0)):
            assert await logs.high_watermark(TOPIC, p) == first + 3
            records = offsets_and_values(await read_all(logs, TOPIC, p, start=first))
            assert records == [(first + i, f"p{p}{i}:".encode().ljust(8, b"x")) for i in range(3)]

    run_harness(local_store, tmp_path, body)


def test_bad_partitions_of_a_request_fail_alone(local_store: ObjectStore, tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC, partitions=2)
        corrupt = bytearray(make_batch(2))
        corrupt[-1] ^= 0xFF
        outcomes = await logs.append_many(
            [
                (TOPIC, 0, make_batch(2)),
                (TOPIC, 5, make_batch(2)),  # no such partition
                (TOPIC, 1, bytes(corrupt)),  # CRC mismatch
                ("no-such-topic", 0, make_batch(2)),
                (TOPIC, 1, make_batch(4)),
            ],
            timeout_s=10,
        )
        assert _base_offsets(outcomes[:1] + outcomes[4:]) == [0, 0]
        assert isinstance(outcomes[1], UnknownTopicOrPartition)
        assert isinstance(outcomes[2], CorruptMessage)
        assert isinstance(outcomes[3], UnknownTopicOrPartition)
        assert [await logs.high_watermark(TOPIC, p) for p in (0, 1)] == [2, 4]
        assert logs.metrics().pool_used_bytes == logs.metrics().buffered_bytes

    run_harness(local_store, tmp_path, body)


def test_one_partition_twice_in_a_request_gets_consecutive_offsets(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC)
        outcomes = await logs.append_many(
            [(TOPIC, 0, make_batch(2, tag="a")), (TOPIC, 0, make_batch(3, tag="b"))],
            timeout_s=10,
        )
        assert _base_offsets(outcomes) == [0, 2]
        values = [v for _, v in offsets_and_values(await read_all(logs, TOPIC, 0))]
        assert [v[:1] for v in values if v] == [b"a"] * 2 + [b"b"] * 3
        await h.crash(logs)  # the WAL holds them in offset order too
        wal = WalWriter(h.wal_dir, file_size=WAL_FILE_SIZE)
        recovered = [(r.base_offset, r.last_offset) for r in wal.recover()]
        wal.close()
        assert recovered == [(0, 1), (2, 4)]

    run_harness(local_store, tmp_path, body)


def test_owned_buffers_get_their_offsets_in_place_and_are_not_copied(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs: LogManager = await h.open()
        await logs.create_topic(TOPIC)
        await logs.append(TOPIC, 0, make_batch(5), timeout_s=10)
        frame = bytearray(b"header" + make_batch(3) + b"trailer")  # a request frame
        records = memoryview(frame)[6:-7]
        (outcome,) = await logs.append_many([(TOPIC, 0, records)], timeout_s=10, owned=True)
        assert _base_offsets([outcome]) == [5]
        # The offsets were assigned in the caller's frame ...
        ((_, header),) = iter_batch_headers(records)
        assert header.base_offset == 5
        # ... and the log serves the bytes from it: a change would show (nobody does that).
        frame[-8] ^= 0xFF
        data = (await logs.read(TOPIC, 0, 5, 1 << 20)).records
        assert data == bytes(records)
        frame[-8] ^= 0xFF

    run_harness(local_store, tmp_path, body)


def test_unowned_buffers_are_copied(local_store: ObjectStore, tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC)
        await logs.append(TOPIC, 0, make_batch(5), timeout_s=10)
        frame = bytearray(make_batch(3))
        (outcome,) = await logs.append_many([(TOPIC, 0, memoryview(frame))], timeout_s=10)
        assert _base_offsets([outcome]) == [5]
        ((_, header),) = iter_batch_headers(frame)
        assert header.base_offset == 0  # untouched: the log assigned offsets in its copy
        frame[-1] ^= 0xFF  # the caller reuses its buffer
        assert len(offsets_and_values(await read_all(logs, TOPIC, 0))) == 8  # CRCs still good

    run_harness(local_store, tmp_path, body)
