"""What the multi-daemon tests share: a `DaemonFactory` that kills what it started."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.daemon import DaemonFactory


@pytest.fixture
def factory(tmp_path: Path) -> Iterator[DaemonFactory]:
    daemons = DaemonFactory(tmp_path)
    try:
        yield daemons
    finally:
        daemons.close()
