"""A fault-injecting HTTP proxy for S3 tests: real failures on a real socket.

`FaultInjectingProxy` listens on 127.0.0.1 in front of an S3 endpoint (the
moto server) and forwards every request, except that the next N requests can
be made to fail in one of three ways:

- ``"reject"``: answer 503 SlowDown with S3's XML error body, forward nothing;
- ``"lose_response"``: forward the request, then answer 503 instead of the
  real response (the server did the work; the client never hears of it);
- ``"drop"``: close the connection without answering.
"""

from __future__ import annotations

import http.client
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

FaultMode = Literal["reject", "lose_response", "drop"]

SLOW_DOWN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<Error><Code>SlowDown</Code>"
    b"<Message>Please reduce your request rate.</Message>"
    b"<RequestId>kfs-fault-proxy</RequestId></Error>"
)
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "server", "date"}


@dataclass(frozen=True)
class ProxiedRequest:
    method: str
    path: str
    outcome: str  # "forwarded" or the fault mode


class FaultInjectingProxy:
    """Forwards HTTP requests to ``upstream``; fails the next ``fail_next(n)`` requests."""

    def __init__(self, upstream: str) -> None:
        parts = urllib.parse.urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._lock = threading.Lock()
        self._faults_left = 0
        self._mode: FaultMode = "reject"
        self._methods: frozenset[str] | None = None
        self.requests: list[ProxiedRequest] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def fail_next(
        self, count: int, mode: FaultMode = "reject", methods: set[str] | None = None
    ) -> None:
        """Fail the next ``count`` requests (only those with one of ``methods``, if given)."""
        with self._lock:
            self._faults_left = count
            self._mode = mode
            self._methods = frozenset(methods) if methods else None

    def count(self, method: str | None = None, outcome: str | None = None) -> int:
        with self._lock:
            return sum(
                1
                for r in self.requests
                if (method is None or r.method == method)
                and (outcome is None or r.outcome == outcome)
            )

    def _take_fault(self, method: str) -> FaultMode | None:
        with self._lock:
            if self._faults_left <= 0:
                return None
            if self._methods is not None and method not in self._methods:
                return None
            self._faults_left -= 1
            return self._mode

    def _record(self, method: str, path: str, outcome: str) -> None:
        with self._lock:
            self.requests.append(ProxiedRequest(method, path, outcome))

    def _forward(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(*self._upstream, timeout=30)
        try:
            connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                if name.lower() not in _HOP_BY_HOP and name.lower() != "expect":
                    connection.putheader(name, value)
            if body and not any(name.lower() == "content-length" for name, _ in headers):
                connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body or None)
            response = connection.getresponse()
            payload = response.read()
            return response.status, response.getheaders(), payload
        finally:
            connection.close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            # HTTP/1.1 so that "Expect: 100-continue" (botocore sends it with
            # PutObject bodies) is answered at once instead of after the
            # client's one-second wait.  Every response closes the connection.
            protocol_version = "HTTP/1.1"

            def handle_one_request(self) -> None:
                self.raw_requestline = self.rfile.readline(65537)
                if not self.raw_requestline or not self.parse_request():
                    self.close_connection = True
                    return
                self._proxy()
                self.wfile.flush()

            def _read_body(self) -> bytes:
                length = self.headers.get("Content-Length")
                if length is not None:
                    return self.rfile.read(int(length))
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks: list[bytes] = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                return b""

            def _proxy(self) -> None:
                method, path = self.command, self.path
                body = self._read_body()
                fault = proxy._take_fault(method)
                if fault == "drop":
                    proxy._record(method, path, fault)
                    self.close_connection = True
                    return
                if fault == "lose_response":
                    proxy._forward(method, path, list(self.headers.items()), body)
                if fault is not None:
                    proxy._record(method, path, fault)
                    self.send_response_only(503)
                    self.send_header("Content-Type", "application/xml")
                    payload = b"" if method == "HEAD" else SLOW_DOWN_BODY
                    self.send_header("Content-Length", str(len(payload)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(payload)
                    self.close_connection = True
                    return
                status, headers, payload = proxy._forward(
                    method, path, list(self.headers.items()), body
                )
                proxy._record(method, path, "forwarded")
                self.send_response_only(status)
                for name, value in headers:
                    if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                length = dict((k.lower(), v) for k, v in headers).get("content-length")
                if method == "HEAD" and length is not None:
                    self.send_header("Content-Length", length)
                else:
                    self.send_header("Content-Length", str(len(payload)))
                self.send_header("Connection", "close")
                self.end_headers()
                if method != "HEAD":
                    self.wfile.write(payload)
                self.close_connection = True

            def log_message(self, format: str, *args: object) -> None:  # the base's name
                pass  # keep test output clean

        return Handler

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


@contextmanager
def fault_proxy(upstream: str) -> Iterator[FaultInjectingProxy]:
    proxy = FaultInjectingProxy(upstream)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
