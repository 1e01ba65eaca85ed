"""Hypothesis strategies for records and batches."""

from __future__ import annotations

from hypothesis import strategies as st

from kfs_core.records.batch import Record

INT64_MAX = 2**63 - 1

# Lengths of one, two and three varint bytes all occur.
payloads = st.one_of(
    st.none(),
    st.binary(max_size=200),
    st.integers(8192, 9000).map(lambda n: bytes([n % 251]) * n),
)
header_lists = st.lists(
    st.tuples(st.text(max_size=12), st.one_of(st.none(), st.binary(max_size=40))),
    max_size=4,
)
timestamps = st.one_of(st.just(-1), st.integers(0, 2**45), st.integers(-(2**40), 2**60))


@st.composite
def record_lists(
    draw: st.DrawFn,
    *,
    min_size: int = 0,
    max_size: int = 12,
    consecutive: bool = False,
    base_offset: int | None = None,
) -> tuple[int, list[Record]]:
    """``(base_offset, records)`` with increasing offsets from the base.

    ``consecutive`` gives offsets base, base+1, ... as a producer writes them;
    otherwise there are gaps, as compaction leaves them.
    """
    base = draw(st.integers(0, 2**50)) if base_offset is None else base_offset
    n = draw(st.integers(min_size, max_size))
    offset = base + (0 if consecutive else draw(st.integers(0, 3)))
    records = []
    for _ in range(n):
        records.append(
            Record(
                offset=offset,
                timestamp=draw(timestamps),
                key=draw(payloads),
                value=draw(payloads),
                headers=draw(header_lists),
                attributes=0,
            )
        )
        offset += 1 if consecutive else draw(st.integers(1, 1000))
    return base, records
