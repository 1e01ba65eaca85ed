"""Every directory KFS writes directly under a namespace is a reserved topic name."""

from __future__ import annotations

from pathlib import Path

import pytest

from kfs_core.catalog import TopicRegistry
from kfs_core.catalog.config import RESERVED_TOPIC_NAMES, validate_topic_name
from kfs_core.catalog.snapshots import take_snapshot
from kfs_core.cluster.nodes import NodeRegistry
from kfs_core.cluster.view import NodeInfo
from kfs_core.errors import InvalidTopicName
from kfs_core.log.wal.store import wal_object_key
from kfs_core.maintenance_pause import set_emergency_flag
from kfs_core.namespace import DIRECTORIES, PAGE_DIR, RESERVED_NAMES
from kfs_core.reports import report_key
from kfs_core.security.scram import make_credential
from kfs_core.security.users import UserStore
from kfs_core.storage.local import LocalObjectStore
from kfs_core.tables import open_catalog

NS = "ns"


def test_the_reserved_topic_names_are_the_namespace_directories() -> None:
    assert RESERVED_TOPIC_NAMES == RESERVED_NAMES == set(DIRECTORIES)
    assert {"_topics", "_snapshots", "_reports", "_control"} <= RESERVED_TOPIC_NAMES


@pytest.mark.parametrize("name", DIRECTORIES)
def test_a_topic_named_like_a_namespace_directory_is_refused(name: str) -> None:
    with pytest.raises(InvalidTopicName, match="reserved"):
        validate_topic_name(name)


def test_every_directory_written_under_a_namespace_is_reserved(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "store")
    TopicRegistry(store, NS).create_topic("orders")  # {ns}/_topics/
    take_snapshot(store, NS, "first")  # {ns}/_snapshots/
    store.put(report_key(NS, "compaction", "run-1"), b"{}")  # {ns}/_reports/
    set_emergency_flag(store, NS, True)  # {ns}/_control/
    UserStore(store, NS).set_credential(
        "u", make_credential("SCRAM-SHA-256", "pw", 4096)
    )  # _security/
    store.put(f"{NS}/{PAGE_DIR}/overview.json", b"{}")  # the KFS page's copy
    NodeRegistry(store, NS).write(NodeInfo(1, "i", {}, "store"))  # _cluster/
    store.put(wal_object_key(NS, 1, "i", 0), b"")  # _wal/
    open_catalog(store.url, NS).create_namespace(NS)  # _tables/: the embedded table catalog
    written = {info.key.split("/")[1] for info in store.list(f"{NS}/")}
    assert written == set(DIRECTORIES)  # this test writes under every one of them
    for name in written:
        with pytest.raises(InvalidTopicName):
            validate_topic_name(name)
