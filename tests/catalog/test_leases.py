"""Partition leases and fencing: the ``lease`` action, `take_lease` and ``leader_epoch``.

A lease commit's epoch must be the newest lease's plus one (`LeaseConflict`),
so of daemons racing for an epoch exactly one wins; a daemon commit that
carries an epoch older than the newest lease is refused (`FencedLeaderEpoch`),
even when the daemon's cached state predates the lease and it first loses the
version race to it.  Commits without an epoch are never fenced.  Races start
together on barriers; nothing sleeps to synchronise.
"""

from __future__ import annotations

import json
import pickle
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from kfs_core.catalog import (
    AddSegment,
    Commit,
    PartitionCatalog,
    SegmentEntry,
    SetLogStartOffset,
    TakeLease,
    layout,
)
from kfs_core.catalog.actions import encode_commit
from kfs_core.catalog.state import StateBuilder, decode_checkpoint
from kfs_core.catalog.topics import TopicRegistry
from kfs_core.errors import (
    CatalogError,
    CorruptCatalog,
    FencedLeaderEpoch,
    LeaseConflict,
    LogError,
    NotLeaderOrFollower,
    UnknownLeaderEpoch,
)
from kfs_core.formats.segment import parse_object_name
from kfs_core.storage import LocalObjectStore
from kfs_core.storage.base import ObjectInfo, ObjectStore
from tests.catalog.conftest import NS, PARTITION, TOPIC, FaultyStore, seg


def catalog(store: ObjectStore, **options: Any) -> PartitionCatalog:
    return PartitionCatalog(store, NS, TOPIC, PARTITION, **options)


def lease(epoch: int, node_id: int = 1, incarnation: str = "run-a") -> TakeLease:
    return TakeLease(epoch=epoch, node_id=node_id, incarnation=incarnation)


def is_commit_key(key: str) -> bool:
    parsed = layout.parse_log_name(key.rsplit("/", 1)[-1])
    return parsed is not None and not parsed[1]


# --- the action and the state ----------------------------------------------------------


def test_lease_action_encodes_on_one_line_and_round_trips() -> None:
    commit = Commit(
        version=0, commit_id="c", writer="w", timestamp_ms=1, operation="lease", actions=(lease(1),)
    )
    data = encode_commit(commit)
    lines = data.decode().splitlines()
    assert lines[1] == '{"action":"lease","epoch":1,"node_id":1,"incarnation":"run-a"}'
    assert Commit.model_validate_json(data) == commit


@pytest.mark.parametrize(
    "fields",
    [
        {"epoch": 0, "node_id": 1, "incarnation": "x"},
        {"epoch": 1, "node_id": -1, "incarnation": "x"},
        {"epoch": "1", "node_id": 1, "incarnation": "x"},
        {"epoch": 1, "node_id": 1},
    ],
)
def test_lease_action_refuses_bad_fields(fields: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        TakeLease.model_validate(fields)


def test_a_partition_without_a_lease_has_epoch_zero_and_no_leader() -> None:
    state = StateBuilder(TOPIC, PARTITION).snapshot()
    assert (state.leader_epoch, state.leader_node_id, state.leader_incarnation) == (0, -1, "")


def test_a_lease_commit_sets_the_leader_and_only_the_next_epoch_is_accepted() -> None:
    b = StateBuilder(TOPIC, PARTITION)
    b.apply_ops(b.plan([lease(1, node_id=3, incarnation="boot-1")]), 0, 10)
    state = b.snapshot()
    assert (state.leader_epoch, state.leader_node_id, state.leader_incarnation) == (
        1,
        3,
        "boot-1",
    )
    for epoch in (1, 3):
        with pytest.raises(LeaseConflict) as caught:
            b.plan([lease(epoch)])
        assert (caught.value.epoch, caught.value.catalog_epoch) == (epoch, 1)
        assert not caught.value.retriable
    b.apply_ops(b.plan([AddSegment(segment=seg(0)), lease(2, node_id=4)]), 1, 20)
    assert (b.snapshot().leader_epoch, b.snapshot().leader_node_id) == (2, 4)
    # Two leases in one commit: the second must follow the first.
    b.plan([lease(3), lease(4)])
    with pytest.raises(LeaseConflict):
        b.plan([lease(3), lease(3)])


def test_replay_applies_whatever_lease_the_log_holds() -> None:
    b = StateBuilder(TOPIC, PARTITION)
    b.apply(
        Commit(version=0, commit_id="c", writer="w", timestamp_ms=1, operation="lease",
               actions=(lease(5, node_id=2),)),
        "_log/0",
    )  # fmt: skip
    assert (b.snapshot().leader_epoch, b.snapshot().leader_node_id) == (5, 2)


# --- checkpoints -------------------------------------------------------------------


def test_checkpoint_carries_the_lease_and_reads_back_the_same_state() -> None:
    b = StateBuilder(TOPIC, PARTITION)
    b.apply_ops(b.plan([AddSegment(segment=seg(0))]), 0, 10)
    unleased = b.encode_checkpoint()
    assert b"leader" not in unleased  # reads as it did before leases existed
    assert decode_checkpoint(unleased, "cp", 0).leader_epoch == 0
    b.apply_ops(b.plan([lease(1, node_id=7, incarnation="boot-9")]), 1, 20)
    data = b.encode_checkpoint()
    header = data.split(b',"segments"')[0]
    assert header.endswith(
        b'"config":{},"leader_epoch":1,"leader_node_id":7,"leader_incarnation":"boot-9",'
        b'"leader_epochs":[{"epoch":1,"start_offset":10}]'
    )
    checkpoint = decode_checkpoint(data, "cp", 1)
    restored = StateBuilder.from_checkpoint(checkpoint, TOPIC, PARTITION, "cp", data=data)
    assert restored.snapshot() == b.snapshot()
    assert restored.snapshot().leader_incarnation == "boot-9"
    assert restored.encode_checkpoint() == data  # stable bytes
    # The next epoch after a checkpoint is judged against the checkpointed lease.
    with pytest.raises(LeaseConflict):
        restored.plan([lease(1)])
    restored.plan([lease(2)])


def test_a_checkpoint_with_a_lease_but_a_bad_epoch_is_corrupt() -> None:
    b = StateBuilder(TOPIC, PARTITION)
    b.apply_ops(b.plan([lease(1)]), 0, 10)
    data = b.encode_checkpoint().replace(b'"leader_epoch":1', b'"leader_epoch":-1')
    with pytest.raises(CorruptCatalog, match="leader_epoch"):
        decode_checkpoint(data, "cp", 0)


def test_checkpoint_and_tail_give_the_state_a_full_replay_gives(store: ObjectStore) -> None:
    writer = catalog(store, checkpoint_interval=3)
    writer.add_segments([seg(0)])
    writer.take_lease(1, "boot-1")
    writer.add_segments([seg(10)], leader_epoch=1)
    writer.take_lease(2, "boot-2")  # version 3: checkpointed
    writer.set_log_start_offset(5, leader_epoch=2)
    writer.take_lease(1, "boot-3")
    writer.add_segments([seg(20)], leader_epoch=3)  # version 6: checkpointed
    writer.add_segments([seg(30)], leader_epoch=3)
    assert b'"version":6,' in store.get(writer.pointer_key)

    loaded = catalog(store, checkpoint_interval=3).load()  # checkpoint, then the tail
    replayed = StateBuilder(TOPIC, PARTITION)
    for commit in writer.read_commits(0, loaded.version + 1):
        replayed.apply(commit, writer.commit_key(commit.version))
    assert loaded == replayed.snapshot() == writer.state
    assert (loaded.leader_epoch, loaded.leader_node_id, loaded.leader_incarnation) == (
        3,
        1,
        "boot-3",
    )


# --- take_lease ---------------------------------------------------------------------


def test_take_lease_commits_the_next_epoch_and_returns_the_state(store: ObjectStore) -> None:
    cat = catalog(store)
    first = cat.take_lease(1, "boot-1")
    assert (first.version, first.leader_epoch, first.leader_node_id) == (0, 1, 1)
    second = cat.take_lease(2, "boot-2")
    assert (second.leader_epoch, second.leader_node_id, second.leader_incarnation) == (
        2,
        2,
        "boot-2",
    )
    commit = cat.read_commit(1)
    assert commit.operation == "lease"
    assert commit.actions == (TakeLease(epoch=2, node_id=2, incarnation="boot-2", start_offset=0),)
    assert catalog(store).load() == second


def test_take_lease_reads_the_newest_lease_not_the_cache(store: ObjectStore) -> None:
    a, b = catalog(store), catalog(store)
    a.load()
    b.take_lease(2, "b")
    assert a.state.leader_epoch == 0  # a's cache predates b's lease
    assert a.take_lease(1, "a").leader_epoch == 2


def test_a_stale_lease_commit_is_refused_even_from_an_old_cache(store: ObjectStore) -> None:
    a, b = catalog(store), catalog(store)
    a.load()
    b.take_lease(2, "b")
    with pytest.raises(LeaseConflict):
        a.commit([lease(1)], operation="lease")  # a's put loses the version, then it re-plans
    assert catalog(store).load().leader_node_id == 2


class GatedStore(FaultyStore):
    """Holds each put of a commit file until ``parties`` writers have reached theirs."""

    def __init__(self, inner: ObjectStore, parties: int) -> None:
        super().__init__(inner)
        self.gate = threading.Barrier(parties)

    def put_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        if is_commit_key(key):
            self.gate.wait(timeout=60)
        return super().put_if_absent(key, data)


def test_two_catalogs_racing_for_each_epoch_have_exactly_one_winner(store: ObjectStore) -> None:
    """Both plan the same epoch before either puts (the gate): one wins, one conflicts."""
    rounds = 5
    gated = GatedStore(store, parties=2)
    nodes = {1: catalog(gated, writer="node-1"), 2: catalog(gated, writer="node-2")}
    outcomes: dict[int, list[int | None]] = {1: [], 2: []}

    def contend(node: int) -> None:
        for _ in range(rounds):
            try:
                outcomes[node].append(nodes[node].take_lease(node, f"boot-{node}").leader_epoch)
            except LeaseConflict:
                outcomes[node].append(None)

    with ThreadPoolExecutor(2) as pool:
        for future in [pool.submit(contend, node) for node in nodes]:
            future.result(timeout=120)

    for r in range(rounds):
        won = [outcomes[n][r] for n in nodes if outcomes[n][r] is not None]
        assert won == [r + 1], outcomes  # exactly one winner, of the next epoch
    log = catalog(store).read_commits(0, rounds)
    assert [a.epoch for c in log for a in c.actions if isinstance(a, TakeLease)] == [
        1,
        2,
        3,
        4,
        5,
    ]
    assert catalog(store).load().version == rounds - 1  # the losers committed nothing


def test_free_running_lease_takers_never_share_an_epoch(store: ObjectStore) -> None:
    takers, leases_each = 3, 4
    barrier = threading.Barrier(takers)

    def take(node: int) -> list[int]:
        cat = catalog(store, writer=f"node-{node}")
        cat.load()
        barrier.wait(timeout=60)
        won: list[int] = []
        while len(won) < leases_each:
            try:
                won.append(cat.take_lease(node, "boot").leader_epoch)
            except LeaseConflict:
                continue  # another took it; try the next epoch
        return won

    with ThreadPoolExecutor(takers) as pool:
        results = list(pool.map(take, range(takers)))
    epochs = sorted(e for won in results for e in won)
    assert epochs == list(range(1, takers * leases_each + 1))


# --- fencing --------------------------------------------------------------------------


def test_a_deposed_writer_loses_the_version_race_then_is_fenced(store: ObjectStore) -> None:
    faulty = FaultyStore(store)
    old = catalog(faulty, writer="old")
    old.take_lease(1, "old")
    old.add_segments([seg(0)], leader_epoch=1)
    new = catalog(store, writer="new")
    lease_version = new.take_lease(2, "new").version
    assert old.state.leader_epoch == 1  # its cache predates the new lease
    faulty.calls.clear()

    with pytest.raises(FencedLeaderEpoch) as caught:
        old.add_segments([seg(10)], leader_epoch=1)

    error = caught.value
    assert (error.leader_epoch, error.catalog_epoch) == (1, 2)
    assert (error.topic, error.partition) == (TOPIC, PARTITION)
    assert f"{TOPIC}/{PARTITION}" in str(error) and "1" in str(error) and "2" in str(error)
    assert error.retriable and error.kafka_error_code == 74
    puts = [key for op, key in faulty.calls if op == "put_if_absent" and is_commit_key(key)]
    assert puts == [old.commit_key(lease_version)]  # it tried the lease's version, lost, stopped
    state = catalog(store).load()
    assert state.version == lease_version and state.find(seg(10).key) is None
    assert old.state.leader_epoch == 2  # it read the lease that fenced it


def test_a_writer_whose_cache_is_refreshed_first_is_fenced_without_a_put(
    store: ObjectStore,
) -> None:
    faulty = FaultyStore(store)
    old = catalog(faulty, max_state_age_s=0.0)  # refreshes before every commit
    old.take_lease(1, "old")
    catalog(store).take_lease(2, "new")
    faulty.calls.clear()
    with pytest.raises(FencedLeaderEpoch):
        old.set_log_start_offset(0, leader_epoch=1)
    assert not [key for op, key in faulty.calls if op == "put_if_absent"]


@pytest.mark.parametrize(
    "commit",
    [
        lambda cat, epoch: cat.add_segments([seg(100)], leader_epoch=epoch),
        lambda cat, epoch: cat.set_log_start_offset(5, leader_epoch=epoch),
        lambda cat, epoch: cat.remove([0], leader_epoch=epoch),
        lambda cat, epoch: cat.replace([seg(0)], [seg(0, suffix="-c1")], leader_epoch=epoch),
        lambda cat, epoch: cat.commit([SetLogStartOffset(offset=5)], leader_epoch=epoch),
    ],
    ids=["add_segments", "set_log_start_offset", "remove", "replace", "commit"],
)
def test_every_daemon_commit_form_is_fenced(
    store: ObjectStore, commit: Callable[[PartitionCatalog, int], object]
) -> None:
    old = catalog(store)
    old.add_segments([seg(0)])
    old.take_lease(1, "old")
    catalog(store).take_lease(2, "new")
    with pytest.raises(FencedLeaderEpoch):
        commit(old, 1)
    commit(old, 2)  # the current epoch lands
    assert old.state.leader_epoch == 2


def test_a_commit_without_an_epoch_lands_after_any_lease(store: ObjectStore) -> None:
    maintenance = catalog(store)
    maintenance.add_segments([seg(0)])
    maintenance.load()
    daemon = catalog(store)
    daemon.take_lease(1, "a")
    daemon.take_lease(2, "b")
    result = maintenance.remove([0], log_start_offset=10)  # its cache predates both leases
    assert result.attempts == 2
    state = catalog(store).load()
    assert state.segments == () and state.log_start_offset == 10 and state.leader_epoch == 2


def test_a_commit_with_an_epoch_newer_than_the_cache_refreshes_and_lands(
    store: ObjectStore,
) -> None:
    daemon = catalog(store)
    daemon.load()
    epoch = catalog(store).take_lease(1, "a").leader_epoch  # the lease taken through another
    assert daemon.state.leader_epoch == 0
    daemon.add_segments([seg(0)], leader_epoch=epoch)
    assert daemon.state.find(seg(0).key) is not None


def test_a_commit_before_any_lease_with_an_epoch_is_fenced(store: ObjectStore) -> None:
    with pytest.raises(FencedLeaderEpoch) as caught:
        catalog(store).add_segments([seg(0)], leader_epoch=1)
    assert caught.value.catalog_epoch == 0
    catalog(store).add_segments([seg(0)], leader_epoch=0)  # epoch 0: never leased, as the catalog


# --- segment keys per epoch ---------------------------------------------------------


def test_epoch_suffix() -> None:
    assert layout.epoch_suffix(0) == ""
    assert layout.epoch_suffix(3) == "-e3"
    assert layout.epoch_suffix(12345) == "-e12345"
    with pytest.raises(ValueError):
        layout.epoch_suffix(-1)


def test_epoch_keys_name_their_base_offset_and_keep_offset_order(store: ObjectStore) -> None:
    key = layout.segment_key(TOPIC, PARTITION, 42, layout.epoch_suffix(3))
    assert key == f"{TOPIC}/{PARTITION}/segment-00000000000000000042-e3.kfs"
    assert layout.index_key_for(key) == f"{TOPIC}/{PARTITION}/segment-00000000000000000042-e3.index"
    for name in (key, layout.index_key_for(key), "segment-00000000000000000042-c1.kfs"):
        assert parse_object_name(name) == 42
    assert parse_object_name(layout.segment_key(TOPIC, PARTITION, 7)) == 7
    keys = [
        layout.segment_key(TOPIC, PARTITION, base, layout.epoch_suffix(epoch))
        for base, epoch in [(0, 0), (10, 1), (20, 12), (30, 2)]
    ]
    assert sorted(keys) == keys

    # Each owner writes under its own epoch's keys, and the catalog takes them.
    for node in (1, 2):
        owner = catalog(store)
        epoch = owner.take_lease(node, f"boot-{node}").leader_epoch
        entry = SegmentEntry.for_partition(
            TOPIC,
            PARTITION,
            **seg(epoch * 10).model_dump(exclude={"key", "index_key"}),
            key_suffix=layout.epoch_suffix(epoch),
        )
        owner.add_segments([entry], leader_epoch=epoch)
    assert [s.key.rsplit("/", 1)[-1] for s in catalog(store).load().segments] == [
        "segment-00000000000000000010-e1.kfs",
        "segment-00000000000000000020-e2.kfs",
    ]


# --- readers of the log ------------------------------------------------------------


def test_kfs_catalog_show_prints_the_lease(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kfs_core.cli import main

    store = LocalObjectStore(tmp_path / "store")
    TopicRegistry(store, NS).create_topic(TOPIC, partitions=2)
    cat = catalog(store)
    cat.add_segments([seg(0)])
    cat.take_lease(4, "boot-4")
    args = ["--store-url", (tmp_path / "store").as_uri(), "--namespace", NS, "catalog", "show"]
    shown = CliRunner().invoke(main, [*args, TOPIC])
    assert shown.exit_code == 0, shown.output
    assert f"{TOPIC}/0: version 1" in shown.output
    assert "leader epoch 1 (node 4)" in shown.output
    assert (
        f"{TOPIC}/1: version -1" in shown.output
        and "leader epoch" not in shown.output.split(f"{TOPIC}/1:")[1]
    )
    as_json = json.loads(CliRunner().invoke(main, [*args, TOPIC, "0", "--json"]).output)
    assert as_json[0]["leader_epoch"] == 1 and as_json[0]["leader_incarnation"] == "boot-4"


def test_retention_removes_a_fenced_upload_as_an_orphan_and_keeps_the_live_one(
    store: ObjectStore,
) -> None:
    """A deposed owner's upload (its epoch's key, its commit fenced) is an orphan."""
    from spark_jobs.retention import SweepTask, sweep_partition

    old = catalog(store)
    old.take_lease(1, "old")
    new = catalog(store)
    new.take_lease(2, "new")
    fenced, live = seg(0, suffix=layout.epoch_suffix(1)), seg(0, suffix=layout.epoch_suffix(2))
    for entry in (fenced, live):
        for key in (entry.key, entry.index_key):
            store.put(old.object_key(key), b"bytes")
    with pytest.raises(FencedLeaderEpoch):
        old.add_segments([fenced], leader_epoch=1)
    new.add_segments([live], leader_epoch=2)

    day = 86_400_000
    task = SweepTask(NS, TOPIC, PARTITION, new.state.timestamp_ms + 2 * day, 3_600_000, day, False)
    swept = sweep_partition(store, task)
    assert not swept.error and not swept.unknown
    assert swept.orphans_deleted == sorted(
        old.object_key(k) for k in (fenced.key, fenced.index_key)
    )
    assert all(store.exists(old.object_key(k)) for k in (live.key, live.index_key))


# --- errors -----------------------------------------------------------------------------


def test_lease_errors_carry_kafka_codes_and_pickle() -> None:
    fenced = FencedLeaderEpoch("fenced", topic=TOPIC, partition=0, leader_epoch=1, catalog_epoch=2)
    back = pickle.loads(pickle.dumps(fenced))
    assert type(back) is FencedLeaderEpoch and back.fields == fenced.fields
    assert isinstance(fenced, CatalogError) and fenced.retriable
    assert isinstance(LeaseConflict("x"), CatalogError) and not LeaseConflict.retriable
    assert LeaseConflict.kafka_error_code is None
    assert (NotLeaderOrFollower.kafka_error_code, NotLeaderOrFollower.retriable) == (6, True)
    assert (UnknownLeaderEpoch.kafka_error_code, UnknownLeaderEpoch.retriable) == (75, True)
    assert issubclass(NotLeaderOrFollower, LogError) and issubclass(UnknownLeaderEpoch, LogError)
