"""Thread names the operating system shows: ``top -H``, ``perf`` and ``/proc/<pid>/task``.

Python names its threads for itself only: to the kernel every thread of the
daemon is ``python``, so a profile by thread (``top -H``, ``perf top
--sort comm``, the run-queue figures of ``bench.produce_cpu``) cannot tell
the event loop from the WAL writer.  The daemon's long-lived threads call
`name_os_thread` when they start.  Linux keeps 15 bytes of a name.
"""

from __future__ import annotations

import threading

import setproctitle

__all__ = ["OS_NAME_BYTES", "name_os_thread"]

OS_NAME_BYTES = 15


def name_os_thread() -> None:
    """Give the calling thread's Python name (its first 15 bytes) to the operating system.

    A ``ThreadPoolExecutor(initializer=name_os_thread)`` names each worker as
    it starts.  Where the platform has no thread names this does nothing.
    """
    setproctitle.setthreadtitle(threading.current_thread().name[:OS_NAME_BYTES])
