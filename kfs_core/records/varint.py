"""Variable-length integers as Kafka writes them (protobuf-style base-128).

Each byte carries 7 bits of the value, least significant group first; the high
bit says "another byte follows":

    300 = 0b10_0101100  ->  0xAC 0x02
          (0101100 | 0x80) (0000010)

Kafka uses two flavours:

* unsigned varint (``uvarint``): the bytes above, as is.  The protocol's
  flexible versions use it for compact lengths and tagged fields.
* zig-zag varint / varlong: signed values first mapped onto unsigned ones so
  small magnitudes stay short (0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3, ...).  The
  record format uses it for every length, delta and count.  A varint is an
  int32 (at most 5 bytes), a varlong an int64 (at most 10 bytes).

Decoders take ``(buf, pos)`` and return ``(value, next_pos)`` so a parser can
walk a buffer without slicing it.  They raise `ValueError` for a value that
runs past the end of ``buf`` or is longer than its type allows; callers turn
that into the corruption error of their format.
"""

from __future__ import annotations

BytesLike = bytes | bytearray | memoryview

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "ZIGZAG_ONE_BYTE",
    "BytesLike",
    "decode_uvarint",
    "decode_varint",
    "decode_varlong",
    "encode_uvarint",
    "encode_varint",
    "encode_varlong",
    "read_zigzag",
    "size_of_uvarint",
    "size_of_varint",
    "write_uvarint",
    "write_varint",
    "zigzag_decode",
    "zigzag_encode",
]

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT32_MAX = (1 << 32) - 1
UINT64_MAX = (1 << 64) - 1

# A one-byte zig-zag varint decodes through this table: the record parser's
# fast path for attributes, small deltas, short lengths and null markers.
ZIGZAG_ONE_BYTE: tuple[int, ...] = tuple((b >> 1) ^ -(b & 1) for b in range(0x80))
_ONE_BYTE: tuple[bytes, ...] = tuple(bytes((b,)) for b in range(0x80))


def zigzag_encode(value: int) -> int:
    """Map a signed integer onto an unsigned one: 0, -1, 1, -2 -> 0, 1, 2, 3."""
    return value << 1 if value >= 0 else ((-value) << 1) - 1


def zigzag_decode(value: int) -> int:
    """Inverse of `zigzag_encode`."""
    return (value >> 1) ^ -(value & 1)


# --- encoding --------------------------------------------------------------


def encode_uvarint(value: int) -> bytes:
    """Unsigned varint of ``0 <= value < 2**64``."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0 or value > UINT64_MAX:
        raise ValueError(f"unsigned varint out of range: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def write_uvarint(out: bytearray, value: int) -> None:
    """Append the unsigned varint of ``value`` to ``out``."""
    if 0 <= value < 0x80:
        out.append(value)
        return
    if value < 0 or value > UINT64_MAX:
        raise ValueError(f"unsigned varint out of range: {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def encode_varint(value: int) -> bytes:
    """Zig-zag varint of an int32."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    return encode_uvarint(value << 1 if value >= 0 else ((-value) << 1) - 1)


def encode_varlong(value: int) -> bytes:
    """Zig-zag varlong of an int64."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    return encode_uvarint(value << 1 if value >= 0 else ((-value) << 1) - 1)


def write_varint(out: bytearray, value: int) -> None:
    """Append the zig-zag encoding of ``value`` to ``out``.

    Checks only the int64 range: the record encoder calls this for int32 and
    int64 fields alike and range-checks the int32 ones itself.
    """
    u = value << 1 if value >= 0 else ((-value) << 1) - 1
    if u < 0x80:
        out.append(u)
        return
    if u > UINT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


def size_of_uvarint(value: int) -> int:
    """Bytes `encode_uvarint` writes for ``value``."""
    return max(1, (value.bit_length() + 6) // 7)


def size_of_varint(value: int) -> int:
    """Bytes `encode_varint` / `encode_varlong` write for ``value``."""
    return size_of_uvarint(value << 1 if value >= 0 else ((-value) << 1) - 1)


# --- decoding --------------------------------------------------------------


def decode_uvarint(buf: BytesLike, pos: int = 0, max_bytes: int = 10) -> tuple[int, int]:
    """Read an unsigned varint at ``buf[pos]``; return ``(value, next_pos)``."""
    end = min(len(buf), pos + max_bytes)
    result = 0
    shift = 0
    i = pos
    while i < end:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7
    if i >= len(buf):
        raise ValueError(f"varint at byte {pos} runs past the end of the buffer")
    raise ValueError(f"varint at byte {pos} is longer than {max_bytes} bytes")


def read_zigzag(buf: BytesLike, pos: int) -> tuple[int, int]:
    """Read a zig-zag varint or varlong of up to 10 bytes; return ``(value, next_pos)``.

    The record parser's slow path: one call, no range check beyond the 10
    bytes of a varlong, so callers bound the value themselves.  Raises
    `IndexError` when the bytes run out.
    """
    b = buf[pos]
    u = b & 0x7F
    shift = 7
    pos += 1
    while b >= 0x80:
        if shift >= 70:
            raise ValueError(f"varint at byte {pos - 10} is longer than 10 bytes")
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        shift += 7
    return (u >> 1) ^ -(u & 1), pos


def decode_varint(buf: BytesLike, pos: int = 0) -> tuple[int, int]:
    """Read a zig-zag int32 varint (at most 5 bytes); return ``(value, next_pos)``."""
    u, nxt = decode_uvarint(buf, pos, 5)
    if u > UINT32_MAX:
        raise ValueError(f"varint at byte {pos} overflows int32")
    return (u >> 1) ^ -(u & 1), nxt


def decode_varlong(buf: BytesLike, pos: int = 0) -> tuple[int, int]:
    """Read a zig-zag int64 varlong (at most 10 bytes); return ``(value, next_pos)``."""
    u, nxt = decode_uvarint(buf, pos, 10)
    if u > UINT64_MAX:
        raise ValueError(f"varlong at byte {pos} overflows int64")
    return (u >> 1) ^ -(u & 1), nxt
