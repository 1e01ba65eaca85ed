"""`kfs_core.cli.processes`: children in their own process groups, and stopping them.

`tests/cli/test_run.py` runs them under `kfs run`; these check the pieces on
small Python children.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from kfs_core.cli.processes import Child, log_tail, proc_table, rotate_log, stop_children
from testkit.waiting import wait_for

pytestmark = pytest.mark.unit


def _python(name: str, code: str, tmp_path: Path) -> Child:
    return Child(name, [sys.executable, "-c", code], os.environ, tmp_path / f"{name}.log")


def test_a_child_logs_to_its_file_in_its_own_process_group(tmp_path: Path) -> None:
    log = tmp_path / "hello.log"
    log.write_text("the previous run\n")
    child = _python(
        "hello", "import os; print('hello', os.getpgid(0)); raise SystemExit(3)", tmp_path
    )
    child.start()
    wait_for(child.exited, timeout=30, what="the child to exit")
    assert child.returncode == 3
    assert log_tail(log) == [f"hello {child.pid}"]  # the group is its own
    assert (tmp_path / "hello.log.1").read_text() == "the previous run\n"
    rotate_log(log)
    assert not log.exists() and log_tail(log) == []


def test_stop_children_terms_twice_then_kills(tmp_path: Path) -> None:
    stubborn = _python(
        "stubborn",
        "import signal, time; signal.signal(signal.SIGTERM, lambda *a: print('TERM', flush=True));"
        " print('ready', flush=True); time.sleep(60)",
        tmp_path,
    )
    stubborn.start()
    wait_for(lambda: "ready" in log_tail(stubborn.log_path), timeout=30, what="the handler")
    stop_children([stubborn], 0.3, force=lambda: False)
    assert stubborn.returncode == -signal.SIGKILL
    assert stubborn.signals_sent == 2
    assert log_tail(stubborn.log_path).count("TERM") == 2


@pytest.mark.skipif(proc_table() is None, reason="needs /proc")
def test_an_exited_child_leaves_nothing_behind_in_its_group(tmp_path: Path) -> None:
    parent = _python(
        "parent",
        "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
        "'import time; time.sleep(60)']); print(p.pid, flush=True)",
        tmp_path,
    )
    parent.start()
    wait_for(parent.exited, timeout=30, what="the parent to exit")
    (grandchild,) = (int(line) for line in log_tail(parent.log_path))
    table = proc_table() or {}
    assert grandchild not in table or table[grandchild][2] == "Z"
