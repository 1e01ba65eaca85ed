"""A segment's bytes checked end to end, collecting every problem instead of raising.

`SegmentReader.verify` (`kfs_core.formats.segment`) stops at the first
problem, as a reader must.  An operator or the validation job wants all of
them: `check_segment_bytes` walks a whole `.kfs` object - header, footer, body
CRC-32C, every batch's CRC, offset order and gaps, the header's and footer's
agreement with the batches - and returns a `SegmentCheck` holding each
verdict, the counts it found and the problems in the order they were found.
The validation job turns it into a result row (and adds the catalog's
checks); ``kfs segment dump`` lists its batches with their CRC verdicts.  The
index against its segment is `kfs_core.formats.index_check.check_index`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import crc32c

from kfs_core.errors import CorruptionError
from kfs_core.formats.segment import (
    SEGMENT_FOOTER_SIZE,
    SEGMENT_HEADER_SIZE,
    SEGMENT_OVERHEAD,
    SegmentFooter,
    SegmentHeader,
    decode_segment_footer,
    decode_segment_header,
    parse_object_name,
)
from kfs_core.records.header import BatchHeader, batch_crc, read_batch_header

__all__ = ["BatchCheck", "SegmentCheck", "check_segment_bytes"]

#: Batch CRC failures described one by one; the rest are only counted.
MAX_DESCRIBED_CRC_FAILURES = 3


@dataclass(frozen=True, slots=True)
class BatchCheck:
    """One batch of the walk: its file position, header and whether its CRC-32C holds."""

    position: int
    header: BatchHeader
    crc_ok: bool


@dataclass(slots=True)
class SegmentCheck:
    """What `check_segment_bytes` found; a verdict is None where its check could not run.

    The batch fields (``batches`` .. ``counts_ok``) are filled only when the
    header decodes; ``counts_ok`` only when the batches walk cleanly.
    """

    object_name: str
    size_bytes: int
    header: SegmentHeader | None = None
    footer: SegmentFooter | None = None
    #: Magic, version and flags decode, reserved is 0, base offset matches the object name.
    header_ok: bool | None = None
    footer_ok: bool | None = None
    body_crc_ok: bool | None = None
    #: The batches walk to the footer, offsets strictly increasing, at least one batch.
    batches_ok: bool | None = None
    #: Header message count, base offset and flags, footer last offset agree with the batches.
    counts_ok: bool | None = None
    batches: list[BatchCheck] = field(default_factory=list)
    crc_failures: int | None = None
    batch_count: int | None = None
    record_count: int | None = None
    offset_gaps: int | None = None
    first_offset: int | None = None
    last_offset: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def index_checkable(self) -> bool:
        """Header and footer open, so the batches an index points at can be located."""
        return self.header is not None and self.footer is not None

    @property
    def ok(self) -> bool:
        return not self.problems


def check_segment_bytes(data: bytes, object_name: str) -> SegmentCheck:
    """Every check of one segment object's bytes; never raises for damaged bytes."""
    check = SegmentCheck(object_name=object_name, size_bytes=len(data))
    header = _check_header(data, check)
    footer = _check_footer(data, check)
    if footer is not None:
        body = memoryview(data)[SEGMENT_HEADER_SIZE : len(data) - SEGMENT_FOOTER_SIZE]
        check.body_crc_ok = crc32c.crc32c(body) == footer.body_crc
        if not check.body_crc_ok:
            check.problems.append(f"body CRC-32C mismatch (footer {footer.body_crc:#010x})")
    if header is None:
        return check
    # A damaged footer still leaves the batches walkable up to the end of the object.
    end = len(data) - SEGMENT_FOOTER_SIZE if footer is not None else len(data)
    flags = _walk_batches(data, end, check)
    first, last = check.first_offset, check.last_offset
    if check.batches_ok and first is not None and last is not None:
        counts: list[str] = []
        if header.message_count != check.record_count:
            counts.append(
                f"header message count {header.message_count}, batches hold {check.record_count}"
            )
        if first < header.base_offset:
            counts.append(
                f"first batch offset {first} below header base offset {header.base_offset}"
            )
        if footer is not None and footer.last_offset != last:
            counts.append(f"footer last offset {footer.last_offset}, last batch ends at {last}")
        if header.flags != flags:
            counts.append(f"header flags {header.flags:#06x}, batches say codec {flags}")
        check.counts_ok = not counts
        check.problems.extend(counts)
    return check


def _check_header(data: bytes, check: SegmentCheck) -> SegmentHeader | None:
    name = check.object_name
    try:
        header = decode_segment_header(data, name)
        named = parse_object_name(name)
    except CorruptionError as exc:
        check.header_ok = False
        check.problems.append(f"header: {exc}")
        return None
    except ValueError:
        named = header.base_offset  # a suffixed key (a compaction output): no name check
    check.header = header
    check.header_ok = header.reserved == 0 and named == header.base_offset
    if not check.header_ok:
        check.problems.append(
            f"header: base offset {header.base_offset} (name says {named}), "
            f"reserved {header.reserved:#x}"
        )
    return header


def _check_footer(data: bytes, check: SegmentCheck) -> SegmentFooter | None:
    if len(data) < SEGMENT_OVERHEAD:
        check.footer_ok = False
        check.problems.append(
            f"truncated: {len(data)} bytes, a segment is at least {SEGMENT_OVERHEAD}"
        )
        return None
    start = len(data) - SEGMENT_FOOTER_SIZE
    try:
        footer = decode_segment_footer(data[start:], check.object_name, file_offset=start)
    except CorruptionError as exc:
        check.footer_ok = False
        check.problems.append(f"footer: {exc}")
        return None
    check.footer = footer
    check.footer_ok = True
    return footer


def _walk_batches(data: bytes, end: int, check: SegmentCheck) -> int:
    """Walk every batch up to ``end``: CRCs, order, gaps, counts.

    Fills the batch fields of ``check``; returns the header flags the batches
    imply (the shared codec, 0 when mixed or none, as the writer sets them).
    """
    view = memoryview(data)[:end]
    position = SEGMENT_HEADER_SIZE
    crc_failures = gaps = records = 0
    previous_last: int | None = None
    ordered = True
    codecs: set[int] = set()
    walk_error: str | None = None
    while position < end:
        try:
            batch = read_batch_header(view, position, object_name=check.object_name)
        except CorruptionError as exc:
            walk_error = f"batches: {exc}"
            break
        crc_ok = batch_crc(view, position, batch.total_size) == batch.crc
        check.batches.append(BatchCheck(position, batch, crc_ok))
        if not crc_ok:
            crc_failures += 1
            if crc_failures <= MAX_DESCRIBED_CRC_FAILURES:
                check.problems.append(
                    f"batch CRC-32C mismatch at byte {position} (base offset {batch.base_offset})"
                )
        if batch.last_offset_delta < 0:
            ordered = False
        if previous_last is not None:
            if batch.base_offset <= previous_last:
                ordered = False
            elif batch.base_offset > previous_last + 1:
                gaps += 1
        if check.first_offset is None:
            check.first_offset = batch.base_offset
        codecs.add(batch.codec)
        previous_last = batch.last_offset
        records += batch.record_count
        position += batch.total_size
    check.crc_failures = crc_failures
    if crc_failures > MAX_DESCRIBED_CRC_FAILURES:
        check.problems.append(f"{crc_failures} batch CRC-32C mismatches in all")
    check.batch_count = len(check.batches)
    check.record_count = records
    check.offset_gaps = gaps
    check.last_offset = previous_last
    problems = [walk_error] if walk_error else []
    if not ordered:
        problems.append("batch offsets do not strictly increase")
    if not check.batches and walk_error is None:
        problems.append("segment holds no batch")
    check.batches_ok = not problems
    check.problems.extend(problems)
    return next(iter(codecs)) if len(codecs) == 1 else 0
