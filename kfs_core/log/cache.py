"""The read path's two caches and what they hold.

- L1, the hot-segment cache: whole `.kfs` objects (`CachedSegment`, the bytes
  plus the position and last offset of every batch, so a fetch is a bisect and
  a slice), bounded by ``cache_size`` bytes.
- L2, the index cache: parsed `.index` objects (`IndexReader`), bounded by
  ``index_cache_size`` bytes of estimated memory (`index_weight`).

Both are `LruCache`: least recently used first out, bounded by the total
weight of the values, with hit and miss counters.  Keys are object keys; a
segment object is immutable, so a key never needs revalidating, only
dropping when the catalog stops listing the segment (`LruCache.pop`).  The
caches belong to one event loop and are not thread-safe.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from kfs_core.formats.index import IndexReader
from kfs_core.formats.segment import SegmentReader

__all__ = ["CachedSegment", "LruCache", "index_weight", "take_batches"]

K = TypeVar("K")
V = TypeVar("V")

# A parsed index entry costs far more than its 12 file bytes: two ints and
# their places in the reader's two tuples (about 80 bytes); the reader
# itself about 170 more.
_INDEX_ENTRY_MEMORY = 80
_INDEX_BASE_MEMORY = 192


def index_weight(index: IndexReader) -> int:
    """Estimated bytes of memory a parsed index holds."""
    return _INDEX_BASE_MEMORY + _INDEX_ENTRY_MEMORY * len(index)


class LruCache(Generic[K, V]):
    """A mapping that evicts least recently used values beyond ``capacity`` total weight."""

    def __init__(self, capacity: int, weigh: Callable[[V], int]) -> None:
        if capacity < 0:
            raise ValueError(f"cache capacity must not be negative, got {capacity}")
        self.capacity = capacity
        self._weigh = weigh
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self.weight = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def get(self, key: K) -> V | None:
        """The value (now the most recently used), counting a hit or a miss."""
        item = self._items.get(key)
        if item is None:
            self.misses += 1
            return None
        self.hits += 1
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: K, value: V) -> bool:
        """Insert or replace; False (and nothing cached) if the value alone outweighs the cache."""
        weight = self._weigh(value)
        if weight > self.capacity:
            return False
        self.pop(key)
        self._items[key] = (value, weight)
        self.weight += weight
        while self.weight > self.capacity:
            _, (_, evicted) = self._items.popitem(last=False)
            self.weight -= evicted
            self.evictions += 1
        return True

    def pop(self, key: K) -> V | None:
        item = self._items.pop(key, None)
        if item is None:
            return None
        self.weight -= item[1]
        return item[0]

    def discard(self, keys: Iterable[K]) -> int:
        """Drop every key present; how many were."""
        return sum(1 for key in keys if self.pop(key) is not None)

    def keys(self) -> list[K]:
        """Keys from least to most recently used (for tests and introspection)."""
        return list(self._items)


@dataclass(frozen=True, slots=True)
class CachedSegment:
    """A whole segment object in memory, with every batch's position and last offset."""

    key: str
    data: bytes
    positions: tuple[int, ...]  # file position of each batch
    last_offsets: tuple[int, ...]  # last offset of each batch, increasing

    @classmethod
    def load(cls, key: str, data: bytes, *, verify: bool = True) -> CachedSegment:
        """Open ``data`` (header, footer and, with ``verify``, the body CRC) and list its batches.

        Raises `CorruptSegment` naming ``key`` and the byte offset.
        """
        reader = SegmentReader(data, key, verify=verify)
        positions: list[int] = []
        last_offsets: list[int] = []
        for position, header in reader.iter_batches():
            positions.append(position)
            last_offsets.append(header.last_offset)
        positions.append(reader.body_end)  # so batch i ends where batch i + 1 starts
        return cls(key, data, tuple(positions), tuple(last_offsets))

    @property
    def size(self) -> int:
        return len(self.data)

    def read(self, offset: int, max_bytes: int) -> tuple[bytes, int]:
        """Whole batches from the one holding ``offset`` (or the next after a gap).

        At least one batch, then as many as fit ``max_bytes`` (KIP-74).
        Returns the bytes and the offset after the last batch returned (the
        bytes are empty, and the offset ``offset``, when nothing is that far).
        """
        first = bisect.bisect_left(self.last_offsets, offset)
        if first == len(self.last_offsets):
            return b"", offset
        stop = take_batches(self.positions, first, max_bytes)
        start = self.positions[first]
        return self.data[start : self.positions[stop]], self.last_offsets[stop - 1] + 1


def take_batches(bounds: tuple[int, ...] | list[int], first: int, max_bytes: int) -> int:
    """How far a fetch of ``max_bytes`` reaches from batch ``first``.

    ``bounds[i]`` is where batch ``i`` starts and ``bounds[i + 1]`` where it
    ends.  Returns the index after the last batch taken: always at least
    ``first + 1``, then every further batch while the total stays within
    ``max_bytes``.
    """
    limit = bounds[first] + max_bytes
    stop = bisect.bisect_right(bounds, limit, lo=first + 1) - 1
    return max(stop, first + 1)
