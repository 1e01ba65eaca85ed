"""kfs_core.records.rewrite: which batches are copied, merged or re-encoded, and what is dropped."""

from __future__ import annotations

import struct

import pytest

from kfs_core.records.batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    LOG_APPEND_TIME,
    Record,
    decode_batch,
    encode_batch,
    encode_control_key,
)
from kfs_core.records.codecs import CODEC_NONE, CODEC_ZSTD
from kfs_core.records.header import read_batch_header
from kfs_core.records.rewrite import (
    AbortedTransactions,
    BatchRewriter,
    key_compactable,
    rebatchable,
)

pytestmark = pytest.mark.unit

TS = 1_700_000_000_000
TXN = {"producer_id": 7, "producer_epoch": 0, "is_transactional": True}


def records(base: int, count: int) -> list[Record]:
    return [Record(base + i, TS + i, b"k%d" % (base + i), b"v" * 20) for i in range(count)]


def rewrite(
    batches: list[bytes],
    drop: set[int],
    target: int = 1 << 20,
    codec: int = CODEC_ZSTD,
    aborted: AbortedTransactions | None = None,
) -> tuple[list[bytes], list[bool]]:
    out: list[bytes] = []
    rewriter = BatchRewriter(codec, target, out.append, aborted=aborted)
    copied = []
    for batch in batches:
        view = memoryview(batch)
        copied.append(rewriter.add(view, 0, read_batch_header(view), drop, "<test>"))
    rewriter.flush()
    return out, copied


def offsets(batch: bytes) -> list[int]:
    return [r.offset for r in decode_batch(batch).records]


def test_create_time_batches_merge_without_the_dropped_offsets() -> None:
    batches = [encode_batch(records(0, 3)), encode_batch(records(3, 3), base_offset=3)]
    out, copied = rewrite(batches, drop={1, 4})
    assert copied == [False, False]
    assert len(out) == 1 and offsets(out[0]) == [0, 2, 3, 5]
    assert read_batch_header(memoryview(out[0])).codec == CODEC_ZSTD


def test_a_small_target_starts_new_batches_between_sources() -> None:
    batches = [encode_batch(records(b, 3), base_offset=b) for b in (0, 3, 6)]
    out, _ = rewrite(batches, drop=set(), target=1)
    assert [offsets(b) for b in out] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


def test_control_and_transactional_batches_are_copied_whole_in_order() -> None:
    marker = Record(3, TS, encode_control_key(CONTROL_COMMIT), struct.pack(">hi", 0, 1))
    txn = encode_batch(records(0, 3), **TXN)
    control = encode_batch([marker], base_offset=3, is_control=True, **TXN)
    plain = encode_batch(records(4, 2), base_offset=4)
    out, copied = rewrite([txn, control, plain], drop={0, 1, 4})
    assert copied == [True, True, False]
    assert out[:2] == [txn, control]  # nothing dropped from them
    assert offsets(out[2]) == [5]
    header = read_batch_header(memoryview(txn))
    assert not key_compactable(header) and not rebatchable(header)


def test_with_the_aborted_transactions_known_committed_ones_compact_and_aborted_ones_go() -> None:
    committed = encode_batch(records(0, 3), base_sequence=10, **TXN)
    aborted = encode_batch(records(3, 2), base_offset=3, base_sequence=13, **TXN)
    marker = Record(5, TS, encode_control_key(CONTROL_COMMIT), struct.pack(">hi", 0, 1))
    control = encode_batch([marker], base_offset=5, is_control=True, **TXN)
    index = AbortedTransactions([(7, 3, 5)])
    out, copied = rewrite([committed, aborted, control], drop={1, 3}, aborted=index)
    assert copied == [False, False, True]
    assert [offsets(b) for b in out] == [[0, 2], [5]]
    kept = read_batch_header(memoryview(out[0]))
    # The committed batch keeps its header: producer, epoch, sequence, transactional.
    assert (kept.producer_id, kept.producer_epoch, kept.base_sequence) == (7, 0, 10)
    assert kept.is_transactional and kept.last_offset == 2
    assert key_compactable(kept, index) and not key_compactable(kept)
    assert not key_compactable(read_batch_header(memoryview(aborted)), index)


def test_log_append_time_batches_keep_their_boundaries_and_lose_dropped_records() -> None:
    batches = [
        encode_batch(records(0, 3), timestamp_type=LOG_APPEND_TIME, max_timestamp=TS + 9),
        encode_batch(records(3, 2), base_offset=3, timestamp_type=LOG_APPEND_TIME),
    ]
    assert not rebatchable(read_batch_header(memoryview(batches[0])))
    out, copied = rewrite(batches, drop={1, 3, 4}, codec=CODEC_NONE)
    assert copied == [False, False]
    assert [offsets(b) for b in out] == [[0, 2]]  # the second batch lost every record


def _marker(offset: int, kind: int, timestamp: int = TS) -> bytes:
    record = Record(offset, timestamp, encode_control_key(kind), struct.pack(">hi", 0, 1))
    return encode_batch([record], base_offset=offset, is_control=True, **TXN)


def test_markers_past_the_horizon_go_with_their_whole_transaction() -> None:
    """Which markers a rewrite may leave out, as Kafka's cleaner decides, and which stay."""
    batches = [
        _marker(0, CONTROL_COMMIT),  # ends a transaction begun before this rewrite: stays
        encode_batch(records(1, 2), base_offset=1, **TXN),  # A: every record superseded
        _marker(3, CONTROL_COMMIT),  # A's marker: A lay wholly here and left nothing: goes
        encode_batch(records(4, 2), base_offset=4, **TXN),  # B: aborted
        _marker(6, CONTROL_ABORT),  # B's marker: B began here and is gone: goes
        encode_batch(records(7, 2), base_offset=7, **TXN),  # C: one record survives
        _marker(9, CONTROL_COMMIT),  # C's marker: C kept a record: stays
        encode_batch(records(10, 1), base_offset=10, **TXN),  # D: superseded
        _marker(11, CONTROL_COMMIT),  # D's marker: the producer's last batch: stays
    ]
    out: list[bytes] = []
    aborted = AbortedTransactions([(7, 4, 6)])
    rewriter = BatchRewriter(CODEC_NONE, 1 << 20, out.append, aborted=aborted, marker_horizon_ms=TS)
    for batch in batches:
        view = memoryview(batch)
        header = read_batch_header(view)
        rewriter.add(view, 0, header, {1, 2, 7, 10}, "<test>", keep_header=header.base_offset == 11)
    rewriter.flush()
    kept = [read_batch_header(memoryview(b)) for b in out]
    assert [(h.base_offset, h.is_control) for h in kept] == [
        (0, True),
        (7, False),  # C's batch keeps its header, with offset 8 alone
        (9, True),
        (11, True),
    ]
    assert rewriter.removed_markers == [3, 6] and rewriter.removed_abort_markers == [6]

    # Newer than the horizon, every marker stays.
    out.clear()
    young = BatchRewriter(
        CODEC_NONE, 1 << 20, out.append, aborted=aborted, marker_horizon_ms=TS - 1
    )
    for batch in batches:
        view = memoryview(batch)
        young.add(view, 0, read_batch_header(view), {1, 2, 7, 10}, "<test>")
    young.flush()
    assert young.removed_markers == []
    assert sum(read_batch_header(memoryview(b)).is_control for b in out) == 5
