"""A fault-injecting HTTP proxy to put in front of an S3 endpoint (a moto server).

`FaultProxy` forwards every request to ``upstream`` unless a fault applies;
the faults are attributes a campaign sets while it runs (each request reads
them once, under a lock):

- ``error_rate``: that share of requests answered 500 InternalError or 503
  SlowDown (S3's XML error bodies) without reaching the store;
- ``delay_s``: every request waits this long before it is forwarded;
- ``reset_rate``: that share of requests with a body (uploads) have their
  connection reset (TCP RST) after half the body was read;
- ``outage``: every connection is reset as soon as its request head arrives.

``counts`` says how many requests took each path.  Randomness comes from
``seed``, so a run's faults replay.

    with FaultProxy("http://127.0.0.1:5000", seed=7) as proxy:
        proxy.set(error_rate=0.3)       # S3 clients use proxy.url as their endpoint
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import threading
import time
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ERRORS = (
    (500, "InternalError", "We encountered an internal error. Please try again."),
    (503, "SlowDown", "Please reduce your request rate."),
)
# Hop-by-hop headers a proxy must not forward.
_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "proxy-connection"})


class FaultProxy:
    """A threaded HTTP/1.1 proxy to ``upstream`` with switchable faults."""

    def __init__(self, upstream: str, *, seed: int = 0) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.error_rate = 0.0
        self.delay_s = 0.0
        self.reset_rate = 0.0
        self.outage = False
        self.counts: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                proxy._handle(self)

            do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fault-proxy", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)  # an AF_INET server's address: (host, port)
        return f"http://{host}:{port}"

    def set(
        self,
        *,
        error_rate: float = 0.0,
        delay_s: float = 0.0,
        reset_rate: float = 0.0,
        outage: bool = False,
    ) -> None:
        """The faults from now on (each left out is off): ``set()`` heals everything."""
        with self._lock:
            self.error_rate, self.delay_s = error_rate, delay_s
            self.reset_rate, self.outage = reset_rate, outage

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    # --- one request ---------------------------------------------------------------

    def _decide(self, has_body: bool) -> tuple[str, float]:
        with self._lock:
            if self.outage:
                fault = "outage"
            elif self._rng.random() < self.error_rate:
                fault = "error"
            elif has_body and self._rng.random() < self.reset_rate:
                fault = "reset"
            else:
                fault = "forwarded"
            self.counts[fault] += 1
            return fault, self.delay_s

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        chunked = "chunked" in (request.headers.get("Transfer-Encoding") or "").lower()
        fault, delay = self._decide(length > 0 or chunked)
        if fault == "outage":
            _reset(request)
            return
        if delay:
            time.sleep(delay)  # the fault itself: a slow store
        if fault == "reset":
            request.rfile.read(length // 2)
            _reset(request)
            return
        body = _read_body(request, length, chunked)
        if fault == "error":
            status, code, message = self._rng.choice(_ERRORS)
            _reply(request, status, _error_xml(code, message), "application/xml")
            return
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        if chunked:
            headers["Content-Length"] = str(len(body))
        upstream = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            upstream.request(request.command, request.path, body=body or None, headers=headers)
            response = upstream.getresponse()
            payload = response.read()
            reply_headers = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP]
        except OSError:
            _reply(request, 502, _error_xml("BadGateway", "upstream failed"), "application/xml")
            return
        finally:
            upstream.close()
        request.send_response(response.status, response.reason)
        head = request.command == "HEAD"  # its Content-Length is the object's, with no body
        for name, value in reply_headers:
            if head or name.lower() != "content-length":
                request.send_header(name, value)
        if not head:
            request.send_header("Content-Length", str(len(payload)))
        request.end_headers()
        if not head:
            request.wfile.write(payload)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a reset connection is the point, not an error worth a traceback


def _read_body(request: BaseHTTPRequestHandler, length: int, chunked: bool) -> bytes:
    if not chunked:
        return request.rfile.read(length) if length else b""
    parts: list[bytes] = []
    while True:
        size = int(request.rfile.readline().split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while request.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(parts)
        parts.append(request.rfile.read(size))
        request.rfile.readline()


def _error_xml(code: str, message: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
        f"<Message>{message}</Message><RequestId>kfs-fault-proxy</RequestId></Error>"
    ).encode()


def _reply(request: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str) -> None:
    request.send_response(status)
    request.send_header("Content-Type", content_type)
    request.send_header("Content-Length", str(len(body)))
    request.end_headers()
    request.wfile.write(body)


def _reset(request: BaseHTTPRequestHandler) -> None:
    """Drop the connection with a TCP RST (SO_LINGER 0), as a failing network does."""
    conn: socket.socket = request.connection
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    request.close_connection = True
    conn.close()
