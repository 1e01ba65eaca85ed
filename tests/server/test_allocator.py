"""The daemon's allocator tuning (kfs_core.server.allocator): applied on glibc, harmless twice."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

from kfs_core.server.allocator import ALLOCATOR_SETTINGS


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt"
)
def test_every_setting_is_applied_on_glibc_and_big_buffers_are_reused() -> None:
    # A fresh interpreter, as kfs serve is: the settings apply before any thread starts.
    script = """
import json, resource
from kfs_core.server.allocator import tune_allocator
applied = tune_allocator()
again = tune_allocator()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):  # warm: the heap grows to 40 MiB once
    bytearray(40 << 20)
before = faults()
for _ in range(20):
    bytearray(40 << 20)  # freed at once: with the tuning, the same heap memory every time
print(json.dumps({"applied": applied, "again": again, "faults": faults() - before}))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    assert result["applied"] == {name: value for _, value, name in ALLOCATOR_SETTINGS}
    assert result["again"] == result["applied"]
    # Untuned, glibc maps every buffer above 32 MiB afresh and unmaps it on free:
    # 20 x 40 MiB is 204,800 page faults.  Tuned, the heap's memory is reused.
    assert result["faults"] < 2_000, result
