"""A moto S3 server over HTTP on a free local port, as the tests, bench and soak run S3.

`moto_server` starts ``python -m moto.server`` in a subprocess, waits until it
accepts connections and stops it on exit; the tests' session fixture
(tests/conftest.py), the S3 benchmarks and the soak's store campaigns all
start it here.  `fake_credentials` puts moto's dummy AWS credentials in the
environment (never real ones) for the clients that talk to it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from testkit.ports import free_port

START_TIMEOUT_S = 60.0


def fake_credentials() -> None:
    """Set dummy AWS credentials where none are set: moto needs some, never real ones."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


@contextlib.contextmanager
def moto_server(log_path: Path | None = None, host: str = "127.0.0.1") -> Iterator[str]:
    """A moto S3 server on a free port of ``host`` (loopback by default); yields its endpoint URL.

    The server's output goes to ``log_path`` (its tail is in the error if the
    server exits before it answers), or nowhere.  ``host`` is another local
    address where daemons in a network namespace must reach it
    (`testkit.netns`: the ``store`` path's outside address).
    """
    fake_credentials()
    port = free_port()
    with open(log_path, "wb") if log_path else open(os.devnull, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                log = log_path.read_text()[-2000:] if log_path else ""
                raise RuntimeError(f"moto server exited with {proc.returncode}: {log}")
            try:
                with socket.create_connection((host, port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"moto server did not start within {START_TIMEOUT_S:g} s"
                    ) from None
                time.sleep(0.05)
        yield f"http://{host}:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
