"""The maintenance campaign: every mutating job, repeatedly and two at once, against a live daemon.

A real `kfs serve` takes records on two topics while the Spark jobs run in
rounds on the same store (one SparkSession, the jobs' own ``run``):

- ``live-delete`` (``cleanup.policy=delete``, ``retention.bytes`` small, no
  time limit): compaction merges its small segments, retention moves its log
  start and deletes the removed objects at once (``--delete-grace 0s``);
- ``live-compact`` (``cleanup.policy=compact``, keys from a small key space):
  compaction drops superseded records.

Each round runs compaction, retention, checkpoint and index_rebuild one
after another, then compaction and retention at the same time, each job's
summary checked.  Producers (idempotent, acks=all) and a tail consumer per
topic run throughout, and a cold consumer re-reads each topic from its log
start after every round.  Afterwards (`soak.load.check_log`):

- every acknowledged record is at its offset, unchanged, unless retention
  removed it (below the log start: reading there is OFFSET_OUT_OF_RANGE) or
  compaction superseded it (a later record of its partition has its key);
- nothing any consumer read differs from what the producers sent; consumers
  see no error;
- the daemon stops cleanly; with the clock two hours on (past the 1 h orphan
  and delete graces) retention leaves no segment or index object the
  catalogs do not name, and a restarted daemon still serves every record
  the catalogs hold.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import confluent_kafka

from kfs_core.catalog import PartitionCatalog, SegmentEntry, Tombstone, TopicRegistry, layout
from kfs_core.storage import open_store
from soak.load import (
    QUIET,
    Findings,
    LoadProducer,
    Position,
    Record,
    TailConsumer,
    check_log,
    create_topic,
    read_range,
    wait_until,
)
from soak.report import Row

NAMESPACE = "test"  # DaemonFactory's
PARTITIONS = 3
RETENTION_BYTES = 64 << 10  # per partition of the delete topic
#: Acknowledged records on the delete topic before the first round: several times its
#: retention (records average about 1.2 KB), so retention has something to remove.
WARM_UP_RECORDS = 1000
DELETE_TOPIC = "live-delete"
COMPACT_TOPIC = "live-compact"
TOPICS = {
    DELETE_TOPIC: {
        "cleanup.policy": "delete",
        "retention.bytes": str(RETENTION_BYTES),
        "retention.ms": "-1",
    },
    COMPACT_TOPIC: {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"},
}
KEY_SPACE = 50  # keys of the compacted topic
HOUR_MS = 3_600_000


def daemon_args() -> list[str]:
    """Small, frequent segments: every round gives the jobs something to merge and remove."""
    return ["--segment-bytes", "32KiB", "--flush-interval-ms", "100"]


def _job_args(store_url: str, endpoint: str | None, *extra: str) -> list[str]:
    args = ["--store-url", store_url, "--namespace", NAMESPACE]
    return args + (["--s3-endpoint-url", endpoint] if endpoint else []) + list(extra)


def log_start(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's log start offset (ListOffsets earliest)."""
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "kfs-soak-marks", **QUIET}
    )
    try:
        return {
            p: consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(topic, p), timeout=30, cached=False
            )[0]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def below_log_start_is_out_of_range(bootstrap: str, topic: str, partition: int) -> bool:
    """Whether a fetch from offset 0, below the log start, gets OFFSET_OUT_OF_RANGE."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kfs-soak-below-start",
            "auto.offset.reset": "error",
            **QUIET,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is None:
                return False  # a record below the log start was served
            if error.code() == confluent_kafka.KafkaError._AUTO_OFFSET_RESET:
                return "OFFSET_OUT_OF_RANGE" in error.str() or "out of range" in error.str()
        return False
    finally:
        consumer.close()


def orphans(store: Any) -> list[str]:
    """Segment and index objects of the campaign's topics that no catalog entry accounts for.

    A live segment and a removed one still within its delete grace (a
    tombstone) are accounted for; anything else is an orphan.
    """
    named: set[str] = set()
    present: set[str] = set()
    for topic in TOPICS:
        for partition in range(PARTITIONS):
            state = PartitionCatalog(store, NAMESPACE, topic, partition).load()
            entries: tuple[SegmentEntry | Tombstone, ...] = (*state.segments, *state.tombstones)
            for entry in entries:
                named.add(layout.join(NAMESPACE, entry.key))
                named.add(layout.join(NAMESPACE, entry.index_key))
            prefix = layout.join(NAMESPACE, layout.partition_dir(topic, partition)) + "/"
            present.update(
                info.key
                for info in store.list(prefix)
                if info.key.endswith((layout.SEGMENT_SUFFIX, layout.INDEX_SUFFIX))
            )
    return sorted(present - named)


def run(
    daemon: Any,
    spark: Any,
    *,
    rounds: int,
    seed: int,
    store_url: str,
    endpoint: str | None = None,
    rate: int = 150,
    progress: Callable[[str], None] | None = None,
) -> Row:
    """``rounds`` rounds of jobs against ``daemon`` (`testkit.daemon.Daemon`, `daemon_args`); the row."""
    from spark_jobs import checkpoint, compaction, index_rebuild, retention

    for topic, config in TOPICS.items():
        create_topic(daemon.bootstrap, topic, PARTITIONS, config)
    producers = [
        LoadProducer(daemon.bootstrap, 0, seed, "lz4", rate, topic=DELETE_TOPIC,
                     partitions=PARTITIONS),
        LoadProducer(daemon.bootstrap, 1, seed, "zstd", rate, topic=COMPACT_TOPIC,
                     partitions=PARTITIONS, key_space=KEY_SPACE),
    ]  # fmt: skip
    tails = {t: TailConsumer(daemon.bootstrap, t, PARTITIONS) for t in TOPICS}
    findings = Findings()
    cold: dict[str, dict[Position, Record]] = {t: {} for t in TOPICS}
    jobs_run = 0
    topics = ",".join(TOPICS)

    def job(module: Any, *extra: str) -> None:
        nonlocal jobs_run
        summary = module.run(_job_args(store_url, endpoint, *extra), spark)
        jobs_run += 1
        if summary["status"] != "ok":
            findings.problem("job", f"{module.__name__}: {summary['status']}: {summary['message']}")

    compact_args = ("--topics", topics, "--max-read-mb-per-s", "0", "--min-inputs", "2")
    retention_args = ("--topics", topics, "--delete-grace", "0s")
    for producer in producers:
        producer.start()
    for tail in tails.values():
        tail.start()
    try:
        wait_until(
            lambda: (
                producers[0].acked_count() >= WARM_UP_RECORDS and producers[1].acked_count() > 0
            ),
            120,
            f"{WARM_UP_RECORDS} acknowledged records on {DELETE_TOPIC}",
        )
        for round_ in range(rounds):
            job(compaction, *compact_args)
            job(retention, *retention_args)
            job(checkpoint, "--min-commits", "1", "--retain-versions", "20")
            job(index_rebuild, "--topics", topics)
            both = [
                threading.Thread(target=job, args=(compaction, *compact_args)),
                threading.Thread(target=job, args=(retention, *retention_args)),
            ]
            for thread in both:
                thread.start()
            for thread in both:
                thread.join(600)
            for topic in TOPICS:  # a cold consumer from the log start, each round
                got, _ = read_range(daemon.bootstrap, {}, topic=topic, partitions=PARTITIONS)
                for position, record in got.items():
                    if cold[topic].setdefault(position, record) != record:
                        findings.changed.add(position)
            if progress:
                starts = log_start(daemon.bootstrap, DELETE_TOPIC)
                progress(f"round {round_ + 1}/{rounds}: {jobs_run} jobs, delete log start {starts}")
    finally:
        for producer in producers:
            producer.stop()
    acknowledged = 0
    for producer, topic in zip(producers, TOPICS, strict=True):
        sent, acked = producer.snapshot()
        acknowledged += len(acked)
        if producer.failed:
            findings.problem("producer errors", str(sorted(set(producer.failed.values()))[:3]))
        log, ends = read_range(daemon.bootstrap, {}, topic=topic, partitions=PARTITIONS)
        starts = log_start(daemon.bootstrap, topic)
        compacted = topic == COMPACT_TOPIC
        check_log(log, sent, acked, findings, ends, log_starts=starts, compacted=compacted)
        tail = tails[topic]
        count = len(log)

        def caught_up(t: TailConsumer = tail, n: int = count) -> bool:
            return t.count() >= n

        wait_until(caught_up, 120, f"the {topic} tail")
        tail.stop()
        for seen in (tail.seen, cold[topic]):
            for position, record in seen.items():
                if sent.get(record.ident) != record:
                    findings.changed.add(position)
        for error in tail.errors[:5]:
            findings.problem("tail consumer error", error)
        if not compacted:
            moved = [p for p, start in starts.items() if start > 0]
            if not moved:
                findings.problem("retention", f"{topic}: the log start never moved")
            elif not below_log_start_is_out_of_range(daemon.bootstrap, topic, moved[0]):
                findings.problem("retention", f"{topic}: reading below the log start was served")
    code = daemon.stop()
    if code != 0:
        findings.problem("daemon", f"stopped with exit code {code}")
    store = open_store(store_url, endpoint_url=endpoint)
    try:
        # Two sweeps, two and four hours on: the first deletes what outlived the 1 h
        # graces, the second what the first one removed.
        for hours in (2, 4):
            later = time.time_ns() // 1_000_000 + hours * HOUR_MS

            def sweep_time(at: int = later) -> int:
                return at

            summary = retention.run(
                _job_args(store_url, endpoint, "--orphan-grace", "1h", "--delete-grace", "1h"),
                spark,
                clock=sweep_time,
            )
            if summary["status"] != "ok":
                findings.problem("job", f"sweep: {summary['status']}: {summary['message']}")
        left = orphans(store)
        if left:
            findings.problem("orphans", f"{len(left)} left after the grace, e.g. {left[:3]}")
        registry = TopicRegistry(store, NAMESPACE)
        missing = [t for t in TOPICS if not registry.exists(t)]
        if missing:
            findings.problem("topics", f"missing from the registry: {missing}")
    finally:
        store.close()
    daemon.start()
    for topic in TOPICS:  # every record the catalogs hold is still served
        again, _ = read_range(daemon.bootstrap, {}, topic=topic, partitions=PARTITIONS)
        sent = {}
        for producer in producers:
            sent.update(producer.snapshot()[0])
        bad = [pos for pos, record in again.items() if sent.get(record.ident) != record]
        if bad or not again:
            findings.problem("after the sweep", f"{topic}: {len(again)} read, {len(bad)} wrong")
    return Row(
        campaign=f"maintenance vs live daemon ({jobs_run} jobs)",
        store="s3" if endpoint else "local",
        cycles=rounds,
        acknowledged=acknowledged,
        lost=len(findings.lost),
        duplicated=len(findings.duplicated),
        changed=len(findings.changed),
        seed=seed,
        problems=findings.lines(),
    )
