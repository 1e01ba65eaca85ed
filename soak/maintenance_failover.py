"""The maintenance-while-moving campaign: the jobs run while partitions move between daemons.

Three `kfs serve` daemons in the ``store`` durability mode share a namespace
(`soak.failover`'s 200 ms heartbeats and 2 s session timeout; small, frequent
segments as in `soak.maintenance_live`) and serve two topics of three
partitions each, one partition of each topic per daemon:

- ``moving-delete`` (``cleanup.policy=delete``, ``retention.bytes`` small):
  compaction merges its segments, retention removes the oldest and deletes
  them at once (``--delete-grace 0s``), and each round a DeleteRecords moves
  one partition's log start (the daemon's own, fenced commit) for retention
  to remove the segments below it;
- ``moving-compact`` (``cleanup.policy=compact``, 50 keys): compaction drops
  superseded records.

Idempotent producers (acks=all) send to both topics over all three daemons
and a tail consumer follows each.  Each round (seeded: ``kill`` or
``restart``) is one pass of the jobs with a move inside it:

1. Compaction plans and rewrites from the catalogs as they stand.  Just
   before it commits its replace of one partition of the compact topic (its
   ``before_commit`` hook; round n takes partition n mod 3), the daemon
   leading that partition is killed (``kill -9``: the others take over after
   the session timeout and replay its store WAL) or stopped gracefully;
   retention runs meanwhile.  Once the
   new owner's lease commit has landed, compaction commits: a replace planned
   before a lease, landing after it, beside the replay's commits.
2. The victim starts again and its partitions move back to it by hand-over,
   while compaction runs again (its merges of the delete topic, which
   retention's removals made conflict in the first pass, commit beside the
   hand-over's lease commits) and the checkpoint job runs again and again (a
   checkpoint written while lease commits land).
3. Checkpoint and index rebuild once more, on the settled cluster.

Throughout, a watcher refreshes every partition's catalog and cold-loads one
a tick: a partition's lease epoch never goes down in either.  At the end the
producers drain, the topics are read back (`soak.load.check_log`), the
daemons stop, retention sweeps twice with the clock two and four hours on,
and each partition's catalog is checked whole:

- every acknowledged record is at its offset exactly once, unchanged, unless
  it lies below the log start offset (retention, DeleteRecords) or, on the
  compact topic, a later record of its partition has its key; the newest
  record of every key is there; offsets are dense otherwise (on the compact
  topic every missing offset is a superseded record's); a record librdkafka
  acknowledged without an offset (an idempotent producer counts a batch
  whose answer was lost delivered once a later one is acknowledged) is there
  once, or lies below the log start or is superseded; nothing a consumer
  read changed; no producer reported an error;
- every hooked replace landed after the lease it had not read;
- the catalog history is linear: commit versions without holes, each
  applying to the one before, a replay of them equal to a cold load, every
  checkpoint equal to the replay at its version (lease included), the
  pointer naming a checkpoint that exists; each lease's epoch is the one
  before plus one;
- every job run ends ``ok``, and after the graces nothing is orphaned.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka
import confluent_kafka.admin

from kfs_core.catalog import (
    PartitionCatalog,
    PartitionState,
    SegmentEntry,
    TakeLease,
    Tombstone,
    layout,
)
from kfs_core.catalog.state import Checkpoint, StateBuilder, decode_checkpoint, decode_pointer
from kfs_core.errors import KfsError, ObjectNotFound
from kfs_core.storage import ObjectStore, open_store
from soak import failover, maintenance_live
from soak.load import (
    QUIET,
    Findings,
    LoadProducer,
    Position,
    ReadStalled,
    Record,
    TailConsumer,
    check_log,
    check_unplaced,
    create_topic,
    merge_model,
    read_range,
    wait_until,
)
from soak.report import Row
from testkit.daemon import Daemon, DaemonFactory, node_id_of

NAMESPACE = maintenance_live.NAMESPACE
PARTITIONS = 3  # of each topic: one per daemon
DELETE_TOPIC = "moving-delete"
COMPACT_TOPIC = "moving-compact"
TOPICS = {
    DELETE_TOPIC: maintenance_live.TOPICS[maintenance_live.DELETE_TOPIC],
    COMPACT_TOPIC: maintenance_live.TOPICS[maintenance_live.COMPACT_TOPIC],
}
KEY_SPACE = maintenance_live.KEY_SPACE
ACTIONS = ("kill", "restart")
FAULTS = {"kill": "kill -9", "restart": "graceful restart"}
#: Acknowledged records on the delete topic before the first round (see `soak.maintenance_live`).
WARM_UP_RECORDS = maintenance_live.WARM_UP_RECORDS
WAIT_S = failover.WAIT_S
WATCH_INTERVAL_S = 0.25
HOUR_MS = 3_600_000

COMPACTION_ARGS = ("--max-read-mb-per-s", "0", "--min-inputs", "2")
RETENTION_ARGS = ("--delete-grace", "0s")
CHECKPOINT_ARGS = ("--min-commits", "1", "--retain-versions", "20")


def start_cluster(factory: DaemonFactory, *, store_url: str) -> list[Daemon]:
    """The campaign's three daemons: ``store`` durability, short heartbeats, small segments."""
    return factory.start_cluster(
        failover.NODES,
        store_url=store_url,
        durability="store",
        heartbeat_ms=failover.HEARTBEAT_MS,
        session_timeout_ms=failover.SESSION_TIMEOUT_MS,
        extra_args=maintenance_live.daemon_args(),
    )


def plan(seed: int, rounds: int) -> list[str]:
    """The rounds' actions: kill -9 and graceful restart taking turns, the first one seeded."""
    rng = random.Random(seed)
    first = rng.randrange(len(ACTIONS))
    return [ACTIONS[(first + n) % len(ACTIONS)] for n in range(rounds)]


# --- the catalogs ---------------------------------------------------------------------------


class LeaseWatch:
    """Follows every partition's lease epoch from the store; a step back is a finding.

    Each tick refreshes every partition's catalog (the epoch must not go down)
    and cold-loads one of them (from the pointer, its checkpoint and the
    commits after it: it must not show an epoch older than one already seen,
    which is what a checkpoint or an expiry that dropped a lease would show).
    """

    def __init__(self, store: ObjectStore, findings: Findings) -> None:
        self.store = store
        self.findings = findings
        self.pairs = [(t, p) for t in TOPICS for p in range(PARTITIONS)]
        self.catalogs = {tp: PartitionCatalog(store, NAMESPACE, *tp) for tp in self.pairs}
        self.seen = dict.fromkeys(self.pairs, 0)  # the highest epoch seen so far
        self.cold_loads = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-watch", daemon=True)

    def epoch(self, topic: str, partition: int) -> int:
        with self._lock:
            return self.seen[(topic, partition)]

    def _note(self, tp: tuple[str, int], epoch: int, how: str) -> None:
        with self._lock:
            before = self.seen[tp]
            self.seen[tp] = max(before, epoch)
        if epoch < before:
            self.findings.problem(
                "lease epoch went down", f"{tp[0]}/{tp[1]}: {how} read epoch {epoch} after {before}"
            )

    def _run(self) -> None:
        tick = 0
        while not self._stop.is_set():
            for tp, catalog in self.catalogs.items():
                try:
                    self._note(tp, catalog.refresh().leader_epoch, "a refresh")
                except KfsError as exc:
                    self.findings.problem("lease watch", f"{tp[0]}/{tp[1]}: refresh: {exc}")
            tp = self.pairs[tick % len(self.pairs)]
            try:
                cold = PartitionCatalog(self.store, NAMESPACE, *tp).load()
                self.cold_loads += 1
                self._note(tp, cold.leader_epoch, "a cold load")
            except KfsError as exc:
                self.findings.problem("lease watch", f"{tp[0]}/{tp[1]}: cold load: {exc}")
            tick += 1
            self._stop.wait(WATCH_INTERVAL_S)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


@dataclass
class History:
    """What the commit logs of the campaign's partitions hold, counted."""

    commits: int = 0
    leases: int = 0
    replaces: int = 0
    removes: int = 0
    checkpoints: int = 0
    epochs: dict[str, int] = field(default_factory=dict)  # "topic/partition" -> the newest

    def add(self, other: History) -> None:
        self.commits += other.commits
        self.leases += other.leases
        self.replaces += other.replaces
        self.removes += other.removes
        self.checkpoints += other.checkpoints
        self.epochs.update(other.epochs)


def check_history(store: ObjectStore, topic: str, partition: int, findings: Findings) -> History:
    """Judge one partition's whole commit log (see the module docstring); what it holds."""
    name = f"{topic}/{partition}"
    history = History()
    prefix = layout.log_prefix(NAMESPACE, topic, partition)
    commits: list[int] = []
    checkpoints: set[int] = set()
    for info in store.list(prefix):
        parsed = layout.parse_log_name(info.key[len(prefix) :])
        if parsed is not None:
            (checkpoints.add if parsed[1] else commits.append)(parsed[0])
    if not commits:
        findings.problem("catalog history", f"{name}: no commits")
        return history
    first, last = min(commits), max(commits)
    if sorted(commits) != list(range(first, last + 1)):
        holes = sorted(set(range(first, last + 1)) - set(commits))
        findings.problem("catalog history", f"{name}: commit versions missing: {holes[:5]}")
        return history
    catalog = PartitionCatalog(store, NAMESPACE, topic, partition)
    loaded = catalog.load()
    if first == 0:
        builder = StateBuilder(topic, partition)
        start = 0
    else:  # expired below a checkpoint, which the log now starts from
        key = catalog.checkpoint_key(first)
        data = store.get(key)
        builder = StateBuilder.from_checkpoint(
            decode_checkpoint(data, key, first), topic, partition, key
        )
        start = first + 1
    epoch = builder.leader_epoch
    for commit in catalog.read_commits(start, last + 1):
        key = catalog.commit_key(commit.version)
        try:
            builder.apply(commit, key)
        except KfsError as exc:
            findings.problem("catalog history", f"{name}: {exc}")
            return history
        history.commits += 1
        history.replaces += commit.operation == "replace"
        history.removes += commit.operation == "remove"
        for action in commit.actions:
            if isinstance(action, TakeLease):
                if action.epoch != epoch + 1:
                    findings.problem(
                        "lease epochs",
                        f"{name}: version {commit.version} leases epoch {action.epoch} "
                        f"after epoch {epoch}",
                    )
                epoch = action.epoch
                history.leases += 1
        if commit.version in checkpoints:
            history.checkpoints += 1
            _check_checkpoint(store, catalog, builder, findings)
    state = builder.snapshot()
    if _essence(state) != _essence(loaded):
        findings.problem(
            "catalog history",
            f"{name}: a cold load (version {loaded.version}, epoch {loaded.leader_epoch}) "
            f"differs from the replay of every commit (version {state.version}, epoch "
            f"{state.leader_epoch})",
        )
    try:
        pointer = decode_pointer(store.get(catalog.pointer_key), catalog.pointer_key)
    except ObjectNotFound:
        pointer = None
    if pointer is not None and pointer.version not in checkpoints:
        findings.problem("catalog history", f"{name}: the pointer names missing checkpoint "
                         f"{pointer.version}")  # fmt: skip
    history.epochs[name] = state.leader_epoch
    return history


def _essence(state: PartitionState | Checkpoint) -> tuple[object, ...]:
    """What a state says, tombstones in any order: a checkpoint and a replay must agree on it."""
    return (
        state.version,
        state.leader_epoch,
        state.leader_node_id,
        state.leader_incarnation,
        state.log_start_offset,
        state.high_watermark,
        dict(state.config),
        state.segments,
        frozenset(state.tombstones),
    )


def _check_checkpoint(
    store: ObjectStore, catalog: PartitionCatalog, replay: StateBuilder, findings: Findings
) -> None:
    """The checkpoint at ``replay``'s version must hold exactly the replayed state, lease included."""
    key = catalog.checkpoint_key(replay.version)
    checkpoint = decode_checkpoint(store.get(key), key, replay.version)
    state = replay.snapshot()
    if _essence(checkpoint) != _essence(state):
        findings.problem(
            "checkpoints",
            f"{catalog.topic}/{catalog.partition}: checkpoint {replay.version} (epoch "
            f"{checkpoint.leader_epoch}, node {checkpoint.leader_node_id}) differs from the "
            f"commits' state (epoch {state.leader_epoch}, node {state.leader_node_id})",
        )


def unexplained_gaps(
    log: Mapping[Position, Record],
    sent: Mapping[bytes, Record],
    acked: Sequence[tuple[Position, bytes]],
    partition: int,
    start: int,
    end: int,
) -> list[int]:
    """Offsets of a compacted partition missing from ``log`` that no superseded record explains.

    An offset may be missing only if the record acknowledged there has a
    later record of the same key in the partition.
    """
    newest: dict[bytes, int] = {}
    for (p, offset), record in log.items():
        if p == partition:
            newest[record.key] = max(newest.get(record.key, -1), offset)
    acked_at = {position: ident for position, ident in acked}
    missing: list[int] = []
    for offset in range(start, end):
        if (partition, offset) in log:
            continue
        ident = acked_at.get((partition, offset))
        if ident is None or newest.get(sent[ident].key, -1) <= offset:
            missing.append(offset)
    return missing


# --- the cluster ---------------------------------------------------------------------------


@dataclass
class Move:
    """One partition moved inside a compaction pass, and what followed."""

    action: str
    topic: str = ""
    partition: int = -1
    victim: int = -1  # node id
    lease_version: int = -1  # the new owner's lease commit
    takeover_s: float = 0.0  # from the fault to that lease commit
    held: bool = False  # whether compaction's replace of the partition waited for the move
    replace_version: int = -1  # compaction's replace of the partition (-1: none landed)


class Campaign:
    """The cluster, its clients, the watcher and the history of one run."""

    def __init__(
        self, daemons: list[Daemon], spark: Any, store_url: str, seed: int, rate: int
    ) -> None:
        self.daemons = daemons
        self.spark = spark
        self.store_url = store_url
        self.store = open_store(store_url)
        self.findings = Findings()
        self.servers = ",".join(d.bootstrap for d in daemons)
        for topic, config in TOPICS.items():
            create_topic(self.servers, topic, PARTITIONS, config)
        self.producers = [
            LoadProducer(self.servers, 0, seed, "lz4", rate, topic=DELETE_TOPIC,
                         partitions=PARTITIONS),
            LoadProducer(self.servers, 1, seed, "zstd", rate, topic=COMPACT_TOPIC,
                         partitions=PARTITIONS, key_space=KEY_SPACE),
        ]  # fmt: skip
        self.tails = {
            topic: TailConsumer(self.servers, topic, PARTITIONS, settings=failover.TAIL_SETTINGS)
            for topic in TOPICS
        }
        self.watch = LeaseWatch(self.store, self.findings)
        self.jobs_run = 0
        self.moves: list[Move] = []
        self.unplaced = 0  # records acknowledged without an offset

    # --- jobs ---------------------------------------------------------------------------------

    def job(self, module: Any, *extra: str, **hooks: Any) -> None:
        """Run one job in-process on the campaign's SparkSession; anything but ``ok`` is a finding."""
        topics = ",".join(TOPICS)
        args = ["--store-url", self.store_url, "--namespace", NAMESPACE, "--topics", topics]
        summary = module.run([*args, *extra], self.spark, **hooks)
        self.jobs_run += 1
        if summary["status"] != "ok":
            self.findings.problem(
                "job", f"{module.__name__}: {summary['status']}: {summary['message']}"
            )

    # --- the cluster as the clients see it ------------------------------------------------------

    def running(self) -> list[Daemon]:
        return [d for d in self.daemons if d.alive()]

    def leaders(self, topic: str) -> dict[int, int]:
        """Partition -> leader node id, from a Metadata request to a running daemon."""
        servers = ",".join(d.bootstrap for d in self.running())
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": servers, **QUIET})
        meta = admin.list_topics(topic, timeout=10)
        return {p.id: p.leader for p in meta.topics[topic].partitions.values()}

    def wait_balanced(self) -> None:
        """Until every daemon counts all three live and leads one partition of each topic."""
        nodes = {node_id_of(d) for d in self.daemons}

        def all_live() -> bool:
            return all(d.metric("kfs_cluster_live_nodes") >= len(nodes) for d in self.daemons)

        def balanced() -> bool:
            return all(set(self.leaders(t).values()) == nodes for t in TOPICS)

        wait_until(_asking_again(all_live), WAIT_S, "every daemon counting every daemon live")
        wait_until(
            _asking_again(balanced), WAIT_S, "every daemon leading a partition of each topic"
        )

    def delete_records(self, partition: int) -> None:
        """DeleteRecords on the delete topic: the log start a quarter of the way to the end."""
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": self.servers, **QUIET})
        low, high = self.watermarks(DELETE_TOPIC, partition)
        target = confluent_kafka.TopicPartition(DELETE_TOPIC, partition, low + (high - low) // 4)
        try:
            admin.delete_records([target])[target].result(30)
        except confluent_kafka.KafkaException as exc:
            self.findings.problem("delete records", f"{DELETE_TOPIC}/{partition}: {exc}")

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": self.servers, "group.id": "kfs-soak-marks", **QUIET}
        )
        try:
            deadline = time.monotonic() + WAIT_S
            while True:
                try:
                    low, high = consumer.get_watermark_offsets(
                        confluent_kafka.TopicPartition(topic, partition), timeout=10, cached=False
                    )
                    return low, high
                except confluent_kafka.KafkaException:
                    if time.monotonic() > deadline:
                        raise
                time.sleep(0.2)
        finally:
            consumer.close()

    # --- one round ------------------------------------------------------------------------------

    def round(self, n: int, action: str) -> Move:
        """One pass of the jobs with a partition moved inside compaction's commit."""
        from spark_jobs import checkpoint, compaction, index_rebuild, retention

        self.wait_balanced()
        self.delete_records(n % PARTITIONS)
        move = Move(action)
        target = (COMPACT_TOPIC, n % PARTITIONS)  # each round another daemon's partition
        retention_run = threading.Thread(target=self.job, args=(retention, *RETENTION_ARGS))

        failed: list[Exception] = []

        def before_commit(partition_plan: Any) -> None:
            if (partition_plan.topic, partition_plan.partition) != target or move.partition >= 0:
                return
            retention_run.start()  # retention too, while the partition moves
            move.held = True
            try:
                self._move(move, partition_plan.topic, partition_plan.partition)
            except Exception as exc:  # noqa: BLE001 - raised again after the job, not into it
                failed.append(exc)

        self.job(compaction, *COMPACTION_ARGS, before_commit=before_commit)
        if move.partition < 0 and not failed:  # nothing to compact there this time: move anyway
            retention_run.start()
            self._move(move, *target)
        if retention_run.ident is not None:  # started
            retention_run.join(600)
        if failed:
            raise failed[0]
        move.replace_version = self._replace_after(move)
        victim = next(d for d in self.daemons if node_id_of(d) == move.victim)
        # The victim's partitions move back to it by hand-over while compaction
        # merges (retention has removed what the first pass would have merged)
        # and checkpoints are written again and again.
        done = threading.Event()

        def checkpoint_while_moving_back() -> None:
            while not done.is_set():
                self.job(checkpoint, *CHECKPOINT_ARGS)

        beside = [
            threading.Thread(target=checkpoint_while_moving_back, name="checkpoints"),
            threading.Thread(target=self.job, args=(compaction, *COMPACTION_ARGS)),
        ]
        for thread in beside:
            thread.start()
        try:
            victim.start()
            self.wait_balanced()
            beside[1].join(600)
        finally:
            done.set()
            for thread in beside:
                thread.join(600)
        self.job(checkpoint, *CHECKPOINT_ARGS)
        self.job(index_rebuild)
        return move

    def _move(self, move: Move, topic: str, partition: int) -> None:
        """Kill or stop the leader of ``topic``/``partition``; return once another has leased it."""
        state = PartitionCatalog(self.store, NAMESPACE, topic, partition).load()
        victim = next(d for d in self.daemons if node_id_of(d) == state.leader_node_id)
        move.topic, move.partition, move.victim = topic, partition, state.leader_node_id
        faulted = time.monotonic()
        if move.action == "kill":
            victim.kill()
        else:
            code = victim.stop()
            if code != 0:
                self.findings.problem("graceful stop", f"node {move.victim} exited {code}")
        catalog = PartitionCatalog(self.store, NAMESPACE, topic, partition)

        def leased_again() -> bool:
            return catalog.refresh().leader_epoch > state.leader_epoch

        wait_until(leased_again, WAIT_S, f"another daemon leasing {topic}/{partition}")
        move.takeover_s = time.monotonic() - faulted
        move.lease_version = next(
            c.version
            for c in catalog.read_commits(state.version + 1, catalog.state.version + 1)
            if any(isinstance(a, TakeLease) for a in c.actions)
        )

    def _replace_after(self, move: Move) -> int:
        """The version of compaction's replace of the moved partition after its lease (-1: none)."""
        catalog = PartitionCatalog(self.store, NAMESPACE, move.topic, move.partition)
        head = catalog.load().version
        for commit in catalog.read_commits(move.lease_version + 1, head + 1):
            if commit.operation == "replace":
                return commit.version
        return -1

    # --- the end ---------------------------------------------------------------------------------

    def check_records(self) -> int:
        """Drain, read both topics back, judge them; the acknowledgements judged."""
        for producer in self.producers:
            producer.stop()
        judged = 0
        for producer, topic in zip(self.producers, TOPICS, strict=True):
            sent, acked = merge_model([producer])
            judged += len(acked)
            if producer.failed:
                self.findings.problem(
                    "producer errors", f"{topic}: {sorted(set(producer.failed.values()))[:3]}"
                )
            if producer.fatal:
                self.findings.problem("producer fatal error", f"{topic}: {producer.fatal}")
            tail = self.tails[topic]
            try:
                final, ends = read_range(
                    self.servers, {}, timeout_s=300, topic=topic, partitions=PARTITIONS
                )
            except (ReadStalled, RuntimeError, confluent_kafka.KafkaException) as exc:
                self.findings.problem("read-back", f"{topic}: {exc}")
                tail.stop()
                continue
            starts = {p: self.watermarks(topic, p)[0] for p in range(PARTITIONS)}
            compacted = topic == COMPACT_TOPIC
            check_log(
                final, sent, acked, self.findings, ends, log_starts=starts, compacted=compacted
            )
            self.unplaced += check_unplaced(
                [producer], final, sent, self.findings, compacted=compacted
            )
            if compacted:
                for p in range(PARTITIONS):
                    gaps = unexplained_gaps(final, sent, acked, p, starts[p], ends[p])
                    if gaps:
                        self.findings.problem(
                            "gaps", f"{topic}/{p}: offsets no compaction explains: {gaps[:5]}"
                        )
            elif not any(start > 0 for start in starts.values()):
                self.findings.problem("retention", f"{topic}: the log start never moved")
            count = len(final)

            def caught_up(t: TailConsumer = tail, n: int = count) -> bool:
                return t.count() >= n

            wait_until(caught_up, 300, f"the {topic} tail")
            tail.stop()
            for position, record in tail.seen.items():
                still = final.get(position)
                if sent.get(record.ident) != record or (still is not None and still != record):
                    self.findings.changed.add(position)
            for error in tail.errors[:5]:
                self.findings.problem("tail consumer error", error)
        return judged

    def check_moves(self) -> None:
        for n, move in enumerate(self.moves):
            if move.held and move.replace_version < 0:
                self.findings.problem(
                    "moves",
                    f"round {n + 1}: no replace of {move.topic}/{move.partition} landed after "
                    f"its lease commit (version {move.lease_version})",
                )

    def sweep_and_check_catalogs(self) -> History:
        """Retention twice past the graces, then every partition's history; what they hold."""
        from spark_jobs import retention

        for hours in (2, 4):  # as `soak.maintenance_live`: the graces are 1 h
            later = time.time_ns() // 1_000_000 + hours * HOUR_MS

            def sweep_time(at: int = later) -> int:
                return at

            summary = retention.run(
                ["--store-url", self.store_url, "--namespace", NAMESPACE,
                 "--orphan-grace", "1h", "--delete-grace", "1h"],
                self.spark,
                clock=sweep_time,
            )  # fmt: skip
            if summary["status"] != "ok":
                self.findings.problem("job", f"sweep: {summary['status']}: {summary['message']}")
        left = _orphans(self.store)
        if left:
            self.findings.problem("orphans", f"{len(left)} left after the grace, e.g. {left[:3]}")
        history = History()
        for topic in TOPICS:
            for partition in range(PARTITIONS):
                history.add(check_history(self.store, topic, partition, self.findings))
        return history


def _asking_again(condition: Callable[[], bool]) -> Callable[[], bool]:
    """``condition``, false while a daemon is too busy to answer it (asked again next time)."""

    def asked() -> bool:
        try:
            return condition()
        except (confluent_kafka.KafkaException, OSError, AssertionError):
            return False

    return asked


def _orphans(store: ObjectStore) -> list[str]:
    named: set[str] = set()
    present: set[str] = set()
    for topic in TOPICS:
        for partition in range(PARTITIONS):
            state = PartitionCatalog(store, NAMESPACE, topic, partition).load()
            entries: tuple[SegmentEntry | Tombstone, ...] = (*state.segments, *state.tombstones)
            for entry in entries:
                named.update(layout.join(NAMESPACE, k) for k in (entry.key, entry.index_key))
            prefix = layout.join(NAMESPACE, layout.partition_dir(topic, partition)) + "/"
            present.update(
                info.key
                for info in store.list(prefix)
                if info.key.endswith((layout.SEGMENT_SUFFIX, layout.INDEX_SUFFIX))
            )
    return sorted(present - named)


def run(
    daemons: list[Daemon],
    spark: Any,
    *,
    actions: Sequence[str],
    seed: int,
    store_url: str,
    rate: int = 150,
    progress: Callable[[str], None] | None = None,
) -> tuple[Row, list[Move]]:
    """One round per entry of ``actions`` (`ACTIONS`, see `plan`) on a `start_cluster` cluster.

    ``spark`` is a local SparkSession the jobs run on, in this process.
    Returns the row and the moves made.
    """
    campaign = Campaign(daemons, spark, store_url, seed, rate)
    for producer in campaign.producers:
        producer.start()
    for tail in campaign.tails.values():
        tail.start()
    campaign.watch.start()
    acknowledged = 0
    history = History()
    try:
        wait_until(
            lambda: (
                campaign.producers[0].acked_count() >= WARM_UP_RECORDS
                and campaign.producers[1].acked_count() > 0
            ),
            120,
            f"{WARM_UP_RECORDS} acknowledged records on {DELETE_TOPIC}",
        )
        for n, action in enumerate(actions):
            try:
                move = campaign.round(n, action)
            except TimeoutError as exc:  # a finding, not a crash of the campaign
                campaign.findings.problem("stalled", f"round {n + 1} ({action}): {exc}")
                break
            campaign.moves.append(move)
            if progress:
                progress(
                    f"round {n + 1}/{len(actions)} {action} node {move.victim} "
                    f"({move.topic}/{move.partition}): leased again in {move.takeover_s:.2f} s, "
                    f"replace at version {move.replace_version} after the lease at "
                    f"{move.lease_version}; {campaign.jobs_run} jobs"
                )
    finally:
        for d in daemons:
            if not d.alive():
                d.start()  # a stalled round may leave its victim down
        acknowledged = campaign.check_records()
        campaign.watch.stop()
        for d in daemons:
            code = d.stop()
            if code != 0:
                campaign.findings.problem("daemon", f"node {node_id_of(d)} stopped with {code}")
        campaign.check_moves()
        history = campaign.sweep_and_check_catalogs()
        campaign.store.close()
    findings = campaign.findings
    moves = campaign.moves
    kinds = sorted({m.action for m in moves} or set(actions), key=ACTIONS.index)
    return Row(
        campaign=f"maintenance while partitions move ({', '.join(FAULTS[k] for k in kinds)})",
        store="local",
        cycles=len(moves),
        acknowledged=acknowledged,
        lost=len(findings.lost),
        duplicated=len(findings.duplicated),
        changed=len(findings.changed),
        max_recovery_s=max((m.takeover_s for m in moves), default=None),
        seed=seed,
        problems=findings.lines(),
        details=[
            f"{campaign.jobs_run} job runs; {len(moves)} moves, {sum(m.held for m in moves)} of "
            "them inside compaction's replace of the partition, which landed after the lease it "
            f"had not read; {campaign.watch.cold_loads} cold loads watched; "
            f"{campaign.unplaced} records acknowledged without an offset (librdkafka's implicit "
            "acknowledgements), each there or legitimately gone",
            f"catalogs: {history.commits} commits, {history.leases} leases, {history.replaces} "
            f"replaces, {history.removes} removes, {history.checkpoints} checkpoints; "
            f"newest epochs {history.epochs}",
        ],
    ), moves
