"""The client of the job server (`spark_jobs.server`): run a maintenance job on a warm driver.

`run_on_server` posts ``{"job", "args"}`` to ``<url>/jobs`` and waits for the
run's end; `cancel_on_server` asks the server to cancel a run's Spark jobs.
``kfs jobs run --server URL`` and the Airflow operator (a ``kfs`` connection
whose extra names ``jobs_server``) use them.  Standard library only: the
scheduler side imports neither pyspark nor the jobs.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kfs_core.errors import KfsError

__all__ = ["JobServerError", "ServerRun", "cancel_on_server", "run_on_server"]

#: How long to wait for a cancel to be acknowledged.
CANCEL_TIMEOUT_S = 10.0
#: Straight to the server: never through an HTTP proxy from the environment, which
#: could not reach a loopback server and would see the job's arguments.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class JobServerError(KfsError):
    """The job server could not be reached, or refused the request (the message says why)."""


@dataclass(frozen=True)
class ServerRun:
    """How a run on the server ended: its exit status, run id, and its stdout and stderr lines."""

    exit_code: int
    run_id: str
    output: str
    errors: str = ""


def _post(url: str, path: str, body: dict[str, Any], timeout_s: float | None) -> dict[str, Any]:
    request = urllib.request.Request(
        url.rstrip("/") + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("error") or exc.reason
        except (ValueError, AttributeError):
            detail = exc.reason
        raise JobServerError(f"job server {url}: {detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise JobServerError(f"cannot reach the job server at {url}: {reason}") from None
    if not isinstance(answer, dict):
        raise JobServerError(f"job server {url}: the answer is not a JSON object")
    return answer


def run_on_server(
    url: str, job: str, args: Sequence[str], *, timeout_s: float | None = None
) -> ServerRun:
    """Run ``job`` with ``args`` on the server at ``url``; returns when the run ends."""
    answer = _post(url, "/jobs", {"job": job, "args": [str(a) for a in args]}, timeout_s)
    try:
        return ServerRun(
            int(answer["exit_code"]),
            str(answer["run_id"]),
            str(answer["output"]),
            str(answer.get("errors") or ""),
        )
    except (KeyError, TypeError, ValueError):
        raise JobServerError(f"job server {url}: unexpected answer {answer!r}") from None


def cancel_on_server(url: str, run_id: str) -> bool:
    """Ask the server to cancel run ``run_id``; whether it was running there."""
    answer = _post(url, "/jobs/cancel", {"run_id": run_id}, CANCEL_TIMEOUT_S)
    return bool(answer.get("cancelled"))
