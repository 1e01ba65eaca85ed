"""Fetch wake-ups: long-polling fetches wait here for appends to their partitions."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator

__all__ = ["AppendNotifier"]


class AppendNotifier:
    """Wakes long-polling fetches when a partition they wait on gets new data.

    A fetch registers one `asyncio.Event` under each partition it reads
    *before* it reads them, so an append that lands between the read and the
    wait still wakes it.
    """

    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], set[asyncio.Event]] = {}
        self._stopping = False

    @property
    def stopping(self) -> bool:
        return self._stopping

    @contextlib.contextmanager
    def watch(self, keys: Iterable[tuple[str, int]]) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        if self._stopping:
            event.set()
        registered = list(dict.fromkeys(keys))
        for key in registered:
            self._waiters.setdefault(key, set()).add(event)
        try:
            yield event
        finally:
            for key in registered:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(event)
                    if not waiters:
                        del self._waiters[key]

    def notify(self, topic: str, partition: int) -> None:
        for event in self._waiters.get((topic, partition), ()):
            event.set()

    def notify_topic(self, topic: str) -> None:
        for (name, _), events in self._waiters.items():
            if name == topic:
                for event in events:
                    event.set()

    def stop(self) -> None:
        """Shutdown: wake every waiter now and every later one at once."""
        self._stopping = True
        for events in self._waiters.values():
            for event in events:
                event.set()
