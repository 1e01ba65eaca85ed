"""The ``kfs`` Spark data source against the raw store and against consuming through the daemon.

    .venv/bin/python -m bench.topic_source [--megabytes N] [--partitions P] [--quick]

Starts ``kfs serve`` (bench.produce_fetch's daemon: a ``file://`` store),
fills a topic with ``--megabytes`` of 1 KiB records from kcat producers
(acks=all, one per partition), stops the daemon so every record is sealed
into segments, and reads the same bytes three ways, one after the other:

- raw store reads: every segment object read whole with ``ObjectStore.get``
  on four threads: the most any reader of the store could get;
- the data source: ``spark.read.format("kfs")`` in a local ``local[2]``
  session, summing ``length(value)`` so every record is decoded and handed
  to Spark (the session's start-up and a warm-up read are not counted);
- the consumer path: the daemon started again, kcat consuming every
  partition to the end (``-e``) with one consumer per partition.

MB/s is segment bytes read per second (the consumer's: the same segment
bytes over its wall time).  Targets: the data source at least 3x the
consumer path and at least 0.5x the raw store reads.  Prints one table.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.produce_cpu import run_kcat_producers
from bench.produce_fetch import NAMESPACE, Daemon
from kfs_core.catalog import PartitionCatalog, layout
from kfs_core.storage import open_store

RECORD_BYTES = 1024
SOURCE_VS_CONSUMER_TARGET = 3.0
SOURCE_VS_RAW_TARGET = 0.5
QUICK = {"megabytes": 8, "partitions": 2}


@dataclass
class Figures:
    segment_mb: float
    records: int
    raw_s: float
    source_s: float
    consumer_s: float

    def mb_s(self, seconds: float) -> float:
        return self.segment_mb / seconds if seconds > 0 else 0.0

    def rows(self) -> list[tuple[str, str, str]]:
        raw, source, consumer = (
            self.mb_s(self.raw_s),
            self.mb_s(self.source_s),
            self.mb_s(self.consumer_s),
        )
        vs_consumer = source / consumer if consumer else 0.0
        vs_raw = source / raw if raw else 0.0
        return [
            ("raw store reads (4 threads)", f"{raw:,.0f} MB/s", ""),
            ("spark.read.format('kfs'), local[2]", f"{source:,.0f} MB/s", ""),
            ("kcat consumers through the daemon", f"{consumer:,.0f} MB/s", ""),
            (
                "data source / consumer path",
                f"{vs_consumer:.2f}",
                f">= {SOURCE_VS_CONSUMER_TARGET}: "
                + ("met" if vs_consumer >= SOURCE_VS_CONSUMER_TARGET else "MISSED"),
            ),
            (
                "data source / raw store reads",
                f"{vs_raw:.2f}",
                f">= {SOURCE_VS_RAW_TARGET}: "
                + ("met" if vs_raw >= SOURCE_VS_RAW_TARGET else "MISSED"),
            ),
        ]


def table(figures: Figures) -> str:
    lines = [
        f"{figures.segment_mb:,.0f} MB of segments, {figures.records:,} records of "
        f"{RECORD_BYTES} bytes",
        "",
        "| read | figure | target |",
        "|---|---|---|",
    ]
    lines += [f"| {what} | {value} | {target} |" for what, value, target in figures.rows()]
    return "\n".join(lines)


def _segments(store: Any, topic: str, partitions: int) -> list[Any]:
    return [
        entry
        for p in range(partitions)
        for entry in PartitionCatalog(store, NAMESPACE, topic, p).load().segments
    ]


def _raw_reads(store: Any, keys: list[str]) -> float:
    started = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        total = sum(pool.map(lambda key: len(store.get(key)), keys))
    assert total > 0
    return time.perf_counter() - started


def _source_read(store_url: str, topic: str, expected: int) -> float:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from spark_jobs.topic_source import KfsTopicSource

    owned = SparkSession.getActiveSession() is None  # a test session stays the test's
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kfs-bench-topic-source")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KfsTopicSource)

    def read() -> int:
        frame = (
            spark.read.format("kfs")
            .option("storeUrl", store_url)
            .option("namespace", NAMESPACE)
            .option("topic", topic)
            .load()
        )
        [row] = frame.selectExpr("count(*) AS n", "sum(length(value)) AS bytes").collect()
        return int(row["n"])

    try:
        read()  # warm-up: Python workers, imports
        started = time.perf_counter()
        count = read()
        seconds = time.perf_counter() - started
    finally:
        if owned:
            spark.stop()
    if count != expected:
        raise RuntimeError(f"the data source read {count} records, expected {expected}")
    return seconds


def _consume(bootstrap: str, topic: str, partitions: int, expected: int) -> float:
    started = time.perf_counter()
    command = [
        "kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
        "-f", "%o\\n", "-X", "fetch.message.max.bytes=4194304",
    ]  # fmt: skip
    procs = [
        subprocess.Popen([*command, "-p", str(p)], stdout=subprocess.PIPE)
        for p in range(partitions)
    ]
    lines = 0
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        lines += out.count(b"\n")
    seconds = time.perf_counter() - started
    if lines != expected:
        raise RuntimeError(f"kcat consumed {lines} records, expected {expected}")
    return seconds


def run(root: Path, *, megabytes: int, partitions: int) -> Figures:
    daemon = Daemon(root)
    topic = f"bench-source-{uuid.uuid4().hex[:6]}"
    per_partition = megabytes * (1 << 20) // RECORD_BYTES // partitions
    lines = root / "records.txt"
    lines.write_bytes((b"x" * (RECORD_BYTES - 1) + b"\n") * per_partition)
    daemon.start()
    try:
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.cimpl import NewTopic

        admin = AdminClient({"bootstrap.servers": daemon.bootstrap})
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
        del admin  # before the daemon stops: no reconnection attempts in the output
        run_kcat_producers(daemon.bootstrap, topic, lines, list(range(partitions)))
    finally:
        daemon.stop()
    store = open_store(daemon.store_dir.as_uri())
    try:
        segments = _segments(store, topic, partitions)
        keys = [layout.join(NAMESPACE, s.key) for s in segments]
        records = sum(s.record_count for s in segments)
        segment_mb = sum(s.size_bytes for s in segments) / 1e6
        raw_s = _raw_reads(store, keys)
    finally:
        store.close()
    expected = per_partition * partitions
    if records != expected:
        raise RuntimeError(f"the segments hold {records} records, expected {expected}")
    source_s = _source_read(daemon.store_dir.as_uri(), topic, expected)
    daemon.start()
    try:
        consumer_s = _consume(daemon.bootstrap, topic, partitions, expected)
    finally:
        daemon.stop()
    return Figures(segment_mb, records, raw_s, source_s, consumer_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.topic_source", description=__doc__)
    parser.add_argument("--megabytes", type=int, default=512)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="a tiny run, to check it works")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else {"megabytes": args.megabytes, "partitions": args.partitions}
    with tempfile.TemporaryDirectory(prefix="kfs-bench-source-") as scratch:
        print(table(run(Path(scratch), **sizes)))


if __name__ == "__main__":
    main()
