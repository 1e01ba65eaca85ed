"""FrameStream: the server's connection protocol, over real loopback sockets.

Frames must come out whole and in order however the bytes are cut into
reads: small frames several to a read, large ones read straight into a
buffer of their own (grown as they arrive beyond the whole-allocation
size), and the errors `read_frame` gives for a stream reader.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from kfs_core.server.protocol import framing as protocol_framing
from kfs_core.server.protocol.errors import FrameTooLarge, TruncatedFrame
from kfs_core.server.protocol.framing import FrameStream

pytestmark = pytest.mark.unit

I32 = struct.Struct(">i")
LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}

Outcome = list[bytes | BaseException | None]


def frame(payload: bytes) -> bytes:
    return I32.pack(len(payload)) + payload


def serve_and_send(
    loop_name: str,
    chunks: list[bytes],
    *,
    limit: int = protocol_framing.MAX_REQUEST_BYTES,
    answer: Callable[[FrameStream, bytes], Awaitable[None]] | None = None,
    half_close: bool = True,
) -> tuple[Outcome, bytes]:
    """Send ``chunks`` (one ``sendall`` each) to a FrameStream server; what it read, and sent."""

    async def main() -> tuple[Outcome, bytes]:
        loop = asyncio.get_running_loop()
        got: Outcome = []
        done = loop.create_future()

        async def on_connect(stream: FrameStream) -> None:
            try:
                while True:
                    payload = await stream.read_frame()
                    got.append(None if payload is None else bytes(payload))
                    if payload is None:
                        break
                    if answer is not None:
                        await answer(stream, bytes(payload))
            except Exception as exc:  # noqa: BLE001 - the error is the outcome under test
                got.append(exc)
            finally:
                stream.close()
                done.set_result(None)

        server = await loop.create_server(lambda: FrameStream(on_connect, limit), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        client.setblocking(False)
        try:
            for chunk in chunks:
                await loop.sock_sendall(client, chunk)
            if half_close:
                client.shutdown(socket.SHUT_WR)
            received = bytearray()
            while data := await loop.sock_recv(client, 1 << 16):
                received += data
            await asyncio.wait_for(done, 10)
        finally:
            client.close()
            server.close()
            await server.wait_closed()
        return got, bytes(received)

    loop = LOOPS[loop_name]()
    try:
        return loop.run_until_complete(asyncio.wait_for(main(), 30))
    finally:
        loop.close()


@pytest.fixture(params=list(LOOPS))
def loop_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_small_frames_several_to_a_read_and_cut_anywhere(loop_name: str) -> None:
    payloads = [b"a", b"", b"bc" * 50, os.urandom(3000), b"last"]
    stream = b"".join(frame(p) for p in payloads)
    together, _ = serve_and_send(loop_name, [stream])
    assert together == [*payloads, None]
    # One byte at a time: size prefixes and payloads cut at every position.
    cut, _ = serve_and_send(loop_name, [stream[i : i + 1] for i in range(len(stream))])
    assert cut == [*payloads, None]


def test_large_frames_are_read_into_their_own_buffer(
    loop_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Beyond the whole-allocation size a frame's buffer grows as bytes arrive.
    monkeypatch.setattr(protocol_framing, "_ALLOCATE_WHOLE_BYTES", 100_000)
    payloads = [os.urandom(1_000_000), b"small", os.urandom(250_000), os.urandom(70_000)]
    stream = b"".join(frame(p) for p in payloads)
    got, _ = serve_and_send(
        loop_name, [stream[i : i + 65_537] for i in range(0, len(stream), 65_537)]
    )
    assert got == [*payloads, None]


def test_frames_are_writable_bytearrays_of_their_own() -> None:
    async def main() -> list[bytearray | None]:
        loop = asyncio.get_running_loop()
        frames: list[bytearray | None] = []
        ready = loop.create_future()

        async def on_connect(stream: FrameStream) -> None:
            frames.extend([await stream.read_frame() for _ in range(3)])
            stream.close()
            ready.set_result(None)

        server = await loop.create_server(lambda: FrameStream(on_connect), "127.0.0.1", 0)
        _reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
        writer.write(frame(b"x" * 10) + frame(os.urandom(200_000)))
        writer.write_eof()
        await ready
        writer.close()
        server.close()
        return frames

    frames = asyncio.run(main())
    assert [type(f) for f in frames[:2]] == [bytearray, bytearray] and frames[2] is None
    assert frames[0] == b"x" * 10 and len(frames[1] or b"") == 200_000


@pytest.mark.parametrize(
    ("data", "error"),
    [
        pytest.param(b"\x00\x00", TruncatedFrame, id="eof-in-size-prefix"),
        pytest.param(I32.pack(10) + b"abc", TruncatedFrame, id="eof-in-frame"),
        pytest.param(I32.pack(200_000) + b"abc", TruncatedFrame, id="eof-in-large-frame"),
        pytest.param(I32.pack(-5), FrameTooLarge, id="negative"),
        pytest.param(I32.pack(2**31 - 1) + b"x" * 10, FrameTooLarge, id="oversize"),
    ],
)
def test_errors_follow_the_frames_before_them(
    loop_name: str, data: bytes, error: type[Exception]
) -> None:
    got, _ = serve_and_send(loop_name, [frame(b"first") + data], limit=1 << 20)
    assert got[0] == b"first"
    assert len(got) == 2 and isinstance(got[1], error)


def test_answers_are_written_after_the_client_stopped_sending(loop_name: str) -> None:
    async def echo(stream: FrameStream, payload: bytes) -> None:
        stream.writelines([I32.pack(len(payload)), memoryview(payload)])
        await stream.drain()

    payloads = [b"one", os.urandom(300_000), b"three"]
    got, received = serve_and_send(loop_name, [b"".join(frame(p) for p in payloads)], answer=echo)
    assert got == [*payloads, None]
    assert received == b"".join(frame(p) for p in payloads)


def test_a_write_once_the_connection_closed_is_a_connection_error(loop_name: str) -> None:
    """A client that gave up on its request is gone when its answer comes: no traceback."""

    async def main() -> BaseException | None:
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[BaseException | None] = loop.create_future()

        async def on_connect(stream: FrameStream) -> None:
            await stream.read_frame()
            stream.abort()  # as the daemon drops a connection that broke
            try:
                stream.writelines([frame(b"late")])
            except Exception as exc:  # noqa: BLE001 - the error is the outcome under test
                outcome.set_result(exc)
            else:
                outcome.set_result(None)

        server = await loop.create_server(lambda: FrameStream(on_connect), "127.0.0.1", 0)
        _reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
        writer.write(frame(b"request"))
        try:
            return await asyncio.wait_for(outcome, 10)
        finally:
            writer.close()
            server.close()
            await server.wait_closed()

    loop = LOOPS[loop_name]()
    try:
        error = loop.run_until_complete(main())
    finally:
        loop.close()
    assert isinstance(error, ConnectionResetError), error


def test_reading_pauses_while_frames_wait_for_the_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(protocol_framing, "_READ_AHEAD_BYTES", 10_000)

    async def main() -> tuple[bool, list[int]]:
        loop = asyncio.get_running_loop()
        streams: list[FrameStream] = []
        sizes: list[int] = []
        arrived = asyncio.Event()
        finished = loop.create_future()

        async def on_connect(stream: FrameStream) -> None:
            streams.append(stream)
            await arrived.wait()
            while (payload := await stream.read_frame()) is not None:
                sizes.append(len(payload))
            finished.set_result(None)

        server = await loop.create_server(lambda: FrameStream(on_connect), "127.0.0.1", 0)
        _reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
        writer.write(b"".join(frame(b"z" * 4000) for _ in range(20)))
        await writer.drain()
        while not streams or streams[0]._buffered < 10_000:
            await asyncio.sleep(0)  # let the server read until it pauses
        paused = streams[0]._read_paused
        arrived.set()
        writer.write_eof()
        await asyncio.wait_for(finished, 10)
        writer.close()
        server.close()
        return paused, sizes

    paused, sizes = asyncio.run(main())
    assert paused
    assert sizes == [4000] * 20
