"""The crash-cycle campaign: ``kill -9`` a loaded `kfs serve` again and again, lose nothing.

Three confluent-kafka producers (acks=all, idempotent, one codec each) send
records with a key, a value, headers and a create time to a 6-partition
topic while an assigned tail consumer follows it.  After a random delay
(seeded) the daemon is killed with SIGKILL, started again on the same WAL
directory and store, and timed until ``/readyz``; the producers and the
consumer ride through the restart as they would through a broker's.  Small
segments and a short flush interval make the kills land during WAL writes,
segment uploads, catalog commits and WAL checkpoint advances.

After every restart the records the log gained are read back and checked
against the model of what the clients were told (`soak.load.check_log`:
lost, changed, duplicated, gaps); the tail consumer's errors other than the
transport ones a broker restart causes, and a record it saw at an offset
that now holds another, are findings too.

At the end the producers drain, the whole topic is read from offset 0 and
checked once more, so a record lost by a later crash is caught too.
"""

from __future__ import annotations

import collections
import random
import time
from collections.abc import Callable
from typing import Any, Protocol

from soak.load import (
    CODECS,
    EXAMPLES,
    Findings,
    LoadProducer,
    Position,
    ReadStalled,
    Record,
    TailConsumer,
    check_log,
    check_seen,
    create_topic,
    merge_model,
    read_range,
    wait_until,
)
from soak.report import Row


class Restartable(Protocol):
    """A `kfs serve` process the campaign can kill and start (`testkit.daemon.Daemon`)."""

    @property
    def bootstrap(self) -> str: ...

    def kill(self) -> None: ...

    def start(self) -> Any: ...  # returns once /readyz answers 200


#: `kfs serve` flags that make kills land in every stage of the write path.
DAEMON_ARGS = ("--segment-bytes", "64KiB", "--flush-interval-ms", "50")


def run(
    daemon: Restartable,
    *,
    cycles: int,
    seed: int,
    store: str,
    mode: str = "cautious",
    rate: int = 400,
    delay_s: tuple[float, float] = (0.1, 2.0),
    progress: Callable[[str], None] | None = None,
) -> Row:
    """``cycles`` kill -9 cycles of a running ``daemon``; the campaign's row.

    ``daemon`` runs with `DAEMON_ARGS` and ``--durability mode``; ``rate`` is
    records a second per producer; each kill comes ``delay_s`` (uniform,
    seeded) after the daemon is ready and the producers have had a record
    acknowledged since the last restart.
    """
    rng = random.Random(seed)
    create_topic(daemon.bootstrap)
    producers = [
        LoadProducer(daemon.bootstrap, i, seed, codec, rate) for i, codec in enumerate(CODECS)
    ]
    tail = TailConsumer(daemon.bootstrap)
    findings = Findings()
    log: dict[Position, Record] = {}
    read_ends: dict[int, int] = {}
    recoveries: list[float] = []

    def acknowledged() -> int:
        return sum(p.acked_count() for p in producers)

    # Each cycle judges only what is new (the records the log gained, the acknowledgements
    # since the last kill) against the producers' own maps, unshared; the end checks all.
    sent_view = collections.ChainMap(*(p.sent for p in producers))
    cursors = [0] * len(producers)
    for producer in producers:
        producer.start()
    tail.start()
    try:
        for cycle in range(cycles):
            before = acknowledged()

            def acknowledged_more(than: int = before) -> bool:
                return acknowledged() > than

            wait_until(acknowledged_more, 60, "an acknowledgement")
            time.sleep(rng.uniform(*delay_s))  # the load runs this long before the kill
            new_acked: list[tuple[Position, bytes]] = []
            for i, producer in enumerate(producers):
                entries, cursors[i] = producer.acked_since(cursors[i])
                new_acked += entries
            daemon.kill()
            killed = time.monotonic()
            daemon.start()
            recoveries.append(time.monotonic() - killed)
            try:
                got, ends = read_range(daemon.bootstrap, read_ends)
            except ReadStalled as exc:  # a finding, not a crash of the campaign
                findings.problem("read-back", f"cycle {cycle + 1}: {exc}")
                cycles = cycle + 1
                break
            for position, record in got.items():
                if position in log and log[position] != record:
                    findings.changed.add(position)
                log[position] = record
            check_log(got, sent_view, new_acked, findings, ends, log_starts=read_ends)
            read_ends = ends
            if progress:
                progress(
                    f"cycle {cycle + 1}/{cycles}: {acknowledged()} acknowledged, "
                    f"ready in {recoveries[-1]:.2f} s"
                )
    finally:
        for producer in producers:
            producer.stop()
    sent, acked = merge_model(producers)
    # The tail catches up to everything, then the whole topic is read once more from 0.
    try:
        final, ends = read_range(daemon.bootstrap, {}, timeout_s=300)
    except ReadStalled as exc:
        findings.problem("read-back", f"the final read: {exc}")
        tail.stop()
    else:
        wait_until(lambda: tail.count() >= sum(ends.values()), 300, "the tail consumer")
        tail.stop()
        for position, record in final.items():
            if position in log and log[position] != record:
                findings.changed.add(position)
        check_log(final, sent, acked, findings, ends)
        check_seen(tail.seen, final, findings)
    for error in tail.errors[:EXAMPLES]:
        findings.problem("tail consumer error", error)
    for producer in producers:
        if producer.fatal:
            findings.problem("producer fatal error", producer.fatal)
    return Row(
        campaign=f"kill -9 ({mode})",
        store=store,
        cycles=cycles,
        acknowledged=len(acked),
        lost=len(findings.lost),
        duplicated=len(findings.duplicated),
        changed=len(findings.changed),
        max_recovery_s=max(recoveries, default=None),
        seed=seed,
        problems=findings.lines(),
    )
