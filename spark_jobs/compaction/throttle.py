"""Read rate limiting in the executors: a token bucket per read budget.

``--max-read-mb-per-s`` is the job's total, split evenly over the task slots
(`spark_jobs.compaction.job` divides it, `build_tasks` puts the per-slot rate
in every task).  Each Spark task makes one `ReadThrottle`
(`spark_jobs.compaction.spark`) and passes it to every segment read it makes,
so its reads keep to the per-slot rate together.  No state outlives the task
or lives in the module: a slot's next task starts with a fresh bucket (and
its one second of burst).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["ReadThrottle", "TokenBucket"]


class TokenBucket:
    """A token bucket of ``rate`` bytes per second holding at most ``burst`` (one second's worth).

    `acquire` takes its bytes at once and may leave the bucket in debt; the
    caller then sleeps until the debt is paid, so a large object costs its
    time after it is read and the average rate holds.
    """

    def __init__(
        self,
        rate: float,
        burst: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self.rate = rate
        self.capacity = rate if burst is None else burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = self.capacity
        self._updated = clock()
        self._lock = threading.Lock()

    def acquire(self, amount: int) -> float:
        """Take ``amount`` tokens, sleeping as long as the bucket is in debt; the seconds slept."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.capacity, self._tokens + (now - self._updated) * self.rate)
            self._updated = now
            self._tokens -= amount
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        return wait


class ReadThrottle:
    """The token buckets of one Spark task's reads, one per rate; None for no limit.

    Every read made with the same throttle and rate draws on one bucket, so
    reads one after another keep to the rate together.
    """

    def __init__(self) -> None:
        self._buckets: dict[float, TokenBucket] = {}
        self._lock = threading.Lock()

    def bucket(self, rate: float) -> TokenBucket | None:
        """The bucket for ``rate`` bytes/s (made on first use); None when ``rate`` <= 0."""
        if rate <= 0:
            return None
        with self._lock:
            bucket = self._buckets.get(rate)
            if bucket is None:
                bucket = self._buckets[rate] = TokenBucket(rate)
            return bucket
