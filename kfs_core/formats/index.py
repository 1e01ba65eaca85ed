r"""The `.index` file: a sparse map from offsets to batch positions in a segment.

Byte-compatible with KafScale's index layout (see docs/architecture.md, "Formats").
All integers are big-endian::

    offset      size  field
    0           4     magic b"IDX\x00"
    4           2     version = 1                    (u16)
    6           4     entry count n                  (i32)
    10          4     interval: messages per entry   (i32)
    14          2     reserved = 0                   (u16)
    16          12*n  entries, each:
                        0  8  offset: base offset of a batch   (i64)
                        8  4  position: that batch's byte position, counted
                              from the start of the segment file (i32)

The segment writer adds an entry for the first batch and then for the next
batch to start once ``interval`` messages have gone by since the last entry
(`IndexSampler`), so `kfs_core.formats.index_check.build_index_from_segment`
reproduces the writer's index byte for byte.  Entries strictly increase in
offset and position.

To find offset N: `IndexReader.lookup` binary-searches the last entry at or
below N, then `kfs_core.formats.index_check.find_batch_position` walks batch
headers forward from there.  This module reads and writes the index alone;
everything that needs the segment's batches as well lives in `index_check`
(the segment writer imports this module, so this one never imports it).
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable
from typing import NamedTuple

from kfs_core.errors import CorruptIndex

Buffer = bytes | bytearray | memoryview

INDEX_MAGIC = b"IDX\x00"
INDEX_VERSION = 1
DEFAULT_INDEX_INTERVAL = 100

INDEX_HEADER = struct.Struct(
    ">4s"  # magic b"IDX\0"
    "H"  # version
    "i"  # entry count
    "i"  # interval (messages between entries)
    "H"  # reserved
)
INDEX_HEADER_SIZE = INDEX_HEADER.size  # 16
VERSION_OFFSET = struct.calcsize(">4s")  # 4
ENTRY_COUNT_OFFSET = struct.calcsize(">4sH")  # 6
INTERVAL_OFFSET = struct.calcsize(">4sHi")  # 10
RESERVED_OFFSET = struct.calcsize(">4sHii")  # 14

INDEX_ENTRY = struct.Struct(
    ">q"  # offset: the batch's base offset
    "i"  # position: the batch's byte position in the segment file
)
INDEX_ENTRY_SIZE = INDEX_ENTRY.size  # 12

assert INDEX_HEADER_SIZE == 16
assert INDEX_ENTRY_SIZE == 12


class IndexEntry(NamedTuple):
    offset: int
    position: int


class IndexSampler:
    """Decides which batches get an index entry, for the writer and for rebuilds.

    The first batch always does; after it, the first batch to start once at
    least ``interval`` messages were added since the last entry.
    """

    __slots__ = ("_since_entry", "entries", "interval")

    def __init__(self, interval: int = DEFAULT_INDEX_INTERVAL) -> None:
        if not 1 <= interval <= 2**31 - 1:
            raise ValueError(f"index interval must be a positive i32, got {interval}")
        self.interval = interval
        self.entries: list[IndexEntry] = []
        self._since_entry = 0

    def add(self, base_offset: int, position: int, record_count: int) -> None:
        if not self.entries or self._since_entry >= self.interval:
            self.entries.append(IndexEntry(base_offset, position))
            self._since_entry = 0
        self._since_entry += record_count


def encode_index(entries: Iterable[tuple[int, int]], interval: int) -> bytes:
    """The `.index` bytes for ``entries`` of (batch base offset, file position)."""
    if not 1 <= interval <= 2**31 - 1:
        raise ValueError(f"index interval must be a positive i32, got {interval}")
    pack = INDEX_ENTRY.pack
    body = [pack(offset, position) for offset, position in entries]
    return b"".join([INDEX_HEADER.pack(INDEX_MAGIC, INDEX_VERSION, len(body), interval, 0), *body])


class IndexReader:
    """An open `.index`: header and entries checked, entries decoded for lookups.

    Raises `CorruptIndex` naming the object and byte offset when the magic,
    version, entry count (it must match the length exactly), interval or entry
    order is wrong.

    The entries are kept as two tuples of ints (``offsets`` and
    ``positions``), not as an `IndexEntry` each.  The L2 cache holds
    thousands of readers for the daemon's whole life; the garbage collector
    stops tracking a tuple that holds only ints, but walked every
    `IndexEntry` of every cached reader in each full collection.
    """

    __slots__ = ("interval", "object_name", "offsets", "positions")

    def __init__(self, data: Buffer, object_name: str = "<index>") -> None:
        self.object_name = object_name
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        size = len(view)
        if size < INDEX_HEADER_SIZE:
            raise CorruptIndex(
                f"truncated index: {size} bytes, the header alone is {INDEX_HEADER_SIZE}",
                object_name=object_name,
                offset=size,
            )
        magic, version, count, interval, _reserved = INDEX_HEADER.unpack_from(view, 0)
        if magic != INDEX_MAGIC:
            raise CorruptIndex(
                f"index magic {magic!r}, expected {INDEX_MAGIC!r}",
                object_name=object_name,
                offset=0,
            )
        if version != INDEX_VERSION:
            raise CorruptIndex(
                f"index version {version}, this build reads {INDEX_VERSION}",
                object_name=object_name,
                offset=VERSION_OFFSET,
            )
        if count < 1:
            raise CorruptIndex(
                f"entry count {count}: an index holds at least the first batch's entry",
                object_name=object_name,
                offset=ENTRY_COUNT_OFFSET,
            )
        expected = INDEX_HEADER_SIZE + count * INDEX_ENTRY_SIZE
        if size != expected:
            # Short: truncated, the damage is where the data stops.  Long:
            # trailing bytes start where the last counted entry ends.
            raise CorruptIndex(
                f"index is {size} bytes, {count} entries need exactly {expected}",
                object_name=object_name,
                offset=min(size, expected),
            )
        if interval < 1:
            raise CorruptIndex(
                f"index interval {interval}, expected a positive number",
                object_name=object_name,
                offset=INTERVAL_OFFSET,
            )
        self.interval: int = interval
        fields = INDEX_ENTRY.iter_unpack(view[INDEX_HEADER_SIZE:])
        offsets, positions = zip(*fields, strict=True)
        self.offsets: tuple[int, ...] = offsets
        self.positions: tuple[int, ...] = positions
        self._check_order()

    def _check_order(self) -> None:
        previous_offset = previous_position = -1
        for i, (offset, position) in enumerate(zip(self.offsets, self.positions, strict=True)):
            if offset <= previous_offset or position <= previous_position:
                raise CorruptIndex(
                    f"entry {i} ({offset} at {position}) does not follow "
                    f"entry {i - 1} ({previous_offset} at {previous_position}); entries "
                    "must strictly increase in offset and position",
                    object_name=self.object_name,
                    offset=entry_file_offset(i),
                )
            previous_offset, previous_position = offset, position

    @property
    def entries(self) -> tuple[IndexEntry, ...]:
        """Every entry, in order (built on each call: `lookup` is the fast path)."""
        return tuple(map(IndexEntry, self.offsets, self.positions))

    def __len__(self) -> int:
        return len(self.offsets)

    def entry_index(self, offset: int) -> int:
        """The number of the last entry whose offset is <= ``offset`` (0 if none is)."""
        return max(bisect.bisect_right(self.offsets, offset) - 1, 0)

    def lookup_entry(self, offset: int) -> IndexEntry:
        """The last entry whose offset is <= ``offset`` (the first entry if none is)."""
        i = self.entry_index(offset)
        return IndexEntry(self.offsets[i], self.positions[i])

    def lookup(self, offset: int) -> int:
        """File position to start scanning batch headers from to reach ``offset``."""
        return self.positions[self.entry_index(offset)]


def entry_file_offset(i: int) -> int:
    """Byte offset of entry ``i`` in the `.index` file."""
    return INDEX_HEADER_SIZE + i * INDEX_ENTRY_SIZE
