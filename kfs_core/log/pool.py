"""`MemoryPool`: the byte budget every buffered, not yet committed batch is charged to.

klite's chunk pool, as accounting rather than preallocated chunks (Python
cannot hand out slices of one arena cheaply): a produce acquires the size of
its batches before they are assigned offsets and gives it back only when the
flush that carries them has committed to the catalog.  So the bytes buffered
for all partitions never exceed ``capacity``.

- At ``pressure_ratio`` (75 %) of the capacity, ``on_pressure`` is called on
  every acquisition: the log manager starts an emergency flush.
- When a request does not fit, it waits (first come, first served, so a large
  request is not starved by small ones) until releases make room, or until
  its deadline: then `RequestTimedOut`.  ``waits`` and ``wait_seconds`` count
  those waits and add up their time, so a produce stall can be told apart
  from one in the WAL.
- A request larger than the whole pool can never fit: `ValueError`; the
  caller turns it into `MessageTooLarge`.

The pool belongs to one event loop and is not thread-safe.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kfs_core.errors import RequestTimedOut

__all__ = ["MemoryPool"]


@dataclass(eq=False, slots=True)
class _Waiter:
    size: int
    granted: asyncio.Future[None]


class MemoryPool:
    """A bounded byte budget with FIFO waiters and a pressure signal."""

    def __init__(
        self,
        capacity: int,
        *,
        pressure_ratio: float = 0.75,
        on_pressure: Callable[[], None] | None = None,
    ) -> None:
        if capacity <= 0:
            raise ValueError(f"pool capacity must be positive, got {capacity}")
        if not 0.0 < pressure_ratio <= 1.0:
            raise ValueError(f"pressure ratio must be in (0, 1], got {pressure_ratio}")
        self.capacity = capacity
        self.pressure_threshold = int(capacity * pressure_ratio)
        self.used = 0
        self._on_pressure = on_pressure
        self._waiters: deque[_Waiter] = deque()
        self.waits = 0  # acquisitions that had to wait for room
        self.wait_seconds = 0.0  # their time waiting, granted or not

    @property
    def waiting(self) -> int:
        """Acquisitions queued for room."""
        return len(self._waiters)

    @property
    def under_pressure(self) -> bool:
        return self.used >= self.pressure_threshold or bool(self._waiters)

    def __repr__(self) -> str:
        return f"MemoryPool(used={self.used}, capacity={self.capacity}, waiting={self.waiting})"

    async def acquire(self, size: int, timeout_s: float | None = None) -> None:
        """Charge ``size`` bytes, waiting up to ``timeout_s`` for room (`RequestTimedOut`)."""
        if size > self.capacity:
            raise ValueError(f"{size} bytes can never fit a pool of {self.capacity}")
        if not self._waiters and self.used + size <= self.capacity:
            self.used += size
            self._signal()
            return
        loop = asyncio.get_running_loop()
        waiter = _Waiter(size, loop.create_future())
        self._waiters.append(waiter)
        self._signal()  # full: make sure a flush is on its way to free memory
        self.waits += 1
        started = loop.time()
        try:
            async with asyncio.timeout(timeout_s):
                await waiter.granted
        except BaseException as exc:
            if waiter.granted.done() and not waiter.granted.cancelled():
                self.release(size)  # granted just as we gave up: hand it on
            else:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                self._grant()  # we may have been the head blocking smaller requests
            if isinstance(exc, TimeoutError):
                raise RequestTimedOut(
                    f"no room for {size} bytes in the memory pool ({self.used} of "
                    f"{self.capacity} used) within {timeout_s}s: flushes are not keeping up"
                ) from None
            raise
        finally:
            self.wait_seconds += loop.time() - started

    def force_acquire(self, size: int) -> None:
        """Charge ``size`` bytes without waiting, even beyond the capacity.

        For WAL replay at start-up only: the data is already acknowledged and
        must be buffered; the flush that follows brings the pool back down.
        """
        self.used += size
        self._signal()

    def release(self, size: int) -> None:
        """Give ``size`` bytes back and wake the waiters that now fit."""
        if size > self.used:
            raise ValueError(f"releasing {size} bytes, but only {self.used} are charged")
        self.used -= size
        self._grant()

    def _grant(self) -> None:
        while self._waiters:
            waiter = self._waiters[0]
            if waiter.granted.done():  # cancelled, its task not yet resumed to withdraw it
                self._waiters.popleft()
                continue
            if self.used + waiter.size > self.capacity:
                break
            self._waiters.popleft()
            self.used += waiter.size
            waiter.granted.set_result(None)
        self._signal()

    def _signal(self) -> None:
        if self._on_pressure is not None and self.under_pressure:
            self._on_pressure()
