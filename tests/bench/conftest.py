"""Tier markers for the benchmarks' tests, as the rooms they test mark theirs.

A test without a tier marker of its own is ``integration`` when it touches
S3 (the ``s3`` side of the ``store`` fixture, or moto directly), ``unit``
otherwise.  None is ``bench``: that marker is for the benchmarks' full runs,
which `make bench` starts, not for these short forms.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).parent
_TIERS = ("integration", "slow", "bench", "spark", "airflow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE not in Path(str(item.fspath)).parents:
            continue
        if any(item.get_closest_marker(tier) for tier in _TIERS):
            continue
        callspec = getattr(item, "callspec", None)
        fixtures = getattr(item, "fixturenames", ())
        uses_s3 = (
            "s3_store" in fixtures
            or "moto_server" in fixtures
            or (callspec is not None and callspec.params.get("store") == "s3")
        )
        item.add_marker(pytest.mark.integration if uses_s3 else pytest.mark.unit)
