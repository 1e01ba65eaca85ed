"""``__transaction_state`` records: Kafka's TransactionLogKey/Value v0 layouts, both ways."""

from __future__ import annotations

import struct

import pytest

from kfs_core.groups.txn_log import (
    TxnRecord,
    TxnState,
    decode_txn_record,
    encode_txn_key,
    encode_txn_value,
)


def test_a_record_reads_back_as_written() -> None:
    record = TxnRecord(
        producer_id=7,
        producer_epoch=3,
        timeout_ms=60_000,
        state=TxnState.PREPARE_COMMIT,
        partitions=frozenset({("orders", 1), ("orders", 0), ("__consumer_offsets", 2)}),
        last_update_ms=1_700_000_000_123,
        start_ms=1_700_000_000_000,
    )
    key, value = encode_txn_key("app-1"), encode_txn_value(record)
    assert decode_txn_record(key, value) == ("app-1", record)
    assert decode_txn_record(key, None) == ("app-1", None)  # a tombstone


def test_the_bytes_are_kafkas_layout() -> None:
    key = encode_txn_key("t")
    assert key == b"\x00\x00" + b"\x00\x01t"
    value = encode_txn_value(TxnRecord(9, 1, 1000, TxnState.ONGOING, frozenset({("a", 2)}), 5, 4))
    head = struct.pack(">hqhib", 0, 9, 1, 1000, 1)
    topics = struct.pack(">i", 1) + b"\x00\x01a" + struct.pack(">ii", 1, 2)
    assert value == head + topics + struct.pack(">qq", 5, 4)
    assert TxnState.PREPARE_COMMIT.kafka_name == "PrepareCommit"


def test_an_unknown_version_is_refused() -> None:
    with pytest.raises(ValueError, match="TransactionLogKey v1"):
        decode_txn_record(b"\x00\x01\x00\x01t", None)
