"""Kafka RecordBatch v2: the bytes clients produce and consumers fetch.

- `header`: the fixed 61-byte batch header, its CRC-32C and attribute bits.
- `varint`: zig-zag and unsigned varints.
- `codecs`: gzip, snappy (xerial), lz4 (frame) and zstd by Kafka attribute code.
- `batch`: `Record`, `RecordBatch`, encode/decode/iterate, offset assignment.
"""

from kfs_core.records.batch import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    Record,
    RecordBatch,
    assign_offsets_into,
    decode_batch,
    encode_batch,
    iter_batch_headers,
    iter_batches,
    reencode_batch,
    rewrite_base_offset,
    rewrite_base_offset_into,
)
from kfs_core.records.codecs import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    compress,
    decompress,
)
from kfs_core.records.header import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    read_batch_header,
    verify_batch_crc,
)

__all__ = [
    "BATCH_HEADER_SIZE",
    "CODEC_GZIP",
    "CODEC_LZ4",
    "CODEC_NONE",
    "CODEC_SNAPPY",
    "CODEC_ZSTD",
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "BatchHeader",
    "Record",
    "RecordBatch",
    "assign_offsets_into",
    "compress",
    "decode_batch",
    "decompress",
    "encode_batch",
    "iter_batch_headers",
    "iter_batches",
    "read_batch_header",
    "reencode_batch",
    "rewrite_base_offset",
    "rewrite_base_offset_into",
    "verify_batch_crc",
]
