"""`kfs topics alter`, `kfs topics add-partitions` and `kfs topics delete` on the registry.

A running daemon picking the change up: tests/server/test_server_admin.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kfs_core.catalog import PartitionCatalog, TopicRegistry
from kfs_core.cluster.nodes import encode_node, node_key
from kfs_core.cluster.view import NodeInfo
from kfs_core.storage import LocalObjectStore
from tests.catalog.conftest import seg
from tests.cli.test_cli import kfs

pytestmark = pytest.mark.integration


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    env = {"KFS_STORE_URL": (tmp_path / "store").as_uri(), "KFS_NAMESPACE": "ns1"}
    created = kfs("topics", "create", "orders", "--config", "retention.ms=3600000", env=env)
    assert created.returncode == 0, created.stderr
    return env


def registry(tmp_path: Path) -> TopicRegistry:
    return TopicRegistry(LocalObjectStore(tmp_path / "store"), "ns1")


def test_alter_sets_and_resets_configs(tmp_path: Path, env: dict[str, str]) -> None:
    altered = kfs(
        "topics",
        "alter",
        "orders",
        "--config",
        "cleanup.policy=compact",
        "--add-config",
        "retention.bytes=1000",
        "--delete-config",
        "retention.ms",
        env=env,
    )
    assert altered.returncode == 0, altered.stderr
    assert "cleanup.policy = compact  (set)" in altered.stdout
    assert "retention.ms = 604800000  (default)" in altered.stdout
    assert registry(tmp_path).get("orders").configs == {
        "cleanup.policy": "compact",
        "retention.bytes": "1000",
    }
    # kafka-configs style: several names in one --delete-config.
    reset = kfs(
        "topics", "alter", "orders", "--delete-config", "cleanup.policy,retention.bytes", env=env
    )
    assert reset.returncode == 0, reset.stderr
    assert registry(tmp_path).get("orders").configs == {}


def test_add_partitions(tmp_path: Path, env: dict[str, str]) -> None:
    grown = kfs("topics", "add-partitions", "orders", "--partitions", "4", env=env)
    assert grown.returncode == 0, grown.stderr
    assert "orders: 1 -> 4 partitions" in grown.stdout
    assert registry(tmp_path).get("orders").partitions == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["alter", "orders", "--config", "retention.ms=soon"], "retention.ms"),
        (["alter", "orders", "--config", "no.such.config=1"], "unknown topic config"),
        (["alter", "orders", "--delete-config", "no.such.config"], "unknown topic config"),
        (["alter", "orders", "--config", "no-equals"], "NAME=VALUE"),
        (["alter", "missing", "--config", "retention.ms=1"], "unknown topic"),
        (["add-partitions", "orders", "--partitions", "1"], "must be larger"),
        (["add-partitions", "orders", "--partitions", "0"], "partition count"),
        (["add-partitions", "missing", "--partitions", "3"], "unknown topic"),
    ],
)
def test_mistakes_get_one_line_and_change_nothing(
    tmp_path: Path, env: dict[str, str], args: list[str], message: str
) -> None:
    result = kfs("topics", *args, env=env)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kfs: error: "), result.stderr
    assert message in lines[0]
    record = registry(tmp_path).get("orders")
    assert (record.partitions, record.configs) == (1, {"retention.ms": "3600000"})


def test_alter_without_a_change_is_a_usage_error(env: dict[str, str]) -> None:
    result = kfs("topics", "alter", "orders", env=env)
    assert result.returncode == 2
    assert "nothing to change" in result.stderr


def test_delete_with_no_daemon_running_purges_at_once(tmp_path: Path, env: dict[str, str]) -> None:
    store = LocalObjectStore(tmp_path / "store")
    catalog = PartitionCatalog(store, "ns1", "orders", 0)
    entry = seg(0, topic="orders")
    store.put(f"ns1/{entry.key}", b"segment")
    catalog.add_segments([entry])

    deleted = kfs("topics", "delete", "orders", env=env)
    assert deleted.returncode == 0, deleted.stderr
    assert "the name is free" in deleted.stdout
    assert not store.exists(f"ns1/{entry.key}")
    assert registry(tmp_path).deleted_topics() == []
    created = kfs("topics", "create", "orders", env=env)
    assert created.returncode == 0, created.stderr
    assert PartitionCatalog(store, "ns1", "orders", 0).refresh().log_start_offset == 10


def test_delete_while_a_daemon_runs_leaves_the_purge_to_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    store = LocalObjectStore(tmp_path / "store")
    node = NodeInfo(1, "running-one", {}, "cautious")
    store.put(node_key("ns1", 1), encode_node(node, heartbeat_ms=int(time.time() * 1000)))

    deleted = kfs("topics", "delete", "orders", env=env)
    assert deleted.returncode == 0, deleted.stderr
    assert "running daemons [1] purge its data" in deleted.stdout
    assert registry(tmp_path).deleted_topics() == ["orders"]
