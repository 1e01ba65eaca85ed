"""The crash-cycle campaign in short form, and its checker shown able to fail.

``make soak`` runs 100 cycles per store and mode; here a few cycles of each
keep the campaign honest in CI: a real `kfs serve` killed with SIGKILL under
three idempotent confluent-kafka producers and a tail consumer, on the local
store and on S3 (moto), in ``cautious`` and ``normal`` mode.
"""

from __future__ import annotations

import random
import uuid

import pytest

from soak import crash_cycles, wal_recovery
from soak.load import Findings, Record, check_log
from soak.report import Row, format_table
from testkit.daemon import DaemonFactory


def _record(key: bytes, value: bytes = b"v") -> Record:
    return Record(key, value, (("seq", b"1"),), 1_700_000_000_000)


def test_the_checker_finds_lost_changed_duplicated_and_gaps() -> None:
    sent = {k: _record(k) for k in (b"a", b"b", b"c", b"d")}
    log = {
        (0, 0): sent[b"a"],
        (0, 2): _record(b"b", b"other value"),  # changed, and offset 1 is a gap
        (1, 0): sent[b"c"],
        (1, 1): sent[b"c"],  # a second copy
        (1, 2): _record(b"never sent"),
    }
    acked = [((0, 0), b"a"), ((0, 2), b"b"), ((1, 0), b"c"), ((1, 3), b"d"), ((1, 9), b"d")]
    findings = Findings()
    check_log(log, sent, acked, findings, read_ends={0: 3, 1: 4})
    assert findings.lost == {(1, 3)}  # (1, 9) is past what was read: not judged yet
    assert findings.changed == {(0, 2), (1, 2)}
    assert findings.duplicated == {b"c"}
    assert findings.problems == {
        "duplicated where": ["c at (1, 0) and (1, 1), acknowledged at (1, 0)"],
        "gaps": ["partition 0 lacks offsets [1]", "partition 1 lacks offsets [3]"],
    }
    clean = Findings()
    check_log({(0, 0): sent[b"a"]}, sent, [((0, 0), b"a")], clean, read_ends={0: 1})
    assert clean.lines() == []


def test_the_checker_allows_what_retention_and_compaction_may_remove() -> None:
    def keyed(ident: bytes, key: bytes) -> Record:
        return Record(key, ident, (("id", ident),), 1_700_000_000_000)

    sent = {i: keyed(i, k) for i, k in ((b"1", b"a"), (b"2", b"b"), (b"3", b"a"), (b"4", b"b"))}
    acked = [((0, 0), b"1"), ((0, 1), b"2"), ((0, 2), b"3"), ((0, 3), b"4")]
    # Retention moved the log start to 2: offsets 0 and 1 are gone legally.
    below = Findings()
    log = {(0, 2): sent[b"3"], (0, 3): sent[b"4"]}
    check_log(log, sent, acked, below, {0: 4}, log_starts={0: 2})
    assert below.lines() == []
    # Compaction kept the newest record of each key: 1 and 2 were superseded.
    compacted = Findings()
    check_log(log, sent, acked, compacted, {0: 4}, compacted=True)
    assert compacted.lines() == []
    # ... but never the newest record of a key.
    newest_gone = Findings()
    check_log({(0, 2): sent[b"3"]}, sent, acked, newest_gone, {0: 4}, compacted=True)
    assert newest_gone.lost == {(0, 1), (0, 3)}


def test_the_table_marks_what_failed() -> None:
    ok = Row("kill -9 (cautious)", "local", 3, acknowledged=10, max_recovery_s=1.5, seed=7)
    bad = Row("kill -9 (normal)", "s3", 3, acknowledged=10, lost=2, problems=["lost: 2"])
    assert ok.passed and not bad.passed
    table = format_table([ok, bad])
    assert "1.50 s" in table and "kill -9 (normal) (s3): lost: 2" in table


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("backend", "mode"), [("local", "cautious"), ("s3", "cautious"), ("local", "normal")]
)
def test_kill_9_cycles_lose_nothing_acknowledged(
    daemons: DaemonFactory, request: pytest.FixtureRequest, backend: str, mode: str
) -> None:
    store: dict[str, str] = {}
    if backend == "s3":
        store = {
            "store_url": f"s3://{request.getfixturevalue('s3_bucket')}/cycles-{uuid.uuid4().hex[:8]}",
            "s3_endpoint_url": request.getfixturevalue("moto_server"),
        }
    daemon = daemons.start(
        name=f"cycles-{backend}-{mode}",
        extra_args=[*crash_cycles.DAEMON_ARGS, "--durability", mode],
        **store,
    )
    seed = random.randrange(1 << 30)
    row = crash_cycles.run(daemon, cycles=3, seed=seed, store=backend, mode=mode)
    print(format_table([row]))  # the seed replays the run: crash_cycles.run(..., seed=seed)
    assert row.acknowledged > 0
    assert row.passed, format_table([row]) + "\n" + daemon.log()[-3000:]


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_full_wal_is_replayed_whole_after_kill_9(daemons: DaemonFactory) -> None:
    """The short form of the 1 GiB WAL recovery in `make soak`: 32 MiB, nothing flushed."""
    wal_bytes = 32 << 20
    daemon = daemons.start(name="wal-recovery", extra_args=wal_recovery.daemon_args(wal_bytes))
    row = wal_recovery.run(
        daemon, wal_bytes=wal_bytes, seed=random.randrange(1 << 30), store="local"
    )
    print(format_table([row]))
    assert row.acknowledged == wal_bytes // wal_recovery.VALUE_BYTES
    assert row.passed, format_table([row]) + "\n" + daemon.log()[-3000:]
