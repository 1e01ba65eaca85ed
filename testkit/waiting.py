"""`wait_for`: poll a condition until it holds, with a deadline and the last error in the message."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T],
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Poll ``condition`` until it returns a truthy value or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
        except Exception as exc:  # noqa: BLE001 - keep polling until the deadline
            last_error = exc
        else:
            if value:
                return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}: {last_error!r}")
