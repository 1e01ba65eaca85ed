"""The `kfs` command, run as a user runs it: a subprocess on real files and stores."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kfs_core.formats.segment import SegmentWriter
from kfs_core.records.batch import Record, encode_batch
from kfs_core.records.codecs import CODEC_GZIP, CODEC_ZSTD

KFS = [sys.executable, "-m", "kfs_core.cli"]


def kfs(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KFS, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )


def write_segment(directory: Path, base: int = 100) -> Path:
    writer = SegmentWriter(created_ms=1_700_000_000_000, index_interval=2)
    offset = base
    for codec, n in [(0, 3), (CODEC_GZIP, 4), (CODEC_ZSTD, 5)]:
        records = [
            Record(offset + i, 1_700_000_000_000 + offset + i, b"k", b"v" * 50) for i in range(n)
        ]
        writer.append(encode_batch(records, base_offset=offset, codec=codec))
        offset += n
    sealed = writer.finish()
    path = directory / f"segment-{base:020d}.kfs"
    path.write_bytes(sealed.data)
    path.with_suffix(".index").write_bytes(sealed.index)
    return path


def test_segment_dump_prints_header_batches_and_index(tmp_path: Path) -> None:
    path = write_segment(tmp_path)
    result = kfs("segment", "dump", str(path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "base offset 100" in out and "messages 12" in out
    assert "last offset 111" in out
    lines = [
        line
        for line in out.splitlines()
        if line.strip().endswith((" ok", " BAD")) and line.split()[0].isdigit()
    ]
    assert len(lines) == 3
    assert [line.split()[4] for line in lines] == ["none", "gzip", "zstd"]
    assert [int(line.split()[1]) for line in lines] == [100, 103, 107]
    assert "index: 3 entries, interval 2" in out
    assert "verify: ok" in out


def test_segment_dump_flipped_bit_is_one_line_error(tmp_path: Path) -> None:
    path = write_segment(tmp_path)
    data = bytearray(path.read_bytes())
    data[120] ^= 0x10  # inside the first batch's records
    path.write_bytes(bytes(data))
    result = kfs("segment", "dump", str(path))
    assert result.returncode == 3
    assert "BAD" in result.stdout
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kfs: error: ") and str(path) in err[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("damage", ["truncate", "magic"])
def test_segment_dump_truncated_or_wrong_magic(tmp_path: Path, damage: str) -> None:
    path = write_segment(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-9] if damage == "truncate" else b"XXXX" + data[4:])
    result = kfs("segment", "dump", str(path))
    assert result.returncode == 3
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and "corrupt at byte" in err[0], result.stderr


def test_segment_dump_missing_object(tmp_path: Path) -> None:
    result = kfs(
        "segment",
        "dump",
        "nope/0/segment-00000000000000000000.kfs",
        env={"KFS_STORE_URL": (tmp_path / "store").as_uri()},
    )
    assert result.returncode != 0
    assert result.stderr.strip().startswith("kfs: error: ")
    assert "no such file or object" in result.stderr


def test_segment_dump_index_pointing_off_a_batch(tmp_path: Path) -> None:
    path = write_segment(tmp_path)
    index = bytearray(path.with_suffix(".index").read_bytes())
    index[-1] ^= 0x01  # the last entry's position now points one byte off
    path.with_suffix(".index").write_bytes(bytes(index))
    result = kfs("segment", "dump", str(path))
    assert result.returncode == 3
    assert ".index" in result.stderr and "corrupt at byte" in result.stderr


def test_topics_and_catalog_show(tmp_path: Path) -> None:
    from kfs_core.catalog import PartitionCatalog, SegmentEntry
    from kfs_core.storage import LocalObjectStore

    env = {"KFS_STORE_URL": (tmp_path / "store").as_uri(), "KFS_NAMESPACE": "ns1"}
    created = kfs(
        "topics",
        "create",
        "orders",
        "--partitions",
        "2",
        "--config",
        "retention.ms=3600000",
        env=env,
    )
    assert created.returncode == 0, created.stderr
    assert kfs("topics", "list", env=env).stdout.split() == ["orders"]
    described = kfs("topics", "describe", "orders", env=env).stdout
    assert "partitions 2" in described
    assert "retention.ms = 3600000  (set)" in described
    assert "cleanup.policy = delete  (default)" in described

    store = LocalObjectStore(tmp_path / "store")
    segment = write_segment(tmp_path, base=0)
    catalog = PartitionCatalog(store, "ns1", "orders", 1)
    entry = SegmentEntry.for_partition(
        "orders",
        1,
        base_offset=0,
        last_offset=11,
        record_count=12,
        size_bytes=segment.stat().st_size,
        index_size_bytes=0,
        min_timestamp=1_700_000_000_000,
        max_timestamp=1_700_000_000_011,
        codec=0,
        created_ms=1_700_000_000_000,
    )
    catalog.add_segments([entry])
    shown = kfs("catalog", "show", "orders", "1", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "orders/1: version 0" in shown.stdout
    assert "high watermark 12" in shown.stdout
    assert "orders/1/segment-00000000000000000000.kfs" in shown.stdout
    everything = kfs("catalog", "show", "orders", env=env).stdout
    assert "orders/0:" in everything and "0 live segments" in everything


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["topics", "create", "bad/name"], "topic name"),
        (["topics", "create", "t", "--config", "retention.ms=soon"], "retention.ms"),
        (["topics", "create", "t", "--config", "no-equals"], "NAME=VALUE"),
        (["topics", "describe", "missing"], "unknown topic"),
        (["catalog", "show", "missing"], "unknown topic"),
    ],
)
def test_operator_mistakes_get_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = kfs(*args, env={"KFS_STORE_URL": (tmp_path / "store").as_uri()})
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kfs: error: "), result.stderr
    assert message in lines[0]


def test_catalog_snapshot_list_and_restore(tmp_path: Path) -> None:
    from kfs_core.catalog import PartitionCatalog, SegmentEntry
    from kfs_core.storage import LocalObjectStore

    env = {"KFS_STORE_URL": (tmp_path / "store").as_uri(), "KFS_NAMESPACE": "ns1"}
    assert kfs("topics", "create", "orders", env=env).returncode == 0
    store = LocalObjectStore(tmp_path / "store")
    path = write_segment(tmp_path, base=0)
    store.put("ns1/orders/0/segment-00000000000000000000.kfs", path.read_bytes())
    store.put(
        "ns1/orders/0/segment-00000000000000000000.index", path.with_suffix(".index").read_bytes()
    )
    entry = SegmentEntry.for_partition(
        "orders",
        0,
        base_offset=0,
        last_offset=11,
        record_count=12,
        size_bytes=path.stat().st_size,
        index_size_bytes=path.with_suffix(".index").stat().st_size,
        min_timestamp=1_700_000_000_000,
        max_timestamp=1_700_000_000_011,
        codec=0,
        created_ms=1_700_000_000_000,
    )
    catalog = PartitionCatalog(store, "ns1", "orders", 0)
    catalog.add_segments([entry])

    assert "no snapshots" in kfs("catalog", "snapshots", env=env).stdout
    taken = kfs("catalog", "snapshot", "before-mistake", env=env)
    assert taken.returncode == 0, taken.stderr
    listed = kfs("catalog", "snapshots", env=env).stdout
    assert listed.startswith("before-mistake") and "segments 1" in listed

    catalog.remove([entry])  # the mistake: the only segment is gone from the catalog
    assert PartitionCatalog(store, "ns1", "orders", 0).load().segments == ()
    dry = kfs("catalog", "restore", "orders", "--snapshot", "before-mistake", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert "would remove 0 and restore 1 segment(s)" in dry.stdout
    assert PartitionCatalog(store, "ns1", "orders", 0).load().segments == ()

    restored = kfs("catalog", "restore", "orders", "--snapshot", "before-mistake", env=env)
    assert restored.returncode == 0, restored.stderr
    assert "orders/0: restored" in restored.stdout
    state = PartitionCatalog(store, "ns1", "orders", 0).load()
    assert [(s.base_offset, s.last_offset) for s in state.segments] == [(0, 11)]
    missing = kfs("catalog", "restore", "orders", "--snapshot", "nope", env=env)
    assert missing.returncode != 0 and missing.stderr.startswith("kfs: error: ")
