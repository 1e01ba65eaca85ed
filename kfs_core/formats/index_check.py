"""A `.index` against its segment: offset lookups, rebuilds and consistency checks.

`kfs_core.formats.index` reads and writes the index alone, and
`kfs_core.formats.segment` (whose writer samples the index) imports it; what
needs both files lives here, so the two format modules never import each
other:

- `find_batch_position`: the batch that holds an offset (index lookup, then a
  walk of batch headers);
- `build_index_entries` / `build_index_from_segment`: the index the segment
  writer would have written (what the index rebuild job uploads);
- `check_index`: every disagreement between an index and its segment, as
  `IndexProblem` values (index rebuild, validation, ``kfs segment dump``).

Each takes a `SegmentReader` or the segment's bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from kfs_core.errors import CorruptIndex
from kfs_core.formats.index import (
    DEFAULT_INDEX_INTERVAL,
    Buffer,
    IndexEntry,
    IndexReader,
    IndexSampler,
    encode_index,
    entry_file_offset,
)
from kfs_core.formats.segment import SegmentReader

__all__ = [
    "IndexProblem",
    "build_index_entries",
    "build_index_from_segment",
    "check_index",
    "find_batch_position",
]


def _open_segment(
    segment: SegmentReader | Buffer, object_name: str, *, verify: bool = False
) -> SegmentReader:
    if isinstance(segment, SegmentReader):
        return segment
    return SegmentReader(segment, object_name, verify=verify)


def find_batch_position(
    segment: SegmentReader | Buffer,
    index: IndexReader | None,
    target_offset: int,
    *,
    object_name: str = "<segment>",
) -> int | None:
    """File position of the batch holding ``target_offset``.

    Binary search in ``index`` (or start at the first batch without one),
    then a forward walk of batch headers.  When the target falls in a gap
    (compaction removed it), the next batch after the gap is returned, as a
    Kafka fetch would; a target below the segment gives the first batch.
    None when the target lies past the segment's last offset.  Raw bytes are
    opened without the body CRC check (only the walked headers are read).
    """
    reader = _open_segment(segment, object_name)
    if target_offset > reader.last_offset:
        return None
    start = None if index is None else index.lookup(target_offset)
    for position, header in reader.iter_batches(start):
        if header.last_offset >= target_offset:
            return position
    return None


def build_index_entries(
    segment: SegmentReader | Buffer,
    interval: int = DEFAULT_INDEX_INTERVAL,
    *,
    object_name: str = "<segment>",
) -> list[IndexEntry]:
    """The entries the segment writer would have written for ``segment``."""
    reader = _open_segment(segment, object_name)
    sampler = IndexSampler(interval)
    for position, header in reader.iter_batches():
        sampler.add(header.base_offset, position, header.record_count)
    return sampler.entries


def build_index_from_segment(
    segment: SegmentReader | Buffer,
    interval: int = DEFAULT_INDEX_INTERVAL,
    *,
    object_name: str = "<segment>",
) -> bytes:
    """Regenerate a segment's `.index` bytes (what the index rebuild job writes).

    Raw bytes are opened with the body CRC check: an index is never built
    over a damaged segment.
    """
    reader = _open_segment(segment, object_name, verify=True)
    return encode_index(build_index_entries(reader, interval), interval)


@dataclass(frozen=True, slots=True)
class IndexProblem:
    """One disagreement between an index and its segment.

    ``offset`` is the byte offset in the `.index` file of the bad header field
    or entry.
    """

    object_name: str
    offset: int
    message: str

    def __str__(self) -> str:
        return f"{self.object_name}: byte {self.offset}: {self.message}"


def check_index(
    segment: SegmentReader | Buffer,
    index: IndexReader | Buffer,
    *,
    segment_name: str = "<segment>",
    index_name: str = "<index>",
) -> list[IndexProblem]:
    """Everything wrong with ``index`` as an index of ``segment``; empty when sound.

    Checks that the index opens (magic, version, size, increasing entries),
    that the first batch has an entry and that every entry sits on a batch
    start whose base offset is the entry's offset.  A segment that cannot be
    opened raises `CorruptSegment`: that is the segment's problem, not the
    index's.
    """
    reader = _open_segment(segment, segment_name)
    if isinstance(index, IndexReader):
        index_reader = index
    else:
        try:
            index_reader = IndexReader(index, index_name)
        except CorruptIndex as exc:
            return [IndexProblem(exc.object_name, exc.offset, exc.message)]
    name = index_reader.object_name
    batch_offsets = {position: header.base_offset for position, header in reader.iter_batches()}
    problems: list[IndexProblem] = []
    first_position = min(batch_offsets, default=None)
    first = index_reader.entries[0]
    if first_position is not None and (
        first.position != first_position or first.offset != batch_offsets[first_position]
    ):
        problems.append(
            IndexProblem(
                name,
                entry_file_offset(0),
                f"first entry is {first.offset} at {first.position}, but the first batch "
                f"({batch_offsets[first_position]} at {first_position}) must have the first "
                "entry",
            )
        )
    for i, entry in enumerate(index_reader.entries):
        batch_offset = batch_offsets.get(entry.position)
        if batch_offset is None:
            problems.append(
                IndexProblem(
                    name,
                    entry_file_offset(i),
                    f"entry {i} ({entry.offset}) points at byte {entry.position}, "
                    "which is not the start of a batch",
                )
            )
        elif batch_offset != entry.offset:
            problems.append(
                IndexProblem(
                    name,
                    entry_file_offset(i),
                    f"entry {i} says offset {entry.offset}, but the batch at byte "
                    f"{entry.position} starts at offset {batch_offset}",
                )
            )
    return problems
