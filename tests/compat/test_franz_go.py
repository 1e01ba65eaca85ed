"""franz-go's kgo integration tests in short form against a `kfs serve` on a local store.

``python -m compat`` runs franz-go's whole kgo suite; here a selection
that covers each kind of integration test runs with few records, so that
`make test` sees a franz-go regression within a minute: produce and
consume, consumer groups under every balancer (``TestGroupETL``), the
transactional chain (``TestTxnEtl``), admin requests and the issue
regression tests.  ``TestIssue434``, ``TestIssue337`` and ``TestIssue523``
are left to the full run: they wait out fixed timeouts (15 to 20 s)
whatever the record count.  Go is needed: without it the test fails, saying
so (the project skips no test).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from compat.franz_go import SUITE, UNFINISHED, fetch_source, outcomes_from_events, run_kgo
from compat.suites import judge, load_expected
from testkit.daemon import Daemon, DaemonFactory

SHORT_FORM = (
    # produce and consume
    "TestClient_Produce",
    "TestClient_ProduceLargeMessages",
    "TestConsumeMaxDecompressBatchBytes",
    "TestConsumeRegex",
    "TestGroupSimple",
    "TestPing",
    # groups and transactions, KGO_TEST_RECORDS records each
    "TestGroupETL",
    "TestTxnEtl",
    # admin: partitions added, records deleted, topics described, offsets fetched
    "TestAddRemovePartitions",
    "TestDirectPartitionPurge",
    "TestConsumeTopicRetrieval",
    "TestUnknownGroupOffsetFetchPinned",
    # regressions of franz-go's issues
    "TestIssue325",
    "TestIssue648",
    "TestIssue769",
    "TestIssue810",
    "TestIssue831",
    "TestIssue865",
    "TestIssue1034",
    "TestIssueFetchLargerThanBrokerMaxReadBytes",
    "TestIssueProduceBrokerTooOldFailsRecords",
    "TestIssueProduceSyncManualPartitionNegativeDoesNotPanic",
    "TestPauseIssue489",
    "TestPauseIssueOct2023",
)
RECORDS = 10_000
TIMEOUT_S = 300
#: A run that passes fewer has not really run: a wrong -test.run, or no broker reached.
MIN_PASSED = 20


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    factory = DaemonFactory(tmp_path)
    try:
        yield factory.start(name="franz-go")
    finally:
        factory.close()


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_franz_go_kgo_short_form(daemon: Daemon, tmp_path: Path) -> None:
    source = fetch_source()
    log = tmp_path / "kgo.log"
    result = run_kgo(
        source,
        daemon.bootstrap,
        records=RECORDS,
        run=f"^({'|'.join(SHORT_FORM)})$",
        timeout_s=TIMEOUT_S,
        log=log,
    )
    surprises = judge([result], load_expected())
    assert not surprises, f"{SUITE} (output in {log}):\n" + "\n".join(surprises)
    assert {o.test for o in result.outcomes} == set(SHORT_FORM), f"output in {log}"
    assert result.count("passed") >= MIN_PASSED, result.outcomes


def _said(test: str, *lines: str) -> list[dict[str, str]]:
    return [{"Action": "output", "Test": test, "Output": line + "\n"} for line in lines]


@pytest.mark.unit
def test_outcomes_are_per_top_level_test_and_a_timeout_fails_what_was_running() -> None:
    # test2json's events for a binary that timed out (as Go 1.26 writes them): a subtest's
    # failure is its test's, and the timeout's output and "fail" land on the last test that
    # printed, which had already skipped, not on the test that hung.
    events = [
        *({"Action": "run", "Test": name} for name in ("TestA", "TestB", "TestC", "TestHang")),
        *_said("TestA", "    helpers_test.go:535: deleting topic t1", "--- PASS: TestA (0.01s)"),
        {"Action": "pass", "Test": "TestA"},
        *_said("TestB/sub", "    group_test.go:99: saw double offset", "--- FAIL: TestB/sub (1s)"),
        {"Action": "fail", "Test": "TestB/sub"},
        *_said("TestB/ok", "    helpers_test.go:860: TestB/ok completed", "--- PASS: TestB/ok"),
        {"Action": "pass", "Test": "TestB/ok"},
        *_said("TestB", "--- FAIL: TestB (1.00s)"),
        {"Action": "fail", "Test": "TestB"},
        *_said("TestC", "    share_test.go:38: broker does not support share groups"),
        *_said("TestC", "--- SKIP: TestC (0.00s)", "panic: test timed out after 5m0s"),
        {"Action": "fail", "Test": "TestC"},
        {"Action": "output", "Output": "FAIL\tkgo\t300.01s\n"},
    ]
    outcomes = {o.test: (o.status, o.detail) for o in outcomes_from_events(events, 2)}
    assert outcomes == {
        "TestA": ("passed", ""),
        "TestB": ("failed", "group_test.go:99: saw double offset"),
        "TestC": ("skipped", "share_test.go:38: broker does not support share groups"),
        "TestHang": ("failed", f"{UNFINISHED}: panic: test timed out after 5m0s"),
    }


@pytest.mark.unit
def test_a_binary_that_fails_without_a_failed_test_is_a_failure() -> None:
    events = [{"Action": "output", "Output": "fork/exec ./kgo.test: no such file or directory\n"}]
    (outcome,) = outcomes_from_events(events, 1)
    assert outcome.status == "failed"
    assert "no such file" in outcome.detail
