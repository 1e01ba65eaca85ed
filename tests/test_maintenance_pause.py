"""The emergency pause flag: the object the daemon puts and the jobs look for."""

from __future__ import annotations

import json
import os
from pathlib import Path

from kfs_core.maintenance_pause import (
    EMERGENCY_PAUSE_KEY,
    emergency_pause_key,
    is_paused,
    set_emergency_flag,
)
from kfs_core.storage.local import LocalObjectStore


def test_emergency_flag_is_put_and_cleared(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "store")
    assert emergency_pause_key("ns") == f"ns/{EMERGENCY_PAUSE_KEY}" == "ns/_control/emergency-pause"
    assert not is_paused(store, "ns")
    set_emergency_flag(store, "ns", True)
    assert is_paused(store, "ns") and not is_paused(store, "other")
    body = json.loads((tmp_path / "store" / "ns" / "_control" / "emergency-pause").read_bytes())
    assert body["reason"] == "durability=emergency" and body["pid"] == os.getpid()
    set_emergency_flag(store, "ns", True)  # idempotent
    set_emergency_flag(store, "ns", False)
    assert not is_paused(store, "ns")
    set_emergency_flag(store, "ns", False)  # clearing twice is fine
