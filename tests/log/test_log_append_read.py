"""LogManager produce and fetch from memory: offsets, whole batches, validation, topics."""

from __future__ import annotations

import asyncio
import os
import pickle
import threading
from pathlib import Path

import pytest

from kfs_core.errors import (
    CorruptMessage,
    InvalidRecord,
    LogError,
    LogStorageError,
    MessageTooLarge,
    OffsetOutOfRange,
    RequestTimedOut,
    UnknownTopicOrPartition,
)
from kfs_core.formats.segment import SEGMENT_FOOTER_SIZE, SEGMENT_HEADER_SIZE, SegmentReader
from kfs_core.log import LogManager
from kfs_core.log.wal import WalWriter
from kfs_core.log.wal import writer as wal_writer
from kfs_core.records.batch import LOG_APPEND_TIME, decode_batch
from kfs_core.storage.base import ObjectStore
from tests.log.log_helpers import (
    NS,
    TIMESTAMP_BASE,
    TOPIC,
    WAL_FILE_SIZE,
    Harness,
    decode_all,
    eventually_equal,
    make_batch,
    offsets_and_values,
    read_all,
    run_harness,
)


def test_offsets_are_contiguous_across_batches_and_partitions(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC, partitions=2)
        counts = {0: [1, 3, 2, 5], 1: [4, 1, 1]}
        expected: dict[int, list[tuple[int, bytes]]] = {0: [], 1: []}
        for partition, sizes in counts.items():
            next_offset = 0
            for n, count in enumerate(sizes):
                values = [f"p{partition}-b{n}-r{i}".encode() for i in range(count)]
                result = await logs.append(TOPIC, partition, make_batch(values), timeout_s=10)
                assert result.base_offset == next_offset
                assert result.log_append_time == -1  # CreateTime topic
                assert result.log_start_offset == 0
                expected[partition] += [(next_offset + i, v) for i, v in enumerate(values)]
                next_offset += count
            assert await logs.high_watermark(TOPIC, partition) == next_offset
        for partition in counts:
            data = await read_all(logs, TOPIC, partition)
            assert offsets_and_values(data) == expected[partition]

    run_harness(local_store, tmp_path, body)


def test_one_produce_of_several_batches_gets_consecutive_offsets(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC)
        await logs.append(TOPIC, 0, make_batch(2), timeout_s=10)
        produce = make_batch(3, tag="a") + make_batch(4, tag="b") + make_batch(1, tag="c")
        result = await logs.append(TOPIC, 0, produce, timeout_s=10)
        assert result.base_offset == 2
        batches = decode_all((await logs.read(TOPIC, 0, 2, 1 << 20)).records)
        assert [(b.base_offset, b.last_offset) for b in batches] == [(2, 4), (5, 8), (9, 9)]
        # A fetch from the middle of the produce starts at the batch holding the offset.
        middle = decode_all((await logs.read(TOPIC, 0, 6, 1 << 20)).records)
        assert [b.base_offset for b in middle] == [5, 9]

    run_harness(local_store, tmp_path, body)


def test_fetch_returns_whole_batches_within_max_bytes_but_at_least_one(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC)
        sizes = []
        for tag in "abc":
            batch = make_batch(4, size=200, tag=tag)
            sizes.append(len(batch))
            await logs.append(TOPIC, 0, batch, timeout_s=10)
        # The batch holding offset 5 is batch 1 (offsets 4..7), returned whole.
        one = await logs.read(TOPIC, 0, 5, 10)  # max_bytes far below one batch: KIP-74
        assert [b.base_offset for b in decode_all(one.records)] == [4]
        assert len(one.records) == sizes[1]
        two = await logs.read(TOPIC, 0, 0, sizes[0] + sizes[1] + sizes[2] - 1)
        assert [b.base_offset for b in decode_all(two.records)] == [0, 4]
        assert one.high_watermark == two.high_watermark == 12

    run_harness(local_store, tmp_path, body)


def test_fetch_at_the_high_watermark_is_empty_and_beyond_it_out_of_range(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC)
        empty = await logs.read(TOPIC, 0, 0, 1000)
        assert (empty.records, empty.high_watermark, empty.log_start_offset) == (b"", 0, 0)
        await logs.append(TOPIC, 0, make_batch(3), timeout_s=10)
        at_hw = await logs.read(TOPIC, 0, 3, 1000)
        assert (at_hw.records, at_hw.high_watermark) == (b"", 3)
        for offset in (4, 1000, -1):
            with pytest.raises(OffsetOutOfRange) as caught:
                await logs.read(TOPIC, 0, offset, 1000)
            assert caught.value.kafka_error_code == 1
            assert caught.value.high_watermark == 3

    run_harness(local_store, tmp_path, body)


def test_concurrent_producers_get_offsets_in_wal_order(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> list[int]:
        logs = await h.open()
        await logs.create_topic(TOPIC)
        produces = [make_batch(1 + n % 3, tag=f"n{n}-") for n in range(60)]
        results = await asyncio.gather(
            *(logs.append(TOPIC, 0, batch, timeout_s=10) for batch in produces)
        )
        bases = sorted(r.base_offset for r in results)
        counts = {r.base_offset: 1 + n % 3 for n, r in enumerate(results)}
        expected = 0
        for base in bases:  # contiguous, no offset used twice
            assert base == expected
            expected += counts[base]
        assert await logs.high_watermark(TOPIC, 0) == expected
        await h.crash(logs)
        return bases

    bases = run_harness(local_store, tmp_path, body)
    # The WAL holds the frames in exactly offset order.
    wal = WalWriter(tmp_path / "wal", file_size=WAL_FILE_SIZE)
    recovered = [r.base_offset for r in wal.recover()]
    wal.close()
    assert recovered == bases


def test_log_append_time_topics_stamp_every_batch(local_store: ObjectStore, tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open(clock=lambda: 1_800_000_000_123)  # what the broker's clock says
        await logs.create_topic(TOPIC, configs={"message.timestamp.type": "LogAppendTime"})
        result = await logs.append(TOPIC, 0, make_batch(2) + make_batch(1), timeout_s=10)
        assert result.log_append_time == 1_800_000_000_123
        records = (await logs.read(TOPIC, 0, 0, 1 << 20)).records
        for batch in decode_all(records):  # CRCs were recomputed: decode checks them
            assert batch.timestamp_type == LOG_APPEND_TIME
            assert batch.max_timestamp == 1_800_000_000_123
            assert all(batch.effective_timestamp(r) == 1_800_000_000_123 for r in batch.records)

    run_harness(local_store, tmp_path, body)


def _flip(data: bytes, position: int) -> bytes:
    out = bytearray(data)
    out[position] ^= 0x01
    return bytes(out)


def _set_byte(data: bytes, position: int, value: int) -> bytes:
    out = bytearray(data)
    out[position] = value
    return bytes(out)


GOOD = make_batch(3)
INVALID = {
    "bad CRC": (_flip(GOOD, len(GOOD) - 1), CorruptMessage, 2),
    "bad CRC after a good batch": (GOOD + _flip(GOOD, 30), CorruptMessage, 2),
    "magic 1": (_set_byte(GOOD, 16, 1), CorruptMessage, 2),
    "truncated": (GOOD[:-5], CorruptMessage, 2),
    "length shorter than a header": (_set_byte(GOOD, 11, 3), CorruptMessage, 2),
    "trailing garbage": (GOOD + b"\x00\x01\x02", CorruptMessage, 2),
    "empty": (b"", CorruptMessage, 2),
    "over max.message.bytes": (make_batch(40, size=40), MessageTooLarge, 10),
    "count below last offset delta": (make_batch(2, last_offset_delta=5), InvalidRecord, 87),
    "control batch": (make_batch(1, is_control=True), InvalidRecord, 87),
    "producer id without sequence": (make_batch(1, producer_id=7), InvalidRecord, 87),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_batches_are_rejected_and_nothing_is_stored(
    local_store: ObjectStore, tmp_path: Path, case: str
) -> None:
    data, error, code = INVALID[case]

    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC, configs={"max.message.bytes": 1000})
        frames = logs.wal.metrics.frames
        with pytest.raises(error) as caught:
            await logs.append(TOPIC, 0, data, timeout_s=10)
        assert caught.value.kafka_error_code == code
        assert isinstance(caught.value, LogError)
        restored = pickle.loads(pickle.dumps(caught.value))
        assert type(restored) is error and str(restored) == str(caught.value)
        assert logs.wal.metrics.frames == frames  # nothing reached the WAL
        m = logs.metrics()
        assert (m.pool_used_bytes, m.buffered_bytes, m.produce_rejected) == (0, 0, 1)
        assert await logs.high_watermark(TOPIC, 0) == 0
        ok = await logs.append(TOPIC, 0, GOOD, timeout_s=10)
        assert ok.base_offset == 0  # no offset was consumed by the rejected produce

    run_harness(local_store, tmp_path, body)


def test_unknown_topics_and_partitions_and_auto_create(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        for call in (
            logs.append("nope", 0, GOOD, timeout_s=10),
            logs.read("nope", 0, 0, 100),
            logs.list_offsets("nope", 0, -1),
            logs.topic("nope"),
            logs.topic("bad/name"),
        ):
            with pytest.raises(UnknownTopicOrPartition) as caught:
                await call
            assert caught.value.kafka_error_code == 3
        await logs.create_topic(TOPIC, partitions=2)
        with pytest.raises(UnknownTopicOrPartition):
            await logs.append(TOPIC, 2, GOOD, timeout_s=10)
        with pytest.raises(UnknownTopicOrPartition):
            await logs.read(TOPIC, -1, 0, 100)
        created = await logs.topic("auto", auto_create=True, partitions=3)
        assert created.partitions == 3
        assert (await logs.topic("auto", auto_create=True)).partitions == 3  # exists now
        # A topic another daemon or `kfs topics create` made is found too.
        logs.registry.create_topic("elsewhere", 1)
        assert (await logs.topic("elsewhere")).partitions == 1
        assert (await logs.append("elsewhere", 0, GOOD, timeout_s=10)).base_offset == 0

    run_harness(local_store, tmp_path, body)


def test_appends_after_close_are_refused(local_store: ObjectStore, tmp_path: Path) -> None:
    async def body(h: Harness) -> LogManager:
        logs = await h.open()
        await logs.create_topic(TOPIC)
        await h.shutdown(logs)
        with pytest.raises(LogError) as caught:
            await logs.append(TOPIC, 0, GOOD, timeout_s=10)
        assert caught.value.kafka_error_code == 6 and caught.value.retriable
        return logs

    run_harness(local_store, tmp_path, body)


def test_stamped_batches_keep_valid_crcs_in_the_wal(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC, configs={"message.timestamp.type": "LogAppendTime"})
        await logs.append(TOPIC, 0, make_batch(2, timestamp=TIMESTAMP_BASE), timeout_s=10)
        await h.crash(logs)

    run_harness(local_store, tmp_path, body)
    wal = WalWriter(tmp_path / "wal", file_size=WAL_FILE_SIZE)
    (record,) = wal.recover()
    wal.close()
    batch = decode_batch(record.batch)  # verifies the CRC
    assert batch.timestamp_type == LOG_APPEND_TIME


def test_stamped_batches_flush_into_segments_whose_crcs_hold(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    """The segment's body CRC is derived from the batches' CRCs, the stamped ones included."""

    async def body(h: Harness) -> None:
        logs = await h.open(clock=lambda: 1_800_000_000_123)
        await logs.create_topic(TOPIC, configs={"message.timestamp.type": "LogAppendTime"})
        await logs.append(TOPIC, 0, make_batch(2) + make_batch(3), timeout_s=10)
        await logs.append(TOPIC, 0, make_batch(1), timeout_s=10)
        await logs.flush()
        state = await logs.catalog_state(TOPIC, 0)
        assert state.high_watermark == 6
        for segment in state.segments:
            data = local_store.get(f"{NS}/{segment.key}")
            SegmentReader(data).verify()  # the footer's body CRC and every batch CRC
            for batch in decode_all(data[SEGMENT_HEADER_SIZE:-SEGMENT_FOOTER_SIZE]):
                assert batch.max_timestamp == 1_800_000_000_123

    run_harness(local_store, tmp_path, body)


def test_a_failed_wal_refuses_appends_but_keeps_serving_reads(
    local_store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC)
        await logs.append(TOPIC, 0, GOOD, timeout_s=10)

        def broken_disk(fd: int) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(wal_writer, "_fdatasync", broken_disk)
        for _ in range(2):
            with pytest.raises(LogStorageError) as caught:
                await logs.append(TOPIC, 0, GOOD, timeout_s=10)
            assert caught.value.kafka_error_code == 56
        assert await logs.high_watermark(TOPIC, 0) == 3  # nothing unacknowledged shows
        assert offsets_and_values((await logs.read(TOPIC, 0, 0, 1000)).records)[-1][0] == 2

    run_harness(local_store, tmp_path, body)


def test_a_produce_that_times_out_in_the_wal_may_still_become_visible(
    local_store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()

    def slow_disk(fd: int) -> None:
        gate.wait(30)
        os.fdatasync(fd)

    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC)
        monkeypatch.setattr(wal_writer, "_fdatasync", slow_disk)
        with pytest.raises(RequestTimedOut):
            await logs.append(TOPIC, 0, GOOD, timeout_s=0.05)
        assert await logs.high_watermark(TOPIC, 0) == 0
        assert logs.metrics().produce_timeouts == 1
        gate.set()  # the fsync completes after the producer gave up
        await eventually_equal(lambda: logs.high_watermark(TOPIC, 0), 3)
        assert (await logs.append(TOPIC, 0, GOOD, timeout_s=10)).base_offset == 3

    try:
        run_harness(local_store, tmp_path, body)
    finally:
        gate.set()
