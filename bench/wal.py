"""WAL writer throughput in cautious mode against a plain write+fdatasync loop, same disk.

    .venv/bin/python -m bench.wal [--dir DIR] [--seconds S]

For 1 KiB and 1 MiB batches: `WalWriter` (cautious, group commit) with 1 and
8 concurrent writer threads, and two baselines that fsync every write on one
thread -- ``pwrite`` into a preallocated file (what the WAL does without the
framing and the thread hop) and ``write`` appending to a growing file (what a
naive loop does).  Each cell runs for about ``--seconds`` seconds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kfs_core.formats.wal import encode_record_frame
from kfs_core.log.wal import WalWriter
from testkit.batches import make_batch

BASE_OFFSET = struct.Struct(">q")  # the first field of a RecordBatch
KIB = 1024
MIB = 1024 * 1024


@dataclass(frozen=True)
class Result:
    name: str
    batch_bytes: int
    writers: int
    appends: int
    seconds: float
    fsyncs: int

    @property
    def appends_per_second(self) -> float:
        return self.appends / self.seconds

    @property
    def mb_per_second(self) -> float:
        return self.appends * self.batch_bytes / self.seconds / 1e6


def _batch_buffer(partition: int, batch_bytes: int) -> bytearray:
    """One batch of about ``batch_bytes``; its base offset is rewritten in place per append.

    Safe because `WalWriter.append` copies the batch into its frame before it
    returns, and the base offset lies outside the batch CRC.
    """
    return bytearray(make_batch(partition, 0, size=batch_bytes - 80))


def bench_writer(directory: str, batch_bytes: int, writers: int, seconds: float) -> Result:
    wal_dir = tempfile.mkdtemp(prefix="wal-", dir=directory)
    try:
        wal = WalWriter(wal_dir, durability="cautious")
        wal.recover()
        buffers = [_batch_buffer(w, batch_bytes) for w in range(writers)]
        counts = [0] * writers
        start = threading.Barrier(writers + 1)
        deadline = [0.0]

        def produce(writer: int) -> None:
            batch = buffers[writer]
            start.wait()
            offset = 0
            while time.perf_counter() < deadline[0]:
                BASE_OFFSET.pack_into(batch, 0, offset)
                wal.append("bench", writer, offset, batch)
                offset += 1
            counts[writer] = offset

        threads = [threading.Thread(target=produce, args=(w,)) for w in range(writers)]
        for thread in threads:
            thread.start()
        began = time.perf_counter()
        deadline[0] = began + seconds
        start.wait()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - began
        fsyncs = wal.metrics.fsyncs
        wal.close()
        return Result("WalWriter cautious", batch_bytes, writers, sum(counts), elapsed, fsyncs)
    finally:
        shutil.rmtree(wal_dir, ignore_errors=True)


def _bench_loop(
    directory: str,
    batch_bytes: int,
    seconds: float,
    name: str,
    write: Callable[[int, bytes, int], None],
    preallocate: bool,
) -> Result:
    frame = encode_record_frame("bench", 0, make_batch(0, 0, size=batch_bytes - 80))
    path = os.path.join(directory, f"baseline-{os.getpid()}")
    file_size = 16 * MIB
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if preallocate:
            os.posix_fallocate(fd, 0, file_size)
            os.fsync(fd)
        appends = 0
        position = 0
        began = time.perf_counter()
        deadline = began + seconds
        while time.perf_counter() < deadline:
            if preallocate and position + len(frame) > file_size:
                position = 0  # reuse the preallocated space: the cost per write is what counts
            write(fd, frame, position)
            os.fdatasync(fd)
            position += len(frame)
            appends += 1
        elapsed = time.perf_counter() - began
    finally:
        os.close(fd)
        os.unlink(path)
    return Result(name, batch_bytes, 1, appends, elapsed, appends)


def bench_pwrite_preallocated(directory: str, batch_bytes: int, seconds: float) -> Result:
    return _bench_loop(
        directory,
        batch_bytes,
        seconds,
        "pwrite+fdatasync, preallocated",
        _write_all,
        preallocate=True,
    )


def bench_append_growing(directory: str, batch_bytes: int, seconds: float) -> Result:
    return _bench_loop(
        directory,
        batch_bytes,
        seconds,
        "write+fdatasync, growing file",
        lambda fd, data, pos: _write_all(fd, data, None),
        preallocate=False,
    )


def _write_all(fd: int, data: bytes, position: int | None) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view) if position is None else os.pwrite(fd, view, position)
        view = view[n:]
        if position is not None:
            position += n


def run(directory: str, seconds: float) -> list[Result]:
    results = []
    for batch_bytes in (KIB, MIB):
        results.append(bench_pwrite_preallocated(directory, batch_bytes, seconds))
        results.append(bench_append_growing(directory, batch_bytes, seconds))
        results.extend(bench_writer(directory, batch_bytes, writers, seconds) for writers in (1, 8))
    return results


def format_table(results: list[Result]) -> str:
    header = f"{'batch':>6} {'what':<32} {'writers':>7} {'appends/s':>10} {'MB/s':>8} {'appends/fsync':>13}"
    rows = [header, "-" * len(header)]
    for r in results:
        size = "1 KiB" if r.batch_bytes == KIB else "1 MiB"
        rows.append(
            f"{size:>6} {r.name:<32} {r.writers:>7} {r.appends_per_second:>10.0f} "
            f"{r.mb_per_second:>8.1f} {r.appends / max(1, r.fsyncs):>13.1f}"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dir", default=tempfile.gettempdir(), help="a directory on the disk to measure"
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="time per cell")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="kfs-wal-bench-", dir=args.dir)
    try:
        print(f"disk: {workdir}; {args.seconds:g} s per cell")
        print(format_table(run(workdir, args.seconds)))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
