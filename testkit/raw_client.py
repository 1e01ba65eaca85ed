"""A bare socket speaking the Kafka protocol with kafka-python's message classes.

What a Kafka client library hides -- framing, correlation ids, a request the
library would never send -- the daemon tests (tests/server, tests/security)
and bench.produce_cpu's first-produce timing send through `RawClient`.
"""

from __future__ import annotations

import io
import socket
import struct
from typing import Any


class RawClient:
    """A bare socket speaking the protocol with kafka-python's message classes."""

    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, message: Any) -> int:
        self._correlation += 1
        message.with_header(correlation_id=self._correlation, client_id="kfs-raw")
        self.sock.sendall(bytes(message.encode(header=True, framed=True)))
        return self._correlation

    def read_frame(self) -> bytes | None:
        """One response frame's payload; None when the server closed the connection."""
        prefix = self._read_exactly(4)
        if prefix is None:
            return None
        (size,) = struct.unpack(">i", prefix)
        return self._read_exactly(size)

    def _read_exactly(self, n: int) -> bytes | None:
        chunks = b""
        while len(chunks) < n:
            try:
                chunk = self.sock.recv(n - len(chunks))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            chunks += chunk
        return chunks

    def request(self, message: Any) -> Any:
        """Send ``message``; its response, decoded by kafka-python as its client does."""
        self.send(message)
        return self.read_response(message)

    def read_response(self, message: Any) -> Any:
        """The next response frame, which must answer ``message`` (already sent)."""
        payload = self.read_frame()
        assert payload is not None, "the server closed the connection"
        response_class = message.header.get_response_class()
        buffer = io.BytesIO(payload)
        assert response_class.parse_header(buffer).correlation_id == message.header.correlation_id
        return response_class.decode(buffer)

    def closed_by_server(self, timeout: float = 10.0) -> bool:
        """Whether the server closes the connection (reads until EOF, within ``timeout``)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
