"""librdkafka's own test suite (Debian's release, `DEBIAN_VERSION`) against a real `kfs serve`.

librdkafka's ``tests/`` directory builds one program, ``test-runner``, that
holds every test (``tests/test.c`` lists them): unit tests, tests against
librdkafka's in-process mock cluster, and broker tests that run producers,
consumers, groups, transactions and the Admin API against whatever
``bootstrap.servers`` its ``test.conf`` names.  Only the broker tests (the
ones without ``TEST_F_LOCAL``, `list_tests`) run here: the others never
reach KFS.

The source is the Debian source package of the librdkafka the project uses
(``librdkafka1``/``librdkafka-dev`` of Debian 12, `DEBIAN_VERSION`), so the
client tested is the client installed.  `fetch_and_build` downloads its
``.dsc`` from the mirror's pool (pinned by SHA-256; the ``.dsc`` pins the
tarballs), unpacks it with Debian's patches (``dpkg-source -x``) and runs
``./configure && make libs && make -C tests build`` once, in
``.build/librdkafka-<version>/`` (about 90 s on two cores, 200 MB); stamp
files mark what is done.  No ``deb-src`` line, ``apt-get source`` or root is
needed, except to install missing build dependencies (`BUILD_DEPENDS`)
with apt-get.

`run_librdkafka` runs each test number (``0045`` holds four tests) in a
``test-runner -L -p1 -D`` process of its own, ``parallel`` at a time: the
runner SIGKILLs its whole process when one test times out, and ``-D``
deletes the number's topics when it ends (they are named
``rdkafkatest_<number>_...``), so that no test sees the topics of the ones
before it.  The runner's ``Running test``/``Test X PASSED|FAILED|SKIPPED``
lines, ``### Test "X" failed`` messages and ``SKIPPING TEST:`` reasons
become one `Outcome` per test.  A test that started and never finished, or
never started because its process died or the suite's time ran out, has
failed.  `run_scenarios` runs every scenario, each against a daemon of its
own (`librdkafka_daemon`): what ``python -m compat`` runs.

The environment the runner reads (tests/README.md, test.c):

- ``RDKAFKA_TEST_CONF``: a ``test.conf`` per number: ``bootstrap.servers``,
  ``test.timeout.multiplier`` (`TIMEOUT_MULTIPLIER`) and ``test.topic.prefix``;
- ``TESTS``: the number to run (a substring match on test numbers);
- ``TEST_KAFKA_VERSION``: the broker version tests are gated on (`KAFKA_VERSION`,
  3.9.0: no test wants a newer one, and from 3.0 on ``kafka-topics.sh`` is
  run with ``--bootstrap-server $BROKERS``, not ``--zookeeper``);
- ``KAFKA_PATH`` and ``BROKERS``: a Kafka distribution whose scripts some
  tests run: ``kafka-topics.sh`` (0045, 0052, 0077), ``kafka-acls.sh``
  (0109, 0115, 0119), ``kafka-run-class.sh`` for tests/java's programs
  (0098, 0113); here a directory of shell scripts that start those classes
  from the project's Kafka 4.x jars (``make kafka-tools``,
  `compat.kafka_tools.KAFKA_LIB`);
- ``TEST_SCENARIO``: ``default`` (topics auto-created, 4 partitions) or
  ``noautocreate`` (0045's topic-removal tests, 0107, 0111);
- ``TEST_LEVEL`` (verbosity, 2) and ``TEST_DEBUG`` (librdkafka's ``debug``),
  through ``extra_env``; ``-Q``, quick mode, fewer messages and sub-tests
  (``quick``).

Some tests skip themselves, or the runner skips them: 0097 (SSL, from
trivup's ``SSL_*`` variables), 0126 and 0135 (SASL credentials, an OIDC
server), 0101 (a broker rack per broker), 0028 and 0047 (upstream marks
them known issues), and in quick mode 0082.  Tests that fail now and then
with timing, not with what KFS answers, are `RACES`: such a failure is
reported skipped, with why.  The daemon the tests expect (`DAEMON_ARGS`)
has the ``acl`` authorizer allowing everyone where no ACL says otherwise,
as trivup's brokers: 0081 creates and deletes ACLs, 0109, 0115 and 0119
deny a topic.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from compat.kafka_tools import KAFKA_LIB, LOG4J_CONFIG, MAIN_CLASSES
from compat.suites import Outcome, SuiteResult
from testkit.daemon import Daemon, DaemonFactory

__all__ = [
    "BUILD_DIR",
    "DAEMON_ARGS",
    "DEBIAN_VERSION",
    "KAFKA_VERSION",
    "RACES",
    "SUITE",
    "BuildFailed",
    "RunnerTest",
    "fetch_and_build",
    "librdkafka_daemon",
    "list_tests",
    "lost_race",
    "outcomes_from_output",
    "run_librdkafka",
    "run_scenarios",
]

#: The Debian 12 (bookworm) release of librdkafka1 and librdkafka-dev.
DEBIAN_VERSION = "2.0.2-1"
DSC_NAME = f"librdkafka_{DEBIAN_VERSION}.dsc"
#: What the .dsc hashes to: it carries the orig and debian tarballs' SHA-256s in turn.
DSC_SHA256 = "88eb09e84f3d838676c45d2db47633923d069b8605f6b4b48895155ab2b4c64f"
DSC_SHA1 = "1c1f2aa0a4f001d38c3dbe3afd73f3363dfaffce"
#: Where a file is fetched from, in order: the mirror's pool (while bookworm carries this
#: version), then snapshot.debian.org, which keeps every file Debian ever had, by its SHA-1.
POOL_URL = "http://deb.debian.org/debian/pool/main/libr/librdkafka/{name}"
SNAPSHOT_URL = "https://snapshot.debian.org/file/{sha1}"
#: Debian packages the build needs (its Build-Depends, less debhelper; rapidjson-dev lets
#: test 0053 check the statistics JSON against its schema).
BUILD_DEPENDS = (
    "gcc", "g++", "make", "libc6-dev", "dpkg-dev", "pkg-config",
    "zlib1g-dev", "libssl-dev", "libsasl2-dev", "libzstd-dev", "liblz4-dev", "rapidjson-dev",
)  # fmt: skip
SUITE = "librdkafka tests"
#: trivup's cluster setups the broker tests run in (tests/scenarios/*.json, a test's ``.scenario``).
SCENARIOS = ("default", "noautocreate")
KAFKA_VERSION = "3.9.0"
BUILD_DIR = Path(__file__).resolve().parent.parent / ".build"
FETCHED_STAMP = ".kfs-fetched"
BUILT_STAMP = ".kfs-built"
#: `kfs serve` flags for the daemon the tests expect: trivup's broker has an authorizer
#: that allows what no ACL names, and auto-created topics of 4 partitions.
DAEMON_ARGS = (
    "--authorizer", "acl", "--allow-everyone-if-no-acl-found",
    "--default-partitions", "4",
)  # fmt: skip
#: The tests' timeouts, and the slack some allow over a measured latency, times this: KFS is
#: slower than Kafka's JVM and the Kafka tools some tests run start a JVM each (librdkafka's
#: CI adds 2, valgrind 3).
TIMEOUT_MULTIPLIER = 2.0
#: Test topics are named ``<prefix>_<number>_rnd<random>_<what>``.
TOPIC_PREFIX = "rdkafkatest"
#: A test number's process is killed after this long, whatever the suite's timeout:
#: the runner's own per-test timeouts (at most a few minutes) come first.
PROCESS_TIMEOUT_S = 900
UNFINISHED = "did not finish (the test-runner died or was killed)"
NOT_RUN = "did not run"
KNOWN_ISSUE = "upstream marks it a known issue (TEST_F_KNOWN_ISSUE): the runner skips it"
#: Failures that come and go with timing, not with what the broker answers: such a failure
#: of the test is reported skipped, with the reason and what failed; any other failure of it
#: stays a failure.  test -> (what its failure message matches, why).
RACES: Mapping[str, tuple[str, str]] = {
    "0098_consumer_txn": (
        r"abort_transaction\(\) failed: .*invalid state",
        "client race (confluentinc/librdkafka#4849): its rapid abort after a commit sends "
        "EndTxn(abort) although AddPartitionsToTxn got CONCURRENT_TRANSACTIONS while the last "
        "commit's markers were being written, and the coordinator answers INVALID_TXN_STATE, "
        "as Kafka's does; it loses the race when KFS completes the commit more slowly",
    ),
    "0055_producer_latency": (
        r"average latency .* is outside range|broker wakeups out of range",
        "measures produce latency to the millisecond (linger.ms + the round trip + 5 ms) and "
        "counts broker-thread wakeups: a loaded machine or a daemon pause fails it",
    ),
}
DETAIL_CHARS = 400
#: ``bin/kafka-<tool>.sh`` scripts the tests run (test_kafka_topics, test_kafka_cmd), beside
#: ``kafka-run-class.sh`` (test_run_java).
KAFKA_SCRIPTS = ("kafka-topics", "kafka-acls", "kafka-configs")

#: In an entry of tests[]: ``_TEST(0107_topic_recreate, 0, ..., .scenario = "noautocreate")``.
SCENARIO = re.compile(r'\.scenario\s*=\s*"(?P<scenarios>[^"]*)"')
ANSI = re.compile(r"\x1b\[[0-9;]*m")
RUNNING = re.compile(r"={5,} Running test (?P<test>\S+) ={5,}")
RESULT = re.compile(r"={5,} Test (?P<test>\S+) (?P<result>PASSED|FAILED|SKIPPED) ={5,}")
SKIPPING = re.compile(r"\[(?P<test>\S+)\s*/\s*[\d.]+s\] WARN: SKIPPING TEST: (?P<reason>.*)$")
FAILURE = re.compile(r'### Test "(?P<test>[^" ]+)(?: \([^"]*\))?" failed at (?P<where>\S+) at ')


class BuildFailed(RuntimeError):
    """librdkafka's source could not be fetched, or its tests could not be built."""


@dataclass(frozen=True)
class RunnerTest:
    """One test of ``test-runner`` as tests/test.c declares it."""

    name: str  # 0045_subscribe_update
    local: bool  # TEST_F_LOCAL: runs without a broker (unit and mock-cluster tests)
    manual: bool  # TEST_F_MANUAL: only when asked for by number
    known_issue: bool  # TEST_F_KNOWN_ISSUE: the runner skips it (-k runs it)
    scenarios: tuple[str, ...]  # the trivup scenarios it runs in

    @property
    def number(self) -> str:
        """What ``TESTS`` selects it by (a number selects every test of that number)."""
        return self.name.split("_", 1)[0]


def list_tests(test_runner_dir: Path) -> list[RunnerTest]:
    """Every test in ``test_runner_dir/test.c``'s ``tests[]`` table, in its order."""
    source = (test_runner_dir / "test.c").read_text()
    table = source[source.index("struct test tests[] = {") :]
    table = re.sub(r"/\*.*?\*/", "", table, flags=re.DOTALL)
    found = []
    for entry in _test_entries(table):
        name, flags = (part.strip() for part in entry.split(",", 2)[:2])
        scenario = SCENARIO.search(entry)
        found.append(
            RunnerTest(
                name=name,
                local="TEST_F_LOCAL" in flags,
                manual="TEST_F_MANUAL" in flags,
                known_issue=re.search(r"\bTEST_F_KNOWN_ISSUE\b", flags) is not None,
                scenarios=tuple(scenario["scenarios"].split(",")) if scenario else ("default",),
            )
        )
    return found


def _test_entries(table: str) -> Iterator[str]:
    """What is between the parentheses of each ``_TEST(...)``, nested ones and all."""
    for start in (m.end() for m in re.finditer(r"\b_TEST\(", table)):
        depth = 1
        for end in range(start, len(table)):
            depth += {"(": 1, ")": -1}.get(table[end], 0)
            if depth == 0:
                yield table[start:end]
                break


# --- fetch and build ----------------------------------------------------------------------


def fetch_and_build(cache: Path = BUILD_DIR) -> Path:
    """The directory of a built ``test-runner``, ``cache/librdkafka-<version>/source/tests``.

    Fetched, unpacked and built the first time; afterwards only looked up
    (stamp files), so a call costs nothing once the build is done.  Missing
    build dependencies are installed with apt-get.  Two callers at once
    take turns (a lock file).  `BuildFailed` says what went wrong.
    """
    root = cache / f"librdkafka-{DEBIAN_VERSION}"
    source = root / "source"
    tests = source / "tests"

    def built() -> bool:
        return (root / BUILT_STAMP).exists() and (tests / "test-runner").exists()

    if built():
        return tests
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not built():
            (root / BUILT_STAMP).unlink(missing_ok=True)
            ensure_build_depends()
            fetch_source(root)
            build(source, root / "build.log")
            (root / BUILT_STAMP).write_text(f"librdkafka {DEBIAN_VERSION}\n")
    return tests


def ensure_build_depends() -> None:
    """Install the `BUILD_DEPENDS` that are missing with apt-get, as .ci/build-rate-producer does."""
    missing = [p for p in BUILD_DEPENDS if not _installed(p)]
    if shutil.which("python3") is None:  # configure and make run python3 scripts
        missing.append("python3")
    if not missing:
        return
    apt = shutil.which("apt-get")
    if apt is None:
        raise BuildFailed(f"librdkafka's build needs {' '.join(missing)}, and apt-get is missing")
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        [*sudo, apt, "update", "-qq"],
        [*sudo, apt, "install", "-y", "-qq", "--no-install-recommends", *missing],
    ):
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise BuildFailed(
                f"`{shlex.join(command)}` failed ({done.returncode}): "
                f"{_tail(done.stderr or done.stdout)}"
            )


def _installed(package: str) -> bool:
    if shutil.which("dpkg-query") is None:
        return False
    done = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True, check=False
    )
    return done.returncode == 0 and done.stdout.endswith(" installed")


def fetch_source(root: Path) -> Path:
    """``root/source``: the Debian source package, its patches applied; fetched once."""
    source = root / "source"
    if (source / FETCHED_STAMP).exists():
        return source
    # Beside source/: dpkg-source would copy the orig tarball there from anywhere else.
    dsc = _download(root, DSC_NAME, DSC_SHA256, DSC_SHA1)
    for name, sha256, sha1 in _dsc_files(dsc.read_text()):
        _download(root, name, sha256, sha1)
    if source.exists():
        shutil.rmtree(source)  # an unpacking cut short
    # The files were checked against pinned hashes; --no-check only skips the signature
    # (Debian's keyring is not installed) and the same checksums again.
    done = subprocess.run(
        ["dpkg-source", "--no-check", "-x", str(dsc), str(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BuildFailed(f"dpkg-source -x {dsc.name} failed: {_tail(done.stderr or done.stdout)}")
    (source / FETCHED_STAMP).write_text(f"{DSC_NAME} sha256:{DSC_SHA256}\n")
    return source


def _dsc_files(dsc: str) -> list[tuple[str, str, str]]:
    """``(name, sha256, sha1)`` of each file the ``.dsc`` names."""
    sections: dict[str, dict[str, str]] = {"Checksums-Sha256": {}, "Checksums-Sha1": {}}
    current = None
    for line in dsc.splitlines():
        if not line.startswith(" "):
            current = line.split(":", 1)[0]
        elif current in sections and len(fields := line.split()) == 3:
            sections[current][fields[2]] = fields[0]
    sha256s, sha1s = sections["Checksums-Sha256"], sections["Checksums-Sha1"]
    if not sha256s or sha256s.keys() != sha1s.keys():
        raise BuildFailed(f"{DSC_NAME}: no Checksums-Sha256/Checksums-Sha1 to check its files by")
    return [(name, sha256, sha1s[name]) for name, sha256 in sha256s.items()]


def _download(directory: Path, name: str, sha256: str, sha1: str) -> Path:
    """``directory/name``, downloaded unless already there with the right SHA-256."""
    path = directory / name
    if path.exists() and _sha256(path.read_bytes()) == sha256:
        return path
    errors = []
    for url in (POOL_URL.format(name=name), SNAPSHOT_URL.format(sha1=sha1)):
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                data = response.read()
        except (urllib.error.URLError, OSError) as error:
            errors.append(f"{url}: {error}")
            continue
        if _sha256(data) != sha256:
            errors.append(f"{url}: SHA-256 {_sha256(data)}, expected {sha256}")
            continue
        partial = path.with_name(name + ".partial")
        partial.write_bytes(data)
        partial.replace(path)
        return path
    raise BuildFailed(f"could not download {name}: " + "; ".join(errors))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build(source: Path, log: Path) -> None:
    """``./configure``, ``make libs`` and ``make -C tests build`` in ``source``; output to ``log``.

    The tests link against the libraries built here (``src/``, ``src-cpp/``),
    not the installed ones: test-runner uses internal symbols.  ``make`` is
    incremental, so a build cut short resumes.
    """
    jobs = f"-j{min(os.cpu_count() or 1, 8)}"
    steps = [
        ["./configure"] if not (source / "Makefile.config").exists() else [],
        ["make", jobs, "libs"],
        ["make", jobs, "-C", "tests", "build"],
    ]
    with open(log, "a") as out:
        for command in filter(None, steps):
            out.write(f"\n$ {shlex.join(command)}\n")
            out.flush()
            done = subprocess.run(
                command, cwd=source, stdout=out, stderr=subprocess.STDOUT, check=False
            )
            if done.returncode != 0:
                tail = _tail(log.read_text(errors="replace"), lines=15)
                raise BuildFailed(f"`{shlex.join(command)}` failed in {source} (see {log}): {tail}")


def _tail(text: str, lines: int = 6) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


# --- the daemon -------------------------------------------------------------------------------


def librdkafka_daemon(
    factory: DaemonFactory, scenario: str = "default", extra_args: Sequence[str] = ()
) -> Daemon:
    """A `kfs serve` as ``scenario`` wants it: `DAEMON_ARGS`; ``noautocreate``: no auto-creation."""
    no_autocreate = ["--no-auto-create-topics"] if scenario == "noautocreate" else []
    return factory.start(
        name=f"librdkafka-{scenario}", extra_args=[*DAEMON_ARGS, *no_autocreate, *extra_args]
    )


# --- run ------------------------------------------------------------------------------------


def run_librdkafka(
    test_runner_dir: Path,
    bootstrap: str,
    tests: Sequence[str] | None,
    timeout_s: float,
    *,
    scenario: str = "default",
    parallel: int = 2,
    quick: bool = True,
    timeout_multiplier: float = TIMEOUT_MULTIPLIER,
    extra_env: Mapping[str, str] = {},
    log: Path | None = None,
) -> SuiteResult:
    """Run librdkafka's broker tests against ``bootstrap``: one `Outcome` per test.

    ``tests``: test numbers (``"0045"``) or names (``"0045_subscribe_update"``);
    None for every broker test of ``scenario``.  A name runs every test of its
    number (``TESTS`` selects by number) but only the named ones are reported.
    Each number runs in a ``test-runner -L -p1 -D [-Q]`` process of its own,
    ``parallel`` processes at a time; ``timeout_s`` bounds the whole run,
    after which unfinished tests have failed.  ``timeout_multiplier``
    stretches the tests' own timeouts (``test.timeout.multiplier``).
    ``log``: every process's standard error and summary, each written as
    its process ends (the log can be followed).
    """
    started = time.monotonic()
    deadline = started + timeout_s
    chosen = _choose(list_tests(test_runner_dir), tests, scenario)
    groups: dict[str, list[str]] = {}
    for test in chosen:
        groups.setdefault(test.number, []).append(test.name)
    written = threading.Lock()
    with (
        open(log or os.devnull, "w") as out,
        tempfile.TemporaryDirectory(prefix="librdkafka-tests-") as scratch,
    ):
        env = _runner_env(Path(scratch), bootstrap, scenario, extra_env)
        if "KAFKA_PATH" in env:
            out.write(_build_java_programs(test_runner_dir, Path(env["KAFKA_PATH"])))
        args = ["-L", "-p1", "-D", *(["-Q"] if quick else [])]

        def run(number: str) -> _NumberRun:
            conf = _test_conf(Path(scratch), number, bootstrap, timeout_multiplier)
            number_env = {**env, "TESTS": number, "RDKAFKA_TEST_CONF": str(conf)}
            done = _run_number(test_runner_dir, number, args, number_env, deadline)
            with written:  # each number's output whole, as it ends: the log can be followed
                out.write(done.log)
                out.flush()
            return done

        with ThreadPoolExecutor(max_workers=max(parallel, 1)) as pool:
            runs = list(pool.map(run, groups))
    known_issues = {t.name for t in chosen if t.known_issue}
    outcomes = []
    for names, done in zip(groups.values(), runs, strict=True):
        for outcome in outcomes_from_output(done.stderr.splitlines(), names, done.why_stopped):
            known = outcome.status == "skipped" and outcome.test in known_issues
            outcomes.append(
                Outcome(outcome.test, "skipped", KNOWN_ISSUE) if known else lost_race(outcome)
            )
    return SuiteResult(SUITE, outcomes, time.monotonic() - started)


def run_scenarios(
    test_runner_dir: Path,
    factory: DaemonFactory,
    tests: Sequence[str] | None,
    timeout_s: float,
    *,
    parallel: int = 2,
    quick: bool = False,
    log_dir: Path | None = None,
) -> SuiteResult:
    """`run_librdkafka` once per scenario in `SCENARIOS`, each against a daemon of its own.

    What ``python -m compat`` runs: the ``default`` scenario's tests against
    a daemon that auto-creates topics, the ``noautocreate`` ones against one
    that does not (`librdkafka_daemon`); a scenario none of ``tests`` belongs
    to starts no daemon.  ``log_dir``: ``librdkafka-<scenario>.log`` in it.
    A daemon that died during its run is one more failed outcome,
    ``(kfs serve)``.
    """
    started = time.monotonic()
    every = list_tests(test_runner_dir)
    outcomes: list[Outcome] = []
    for scenario in SCENARIOS:
        if not _choose(every, tests, scenario):
            continue
        daemon = librdkafka_daemon(factory, scenario)
        result = run_librdkafka(
            test_runner_dir,
            daemon.bootstrap,
            tests,
            max(timeout_s - (time.monotonic() - started), 0),
            scenario=scenario,
            parallel=parallel,
            quick=quick,
            log=log_dir / f"librdkafka-{scenario}.log" if log_dir else None,
        )
        outcomes.extend(result.outcomes)
        if not daemon.alive():
            tail = _tail(daemon.log(), lines=5)
            outcomes.append(Outcome("(kfs serve)", "failed", f"{scenario}: it died: {tail}"))
        else:
            daemon.stop()
    return SuiteResult(SUITE, outcomes, time.monotonic() - started)


def _choose(
    every: Sequence[RunnerTest], selection: Sequence[str] | None, scenario: str
) -> list[RunnerTest]:
    broker = [t for t in every if not t.local and not t.manual and scenario in t.scenarios]
    if selection is None:
        return broker
    wanted = set(selection)
    unknown = wanted - {t.name for t in every} - {t.number for t in every}
    if unknown:
        raise ValueError(f"not tests of test-runner: {', '.join(sorted(unknown))}")
    return [t for t in broker if t.name in wanted or t.number in wanted]


def _runner_env(
    scratch: Path, bootstrap: str, scenario: str, extra_env: Mapping[str, str]
) -> dict[str, str]:
    env = {
        **os.environ,
        "TEST_KAFKA_VERSION": KAFKA_VERSION,
        "TEST_SCENARIO": scenario,
        "BROKERS": bootstrap,
        # The libraries built beside the tests, not the installed librdkafka1.
        "LD_LIBRARY_PATH": "../src:../src-cpp",
        "RDKAFKA_GITVER": f"debian/{DEBIAN_VERSION}",
    }
    if KAFKA_LIB.is_dir():
        env["KAFKA_PATH"] = str(_kafka_distribution(scratch / "kafka"))
    return {**env, **extra_env}


def _test_conf(scratch: Path, number: str, bootstrap: str, timeout_multiplier: float) -> Path:
    """The ``test.conf`` of one test number's process (``RDKAFKA_TEST_CONF``).

    Its topics are named ``rdkafkatest_<number>_...``, so that the ``-D``
    clean-up at the end of the process (test_delete_all_test_topics, by
    prefix) deletes that number's topics and no other process's.
    """
    conf = scratch / f"test-{number}.conf"
    conf.write_text(
        f"bootstrap.servers={bootstrap}\n"
        f"test.timeout.multiplier={timeout_multiplier:g}\n"
        f"test.topic.prefix={TOPIC_PREFIX}_{number}\n"
    )
    return conf


def _kafka_distribution(kafka_path: Path) -> Path:
    """A ``KAFKA_PATH`` laid out as a Kafka release, made of the Kafka tools jars.

    ``libs/`` is `KAFKA_LIB`; ``bin/kafka-run-class.sh`` runs a class with
    them and ``$CLASSPATH`` (0098 and 0113 run java/*.java programs so), and
    ``bin/kafka-<tool>.sh`` runs that tool's class, as Kafka's own scripts do.
    """
    bin_dir = kafka_path / "bin"
    bin_dir.mkdir(parents=True)
    (kafka_path / "libs").symlink_to(KAFKA_LIB, target_is_directory=True)
    classpath = shlex.quote(str(KAFKA_LIB) + "/*")
    scripts = {
        "kafka-run-class": (
            f"exec java -Xmx512m -Dlog4j2.configurationFile={shlex.quote(str(LOG4J_CONFIG))} "
            f'-cp "${{CLASSPATH:+$CLASSPATH:}}"{classpath} "$@"'
        ),
        **{
            tool: f'exec "$(dirname "$0")/kafka-run-class.sh" {MAIN_CLASSES[tool]} "$@"'
            for tool in KAFKA_SCRIPTS
        },
    }
    for tool, command in scripts.items():
        script = bin_dir / f"{tool}.sh"
        script.write_text(f"#!/bin/sh\n{command}\n")
        script.chmod(0o755)
    return kafka_path


def _build_java_programs(test_runner_dir: Path, kafka_path: Path) -> str:
    """Compile tests/java/*.java (``make -C java``) once, before tests ask for it side by side.

    Returns what make said when it failed (the tests that run them then fail), else "".
    """
    done = subprocess.run(
        ["make", "-s", "-C", "java", f"KAFKA_PATH={kafka_path}"],
        cwd=test_runner_dir,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode == 0:
        return ""
    return f"\n##### make -C java failed ({done.returncode}):\n{done.stdout}{done.stderr}"


@dataclass
class _NumberRun:
    stderr: str
    log: str
    why_stopped: str  # "" when the process exited by itself before the deadline


def _run_number(
    test_runner_dir: Path, number: str, args: list[str], env: Mapping[str, str], deadline: float
) -> _NumberRun:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return _NumberRun("", f"\n##### TESTS={number}: not started, no time left\n", NOT_RUN)
    with tempfile.TemporaryFile("w+") as err, tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(
            ["./test-runner", *args],
            cwd=test_runner_dir,  # tests open interceptor_test/, fixtures/ relative to it
            env=env,
            stdout=out,
            stderr=err,
            start_new_session=True,  # test-runner and the Kafka tools it runs: one group to kill
        )
        why_stopped = ""
        try:
            returncode = proc.wait(min(remaining, PROCESS_TIMEOUT_S))
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            returncode = proc.wait()
            why_stopped = (
                f"killed after {PROCESS_TIMEOUT_S} s"
                if remaining > PROCESS_TIMEOUT_S
                else "the suite's time ran out"
            )
        err.seek(0)
        out.seek(0)
        stderr, stdout = err.read(), out.read()
    header = f"\n##### TESTS={number} test-runner {' '.join(args)}: exit {returncode}"
    if returncode < 0:
        why_stopped = why_stopped or f"killed by signal {-returncode}"
    log = f"{header}{f' ({why_stopped})' if why_stopped else ''}\n{stderr}{stdout}"
    return _NumberRun(stderr, ANSI.sub("", log), why_stopped)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended as the timer fired
        os.killpg(pid, signal.SIGKILL)


def lost_race(outcome: Outcome) -> Outcome:
    """A failure `RACES` names as a lost race, skipped with its reason; any other outcome as is."""
    pattern, why = RACES.get(outcome.test, ("", ""))
    if outcome.status != "failed" or not pattern or not re.search(pattern, outcome.detail):
        return outcome
    return Outcome(outcome.test, "skipped", f"lost a race: {why}; it failed so: {outcome.detail}")


def outcomes_from_output(
    lines: Iterable[str], tests: Sequence[str], stopped: str = ""
) -> list[Outcome]:
    """One `Outcome` per name in ``tests``, from a test-runner's standard error ``lines``.

    A ``Test X PASSED|FAILED|SKIPPED`` line is the result; a test that
    failed fatally (``TEST_FAIL``: its thread exits) or timed out prints only
    its ``### Test "X" failed`` message, which is then the result.  The
    runner skips a test (flags, version, ``TESTS_SKIP``) with a
    ``SKIPPING TEST:`` warning and no ``Running`` line.  ``stopped``: why the
    process was cut short, if it was, for the tests it left unfinished.
    """
    started: set[str] = set()
    results: dict[str, str] = {}
    failures: dict[str, str] = {}
    skips: dict[str, str] = {}
    pending_failure: str | None = None
    for raw in lines:
        line = ANSI.sub("", raw).rstrip()
        if pending_failure is not None:  # the line after "### Test X failed" is the message
            failures[pending_failure] += line.strip()
            pending_failure = None
            continue
        if found := RUNNING.search(line):
            started.add(found["test"])
        elif found := RESULT.search(line):
            results.setdefault(found["test"], found["result"].lower())
        elif found := FAILURE.search(line):
            if found["test"] not in failures:
                failures[found["test"]] = f"{found['where']}: "
                pending_failure = found["test"]
        elif found := SKIPPING.search(line):
            skips.setdefault(found["test"], found["reason"].strip())
    outcomes = []
    for name in tests:
        result = results.get(name)
        if result == "passed":
            outcomes.append(Outcome(name, "passed"))
        elif result == "skipped" or (name in skips and name not in started):
            outcomes.append(Outcome(name, "skipped", skips.get(name, "")))
        elif result == "failed" or name in failures:
            detail = failures.get(name, "failed (no message)")
            outcomes.append(Outcome(name, "failed", detail[:DETAIL_CHARS]))
        elif name in started:
            why = f": {stopped}" if stopped else ""
            outcomes.append(Outcome(name, "failed", f"{UNFINISHED}{why}"))
        else:
            why = f": {stopped}" if stopped else ": the test-runner ended before it"
            outcomes.append(Outcome(name, "failed", f"{NOT_RUN}{why}"))
    return outcomes
