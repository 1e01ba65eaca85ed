"""librdkafka's own broker tests in short form against a `kfs serve` on a local store.

``python -m compat`` runs every broker test of librdkafka's suite (the
Debian release the project uses, built from its source package by
`compat.librdkafka.fetch_and_build`) in both of its scenarios; here 33 of
the default scenario's quick ones run in quick mode (``-Q``), in about a
minute: produce and consume, compression, headers, offsets, consumer groups
(balanced, static membership, cooperative-sticky), idempotence and
transactions (read_committed over a Java transactional producer too), and
the Admin API with ACLs.  A test failing that
``compat/expected_failures.txt`` does not list fails this test, and so does
a listed one that passes.  The first run builds librdkafka and its tests
(about 90 s on two cores); a build that fails fails the test (the project
skips no test), saying why.  The Kafka tools jars (``make kafka-tools``)
provide the ``kafka-acls.sh`` and Java client 0098, 0109 and 0115 run.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat.librdkafka import (
    DEBIAN_VERSION,
    NOT_RUN,
    SUITE,
    UNFINISHED,
    BuildFailed,
    fetch_and_build,
    librdkafka_daemon,
    list_tests,
    lost_race,
    outcomes_from_output,
    run_librdkafka,
)
from compat.suites import Outcome, judge, load_expected
from testkit.daemon import Daemon, DaemonFactory

SHORT_FORM = (
    # produce and consume
    "0001_multiobj",
    "0002_unkpart",
    "0003_msgmaxsize",
    "0005_order",
    "0011_produce_batch",
    "0012_produce_consume",
    "0013_null_msgs",
    "0017_compression",
    "0036_partial_fetch",
    "0040_io_event",
    "0042_many_topics",
    "0063_clusterid",
    "0070_null_empty",
    "0073_headers",
    "0085_headers",
    # offsets
    "0029_assign_offset",
    "0030_offset_commit",
    "0031_get_offsets",
    "0034_offset_reset",
    "0054_offset_time",
    "0099_commit_metadata",
    "0130_store_offsets",
    # consumer groups
    "0019_list_groups",
    "0056_balanced_group_mt",
    "0102_static_group_rebalance",
    # (not 0113: quick mode leaves out the sub-tests that hang in the full run,
    # where it is an expected failure)
    # idempotence and transactions (0098: read_committed over a Java transactional producer)
    "0090_idempotence",
    "0098_consumer_txn",
    "0103_transactions",
    "0129_fetch_aborted_msgs",
    # admin: partitions added, topics created, ACLs denying a topic (kafka-acls.sh)
    "0044_partition_cnt",
    "0109_auto_create_topics",
    "0115_producer_auth",
)
TIMEOUT_S = 240
#: A run that passes fewer has not really run: no broker reached, or a selection gone wrong.
MIN_PASSED = 28


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    factory = DaemonFactory(tmp_path)
    try:
        yield librdkafka_daemon(factory)
    finally:
        factory.close()


def _built() -> Path:
    try:
        return fetch_and_build()
    except BuildFailed as error:
        pytest.fail(f"librdkafka {DEBIAN_VERSION}'s tests could not be built: {error}")


@pytest.mark.integration
@pytest.mark.timeout(600)  # the first run builds librdkafka: about two minutes on two cores
def test_librdkafka_short_form(daemon: Daemon, tmp_path: Path) -> None:
    test_runner_dir = _built()
    log = tmp_path / "librdkafka-tests.log"
    result = run_librdkafka(test_runner_dir, daemon.bootstrap, SHORT_FORM, TIMEOUT_S, log=log)
    surprises = judge([result], load_expected())
    assert not surprises, f"{SUITE} (output in {log}):\n" + "\n".join(surprises)
    assert sorted(o.test for o in result.outcomes) == sorted(SHORT_FORM), f"output in {log}"
    assert result.count("passed") >= MIN_PASSED, result.outcomes
    assert daemon.alive()


@pytest.mark.integration
def test_the_pinned_release_is_the_installed_librdkafka() -> None:
    # The client the suite tests is the one the project's rate producer and bindings load.
    dpkg_query = shutil.which("dpkg-query")
    assert dpkg_query is not None, "dpkg-query is missing: not a Debian system"
    installed = subprocess.run(
        [dpkg_query, "-W", "-f=${Version}", "librdkafka1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert installed.stdout == DEBIAN_VERSION, installed.stderr or installed.stdout


@pytest.mark.integration
def test_the_broker_tests_are_found_in_the_runner_table() -> None:
    tests = {t.name: t for t in list_tests(_built())}
    assert set(SHORT_FORM) <= tests.keys()
    assert not any(tests[name].local for name in SHORT_FORM)
    assert tests["0000_unittests"].local
    assert tests["0107_topic_recreate"].scenarios == ("noautocreate",)
    assert tests["0047_partial_buf_tmout"].known_issue
    assert tests["8000_idle"].manual
    assert sum(not t.local and not t.manual for t in tests.values()) >= 90


def _say(test: str, text: str) -> str:
    return f"\x1b[36m[{test:<28s}/  1.234s] {text}\x1b[0m"


@pytest.mark.unit
def test_outcomes_from_the_runner_output() -> None:
    # What test-runner writes to standard error: a pass, a skip from inside the test, a skip
    # by the runner, a fatal TEST_FAIL (no result line), a timeout, and a test still running.
    lines = [
        _say("0001_multiobj", "================= Running test 0001_multiobj ================="),
        _say("0001_multiobj", "================= Test 0001_multiobj PASSED ================="),
        _say("0097_ssl_verify", "================= Running test 0097_ssl_verify ================="),
        "\x1b[33m[0097_ssl_verify             /  0.000s] WARN: SKIPPING TEST: "
        "Test requires SSL_* env-vars set up by trivup\x1b[0m",
        _say("0097_ssl_verify", "================= Test 0097_ssl_verify SKIPPED ================="),
        "\x1b[33m[0047_partial_buf_tmout      /  0.000s] WARN: SKIPPING TEST: "
        "Filtered due to negative test flags\x1b[0m",
        _say("0081_admin", "================= Running test 0081_admin ================="),
        _say("0081_admin", "TEST FAILURE"),
        '\x1b[31m### Test "0081_admin (do_test_AlterConfigs:721)" failed at '
        "0081-admin.c:878:do_test_AlterConfigs() at Mon Dec  7 05:29:34 2026: ###",
        "ConfigResource #1: expected NO_ERROR (0), got INVALID_REQUEST",
        _say("0094_idem", "================= Running test 0094_idem ================="),
        '\x1b[31m### Test "0094_idem" failed at test.c:1216:check_test_timeouts() at Mon: ###',
        "Test 0094_idem timed out (timeout set to 160 seconds)",
        _say("0045_hang", "================= Running test 0045_hang ================="),
    ]
    tests = [
        "0001_multiobj",
        "0097_ssl_verify",
        "0047_partial_buf_tmout",
        "0081_admin",
        "0094_idem",
        "0045_hang",
        "0045_never",
    ]
    outcomes = {o.test: (o.status, o.detail) for o in outcomes_from_output(lines, tests, "x")}
    assert outcomes == {
        "0001_multiobj": ("passed", ""),
        "0097_ssl_verify": ("skipped", "Test requires SSL_* env-vars set up by trivup"),
        "0047_partial_buf_tmout": ("skipped", "Filtered due to negative test flags"),
        "0081_admin": (
            "failed",
            "0081-admin.c:878:do_test_AlterConfigs(): "
            "ConfigResource #1: expected NO_ERROR (0), got INVALID_REQUEST",
        ),
        "0094_idem": (
            "failed",
            "test.c:1216:check_test_timeouts(): "
            "Test 0094_idem timed out (timeout set to 160 seconds)",
        ),
        "0045_hang": ("failed", f"{UNFINISHED}: x"),
        "0045_never": ("failed", f"{NOT_RUN}: x"),
    }


@pytest.mark.unit
def test_only_a_known_race_of_a_test_is_skipped() -> None:
    race = "testcpp.h:77:(): abort_transaction() failed: Failed to end transaction: Broker: "
    race += "Producer attempted a transactional operation in an invalid state"
    lost = lost_race(Outcome("0098_consumer_txn", "failed", race))
    assert lost.status == "skipped"
    assert "confluentinc/librdkafka#4849" in lost.detail and race in lost.detail
    other = Outcome("0098_consumer_txn", "failed", "Consumed unexpected number of messages")
    assert lost_race(other) == other
    elsewhere = Outcome("0103_transactions", "failed", race)
    assert lost_race(elsewhere) == elsewhere
