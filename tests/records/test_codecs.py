"""Kafka codecs by attribute code.

Round trips, the framings other clients write, the framings we write, and
corrupt input turned into typed errors.
"""

from __future__ import annotations

import gzip
import struct

import cramjam
import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from kfs_core.errors import CorruptRecordBatch, UnsupportedCodec
from kfs_core.records.codecs import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    SNAPPY_XERIAL_MAGIC,
    codec_by_name,
    codec_name,
    compress,
    decompress,
)
from tests.records.kafka_python import kafka_codec

pytestmark = pytest.mark.unit

ALL_CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]
COMPRESSED = [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]
# Compressible and more than two xerial/lz4 blocks long.
TEXT = b"".join(
    b"record %06d: the quick brown fox jumps over the lazy dog\n" % i for i in range(3000)
)


@settings(max_examples=60)
@given(codec=st.sampled_from(ALL_CODECS), data=st.binary(max_size=5000))
def test_round_trip(codec: int, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_round_trip_large_and_from_views(codec: int) -> None:
    packed = compress(codec, memoryview(TEXT))
    assert decompress(codec, packed) == TEXT
    assert decompress(codec, bytearray(packed)) == TEXT
    assert decompress(codec, memoryview(b"xx" + packed)[2:]) == TEXT


@pytest.mark.parametrize("codec", COMPRESSED)
def test_levels(codec: int) -> None:
    fast = compress(codec, TEXT, level=1) if codec != CODEC_SNAPPY else compress(codec, TEXT)
    assert decompress(codec, fast) == TEXT


# --- names -----------------------------------------------------------------


def test_names() -> None:
    assert [codec_name(c) for c in ALL_CODECS] == ["none", "gzip", "snappy", "lz4", "zstd"]
    assert codec_by_name("ZSTD") == CODEC_ZSTD
    assert codec_by_name("uncompressed") == CODEC_NONE
    with pytest.raises(UnsupportedCodec):
        codec_by_name("producer")
    with pytest.raises(UnsupportedCodec):
        codec_name(5)


@pytest.mark.parametrize("codec", [5, 6, 7, -1, 8])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(UnsupportedCodec):
        compress(codec, b"x")
    with pytest.raises(UnsupportedCodec):
        decompress(codec, b"x")


# --- snappy ----------------------------------------------------------------


def _xerial(*chunks: bytes, version: bytes = b"\x00\x00\x00\x01\x00\x00\x00\x01") -> bytes:
    out = SNAPPY_XERIAL_MAGIC + version
    for chunk in chunks:
        raw = cramjam.snappy.compress_raw(chunk)
        out += struct.pack(">i", len(raw)) + bytes(raw)
    return out


def test_snappy_writes_xerial_framing_in_32k_chunks() -> None:
    packed = compress(CODEC_SNAPPY, TEXT)
    assert packed[:16] == SNAPPY_XERIAL_MAGIC + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01"
    # Walk the chunks: each decompresses on its own to at most 32 KiB.
    pos, sizes = 16, []
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        sizes.append(len(snappy.decompress(packed[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert pos == len(packed)
    assert sizes[:-1] == [32 * 1024] * (len(sizes) - 1)
    assert sum(sizes) == len(TEXT)


def test_snappy_reads_raw_blocks_as_librdkafka_writes_them() -> None:
    assert decompress(CODEC_SNAPPY, bytes(cramjam.snappy.compress_raw(TEXT))) == TEXT


def test_snappy_reads_multi_chunk_and_concatenated_xerial_streams() -> None:
    first, second = TEXT[:40000], TEXT[40000:]
    assert decompress(CODEC_SNAPPY, _xerial(first[:100], first[100:])) == first
    assert decompress(CODEC_SNAPPY, _xerial(first) + _xerial(second)) == TEXT


def test_snappy_ignores_xerial_version_byte_order() -> None:
    # Some producers write version/compat little-endian.
    little = _xerial(TEXT[:500], version=b"\x01\x00\x00\x00\x01\x00\x00\x00")
    assert decompress(CODEC_SNAPPY, little) == TEXT[:500]


def test_snappy_interop_with_kafka_python() -> None:
    assert kafka_codec.snappy_decode(compress(CODEC_SNAPPY, TEXT)) == TEXT
    assert decompress(CODEC_SNAPPY, kafka_codec.snappy_encode(TEXT)) == TEXT
    assert (
        decompress(CODEC_SNAPPY, kafka_codec.snappy_encode(TEXT, xerial_compatible=False)) == TEXT
    )


# --- lz4 -------------------------------------------------------------------


def test_lz4_writes_a_frame_java_accepts() -> None:
    packed = compress(CODEC_LZ4, TEXT)
    assert packed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic, little-endian 0x184D2204
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # independent blocks: Java refuses linked ones
    assert not flg & 0x08  # no content size
    assert not flg & 0x14  # no block or content checksum
    assert bd == 0x40  # 64 KiB maximum block size
    assert kafka_codec.lz4_decode(packed) == TEXT


@pytest.mark.parametrize(
    "options",
    [
        {},  # lz4.frame's defaults: content size, linked blocks
        {"content_checksum": True, "block_checksum": True},
        {"block_size": lz4.frame.BLOCKSIZE_MAX4MB, "store_size": False},
    ],
)
def test_lz4_reads_frames_other_clients_write(options: dict[str, object]) -> None:
    assert decompress(CODEC_LZ4, lz4.frame.compress(TEXT, **options)) == TEXT
    assert decompress(CODEC_LZ4, kafka_codec.lz4_encode(TEXT)) == TEXT


def test_lz4_reads_concatenated_frames() -> None:
    assert decompress(CODEC_LZ4, compress(CODEC_LZ4, b"ab") + compress(CODEC_LZ4, b"cd")) == b"abcd"


# --- zstd ------------------------------------------------------------------


def test_zstd_reads_frames_without_content_size() -> None:
    # Streaming compressors (zstd-jni in Java, librdkafka) omit the content size.
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(TEXT)
    assert zstandard.get_frame_parameters(no_size).content_size == zstandard.CONTENTSIZE_UNKNOWN
    with pytest.raises(zstandard.ZstdError):  # why decompress() must stream
        zstandard.ZstdDecompressor().decompress(no_size)
    assert decompress(CODEC_ZSTD, no_size) == TEXT
    stream = zstandard.ZstdCompressor().compressobj()
    streamed = stream.compress(TEXT[:1000]) + stream.compress(TEXT[1000:]) + stream.flush()
    assert decompress(CODEC_ZSTD, streamed) == TEXT


def test_zstd_reads_concatenated_frames_and_interops_with_kafka_python() -> None:
    two = compress(CODEC_ZSTD, b"ab") + compress(CODEC_ZSTD, b"cd")
    assert decompress(CODEC_ZSTD, two) == b"abcd"
    assert decompress(CODEC_ZSTD, kafka_codec.zstd_encode(TEXT)) == TEXT
    assert kafka_codec.zstd_decode(compress(CODEC_ZSTD, TEXT)) == TEXT


# --- gzip ------------------------------------------------------------------


def test_gzip_is_deterministic_multi_member_and_interops() -> None:
    assert compress(CODEC_GZIP, TEXT) == compress(CODEC_GZIP, TEXT)  # mtime 0
    assert decompress(CODEC_GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"
    assert decompress(CODEC_GZIP, kafka_codec.gzip_encode(TEXT)) == TEXT
    assert kafka_codec.gzip_decode(compress(CODEC_GZIP, TEXT)) == TEXT


# --- corrupt input -----------------------------------------------------------


GARBAGE = [
    b"\x07",
    b"not compressed at all, just some bytes",
    bytes(range(256)),
    b"\xff" * 64,
]


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize("garbage", GARBAGE)
def test_garbage_raises_typed_error(codec: int, garbage: bytes) -> None:
    with pytest.raises(CorruptRecordBatch) as info:
        decompress(codec, garbage, object_name="t/0/segment.kfs", offset=1234)
    assert info.value.object_name == "t/0/segment.kfs"
    assert info.value.offset == 1234


@pytest.mark.parametrize(
    "payload",
    [
        SNAPPY_XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01" + b"\x00\x00\x00\x09abc",
        SNAPPY_XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01" + b"\x00\x00",
        SNAPPY_XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01" + b"\xff\xff\xff\xff",
        SNAPPY_XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01" + b"\x00\x00\x00\x04zzzz",
    ],
    ids=["chunk-past-end", "stray-bytes", "negative-length", "bad-chunk"],
)
def test_bad_xerial_streams(payload: bytes) -> None:
    with pytest.raises(CorruptRecordBatch):
        decompress(CODEC_SNAPPY, payload)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_payload_raises_typed_error(codec: int) -> None:
    packed = compress(codec, TEXT)
    for cut in (1, 4, 10, 17, len(packed) // 2, len(packed) - 5, len(packed) - 1):
        with pytest.raises(CorruptRecordBatch):
            decompress(codec, packed[:cut])


@pytest.mark.parametrize("codec", COMPRESSED)
def test_empty_payload_is_corrupt(codec: int) -> None:
    with pytest.raises(CorruptRecordBatch, match="empty"):
        decompress(codec, b"")


def test_lz4_content_checksum_mismatch_is_corrupt() -> None:
    packed = bytearray(lz4.frame.compress(TEXT, content_checksum=True))
    packed[-1] ^= 0xFF
    with pytest.raises(CorruptRecordBatch):
        decompress(CODEC_LZ4, bytes(packed))
