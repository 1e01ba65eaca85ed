"""The daemon does not run on half-broken after its WAL fails.

In process: the WAL's open file is swapped (``dup2``) for ``/dev/full``, so
the next write fails with a real ENOSPC.  The produce in flight gets
KAFKA_STORAGE_ERROR, the log is in its failed state, /readyz answers 503,
one error line tells the operator to restart, and `KfsServer.run` returns 1.
A restart on the same data directory and store recovers and serves what was
acknowledged before the failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kfs_core.errors import WalWriteFailed
from kfs_core.log.log_manager import LogManager
from kfs_core.server.app import EXIT_FAILED
from kfs_core.server.protocol import ErrorCode
from testkit.raw_client import RawClient
from testkit.waiting import wait_for
from tests.server.conftest import (
    ThreadedServer,
    consume_confluent,
    inprocess_settings,
    produce_request,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(120),
    pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full"),
]


@contextlib.contextmanager
def _released(gate: threading.Event) -> Iterator[None]:
    """Open ``gate`` on the way out, so a failed assertion never leaves the daemon held."""
    try:
        yield
    finally:
        gate.set()


def readyz(server: ThreadedServer) -> int:
    url = f"http://127.0.0.1:{server.server.metrics_port}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_a_wal_failure_answers_56_turns_unready_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings = inprocess_settings(tmp_path)
    # Hold the shutdown at the log's close, so the test can see the daemon between
    # "failed" and "gone" (/readyz must already say 503 there).
    closing = threading.Event()
    proceed = threading.Event()
    close = LogManager.close

    async def held_close(self: LogManager, **options: Any) -> None:
        closing.set()
        await asyncio.to_thread(proceed.wait, 30)
        await close(self, **options)

    monkeypatch.setattr(LogManager, "close", held_close)

    running = ThreadedServer(settings)
    with caplog.at_level(logging.ERROR), _released(proceed):
        running.__enter__()  # no __exit__: the daemon stops by itself
        server = running.server
        assert readyz(running) == 200
        with RawClient(running.bootstrap) as client:
            ok = client.request(produce_request("durable", [b"a", b"b", b"c"]))
            assert ok.responses[0].partition_responses[0].error_code == ErrorCode.NONE

            assert server._wal is not None
            full = os.open("/dev/full", os.O_WRONLY)
            os.dup2(full, server._wal._file.fd)
            os.close(full)

            failed = client.request(produce_request("durable", [b"lost"]))
            [answer] = failed.responses[0].partition_responses
        assert answer.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert "WAL" in answer.error_message
        assert server._log is not None and isinstance(server._log.failed, WalWriteFailed)
        assert not server.ready
        assert closing.wait(30), "the daemon did not begin to shut down"
        assert readyz(running) == 503
        proceed.set()
        wait_for(lambda: running.exit_code is not None, what="the daemon to exit")
        assert running.exit_code == EXIT_FAILED

    told = [
        r
        for r in caplog.records
        if r.name == "kfs_core.server.app" and r.levelno == logging.ERROR and "restart" in r.msg
    ]
    assert len(told) == 1, [r.getMessage() for r in caplog.records]
    line = told[0].getMessage()
    assert "\n" not in line and "No space left on device" in line
    assert "recovery replays the WAL" in line

    # The restart recovers the WAL and serves what was acknowledged.
    monkeypatch.setattr(LogManager, "close", close)
    with ThreadedServer(settings) as again:
        assert again.server._log is not None and again.server._log.failed is None
        got = consume_confluent(again.bootstrap, "durable", 1, 3)
        assert [(offset, value) for _, offset, value in got] == [(0, b"a"), (1, b"b"), (2, b"c")]
        with RawClient(again.bootstrap) as client:
            more = client.request(produce_request("durable", [b"d"]))
            assert more.responses[0].partition_responses[0].base_offset == 3
    assert again.exit_code == 0
