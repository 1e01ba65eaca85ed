"""Size-prefixed framing of the Kafka protocol, for asyncio streams.

Every request and response on a Kafka connection is one frame:

    offset  size  field
    0       4     payload size, int32 big-endian (excludes these 4 bytes)
    4       size  payload: request or response header, then the body

A broker refuses a request frame whose size is negative or larger than
``socket.request.max.bytes`` (104857600 by default) by closing the
connection; `read_frame` and `FrameStream.read_frame` raise `FrameTooLarge`
for both so the server can do the same, and `TruncatedFrame` when the peer
goes away mid-frame.

`FrameStream` is the server's connection: an `asyncio.BufferedProtocol` that
has the kernel copy each large frame straight into a ``bytearray`` of its
own -- the one copy a frame's bytes ever make on the way to the WAL, since
Produce records are views of it and offsets are assigned in place.  (An
``asyncio.StreamReader`` copies every byte three more times: into a ``bytes``
per read, into its buffer, and out as the frame.)  `read_frame` is the same
framing for any ``StreamReader``.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any, cast

from kfs_core.server.protocol.errors import FrameTooLarge, TruncatedFrame

__all__ = [
    "MAX_REQUEST_BYTES",
    "SIZE_PREFIX",
    "FrameStream",
    "check_frame_size",
    "read_frame",
]

log = logging.getLogger(__name__)

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


# --- the server's connection -----------------------------------------------------

# Reads land here until a frame's size is known; frames that fit are copied
# out (small requests: Metadata, Fetch), larger ones get a buffer of their own.
_SCRATCH_BYTES = 64 * 1024
# A frame's buffer is allocated whole up to this size; beyond it, it grows
# as bytes arrive, so a size prefix alone never makes the server allocate much.
_ALLOCATE_WHOLE_BYTES = 4 * 1024 * 1024
# Complete frames read ahead of the reader before the socket is paused.
_READ_AHEAD_BYTES = 4 * 1024 * 1024


def _allocator_without_zeroing() -> Callable[[int], bytearray]:
    """CPython's ``PyByteArray_FromStringAndSize(NULL, n)``: a bytearray whose bytes are not set.

    ``bytearray(n)`` zeroes its memory first, a pass over every byte of a
    request frame that the kernel overwrites right after (``memset``, 3 %
    of the daemon's CPU under a produce flood).  Elsewhere than CPython,
    ``bytearray`` itself.
    """
    try:
        new = ctypes.pythonapi.PyByteArray_FromStringAndSize
    except AttributeError:  # pragma: no cover - not CPython
        return bytearray
    new.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
    new.restype = ctypes.py_object
    return lambda size: cast(bytearray, new(None, size))


#: A frame buffer the socket fills before anything reads it: not zeroed first.
_unfilled = _allocator_without_zeroing()


class FrameStream(asyncio.BufferedProtocol):
    """One server connection: size-prefixed frames in, scatter/gather writes out.

    ``on_connect(stream)`` runs as a task once the connection is made (as
    ``asyncio.start_server`` runs its callback).  `read_frame` gives each
    frame's payload as a ``bytearray`` the caller owns.  Writes:
    `writelines` then `drain`, with the transport's flow control.
    """

    def __init__(
        self,
        on_connect: Callable[[FrameStream], Awaitable[None]],
        limit: int = MAX_REQUEST_BYTES,
    ) -> None:
        self._on_connect = on_connect
        self._limit = limit
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self._task: asyncio.Task[None] | None = None
        self._scratch = bytearray(_SCRATCH_BYTES)
        self._scratch_used = 0  # bytes in the scratch buffer: always a partial size prefix
        self._frame: bytearray | None = None  # the frame being filled
        self._frame_size = 0  # its announced size
        self._frame_filled = 0
        self._frames: collections.deque[bytearray] = collections.deque()
        self._buffered = 0  # bytes of the complete frames in ``_frames``
        self._ended = False  # no more frames come: after those queued, `_end_error` or None
        self._end_error: BaseException | None = None
        self._eof = False
        self._read_paused = False
        self._reader: asyncio.Future[None] | None = None
        self._write_paused = False
        self._drainers: collections.deque[asyncio.Future[None]] = collections.deque()
        self._lost = False

    # --- asyncio.BufferedProtocol -----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have Transport's methods but do not subclass it.
        self.transport = cast(asyncio.Transport, transport)
        self._task = self._loop.create_task(self._run())

    async def _run(self) -> None:
        try:
            await self._on_connect(self)
        except Exception:  # as asyncio.start_server does: log it, drop the connection
            log.exception("connection handler failed")
            self.abort()

    def get_buffer(self, sizehint: int) -> memoryview:
        frame = self._frame
        if frame is not None:
            if self._frame_filled == len(frame):  # a large frame grows as its bytes arrive
                frame.extend(bytes(min(len(frame), self._frame_size - len(frame))))
            return memoryview(frame)[self._frame_filled :]
        return memoryview(self._scratch)[self._scratch_used :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._ended:  # bytes after an oversize frame's prefix, before the pause took effect
            return
        frame = self._frame
        if frame is not None:
            self._frame_filled += nbytes
            if self._frame_filled == self._frame_size:
                self._frame = None
                self._deliver(frame)
            return
        self._scratch_used += nbytes
        self._split_scratch()

    def _split_scratch(self) -> None:
        """Take the frames out of the scratch buffer; start a buffer for one that goes on."""
        scratch, used = self._scratch, self._scratch_used
        view = memoryview(scratch)
        pos = 0
        try:
            while used - pos >= SIZE_PREFIX.size:
                size = check_frame_size(view[pos : pos + SIZE_PREFIX.size], self._limit)
                start = pos + SIZE_PREFIX.size
                have = used - start
                if have >= size:
                    self._deliver(bytearray(view[start : start + size]))
                    pos = start + size
                    continue
                frame = _unfilled(min(size, _ALLOCATE_WHOLE_BYTES))
                frame[:have] = view[start:used]
                self._frame, self._frame_size, self._frame_filled = frame, size, have
                pos = used
                break
        except FrameTooLarge as exc:
            self._end(exc)
            pos = used
        finally:
            view.release()
        left = used - pos  # at most a partial size prefix
        if left:
            scratch[:left] = scratch[pos:used]
        self._scratch_used = left

    def eof_received(self) -> bool:
        # Keep the transport open for writing: requests already read are answered.
        # TLS has no half-close (asyncio would only warn): there the transport closes.
        self._eof = True
        self._end(self._truncation())
        return self.get_extra_info("sslcontext") is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._end(exc if exc is not None else self._truncation())
        for drainer in self._drainers:
            if not drainer.done():
                drainer.set_exception(ConnectionResetError("connection lost"))
        self._drainers.clear()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        for drainer in self._drainers:
            if not drainer.done():
                drainer.set_result(None)
        self._drainers.clear()

    # --- reading -----------------------------------------------------------------

    def _truncation(self) -> TruncatedFrame | None:
        """What ending the stream here means: None between frames, else TruncatedFrame."""
        if self._frame is not None:
            return TruncatedFrame(
                f"connection closed after {self._frame_filled} of {self._frame_size} frame bytes",
                size=self._frame_size,
                limit=self._limit,
            )
        if self._scratch_used:
            return TruncatedFrame(
                f"connection closed after {self._scratch_used} of {SIZE_PREFIX.size} "
                "size-prefix bytes",
                limit=self._limit,
            )
        return None

    def _deliver(self, frame: bytearray) -> None:
        self._frames.append(frame)
        self._buffered += len(frame)
        if self._buffered >= _READ_AHEAD_BYTES and not self._read_paused:
            self._pause_reading()
        self._wake_reader()

    def _end(self, error: BaseException | None) -> None:
        """No frames after those delivered; ``error`` (None: a clean end) follows them."""
        if not self._ended:
            self._ended, self._end_error = True, error
            if isinstance(error, FrameTooLarge):
                self._pause_reading()  # nothing after an oversize frame's prefix is read
        self._wake_reader()

    def _pause_reading(self) -> None:
        if self.transport is not None and not self._lost:
            try:
                self.transport.pause_reading()
            except RuntimeError:  # closing already
                return
            self._read_paused = True

    def _wake_reader(self) -> None:
        reader = self._reader
        if reader is not None and not reader.done():
            reader.set_result(None)

    async def read_frame(self) -> bytearray | None:
        """The next frame's payload, or None when the peer closed between frames.

        Raises `TruncatedFrame` (closed inside a frame), `FrameTooLarge` (a
        size outside ``0..limit``; nothing after it is read) or the error the
        connection was lost with.
        """
        while not self._frames:
            if self._ended:
                if self._end_error is not None:
                    raise self._end_error
                return None
            self._reader = self._loop.create_future()
            try:
                await self._reader
            finally:
                self._reader = None
        frame = self._frames.popleft()
        self._buffered -= len(frame)
        if self._read_paused and self._buffered < _READ_AHEAD_BYTES // 2 and not self._eof:
            self._read_paused = False
            if self.transport is not None and not self._lost:
                self.transport.resume_reading()
        return frame

    # --- writing -----------------------------------------------------------------

    def writelines(self, parts: list[bytes | bytearray | memoryview]) -> None:
        """Queue ``parts`` for sending; `ConnectionResetError` once the connection is closed.

        A transport closed meanwhile (the peer reset it, or this side aborted
        it) refuses writes in its own way: uvloop raises `RuntimeError`,
        asyncio drops them with a warning.  Both are a connection gone here.
        """
        assert self.transport is not None
        if self._lost or self.transport.is_closing():
            raise ConnectionResetError("connection lost")
        self.transport.writelines(parts)

    async def drain(self) -> None:
        """Wait while the transport's write buffer is above its high-water mark."""
        if self._lost:
            raise ConnectionResetError("connection lost")
        if not self._write_paused:
            return
        drainer = self._loop.create_future()
        self._drainers.append(drainer)
        await drainer

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default if self.transport is None else self.transport.get_extra_info(name, default)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
