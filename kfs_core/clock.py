"""The wall clock in the units Kafka and the catalog use.

Kafka timestamps, catalog commit times, report times and retention deadlines
are milliseconds since the epoch; every module that stamps or compares them
reads the clock here, so there is one definition of "now".
"""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    """Milliseconds since the Unix epoch (wall clock, integer arithmetic)."""
    return time.time_ns() // 1_000_000
