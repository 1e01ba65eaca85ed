"""Writers racing for the same partition, in threads and in separate processes.

Whatever the interleaving: every commit lands exactly once, versions are
contiguous from 0, nothing is lost, and a replace racing a remove of its
input has exactly one winner.  Barriers start the writers together; nothing
here sleeps to synchronise.
"""

from __future__ import annotations

import functools
import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kfs_core.catalog import AddSegment, PartitionCatalog, PartitionState
from kfs_core.errors import RemoveConflict, ReplaceConflict
from kfs_core.storage.base import ObjectStore
from tests.catalog.conftest import NS, PARTITION, TOPIC, seg

WRITERS = 6
COMMITS_EACH = 8


def catalog(store: ObjectStore, **options: Any) -> PartitionCatalog:
    return PartitionCatalog(store, NS, TOPIC, PARTITION, checkpoint_interval=5, **options)


def writer_offsets(writer: int, commits: int) -> list[int]:
    """Distinct, interleaved offset ranges: writer w owns every WRITERS-th slot."""
    return [(j * 64 + writer) * 10 for j in range(commits)]


def add_all(
    store: ObjectStore, writer: int, commits: int, barrier: Any
) -> list[tuple[int, str, int]]:
    """One writer's work: ``commits`` commits of one segment each; (version, id, attempts)."""
    cat = catalog(store, writer=f"writer-{writer}")
    cat.load()
    barrier.wait(timeout=120)
    results = []
    for base in writer_offsets(writer, commits):
        r = cat.add_segments([seg(base)])
        results.append((r.version, r.commit_id, r.attempts))
    return results


def check_log(
    store: ObjectStore, writers: int, commits: int, results: list[list[tuple[int, str, int]]]
) -> None:
    expected_keys = {seg(b).key for w in range(writers) for b in writer_offsets(w, commits)}
    total = writers * commits
    state = catalog(store).load()
    assert len(state.segments) == total
    assert {s.key for s in state.segments} == expected_keys
    assert state.version == total - 1

    log = catalog(store).read_commits(0, total)  # contiguous 0..K, or this raises
    assert [c.version for c in log] == list(range(total))
    added = [a.segment.key for c in log for a in c.actions if isinstance(a, AddSegment)]
    assert sorted(added) == sorted(expected_keys)  # no segment committed twice
    ids = [c.commit_id for c in log]
    assert len(set(ids)) == total  # no commit applied twice

    won = sorted((v, cid) for rs in results for v, cid, _ in rs)
    assert won == sorted((c.version, c.commit_id) for c in log)  # each writer's view agrees
    assert max(a for rs in results for _, _, a in rs) > 1  # the writers really did race


def test_racing_writer_threads(store: ObjectStore) -> None:
    barrier = threading.Barrier(WRITERS)
    with ThreadPoolExecutor(WRITERS) as pool:
        futures = [pool.submit(add_all, store, w, COMMITS_EACH, barrier) for w in range(WRITERS)]
        results = [f.result(timeout=300) for f in futures]
    check_log(store, WRITERS, COMMITS_EACH, results)


def _process_main(store: ObjectStore, writer: int, commits: int, barrier: Any, queue: Any) -> None:
    try:
        queue.put((writer, add_all(store, writer, commits, barrier)))
    except BaseException as exc:
        queue.put((writer, exc))
        raise


def test_racing_writer_processes(store: ObjectStore) -> None:
    processes = 4
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    queue = ctx.Queue()
    workers = [
        ctx.Process(target=_process_main, args=(store, w, COMMITS_EACH, barrier, queue))
        for w in range(processes)
    ]
    for p in workers:
        p.start()
    try:
        outcomes = dict(queue.get(timeout=300) for _ in workers)
    finally:
        for p in workers:
            p.join(timeout=60)
    for writer, outcome in outcomes.items():
        assert not isinstance(outcome, BaseException), f"writer {writer}: {outcome!r}"
    assert all(p.exitcode == 0 for p in workers)
    check_log(store, processes, COMMITS_EACH, list(outcomes.values()))


def race(*jobs: Callable[[], object]) -> list[object]:
    """Run ``jobs`` at once; each result or the exception it raised."""
    barrier = threading.Barrier(len(jobs))

    def run(job: Callable[[], object]) -> object:
        barrier.wait(timeout=60)
        try:
            return job()
        except Exception as exc:  # noqa: BLE001 - the outcome is what we compare
            return exc

    with ThreadPoolExecutor(len(jobs)) as pool:
        return list(pool.map(run, jobs))


def test_replace_racing_remove_has_exactly_one_winner(store: ObjectStore) -> None:
    setup = catalog(store)
    winners = set()
    for round_ in range(6):
        base = round_ * 100
        a, b = seg(base), seg(base + 10)
        setup.add_segments([a, b])
        compactor, retention = catalog(store), catalog(store)
        compactor.load()
        retention.load()
        merged = seg(base, 20, suffix="-c1")
        replaced, removed = race(
            functools.partial(compactor.replace, [a, b], [merged]),
            functools.partial(retention.remove, [b]),
        )
        state: PartitionState = catalog(store).load()
        live = {s.key for s in state.segments}
        if isinstance(removed, Exception):
            assert isinstance(removed, RemoveConflict)
            assert not isinstance(replaced, Exception)
            assert merged.key in live and a.key not in live and b.key not in live
            winners.add("replace")
        else:
            assert isinstance(replaced, ReplaceConflict)
            assert not isinstance(replaced, RemoveConflict)
            assert a.key in live and b.key not in live and merged.key not in live
            winners.add("remove")
        assert b.key in {t.key for t in state.tombstones}
        setup.refresh()
    assert winners  # at least one kind of outcome, each round consistent


def test_compaction_and_flushes_interleave_without_losing_segments(store: ObjectStore) -> None:
    daemon, compactor = catalog(store), catalog(store)
    old = [seg(10 * i) for i in range(16)]
    daemon.add_segments(old)
    compactor.load()
    fresh = [seg(1000 + 10 * i) for i in range(16)]
    merged = [seg(40 * i, 40, suffix="-c1") for i in range(4)]

    def flush() -> None:
        for s in fresh:
            daemon.add_segments([s])

    def compact() -> None:
        for i, m in enumerate(merged):
            compactor.replace(old[4 * i : 4 * i + 4], [m])

    outcomes = race(flush, compact)
    assert outcomes == [None, None]
    state = catalog(store).load()
    assert [s.key for s in state.segments] == [s.key for s in merged + fresh]
    assert state.version == 1 + len(fresh) + len(merged) - 1
    assert state.high_watermark == 1160
