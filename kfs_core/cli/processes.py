"""Process primitives of `kfs run`: children in their own process groups, and stopping them.

`Child` is one supervised process: started in a new session (its own process
group, so Ctrl-C reaches the supervisor alone) with its output appended to a
log file, and, on Linux, a parent-death signal so it dies with the
supervisor even if the supervisor is killed.  An exited child's leftovers in
its group are stopped before it is reaped, so its pid (the group id) is never
reused while the group is signalled.  `stop_children` stops a set of children
with a grace period (TERM, TERM again, KILL); `become_subreaper` and
`stop_descendants` make sure nothing started below the supervisor outlives it.

Who is still alive is read from /proc (`proc_table`); without it (not Linux)
a group is signalled once and no more.  What `kfs run` starts, and in which
order, is `kfs_core.cli.supervisor`.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

__all__ = [
    "LEFTOVER_GRACE_S",
    "TICK_S",
    "Child",
    "become_subreaper",
    "descendants",
    "group_alive",
    "log_tail",
    "proc_table",
    "reap_orphans",
    "rotate_log",
    "stop_children",
    "stop_descendants",
]

# How long the leftovers of a process group (and orphans) get between TERM and KILL.
LEFTOVER_GRACE_S: Final = 5.0
TICK_S: Final = 0.2
LOG_TAIL_LINES: Final = 20

_PR_SET_PDEATHSIG: Final = 1
_PR_SET_CHILD_SUBREAPER: Final = 36


def _linux_prctl() -> Callable[[int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    prctl: Callable[[int, int], int] = libc.prctl
    return prctl


_PRCTL = _linux_prctl()


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux): orphans below it are re-parented here.

    So no grandchild (a task process, a Spark JVM) escapes `stop_descendants`.
    Whether it worked; False where there is no ``prctl``.
    """
    return _PRCTL is not None and _PRCTL(_PR_SET_CHILD_SUBREAPER, 1) == 0


def _child_setup(parent: int) -> Callable[[], None]:
    """Run in the child before exec: die with the supervisor, even if it is killed."""

    def setup() -> None:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent:  # the supervisor died before prctl took effect
                os._exit(1)

    return setup


def rotate_log(log_path: Path) -> None:
    """Keep the previous run's log as ``<name>.log.1``; this run's starts empty."""
    if log_path.exists() and log_path.stat().st_size:
        log_path.replace(log_path.with_name(log_path.name + ".1"))


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


class Child:
    """One supervised process: its own process group, its output in ``log_path``."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        env: Mapping[str, str],
        log_path: Path,
        *,
        term_group: bool = False,
    ) -> None:
        self.name = name
        self.term_group = term_group  # SIGTERM the whole group, not the leader alone
        self.argv = argv
        self.env = dict(env)
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.returncode: int | None = None
        self.stopping = False
        self._signalled_at = 0.0
        self._signals = 0

    @property
    def pid(self) -> int:
        return self.process.pid if self.process is not None else -1

    def start(self, *, rotate: bool = True) -> None:
        if rotate:
            rotate_log(self.log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the supervisor only
                # PR_SET_PDEATHSIG can only be set in the child between fork and exec; the
                # hook calls nothing but prctl and getppid, which is safe with threads.
                preexec_fn=_child_setup(os.getpid()),  # noqa: PLW1509 - see above
            )

    def exited(self) -> bool:
        """Whether the process has exited; its group's leftovers are stopped, then it is reaped.

        The exited leader is left a zombie until its group is empty, so its pid
        (the group id) cannot be reused while `_stop_group` signals the group.
        """
        if self.returncode is not None:
            return True
        if self.process is None:
            return False
        try:
            info = os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped already
            info = None
            if self.process.poll() is None:
                return False
        else:
            if info is None:
                return False
            self._stop_group()
        self.returncode = self.process.wait()
        return True

    def terminate(self) -> None:
        """SIGTERM the process, or its group when ``term_group``; again if called again."""
        self.stopping = True
        if self.process is None or self.returncode is not None:
            return
        self._signals += 1
        self._signalled_at = time.monotonic()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.term_group:
                os.killpg(self.process.pid, signal.SIGTERM)
            else:
                self.process.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the whole process group."""
        self.stopping = True
        if self.process is None or self.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def since_signal(self) -> float:
        return time.monotonic() - self._signalled_at

    @property
    def signals_sent(self) -> int:
        return self._signals

    def _stop_group(self) -> None:
        """TERM, then KILL, whatever is left in the process group of an exited leader.

        Without /proc (not Linux) nobody can tell who is left: TERM the group, no more.
        """
        assert self.process is not None
        pgid = self.process.pid
        known = proc_table() is not None
        for signum, grace in ((signal.SIGTERM, LEFTOVER_GRACE_S), (signal.SIGKILL, 0.0)):
            if known and not group_alive(pgid, exclude=pgid):
                return
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signum)
            if not known:
                return
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and group_alive(pgid, exclude=pgid):
                time.sleep(TICK_S)


def group_alive(pgid: int, *, exclude: int) -> bool:
    """Whether a live process other than ``exclude`` is in process group ``pgid`` (Linux)."""
    return any(
        pg == pgid and pid != exclude and state != "Z"
        for pid, (_, pg, state) in (proc_table() or {}).items()
    )


def proc_table() -> dict[int, tuple[int, int, str]] | None:
    """Each pid's (ppid, pgid, state) from /proc, or None where there is no /proc."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return None
    table: dict[int, tuple[int, int, str]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses.
        fields = stat.rpartition(")")[2].split()
        if len(fields) >= 3:
            table[int(entry.name)] = (int(fields[1]), int(fields[2]), fields[0])
    return table


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (children, theirs ...), from /proc; [] without it."""
    procs = proc_table() or {}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found: list[int] = []
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def reap_orphans(known: set[int]) -> None:
    """Reap exited processes re-parented to this subreaper (never a `Child`'s own pid)."""
    me = os.getpid()
    for pid, (ppid, _, state) in (proc_table() or {}).items():
        if ppid == me and state == "Z" and pid not in known:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def stop_children(children: list[Child], grace: float, *, force: Callable[[], bool]) -> None:
    """TERM each child; TERM again after ``grace``, KILL after another; KILL when ``force()``.

    The second TERM matters to some: Airflow's scheduler stops waiting for running tasks.
    """
    for child in children:
        if not child.exited():
            child.terminate()
    while True:
        running = [c for c in children if not c.exited()]
        if not running:
            return
        for child in running:
            if force():
                child.kill()
            elif child.since_signal() > grace:
                if child.signals_sent == 1:
                    child.terminate()
                else:
                    child.kill()
        time.sleep(TICK_S)


def stop_descendants() -> None:
    """TERM, then KILL, every process still below this one (orphans re-parented to a subreaper)."""
    for signum, grace in (
        (signal.SIGTERM, LEFTOVER_GRACE_S),
        (signal.SIGKILL, LEFTOVER_GRACE_S),
    ):
        left = descendants(os.getpid())
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            reap_orphans(set())
            if not descendants(os.getpid()):
                return
            time.sleep(TICK_S)
