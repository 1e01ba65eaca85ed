"""Size-prefixed framing of the Kafka protocol, for asyncio streams.

Every request and response on a Kafka connection is one frame:

    offset  size  field
    0       4     payload size, int32 big-endian (excludes these 4 bytes)
    4       size  payload: request or response header, then the body

A broker refuses a request frame whose size is negative or larger than
``socket.request.max.bytes`` (104857600 by default) by closing the
connection; `read_frame` raises `FrameTooLarge` for both so the server can do
the same, and `TruncatedFrame` when the peer goes away mid-frame.
"""

from __future__ import annotations

import asyncio
import struct

from kfs_core.server.protocol_errors import FrameTooLarge, TruncatedFrame

__all__ = [
    "MAX_REQUEST_BYTES",
    "SIZE_PREFIX",
    "check_frame_size",
    "read_frame",
]

SIZE_PREFIX = struct.Struct(">i")  # payload size, excluding the prefix itself
MAX_REQUEST_BYTES = 104_857_600  # Kafka's socket.request.max.bytes default (100 MiB)


def check_frame_size(prefix: bytes | bytearray | memoryview, limit: int = MAX_REQUEST_BYTES) -> int:
    """Decode a 4-byte size prefix; raise `FrameTooLarge` unless ``0 <= size <= limit``."""
    if len(prefix) != SIZE_PREFIX.size:
        raise TruncatedFrame(
            f"size prefix needs {SIZE_PREFIX.size} bytes, got {len(prefix)}", limit=limit
        )
    (size,) = SIZE_PREFIX.unpack(prefix)
    if size < 0 or size > limit:
        raise FrameTooLarge(
            f"frame size {size} is outside 0..{limit} (socket.request.max.bytes)",
            size=size,
            limit=limit,
        )
    return int(size)


async def read_frame(reader: asyncio.StreamReader, limit: int = MAX_REQUEST_BYTES) -> bytes | None:
    """Read one frame's payload (without the size prefix) from ``reader``.

    Returns ``None`` when the peer closed the connection cleanly between
    frames.  Raises `TruncatedFrame` when it closed inside one, and
    `FrameTooLarge` before reading the payload of an oversize frame, so a
    hostile size never makes the server allocate it.
    """
    try:
        prefix = await reader.readexactly(SIZE_PREFIX.size)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise TruncatedFrame(
            f"connection closed after {len(exc.partial)} of {SIZE_PREFIX.size} size-prefix bytes",
            limit=limit,
        ) from None
    size = check_frame_size(prefix, limit)
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError as exc:
        raise TruncatedFrame(
            f"connection closed after {len(exc.partial)} of {size} frame bytes",
            size=size,
            limit=limit,
        ) from None
