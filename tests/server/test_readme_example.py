"""The README's client example runs as written against `kfs serve` (it subscribes)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.daemon import DaemonFactory

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_client_example() -> str:
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    (example,) = [b for b in blocks if "Consumer(" in b and "Producer(" in b]
    return example


def test_the_readme_example_subscribes_and_reads_what_it_produced(daemons: DaemonFactory) -> None:
    example = readme_client_example()
    assert ".subscribe(" in example and ".assign(" not in example
    daemon = daemons.start(name="readme")
    script = example.replace("127.0.0.1:9092", daemon.bootstrap)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "b'{...}'"
