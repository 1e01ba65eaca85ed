"""The README's shell commands work as written in a fresh shell.

Every line of README.md's ```sh blocks is one of:

- ``make run`` / ``make test``: they start the whole stack or run the whole
  suite, so they are not run here (tests/cli/test_run.py and CI cover them);
- a ``kfs ...`` usage form (the synopsis under "The `kfs` command"):
  ``.venv/bin/kfs <command> --help`` must succeed and list every ``--option``
  the line names;
- anything else: it runs exactly as written and must exit 0.

A fresh shell is ``env -i PATH=/usr/bin:/bin HOME=...``: no virtualenv
activated, no ``KFS_*`` variable but ``KFS_LISTEN``, which points `kfs
produce` / `kfs consume` at this test's daemon rather than 127.0.0.1:9092.
The commands run in a directory laid out like a checkout: its ``.venv`` is
this one's, its ``.kfs/store`` the daemon's store.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testkit.ports import free_port
from testkit.waiting import wait_for
from tests.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

README = REPO / "README.md"
VENV = REPO / ".venv"
NOT_RUN = {
    "make run": "starts KFS and Airflow until Ctrl-C (tests/cli/test_run.py starts `kfs run`)",
    "make test": "runs this suite",
}
# A usage form names a placeholder (UPPER), an alternative (a|b) or an optional part ([...]).
USAGE_FORM = re.compile(r"[A-Z_]{3,}|\||\[")


@dataclass(frozen=True)
class Command:
    block: int
    line: str


def readme_commands() -> list[Command]:
    blocks = re.findall(r"^```sh\n(.*?)^```", README.read_text(), re.S | re.M)
    return [
        Command(number, raw.strip())
        for number, block in enumerate(blocks)
        for raw in block.splitlines()
        if raw.strip() and not raw.lstrip().startswith("#")
    ]


def is_usage_form(command: Command) -> bool:
    return command.line.startswith("kfs ") and bool(USAGE_FORM.search(command.line))


def usage_path(line: str) -> list[list[str]]:
    """The commands a usage line names, one list of words per alternative.

    ``kfs groups list|describe GROUP|delete GROUP``
    -> [[groups, list], [groups, describe], [groups, delete]].
    """
    words = line.split("#", maxsplit=1)[0].split()[1:]
    path: list[str] = []
    for i, word in enumerate(words):
        if re.fullmatch(r"[a-z][a-z-]*", word):
            path.append(word)
            continue
        if "|" in word and not word.startswith(("-", "[")):
            alternatives = []
            for later in words[i:]:
                if later.startswith(("-", "[")):
                    break
                alternatives += [w for w in later.split("|") if re.fullmatch(r"[a-z][a-z-]*", w)]
            return [[*path, alternative] for alternative in alternatives]
        break
    return [path]


def usage_options(line: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", line.split("#", maxsplit=1)[0]))


def fresh_shell_env(home: Path, **extra: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), **extra}


def test_readme_commands_are_all_classified() -> None:
    commands = readme_commands()
    assert commands, "README.md has no ```sh blocks"
    run_as_written = [c for c in commands if c.line.split("#")[0].strip() not in NOT_RUN]
    assert any(is_usage_form(c) for c in run_as_written)
    assert any(not is_usage_form(c) for c in run_as_written)


@pytest.mark.skipif(not (VENV / "bin" / "kfs").exists(), reason="no .venv in the checkout")
def test_kfs_usage_forms_match_the_help(tmp_path: Path) -> None:
    forms = [c for c in readme_commands() if is_usage_form(c)]
    assert forms
    for form in forms:
        for path in usage_path(form.line):
            assert path, form.line
            result = subprocess.run(
                [str(VENV / "bin" / "kfs"), *path, "--help"],
                env=fresh_shell_env(tmp_path),
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert result.returncode == 0, (form.line, path, result.stderr)
            missing = {o for o in usage_options(form.line) if o not in result.stdout}
            assert not missing, f"{form.line!r}: `kfs {' '.join(path)} --help` lacks {missing}"


@pytest.fixture
def checkout(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A directory like a checkout (``.venv``, ``.kfs/``) with `kfs serve` running on its store."""
    root = tmp_path / "checkout"
    root.mkdir()
    (root / ".venv").symlink_to(VENV)
    kafka_port, metrics_port = free_port(), free_port()
    bootstrap = f"127.0.0.1:{kafka_port}"
    log = tmp_path / "kfs.log"
    with log.open("wb") as out:
        daemon = subprocess.Popen(
            [str(VENV / "bin" / "kfs"), "serve", "--flush-interval-ms", "100"],
            env=fresh_shell_env(
                tmp_path,
                KFS_LISTEN=bootstrap,
                KFS_METRICS_LISTEN=f"127.0.0.1:{metrics_port}",
            ),
            cwd=root,
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def ready() -> bool:
        assert daemon.poll() is None, log.read_text()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    try:
        wait_for(ready, timeout=60, what="kfs serve /readyz")
        yield root, bootstrap
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(10)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.skipif(not (VENV / "bin" / "kfs").exists(), reason="no .venv in the checkout")
def test_readme_commands_run_as_written(checkout: tuple[Path, str], tmp_path: Path) -> None:
    root, bootstrap = checkout
    commands = [
        c
        for c in readme_commands()
        if not is_usage_form(c) and c.line.split("#")[0].strip() not in NOT_RUN
    ]
    assert any("kfs produce" in c.line for c in commands)
    assert any("spark" in c.line for c in commands)
    produced = False
    for command in commands:
        if produced and ("spark_jobs" in command.line or "kfs jobs" in command.line):
            # The jobs read sealed segments: wait for the daemon's flush (100 ms).
            time.sleep(1.0)
        result = subprocess.run(
            ["/bin/sh", "-c", command.line],
            env=fresh_shell_env(tmp_path, KFS_LISTEN=bootstrap),
            cwd=root,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, (
            f"README: {command.line}\nexit {result.returncode}\n"
            f"stdout: {result.stdout[-3000:]}\nstderr: {result.stderr[-3000:]}"
        )
        produced = produced or "kfs produce" in command.line
    assert (root / ".kfs" / "store").is_dir()
