"""Transactions at the partition log: markers, the last stable offset, read_committed reads.

The transaction coordinator is not involved here: the tests append
transactional batches as a producer would and the markers as the
coordinator has the log write them (`LogManager.write_marker`), then read
as a ``read_committed`` and a ``read_uncommitted`` consumer would -- before
and after a flush, and after a restart from the segments or from the WAL.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kfs_core.catalog import PartitionCatalog
from kfs_core.errors import LogError
from kfs_core.log import LogManager
from kfs_core.log.producer_state import InvalidProducerEpoch, InvalidTxnState
from kfs_core.log.transactions import AbortedTxn, PartitionTransactions
from kfs_core.records.batch import iter_batches
from kfs_core.storage.base import ObjectStore
from tests.log.log_helpers import NS, TOPIC, Harness, make_batch, offsets_and_values, run_harness

PID, OTHER = 1000, 2000


def txn_batch(values: list[bytes], *, pid: int = PID, seq: int, epoch: int = 0) -> bytes:
    return make_batch(
        values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True
    )


async def marker(logs: LogManager, *, commit: bool, pid: int = PID, epoch: int = 0) -> int:
    result = await logs.write_marker(
        TOPIC,
        0,
        producer_id=pid,
        producer_epoch=epoch,
        commit=commit,
        coordinator_epoch=0,
        timeout_s=10,
    )
    return result.base_offset


async def committed_values(logs: LogManager) -> list[bytes | None]:
    """What a read_committed consumer keeps: records below the LSO, minus aborted ones."""
    out: list[bytes | None] = []
    offset = 0
    while True:
        result = await logs.read(TOPIC, 0, offset, 1 << 20, read_committed=True)
        if not result.records:
            return out
        aborted = {t.producer_id: t for t in result.aborted}
        for batch in iter_batches(result.records):
            offset = batch.last_offset + 1
            if batch.is_control:
                continue
            txn = aborted.get(batch.producer_id)
            if txn is not None and txn.first_offset <= batch.base_offset <= txn.last_offset:
                continue
            out.extend(r.value for r in batch.records)


def test_read_committed_stops_at_the_open_transaction_and_drops_aborted_ones(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC, partitions=1)
        await logs.append(TOPIC, 0, make_batch([b"plain"]), timeout_s=10)  # offset 0
        await logs.append(TOPIC, 0, txn_batch([b"a1", b"a2"], seq=0), timeout_s=10)  # 1-2
        await logs.append(TOPIC, 0, txn_batch([b"o1"], pid=OTHER, seq=0), timeout_s=10)  # 3, open
        assert (await logs.read(TOPIC, 0, 0, 1 << 20, read_committed=True)).last_stable_offset == 1
        assert await committed_values(logs) == [b"plain"]
        assert await marker(logs, commit=False) == 4  # PID's transaction aborted
        # OTHER's transaction (from offset 3) is still open: the LSO stays there.
        result = await logs.read(TOPIC, 0, 0, 1 << 20, read_committed=True)
        assert result.last_stable_offset == 3
        assert result.aborted == (AbortedTxn(4, 1, PID),)
        assert await committed_values(logs) == [b"plain"]
        assert await marker(logs, commit=True, pid=OTHER) == 5
        await logs.append(TOPIC, 0, txn_batch([b"a3"], seq=2), timeout_s=10)  # 6, open
        await marker(logs, commit=True)  # 7
        assert await committed_values(logs) == [b"plain", b"o1", b"a3"]
        stable = await logs.read(TOPIC, 0, 0, 1 << 20, read_committed=True)
        assert stable.stable_offset == stable.high_watermark == 8
        # read_uncommitted sees every record, aborted ones too.
        everything = await logs.read(TOPIC, 0, 0, 1 << 20)
        values = [v for _, v in offsets_and_values(everything.records)]
        assert [v for v in values if v in (b"a1", b"a2")] == [b"a1", b"a2"]
        # ListOffsets: latest is the LSO for read_committed.
        await logs.append(TOPIC, 0, txn_batch([b"a4"], seq=3), timeout_s=10)  # 8, open
        assert (await logs.list_offsets(TOPIC, 0, -1, read_committed=True)).offset == 8
        assert (await logs.list_offsets(TOPIC, 0, -1)).offset == 9

    run_harness(local_store, tmp_path, body)


@pytest.mark.parametrize("restart", ["from the segments", "from the WAL"])
def test_the_aborted_list_and_open_transactions_survive_a_restart(
    local_store: ObjectStore, tmp_path: Path, restart: str
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC, partitions=1)
        await logs.append(TOPIC, 0, txn_batch([b"x1"], seq=0), timeout_s=10)  # 0
        await marker(logs, commit=False)  # 1
        await logs.append(TOPIC, 0, txn_batch([b"y1"], pid=OTHER, seq=0), timeout_s=10)  # 2
        await logs.append(TOPIC, 0, make_batch([b"plain"]), timeout_s=10)  # 3
        if restart == "from the segments":
            await h.shutdown(logs)  # flushes: the segment records what was aborted and open
            state = PartitionCatalog(local_store, NS, TOPIC, 0).load()
            [segment] = state.segments
            assert [(a.producer_id, a.first_offset, a.last_offset) for a in segment.aborted] == [
                (PID, 0, 1)
            ]
            assert [(o.producer_id, o.first_offset) for o in segment.open_txns] == [(OTHER, 2)]
        else:
            await h.crash(logs)
        logs = await h.open()
        result = await logs.read(TOPIC, 0, 0, 1 << 20, read_committed=True)
        assert result.last_stable_offset == 2  # OTHER's transaction is still open
        assert result.aborted == (AbortedTxn(1, 0, PID),)
        await marker(logs, commit=True, pid=OTHER)  # 4
        assert await committed_values(logs) == [b"y1", b"plain"]

    run_harness(local_store, tmp_path, body)


def test_a_plain_batch_inside_an_open_transaction_and_a_fenced_marker_are_refused(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC, partitions=1)
        await logs.append(TOPIC, 0, txn_batch([b"t"], seq=0, epoch=1), timeout_s=10)
        plain = make_batch([b"p"], producer_id=PID, producer_epoch=1, base_sequence=1)
        with pytest.raises(InvalidTxnState) as raised:
            await logs.append(TOPIC, 0, plain, timeout_s=10)
        assert raised.value.kafka_error_code == 48
        with pytest.raises(InvalidProducerEpoch):
            await marker(logs, commit=True, epoch=0)
        await marker(logs, commit=False, epoch=2)  # a timed-out transaction, epoch bumped
        with pytest.raises(LogError) as fenced:
            await logs.append(TOPIC, 0, txn_batch([b"z"], seq=1, epoch=1), timeout_s=10)
        assert fenced.value.kafka_error_code == 47
        assert await committed_values(logs) == []

    run_harness(local_store, tmp_path, body)


def test_the_segment_of_a_flush_records_transactions_open_at_its_end_that_ended_since() -> None:
    txns = PartitionTransactions("t-0")
    txns.end(PID, 5, commit=True)  # a marker for nothing open: nothing happens
    txns._open[PID] = 2
    txns.end(PID, 9, commit=False)
    aborted, open_at = txns.for_segment(0, 6)
    assert aborted == [] and open_at == {PID: 2}
    aborted, open_at = txns.for_segment(7, 9)
    assert aborted == [AbortedTxn(9, 2, PID)] and open_at == {}
    txns.sealed_through(9)
    assert txns.for_segment(0, 6) == ([], {})
    assert txns.last_stable_offset(9) == 2  # the marker at 9 is not acknowledged yet
    assert txns.last_stable_offset(10) == 10
    txns.drop_below(10)
    assert txns.aborted == ()
