"""The emergency pause flag: the daemon sets it, the maintenance jobs read it.

The flag is one object, ``{ns}/_control/emergency-pause``.  The daemon's WAL
manager puts it when the daemon starts in ``durability=emergency`` and deletes
it when the daemon starts in any other mode (`set_emergency_flag`); while it
exists, Spark jobs that would change the store do not start, and they check
it again as they go (`is_paused`).  Its body (reason, since when,
host, pid) is for the operator; only its presence counts.

This module is the contract between the two sides, kept apart from the daemon
so every Spark driver and executor can read the flag without importing
`kfs_core.log`.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import TYPE_CHECKING

from kfs_core.namespace import CONTROL_DIR

if TYPE_CHECKING:
    from kfs_core.storage.base import ObjectStore

__all__ = ["EMERGENCY_PAUSE_KEY", "emergency_pause_key", "is_paused", "set_emergency_flag"]

#: Object key (under the namespace) whose presence tells maintenance jobs to pause.
EMERGENCY_PAUSE_KEY = f"{CONTROL_DIR}/emergency-pause"


def emergency_pause_key(namespace: str) -> str:
    return f"{namespace}/{EMERGENCY_PAUSE_KEY}"


def set_emergency_flag(
    store: ObjectStore, namespace: str, on: bool, *, reason: str = "durability=emergency"
) -> None:
    """Put (``on``) or delete the pause flag that maintenance jobs honour; idempotent."""
    key = emergency_pause_key(namespace)
    if on:
        body = {
            "reason": reason,
            "since_ms": int(time.time() * 1000),
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }
        store.put(key, json.dumps(body, sort_keys=True).encode("utf-8"))
    else:
        store.delete(key)


def is_paused(store: ObjectStore, namespace: str) -> bool:
    """True while the daemon of ``namespace`` runs in emergency mode: jobs must not start."""
    return store.exists(emergency_pause_key(namespace))
