"""franz-go's kgo test suite (github.com/twmb/franz-go, pinned) against a real `kfs serve`.

franz-go's ``pkg/kgo`` tests include integration tests that run a Go
client against whatever broker ``KGO_SEEDS`` names: produce and consume,
consumer groups with every balancer (``TestGroupETL``), a transactional
consume-transform-produce chain (``TestTxnEtl``), admin requests, and a
regression test for many of the library's issues (``TestIssue*``).  The
source is the module `FRANZ_GO_VERSION` as the Go module proxy serves it:
`fetch_source` downloads it once with ``go mod download -json`` into
``.build/franz-go-<version>/`` (out of Go's read-only module cache, made
writable) and `build_test_binary` compiles the test binary once, beside it.
`run_kgo` runs that binary under ``go tool test2json`` and turns the
events into one `Outcome` per top-level test; subtests (``TestGroupETL/range``)
are part of their test, not outcomes of their own.  Every top-level test
that runs is counted, unit tests included (a run without ``run`` has about a
hundred that never touch the broker): ``run`` selects tests by name.

The environment the tests read (helpers_test.go):

- ``KGO_SEEDS``: the broker to test (`run_kgo` sets it);
- ``KGO_TEST_RF``: the replication factor of the topics they create; KFS
  keeps one copy in its store, so 1 (set here);
- ``KGO_TEST_RECORDS``: records per ETL test, upstream 500000; 50000 runs
  the whole suite in about a minute on two cores (`run_kgo`'s ``records``);
- ``KGO_TEST_UNSAFE``, ``KGO_TEST_CHAOS``, ``KGO_TEST_MAX_TOPIC_PARTS``,
  ``KGO_LOG_LEVEL``, ``KGO_TEST_TLS``, ``KGO_TEST_SCRAM_SEEDS``/``KGO_TEST_SCRAM``
  (``user:pass[:256|512]``) and ``KGO_TEST_OAUTH_SEEDS``: through ``extra_env``.

Some tests skip themselves: the KIP-848 consumer-group tests and the share
group (KIP-932) tests when the broker does not advertise
ConsumerGroupHeartbeat v1 or ShareFetch/ShareAcknowledge v2, which KFS does
not; the SCRAM tests unless ``KGO_TEST_SCRAM_SEEDS`` and ``KGO_TEST_SCRAM``
are set; the OAUTHBEARER test unless ``KGO_TEST_OAUTH_SEEDS`` is (KFS has no
OAUTHBEARER, so setting it makes that test fail).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TextIO

from compat.suites import Outcome, SuiteResult

__all__ = [
    "BUILD_DIR",
    "FRANZ_GO_VERSION",
    "SUITE",
    "GoNotFound",
    "build_test_binary",
    "fetch_source",
    "outcomes_from_events",
    "run_kgo",
]

FRANZ_GO_VERSION = "v1.22.3"
MODULE = "github.com/twmb/franz-go"
SUITE = "franz-go kgo"
BUILD_DIR = Path(__file__).resolve().parent.parent / ".build"
FETCHED_STAMP = ".kfs-fetched"
#: How long past ``-test.timeout`` the binary may run: its own timeout panics first, naming the
#: tests still running, and this kill is only for a binary that hangs even so.
KILL_GRACE_S = 60
DETAIL_LINES = 5
UNFINISHED = "did not finish (panic or timeout)"
#: A line of t.Error, t.Fatal, t.Skip or t.Log output: ``    file_test.go:123: message``.
TEST_MESSAGE = re.compile(r"^\s+(\S+\.go:\d+: .*)$")
#: A test's result line; test2json's framing prints a subtest's unindented.
RESULT_LINE = re.compile(r"^\s*--- (?P<result>PASS|FAIL|SKIP): (?P<test>\S+) \(")


class GoNotFound(RuntimeError):
    """The ``go`` command is not on PATH: franz-go's tests cannot be fetched, built or run."""


def go_command() -> str:
    found = shutil.which("go")
    if found is None:
        raise GoNotFound(
            "franz-go's tests need Go: `go` is not on PATH (install Go 1.26+ from https://go.dev/dl/)"
        )
    return found


def go_env() -> dict[str, str]:
    """This process's environment, with ``-mod=mod`` added to ``GOFLAGS``."""
    env = dict(os.environ)
    env["GOFLAGS"] = f"{env.get('GOFLAGS', '')} -mod=mod".strip()
    return env


def fetch_source(cache: Path = BUILD_DIR) -> Path:
    """franz-go's source at `FRANZ_GO_VERSION`, in ``cache/franz-go-<version>/``, downloaded once.

    ``go mod download -json`` puts the module in Go's module cache (read-only)
    and says where; the copy here is writable, so the test binary can be built
    in it.  A stamp file marks a finished copy; an unfinished one is copied
    again.
    """
    source = cache / f"franz-go-{FRANZ_GO_VERSION}"
    if (source / FETCHED_STAMP).exists():
        return source
    go = go_command()
    cache.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [go, "mod", "download", "-json", f"{MODULE}@{FRANZ_GO_VERSION}"],
        cwd=cache,  # outside any Go module: the download is of the module alone
        env=go_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        module = json.loads(done.stdout)
    except json.JSONDecodeError:
        module = {}
    if done.returncode != 0 or "Dir" not in module:
        reason = module.get("Error") or done.stderr.strip() or done.stdout.strip()
        raise RuntimeError(f"go mod download {MODULE}@{FRANZ_GO_VERSION} failed: {reason}")
    if source.exists():
        shutil.rmtree(source)
    shutil.copytree(module["Dir"], source)
    make_writable(source)
    (source / FETCHED_STAMP).write_text(f"{MODULE}@{FRANZ_GO_VERSION} {module.get('Sum', '')}\n")
    return source


def make_writable(tree: Path) -> None:
    """``chmod -R u+w``: Go's module cache is read-only, and so is a plain copy of it."""
    for directory, _, files in os.walk(tree):
        for path in [directory, *(os.path.join(directory, name) for name in files)]:
            os.chmod(path, os.stat(path).st_mode | 0o200)


def build_test_binary(source: Path) -> Path:
    """The kgo test binary (``go test -c``), beside ``source``; built only when missing.

    The binary's name carries the version, so a new pin builds a new one.
    """
    binary = source.parent / f"kgo-{FRANZ_GO_VERSION}.test"
    if binary.exists():
        return binary
    partial = binary.with_name(binary.name + ".partial")
    done = subprocess.run(
        [go_command(), "test", "-c", "-o", str(partial), "./pkg/kgo/"],
        cwd=source,
        env=go_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"go test -c ./pkg/kgo/ failed in {source}:\n{done.stderr.strip()}")
    partial.replace(binary)  # a build cut short leaves no binary to be mistaken for a whole one
    return binary


def run_kgo(
    source_or_binary: Path,
    seeds: str,
    *,
    records: int,
    run: str | None = None,
    skip: str | None = None,
    timeout_s: int,
    extra_env: Mapping[str, str] = {},
    log: Path | None = None,
) -> SuiteResult:
    """Run the kgo tests against ``seeds``: one `Outcome` per top-level test that started.

    ``source_or_binary``: `fetch_source`'s directory (the binary is built
    when missing) or a test binary (`build_test_binary`'s, beside that
    directory, whose ``pkg/kgo`` it runs in).  ``run`` and ``skip`` are Go
    test name regular expressions (``-test.run``, ``-test.skip``);
    ``timeout_s`` is the binary's ``-test.timeout``.  Tests that started and
    never finished (the binary panicked or timed out) have failed; a binary
    that fails with no failed test (it could not start, say) is one failed
    outcome, ``(test binary)``.  ``log``: where to write the tests' output
    (``go test -v``'s, but with subtests' result lines unindented).
    """
    if source_or_binary.is_dir():
        source, binary = source_or_binary, build_test_binary(source_or_binary)
    else:
        source, binary = source_or_binary.parent / f"franz-go-{FRANZ_GO_VERSION}", source_or_binary
    # Like `go test`, run in the package's directory: a unit test parses its config.go.
    package_dir = source / "pkg" / "kgo"
    command = [
        go_command(), "tool", "test2json", "-t", "-p", "kgo",
        str(binary.resolve()), "-test.v=test2json", "-test.count=1",
        f"-test.timeout={timeout_s}s",
        *([f"-test.run={run}"] if run else []),
        *([f"-test.skip={skip}"] if skip else []),
    ]  # fmt: skip
    env = {
        **go_env(),
        "KGO_SEEDS": seeds,
        "KGO_TEST_RF": "1",
        "KGO_TEST_RECORDS": str(records),
        **extra_env,
    }
    started = time.monotonic()
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=package_dir if package_dir.is_dir() else binary.parent,
        text=True,
        start_new_session=True,  # test2json and the binary under it: one group to kill
    )
    killer = threading.Timer(timeout_s + KILL_GRACE_S, _kill_group, (proc.pid,))
    killer.start()
    try:
        assert proc.stdout is not None
        with open(log or os.devnull, "w") as out:
            events = list(_events(proc.stdout, out))
        returncode = proc.wait()
    finally:
        killer.cancel()
    return SuiteResult(SUITE, outcomes_from_events(events, returncode), time.monotonic() - started)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended as the timer fired
        os.killpg(pid, signal.SIGKILL)


def _events(lines: Iterable[str], out: TextIO) -> Iterable[dict[str, str]]:
    """test2json's events, each one's output written to ``out``; other lines as output events."""
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            event = None
        if not isinstance(event, dict):  # test2json's own complaints, on the merged stderr
            event = {"Action": "output", "Output": line}
        if event.get("Action") == "output":
            out.write(event.get("Output", ""))
        yield event


def outcomes_from_events(events: Iterable[Mapping[str, str]], returncode: int) -> list[Outcome]:
    """One `Outcome` per top-level test in test2json's ``events``, in the order they started.

    A test's result is the first word on it: its ``--- PASS/FAIL/SKIP`` line or
    test2json's event.  When the binary dies, test2json reports the last test
    it saw output from as failed, even one that had printed ``--- SKIP`` (its
    event waits for the line after), and says nothing of the others still running.
    """
    said: dict[str, list[tuple[str, str]]] = {}  # top-level test -> (test or subtest, line)
    results: dict[str, str] = {}  # test or subtest -> pass, fail or skip
    package_lines: list[str] = []
    for event in events:
        name, action = event.get("Test", ""), event.get("Action", "")
        if action == "output":
            line = event.get("Output", "").rstrip("\n")
            if name:
                said.setdefault(name.split("/")[0], []).append((name, line))
            else:
                package_lines.append(line)
            if result := RESULT_LINE.match(line):
                results.setdefault(result["test"], result["result"].lower())
        elif name:
            said.setdefault(name.split("/")[0], [])
            if action in ("pass", "fail", "skip"):
                results.setdefault(name, action)
    every_line = [line for lines in said.values() for _, line in lines] + package_lines
    panic = next((line for line in every_line if line.startswith("panic: ")), "")
    outcomes = [_outcome(name, lines, results, panic) for name, lines in said.items()]
    if returncode != 0 and not any(o.status == "failed" for o in outcomes):
        tail = " | ".join(line.strip() for line in package_lines[-DETAIL_LINES:] if line.strip())
        outcomes.append(Outcome("(test binary)", "failed", f"exit status {returncode}: {tail}"))
    return outcomes


def _outcome(
    name: str, lines: list[tuple[str, str]], results: Mapping[str, str], panic: str
) -> Outcome:
    result = results.get(name)
    if result == "pass":
        return Outcome(name, "passed")
    if result == "skip":
        reasons = _messages(line for test, line in lines if test == name)
        return Outcome(name, "skipped", reasons[0] if reasons else "")
    if result == "fail":
        errors = _messages(line for test, line in lines if results.get(test) == "fail")
        own_panic = next((line for _, line in lines if line.startswith("panic: ")), "")
        return Outcome(name, "failed", " | ".join(errors) or own_panic or "failed (no message)")
    return Outcome(name, "failed", f"{UNFINISHED}: {panic}" if panic else UNFINISHED)


def _messages(lines: Iterable[str]) -> list[str]:
    """The first few ``file_test.go:N: message`` lines: what t.Error, t.Fatal and t.Skip said."""
    found = [m.group(1) for m in map(TEST_MESSAGE.match, lines) if m]
    return found[:DETAIL_LINES]
