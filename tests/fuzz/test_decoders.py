"""Every decoder of stored bytes decodes its input or raises a `KfsError`, never anything else.

The daemon and the jobs read record batches, segments, indexes, WAL files and
catalog documents that a crash, a disk or a hostile client may have damaged.
What they must never do is meet an exception nobody expects (an IndexError,
a struct.error, a zlib.error ...): that is a crashed request, a daemon that
will not start, or a job that dies without a report.  Each decoder here is
fed, structure-aware, its own valid encodings (built by the real encoders)
with bytes flipped, set, cut, inserted and repeated, and arbitrary bytes too.

``corpus/<decoder>/`` keeps inputs worth replaying forever: edge cases (empty,
one byte, cut in half or one byte short, length fields all ones, doubled)
and any input that once broke a decoder (a failure names the file to write
it to); every test run replays them.  The generated cases run
``max_examples`` times per decoder: a few hundred in `make test`, many
thousands under ``HYPOTHESIS_PROFILE=soak`` (`make soak`).  Hypothesis
prints the seed of a failing run; ``--hypothesis-seed`` replays it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kfs_core.catalog import PartitionCatalog, SegmentEntry
from kfs_core.catalog.actions import decode_commit
from kfs_core.catalog.state import decode_checkpoint, decode_pointer, encode_pointer
from kfs_core.errors import KfsError
from kfs_core.formats.index import IndexReader
from kfs_core.formats.index_check import check_index
from kfs_core.formats.segment import SegmentReader, SegmentWriter
from kfs_core.formats.segment_check import check_segment_bytes
from kfs_core.formats.wal import (
    FRAME_FOOTER_SIZE,
    FRAME_HEADER_SIZE,
    FrameType,
    decode_wal_record,
    encode_record_frame,
    scan_wal,
)
from kfs_core.records import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD, Record
from kfs_core.records.batch import decode_batch, encode_batch, iter_batch_headers
from kfs_core.storage.local import LocalObjectStore

CORPUS = Path(__file__).parent / "corpus"

settings.register_profile(
    "default-fuzz",
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "soak",
    max_examples=5000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE = settings.get_profile(
    "soak" if os.environ.get("HYPOTHESIS_PROFILE") == "soak" else "default-fuzz"
)


# --- valid encodings, the seeds -----------------------------------------------------


def _records(n: int, base: int = 0) -> list[Record]:
    return [
        Record(
            offset=base + i,
            timestamp=1_700_000_000_000 + i,
            key=b"key-%d" % i if i % 3 else None,
            value=(b"value %d " % i) * (i % 7 + 1),
            headers=[("h", b"x")] if i % 2 else [],
        )
        for i in range(n)
    ]


@cache
def batches() -> list[bytes]:
    """One batch per codec, and a control-less idempotent one."""
    out = [
        encode_batch(_records(5 + codec, 10 * codec), base_offset=10 * codec, codec=codec)
        for codec in (CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD)
    ]
    out.append(
        encode_batch(
            _records(3, 70), base_offset=70, producer_id=7, producer_epoch=1, base_sequence=0
        )
    )
    return [bytes(b) for b in out]


@cache
def sealed_segment() -> tuple[bytes, bytes]:
    writer = SegmentWriter(index_interval=2)
    offset = 0
    for codec in (CODEC_NONE, CODEC_ZSTD, CODEC_NONE, CODEC_GZIP):
        writer.append(encode_batch(_records(4, offset), base_offset=offset, codec=codec))
        offset += 4
    sealed = writer.finish()
    return sealed.data, sealed.index


@cache
def wal_file() -> bytes:
    frames = [
        encode_record_frame("orders", p, batch, base_offset=decode_batch(batch).base_offset)
        for p, batch in enumerate(batches())
    ]
    frames.append(encode_record_frame("orders", 0, base_offset=61, frame_type=FrameType.CHECKPOINT))
    return b"".join(frames) + bytes(256)  # and the zero padding of a preallocated file


@cache
def catalog_documents(tmp: str) -> dict[str, bytes]:
    store = LocalObjectStore(tmp)
    catalog = PartitionCatalog(store, "ns", "orders", 0, checkpoint_interval=2)
    for n in range(3):
        writer = SegmentWriter()
        writer.append(encode_batch(_records(2, 100 * n), base_offset=100 * n))
        catalog.add_segments([SegmentEntry.for_sealed("orders", 0, writer.finish())])
    return {
        "commit": store.get(catalog.commit_key(1)),
        "checkpoint": store.get(catalog.checkpoint_key(2)),
        "pointer": encode_pointer(2, 1234),
    }


# --- the decoders ---------------------------------------------------------------------


def _segment(data: bytes) -> Any:
    reader = SegmentReader(data, "fuzz.kfs", verify=True)
    return [decode_batch(data, pos, object_name="fuzz.kfs") for pos, _ in reader.iter_batches()]


def _index(data: bytes) -> Any:
    index = IndexReader(data, "fuzz.index")
    return [index.lookup(offset) for offset in (0, 1, 5, 1 << 40)] if len(index) else []


def _wal(data: bytes) -> Any:
    found = []
    for sealed in (False, True):
        scan = scan_wal(data, "fuzz.wal", sealed=sealed)
        found += [frame.record("fuzz.wal") for frame in scan.frames]
    return found


DECODERS: dict[str, tuple[Callable[[bytes], Any], Callable[[], list[bytes]]]] = {
    "record_batch": (lambda d: decode_batch(d, object_name="fuzz"), batches),
    "batch_headers": (lambda d: list(iter_batch_headers(d, object_name="fuzz")), batches),
    "segment": (_segment, lambda: [sealed_segment()[0]]),
    "segment_check": (
        lambda d: check_segment_bytes(d, "fuzz.kfs"),
        lambda: [sealed_segment()[0]],
    ),
    "index": (_index, lambda: [sealed_segment()[1]]),
    "index_check": (
        lambda d: check_index(sealed_segment()[0], d, index_name="fuzz.index"),
        lambda: [sealed_segment()[1]],
    ),
    "wal_file": (_wal, lambda: [wal_file()]),
    "wal_record": (
        lambda d: decode_wal_record(d, "fuzz.wal"),
        lambda: [encode_record_frame("t", 0, batches()[0])[FRAME_HEADER_SIZE:-FRAME_FOOTER_SIZE]],
    ),
}
CATALOG_DECODERS: dict[str, Callable[[bytes], Any]] = {
    "commit": lambda d: decode_commit(d, "fuzz.json"),
    "checkpoint": lambda d: decode_checkpoint(d, "fuzz.checkpoint.json"),
    "pointer": lambda d: decode_pointer(d, "_last_checkpoint"),
}


def decodes_or_raises_kfs_error(name: str, decode: Callable[[bytes], Any], data: bytes) -> None:
    try:
        decode(data)
    except KfsError:
        pass
    except Exception as exc:  # what this test exists to find
        keep = CORPUS / name / f"{hashlib.sha256(data).hexdigest()[:16]}.bin"
        raise AssertionError(
            f"{name} raised {type(exc).__name__}: {exc} on {len(data)} bytes; "
            f"to keep the case: write it to {keep.relative_to(CORPUS.parent.parent.parent)}"
        ) from exc


# --- mutations --------------------------------------------------------------------------


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    """A seed with a few structure-blind edits: what bit rot, torn writes and fuzzers make."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "cut", "insert", "repeat", "zero"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            # Lengths, counts and offsets are where decoders trust numbers.
            data[at] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
        elif op == "cut":
            del data[draw(st.integers(0, len(data))) :]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "repeat" and data:
            end = draw(st.integers(at, len(data)))
            data[end:end] = data[at:end]
        elif op == "zero" and data:
            end = draw(st.integers(at, min(len(data), at + 64)))
            data[at:end] = bytes(end - at)
    return bytes(data)


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_mutated_encodings_decode_or_raise_a_kfs_error(name: str) -> None:
    decode, seeds = DECODERS[name]

    @PROFILE
    @given(mutated(seeds()) | st.binary(max_size=512))
    def check(data: bytes) -> None:
        decodes_or_raises_kfs_error(name, decode, data)

    check()


@pytest.mark.parametrize("name", sorted(CATALOG_DECODERS))
def test_mutated_catalog_documents_decode_or_raise_a_kfs_error(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    decode = CATALOG_DECODERS[name]
    seed = catalog_documents(str(tmp_path_factory.getbasetemp() / "catalog-seeds"))[name]

    @PROFILE
    @given(mutated([seed]) | st.binary(max_size=256))
    def check(data: bytes) -> None:
        decodes_or_raises_kfs_error(name, decode, data)

    check()


def test_the_seeds_decode() -> None:
    """The unmutated encodings are valid: the mutations start from real structure."""
    for decode, seeds in DECODERS.values():
        for seed in seeds():
            decode(seed)
    assert check_segment_bytes(sealed_segment()[0], "fuzz.kfs").ok


def _corpus() -> list[Any]:
    return [
        pytest.param(path.parent.name, path, id=f"{path.parent.name}/{path.name}")
        for path in sorted(CORPUS.glob("*/*.bin"))
    ]


@pytest.mark.parametrize(("name", "path"), _corpus())
def test_the_kept_corpus_still_decodes_or_raises_a_kfs_error(name: str, path: Path) -> None:
    decode = DECODERS[name][0] if name in DECODERS else CATALOG_DECODERS[name]
    decodes_or_raises_kfs_error(name, decode, path.read_bytes())
