"""The daemon's threads: names the operating system shows, and work handed to a pool.

`run_in` runs a blocking call on an executor and awaits it without blocking
the event loop; every part of the daemon that reads the store or the disk
from asyncio goes through it.

Thread names the operating system shows: ``top -H``, ``perf`` and ``/proc/<pid>/task``.

Python names its threads for itself only: to the kernel every thread of the
daemon is ``python``, so a profile by thread (``top -H``, ``perf top
--sort comm``, the run-queue figures of ``bench.produce_cpu``) cannot tell
the event loop from the WAL writer.  The daemon's long-lived threads call
`name_os_thread` when they start.  Linux keeps 15 bytes of a name.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

import setproctitle

__all__ = ["OS_NAME_BYTES", "name_os_thread", "run_in"]

T = TypeVar("T")

OS_NAME_BYTES = 15


def name_os_thread() -> None:
    """Give the calling thread's Python name (its first 15 bytes) to the operating system.

    A ``ThreadPoolExecutor(initializer=name_os_thread)`` names each worker as
    it starts.  Where the platform has no thread names this does nothing.
    """
    setproctitle.setthreadtitle(threading.current_thread().name[:OS_NAME_BYTES])


async def run_in(executor: Executor, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on ``executor``, awaited without blocking the loop."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(executor, functools.partial(fn, *args))
