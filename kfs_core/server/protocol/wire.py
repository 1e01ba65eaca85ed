"""Primitive Kafka protocol types, read from and written to byte buffers.

Only what the hand-written parts of the protocol layer need: the request and
response headers, and the zero-copy Produce/Fetch fast paths.  Everything else
is encoded by the spec-generated message classes.

    type               classic encoding             flexible (compact) encoding
    int8/16/32/64      big-endian, fixed size       same
    string             int16 length + UTF-8         uvarint (length + 1) + UTF-8
    nullable string    length -1 = null             uvarint 0 = null
    bytes / records    int32 length + bytes         uvarint (length + 1) + bytes
    array              int32 count + elements       uvarint (count + 1) + elements
    tagged fields      (none)                       uvarint count, then per field:
                                                    uvarint tag, uvarint size, data

Readers take ``(buf, pos)`` and return ``(value, next_pos)``.  On a buffer
that is too short or a length that is invalid they raise one of
``READ_ERRORS``, and they never read past the end of ``buf``.
"""

from __future__ import annotations

import struct

from kfs_core.records.varint import decode_uvarint, write_uvarint

__all__ = [
    "I16",
    "I32",
    "I64",
    "READ_ERRORS",
    "Buffer",
    "read_array_length",
    "read_bytes",
    "read_string",
    "skip_tagged_fields",
    "write_array_length",
    "write_bytes_length",
    "write_string",
]

Buffer = bytes | bytearray | memoryview

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")

# What a reader raises on bad input; callers turn these into MalformedRequest.
READ_ERRORS: tuple[type[Exception], ...] = (
    struct.error,
    ValueError,  # includes UnicodeDecodeError
    IndexError,
    OverflowError,
)

_MAX_UVARINT32_BYTES = 5  # lengths and counts are uint32 varints


def _read_uvarint32(buf: Buffer, pos: int) -> tuple[int, int]:
    value, pos = decode_uvarint(buf, pos, _MAX_UVARINT32_BYTES)
    if value > 0xFFFFFFFF:
        raise ValueError(f"unsigned varint at byte {pos} overflows uint32")
    return value, pos


def _read_length(buf: Buffer, pos: int, compact: bool, classic: struct.Struct) -> tuple[int, int]:
    """A length or count; -1 means null."""
    if compact:
        value, pos = _read_uvarint32(buf, pos)
        return value - 1, pos
    (value,) = classic.unpack_from(buf, pos)
    return int(value), pos + classic.size


def read_string(buf: Buffer, pos: int, compact: bool, nullable: bool) -> tuple[str | None, int]:
    """A (compact) string; ``None`` only when ``nullable``."""
    length, pos = _read_length(buf, pos, compact, I16)
    if length < 0:
        if length == -1 and nullable:
            return None, pos
        raise ValueError(f"invalid string length {length} at byte {pos}")
    end = pos + length
    if end > len(buf):
        raise ValueError(f"string of {length} bytes at byte {pos} runs past the end of the frame")
    return str(buf[pos:end], "utf-8"), end


def read_bytes(buf: memoryview, pos: int, compact: bool) -> tuple[memoryview | None, int]:
    """Nullable (compact) bytes or records, as a zero-copy slice of ``buf``."""
    length, pos = _read_length(buf, pos, compact, I32)
    if length < 0:
        if length == -1:
            return None, pos
        raise ValueError(f"invalid bytes length {length} at byte {pos}")
    end = pos + length
    if end > len(buf):
        raise ValueError(f"{length} bytes at byte {pos} run past the end of the frame")
    return buf[pos:end], end


def read_array_length(buf: Buffer, pos: int, compact: bool) -> tuple[int, int]:
    """The element count of a (compact) array; -1 means null."""
    count, pos = _read_length(buf, pos, compact, I32)
    if count < -1:
        raise ValueError(f"invalid array length {count} at byte {pos}")
    return count, pos


def skip_tagged_fields(buf: Buffer, pos: int) -> int:
    """Skip a flexible struct's tagged-field section; return the position after it."""
    count, pos = _read_uvarint32(buf, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint32(buf, pos)
        size, pos = _read_uvarint32(buf, pos)
        pos += size
        if pos > len(buf):
            raise ValueError("tagged field runs past the end of the frame")
    return pos


# --- writers ---------------------------------------------------------------


def write_string(out: bytearray, value: str | None, compact: bool) -> None:
    """Append a nullable (compact) string."""
    if value is None:
        if compact:
            out.append(0)
        else:
            out += I16.pack(-1)
        return
    data = value.encode("utf-8")
    if compact:
        write_uvarint(out, len(data) + 1)
    else:
        out += I16.pack(len(data))
    out += data


def write_bytes_length(out: bytearray, length: int | None, compact: bool) -> None:
    """Append the length prefix of nullable (compact) bytes; ``None`` writes null."""
    if compact:
        write_uvarint(out, 0 if length is None else length + 1)
    else:
        out += I32.pack(-1 if length is None else length)


def write_array_length(out: bytearray, count: int | None, compact: bool) -> None:
    """Append the count prefix of a nullable (compact) array; ``None`` writes null."""
    write_bytes_length(out, count, compact)
