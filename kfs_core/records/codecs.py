"""Kafka's batch compression codecs, by Kafka attribute code, in Kafka's framings.

    code  name    bytes on the wire (what clients produce and expect)
    0     none    the records as they are
    1     gzip    a gzip member (RFC 1952); several concatenated members decode too
    2     snappy  xerial block framing, as the Java client and kafka-python write it:

                    0   8  magic  82 'S' 'N' 'A' 'P' 'P' 'Y' 00
                    8   4  version = 1 (i32 BE)
                    12  4  min. compatible version = 1 (i32 BE)
                    16     ([i32 BE chunk length][raw snappy chunk of <= 32 KiB input])*

                  librdkafka writes a bare raw snappy block instead; decoding
                  takes either, telling them apart by the magic.
    3     lz4     an LZ4 frame (magic 04 22 4D 18) with independent blocks of at
                  most 64 KiB, no content size and no checksums - the settings
                  of Kafka's own Lz4BlockOutputStream, which also refuses linked
                  blocks.  (Magic v0/v1's broken header checksum never applies
                  to v2 batches.)
    4     zstd    a zstd frame.  Java and librdkafka stream-compress, so the
                  frame header may omit the content size: decoding streams.

`compress` and `decompress` raise `UnsupportedCodec` for codes 5-7;
`decompress` turns every library failure (bad magic, truncation, checksum)
into `CorruptRecordBatch`, naming the object and byte offset it was given.
"""

from __future__ import annotations

import gzip
import struct
import threading
import zlib

import lz4.frame
import snappy
import zstandard

from kfs_core.errors import CorruptRecordBatch, UnsupportedCodec

__all__ = [
    "CODEC_GZIP",
    "CODEC_LZ4",
    "CODEC_NAMES",
    "CODEC_NONE",
    "CODEC_SNAPPY",
    "CODEC_ZSTD",
    "SNAPPY_XERIAL_MAGIC",
    "codec_by_name",
    "codec_name",
    "compress",
    "decompress",
]

BytesLike = bytes | bytearray | memoryview

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4

CODEC_NAMES: dict[int, str] = {
    CODEC_NONE: "none",
    CODEC_GZIP: "gzip",
    CODEC_SNAPPY: "snappy",
    CODEC_LZ4: "lz4",
    CODEC_ZSTD: "zstd",
}
# Kafka's `compression.type` spells "no compression" as "uncompressed" for
# topics and "none" for producers; both mean code 0.
_CODECS_BY_NAME: dict[str, int] = {name: code for code, name in CODEC_NAMES.items()}
_CODECS_BY_NAME["uncompressed"] = CODEC_NONE

# Level defaults follow Kafka's `compression.<codec>.level` defaults where the
# Python library has the same scale: gzip 6 (Deflater's default), zstd 3.  LZ4
# uses the library's fast mode; Kafka's level 9 is the much slower HC mode.
DEFAULT_GZIP_LEVEL = 6
DEFAULT_ZSTD_LEVEL = 3
DEFAULT_LZ4_LEVEL = 0

SNAPPY_XERIAL_MAGIC = b"\x82SNAPPY\x00"
SNAPPY_XERIAL_HEADER = struct.Struct(
    ">8s"  # magic
    "i"  # version (1)
    "i"  # minimum compatible version (1)
)
SNAPPY_XERIAL_VERSION = 1
SNAPPY_XERIAL_COMPAT = 1
SNAPPY_XERIAL_BLOCK = 32 * 1024  # xerial's default, used by the Java client
_XERIAL_PREFIX = SNAPPY_XERIAL_HEADER.pack(
    SNAPPY_XERIAL_MAGIC, SNAPPY_XERIAL_VERSION, SNAPPY_XERIAL_COMPAT
)
_CHUNK_LENGTH = struct.Struct(">i")


def codec_name(codec: int) -> str:
    """``"none"``, ``"gzip"``, ... for a Kafka attribute code."""
    try:
        return CODEC_NAMES[codec]
    except KeyError:
        raise UnsupportedCodec(f"unknown compression codec {codec}", codec=codec) from None


def codec_by_name(name: str) -> int:
    """Kafka attribute code for a `compression.type` value such as ``"zstd"``."""
    try:
        return _CODECS_BY_NAME[name.strip().lower()]
    except KeyError:
        raise UnsupportedCodec(f"unknown compression codec {name!r}", codec=name) from None


# --- compression -----------------------------------------------------------


def compress(codec: int, data: BytesLike, *, level: int | None = None) -> bytes:
    """Compress ``data`` the way Kafka's Java producer frames ``codec``."""
    if codec == CODEC_NONE:
        return bytes(data)
    if codec == CODEC_GZIP:
        # mtime=0: the same records always compress to the same bytes.
        return gzip.compress(
            data, compresslevel=DEFAULT_GZIP_LEVEL if level is None else level, mtime=0
        )
    if codec == CODEC_SNAPPY:
        return _snappy_xerial_compress(data)
    if codec == CODEC_LZ4:
        return bytes(
            lz4.frame.compress(
                data,
                compression_level=DEFAULT_LZ4_LEVEL if level is None else level,
                block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                block_linked=False,
                content_checksum=False,
                block_checksum=False,
                store_size=False,
            )
        )
    if codec == CODEC_ZSTD:
        return _zstd_compressor(DEFAULT_ZSTD_LEVEL if level is None else level).compress(data)
    raise UnsupportedCodec(f"unknown compression codec {codec}", codec=codec)


_local = threading.local()


def _zstd_compressor(level: int) -> zstandard.ZstdCompressor:
    """This thread's compressor for ``level``: its context (and buffers) are reused.

    A ZstdCompressor must not be used by two threads at once, hence one per thread.
    """
    compressors: dict[int, zstandard.ZstdCompressor] | None = getattr(_local, "zstd", None)
    if compressors is None:
        compressors = _local.zstd = {}
    compressor = compressors.get(level)
    if compressor is None:
        compressor = compressors[level] = zstandard.ZstdCompressor(level=level)
    return compressor


def _snappy_xerial_compress(data: BytesLike) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_PREFIX]
    for start in range(0, len(view), SNAPPY_XERIAL_BLOCK):
        chunk = snappy.compress(view[start : start + SNAPPY_XERIAL_BLOCK])
        parts.append(_CHUNK_LENGTH.pack(len(chunk)))
        parts.append(chunk)
    return b"".join(parts)


# --- decompression ---------------------------------------------------------


def decompress(
    codec: int, data: BytesLike, *, object_name: str = "<compressed>", offset: int = 0
) -> bytes:
    """Decompress a batch's records section.

    ``object_name`` and ``offset`` (where ``data`` starts in that object) go
    into the `CorruptRecordBatch` raised for data the codec cannot decode.
    """
    if codec == CODEC_NONE:
        return bytes(data)
    if codec not in CODEC_NAMES:
        raise UnsupportedCodec(
            f"{object_name}: unknown compression codec {codec} at byte {offset}",
            codec=codec,
            object_name=object_name,
            offset=offset,
        )
    if len(data) == 0:
        raise CorruptRecordBatch(
            f"empty {CODEC_NAMES[codec]} payload", object_name=object_name, offset=offset
        )
    try:
        if codec == CODEC_GZIP:
            return gzip.decompress(data)
        if codec == CODEC_SNAPPY:
            return _snappy_decompress(data)
        if codec == CODEC_LZ4:
            return _lz4_decompress(data)
        return _zstd_decompress(data)
    except _Truncated as exc:
        raise CorruptRecordBatch(
            f"{CODEC_NAMES[codec]} payload is truncated: {exc}",
            object_name=object_name,
            offset=offset,
        ) from exc
    except (
        OSError,  # gzip.BadGzipFile
        EOFError,  # gzip: stream ends inside a member
        zlib.error,
        snappy.UncompressError,
        RuntimeError,  # lz4.frame
        zstandard.ZstdError,
        ValueError,
    ) as exc:
        raise CorruptRecordBatch(
            f"cannot decompress {CODEC_NAMES[codec]} payload: {exc}",
            object_name=object_name,
            offset=offset,
        ) from exc


class _Truncated(Exception):
    """A compressed stream ended before its framing said it would."""


def _snappy_decompress(data: BytesLike) -> bytes:
    view = memoryview(data)
    if len(view) < SNAPPY_XERIAL_HEADER.size or view[:8] != SNAPPY_XERIAL_MAGIC:
        return bytes(snappy.decompress(view))
    # Version and compat are not checked: there has only ever been one xerial
    # block format, and some producers (redpanda) write those two ints
    # little-endian.
    parts: list[bytes] = []
    pos = SNAPPY_XERIAL_HEADER.size
    end = len(view)
    while pos < end:
        # xerial's reader accepts concatenated streams: a second header may
        # follow the last chunk of the first.
        if view[pos : pos + 8] == SNAPPY_XERIAL_MAGIC and end - pos >= SNAPPY_XERIAL_HEADER.size:
            pos += SNAPPY_XERIAL_HEADER.size
            continue
        if end - pos < _CHUNK_LENGTH.size:
            raise _Truncated(f"{end - pos} stray bytes after the last xerial chunk")
        (length,) = _CHUNK_LENGTH.unpack_from(view, pos)
        pos += _CHUNK_LENGTH.size
        if length < 0 or pos + length > end:
            raise _Truncated(f"xerial chunk of {length} bytes, {end - pos} left")
        parts.append(snappy.decompress(view[pos : pos + length]))
        pos += length
    return b"".join(parts)


def _lz4_decompress(data: BytesLike) -> bytes:
    parts: list[bytes] = []
    rest: BytesLike = data
    while True:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        parts.append(decompressor.decompress(rest))
        if not decompressor.eof:
            raise _Truncated("LZ4 frame has no end mark")
        rest = decompressor.unused_data
        if not rest:
            return b"".join(parts)


def _zstd_decompress(data: BytesLike) -> bytes:
    # A streaming decompressor, not ZstdDecompressor.decompress(): the latter
    # refuses frames whose header omits the content size, which is what the
    # Java client and librdkafka write.
    parts: list[bytes] = []
    rest: BytesLike = data
    decompressor = zstandard.ZstdDecompressor()
    while True:
        stream = decompressor.decompressobj()
        parts.append(stream.decompress(rest))
        if not stream.eof:
            raise _Truncated("zstd frame ends early")
        rest = stream.unused_data
        if not rest:
            return b"".join(parts)
