"""The network-cut campaign's pieces; its short form is tests/cluster/test_network_cuts.py."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from soak import network_cuts
from soak.network_cuts import Cut
from testkit.netns import NetnsUnavailable


def test_the_plan_is_seeded_and_holds_each_cut_asked_for() -> None:
    first = network_cuts.plan(random.Random(5), store=3, clients=2)
    assert first == network_cuts.plan(random.Random(5), store=3, clients=2)
    assert sorted(first) == ["clients"] * 2 + ["store"] * 3


def test_the_summary_gives_each_cuts_figures() -> None:
    store = [
        Cut("store", one_way=True, failover_s=6.0, rejoin_s=2.0, moved=4),
        Cut("store", one_way=False, failover_s=8.0, rejoin_s=3.0, moved=4),
    ]
    [line] = network_cuts.summary("store", store)
    assert line.startswith("2 x cut from the store (1 one way): failover p50 6.00 s")
    assert "8 partitions moved; rejoin max 3.00 s; application errors 0" in line
    [line] = network_cuts.summary("clients", [Cut("clients", one_way=False, resume_s=1.5)])
    assert line == (
        "1 x cut from its clients (0 one way): resume after restore "
        "p50 1.50 s, p99 1.50 s, max 1.50 s; application errors 0"
    )
    assert network_cuts.summary("clients", []) == []


def test_without_network_namespaces_the_row_fails_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unavailable() -> Iterator[None]:
        raise NetnsUnavailable("network namespaces need root: run the tests as root")

    monkeypatch.setattr(network_cuts, "network_namespace", unavailable)
    [row] = network_cuts.rows(tmp_path, store_cuts=1, client_cuts=1, seed=3)
    assert not row.passed
    assert row.problems == ["not run: network namespaces need root: run the tests as root"]
