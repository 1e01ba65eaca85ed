"""The WAL directory lock: one daemon per directory, and the previous holder's incarnation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kfs_core.log.wal.lock import WalDirectoryInUse, WalDirectoryLock


def test_the_first_holder_finds_no_previous_incarnation(tmp_path: Path) -> None:
    lock = WalDirectoryLock(tmp_path / "wal")
    assert lock.acquire("a1") is None
    lock.release()


def test_the_next_holder_learns_the_previous_incarnation(tmp_path: Path) -> None:
    first = WalDirectoryLock(tmp_path)
    first.acquire("first-incarnation")
    first.release()
    second = WalDirectoryLock(tmp_path)
    assert second.acquire("second") == "first-incarnation"
    second.release()


def test_a_second_holder_is_refused_while_the_first_holds_it(tmp_path: Path) -> None:
    first = WalDirectoryLock(tmp_path)
    first.acquire("a")
    with pytest.raises(WalDirectoryInUse, match="another kfs serve is using the WAL directory"):
        WalDirectoryLock(tmp_path).acquire("b")
    first.release()
    assert WalDirectoryLock(tmp_path).acquire("c") == "a"


def test_a_killed_holder_leaves_the_lock_free(tmp_path: Path) -> None:
    """The kernel drops a flock when its process dies, kill -9 included."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from kfs_core.log.wal.lock import WalDirectoryLock\n"
            f"WalDirectoryLock({str(tmp_path)!r}).acquire('killed')\n"
            "print('held', flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == b"held"
    with pytest.raises(WalDirectoryInUse):
        WalDirectoryLock(tmp_path).acquire("x")
    holder.kill()
    holder.wait(10)
    assert WalDirectoryLock(tmp_path).acquire("after") == "killed"
