"""`TopicRegistry` on both stores: create, get, list, describe, alter, delete, purge, races."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from kfs_core.catalog import DEFAULT_CONFIGS, TopicRegistry
from kfs_core.errors import (
    CorruptCatalog,
    InvalidConfig,
    InvalidPartitions,
    InvalidTopicName,
    TopicAlreadyExists,
    UnknownTopic,
)
from kfs_core.storage.base import ObjectStore
from tests.catalog.conftest import NS


@pytest.fixture
def registry(store: ObjectStore) -> TopicRegistry:
    return TopicRegistry(store, NS)


def test_create_get_describe(registry: TopicRegistry, store: ObjectStore) -> None:
    created = registry.create_topic(
        "orders", 3, {"cleanup.policy": "compact", "retention.ms": 1000}
    )
    assert store.exists(f"{NS}/_topics/orders.json")
    record = registry.get("orders")
    assert record == created
    assert (record.name, record.partitions, record.revision, record.deleted) == (
        "orders",
        3,
        0,
        False,
    )
    assert record.configs == {"cleanup.policy": "compact", "retention.ms": "1000"}
    description = registry.describe("orders")
    assert description.config.compacted
    assert description.config.retention_ms == 1000
    assert description.effective_configs["segment.bytes"] == DEFAULT_CONFIGS["segment.bytes"]
    assert description.is_default("segment.bytes") and not description.is_default("retention.ms")


def test_duplicate_create_is_topic_already_exists(registry: TopicRegistry) -> None:
    registry.create_topic("orders")
    with pytest.raises(TopicAlreadyExists, match="already exists"):
        registry.create_topic("orders", 5)
    assert registry.get("orders").partitions == 1


def test_racing_creates_have_one_winner(registry: TopicRegistry) -> None:
    barrier = threading.Barrier(8)

    def create(i: int) -> object:
        barrier.wait(timeout=60)
        try:
            return registry.create_topic("contested", i + 1)
        except TopicAlreadyExists as exc:
            return exc

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(create, range(8)))
    winners = [o for o in outcomes if not isinstance(o, Exception)]
    assert len(winners) == 1
    assert registry.get("contested") == winners[0]


@pytest.mark.parametrize(
    ("name", "partitions", "configs", "error"),
    [
        ("bad name", 1, None, InvalidTopicName),
        ("x" * 250, 1, None, InvalidTopicName),
        ("..", 1, None, InvalidTopicName),
        ("ok", 0, None, InvalidPartitions),
        ("ok", -3, None, InvalidPartitions),
        ("ok", "2", None, InvalidPartitions),
        ("ok", 1, {"retention.ms": "-7"}, InvalidConfig),
        ("ok", 1, {"no.such.config": "1"}, InvalidConfig),
    ],
)
def test_create_validates(
    registry: TopicRegistry, name: str, partitions: object, configs: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        registry.create_topic(name, partitions, configs)  # type: ignore[arg-type]
    assert registry.list_topics() == []


def test_longest_legal_name_works(registry: TopicRegistry) -> None:
    name = "t" * 249
    registry.create_topic(name)
    assert registry.list_topics() == [name]


def test_unknown_topic(registry: TopicRegistry) -> None:
    with pytest.raises(UnknownTopic):
        registry.get("nope")
    with pytest.raises(UnknownTopic):
        registry.alter_configs("nope", {"retention.ms": 1})
    with pytest.raises(UnknownTopic):
        registry.delete_topic("nope")
    assert not registry.exists("nope")


def test_list_topics(registry: TopicRegistry) -> None:
    for name in ("b", "a.b", "a", "a-b", "c"):
        registry.create_topic(name)
    registry.alter_configs("c", {"retention.ms": 5})
    registry.delete_topic("b")
    assert registry.list_topics() == ["a", "a-b", "a.b", "c"]
    assert registry.deleted_topics() == ["b"]
    assert registry.list_topics(include_deleted=True) == ["a", "a-b", "a.b", "b", "c"]


def test_alter_configs_sets_and_resets(registry: TopicRegistry) -> None:
    registry.create_topic("orders", 1, {"retention.ms": 1000, "cleanup.policy": "compact"})
    record = registry.alter_configs(
        "orders", {"retention.bytes": 10}, delete_configs=["retention.ms"]
    )
    assert record.revision == 1
    assert record.configs == {"cleanup.policy": "compact", "retention.bytes": "10"}
    assert registry.get("orders") == record
    with pytest.raises(InvalidConfig):
        registry.alter_configs("orders", {"compression.type": "brotli"})
    with pytest.raises(InvalidConfig):
        registry.alter_configs("orders", delete_configs=["no.such"])
    with pytest.raises(InvalidConfig, match="both set and delete"):
        registry.alter_configs("orders", {"retention.ms": 1}, delete_configs=["retention.ms"])
    assert registry.get("orders").revision == 1


def test_concurrent_alters_lose_no_update(registry: TopicRegistry) -> None:
    registry.create_topic("orders")
    settings = [
        ("retention.ms", "1000"),
        ("retention.bytes", "2000"),
        ("cleanup.policy", "compact"),
        ("compression.type", "zstd"),
        ("segment.bytes", "1048576"),
        ("max.message.bytes", "100"),
        ("delete.retention.ms", "5"),
        ("min.compaction.lag.ms", "6"),
    ]
    barrier = threading.Barrier(len(settings))

    def alter(setting: tuple[str, str]) -> int:
        barrier.wait(timeout=60)
        return TopicRegistry(registry.store, NS).alter_configs("orders", dict([setting])).revision

    with ThreadPoolExecutor(len(settings)) as pool:
        revisions = list(pool.map(alter, settings))
    assert sorted(revisions) == list(range(1, len(settings) + 1))
    assert registry.get("orders").configs == dict(settings)


def test_create_partitions_only_grows(registry: TopicRegistry) -> None:
    registry.create_topic("orders", 2)
    assert registry.create_partitions("orders", 5).partitions == 5
    with pytest.raises(InvalidPartitions, match="must be larger"):
        registry.create_partitions("orders", 5)
    assert registry.get("orders").partitions == 5


def test_delete_marks_then_purge_forgets(registry: TopicRegistry, store: ObjectStore) -> None:
    first = registry.create_topic("orders", 1, {"retention.ms": 1})
    registry.alter_configs("orders", {"retention.ms": 2})
    registry.delete_topic("orders")
    with pytest.raises(UnknownTopic):
        registry.get("orders")
    with pytest.raises(UnknownTopic):
        registry.delete_topic("orders")
    with pytest.raises(TopicAlreadyExists, match="marked for deletion"):
        registry.create_topic("orders")
    registry.purge_topic("orders")
    assert list(store.list(f"{NS}/_topics/")) == []
    second = registry.create_topic("orders", 4)
    assert second.topic_id != first.topic_id
    assert registry.get("orders") == second
    registry.purge_topic("never-existed")  # nothing to do


def test_purge_refuses_a_live_topic(registry: TopicRegistry) -> None:
    registry.create_topic("orders")
    with pytest.raises(UnknownTopic, match="delete it first"):
        registry.purge_topic("orders")


def test_leftovers_of_an_earlier_incarnation_are_ignored(
    registry: TopicRegistry, store: ObjectStore
) -> None:
    old = registry.create_topic("orders")
    registry.alter_configs("orders", {"retention.ms": 7})
    # A purge that crashed after deleting the record leaves old revisions behind.
    store.delete(f"{NS}/_topics/orders.json")
    new = registry.create_topic("orders", 2)
    assert registry.get("orders") == new
    assert new.topic_id != old.topic_id
    assert registry.list_topics() == ["orders"]


def test_corrupt_record_names_its_key(registry: TopicRegistry, store: ObjectStore) -> None:
    store.put(f"{NS}/_topics/orders.json", b"{not json")
    with pytest.raises(CorruptCatalog) as caught:
        registry.get("orders")
    assert caught.value.object_name == f"{NS}/_topics/orders.json"


def test_record_under_the_wrong_name_is_corrupt(
    registry: TopicRegistry, store: ObjectStore
) -> None:
    registry.create_topic("orders")
    store.put(f"{NS}/_topics/payments.json", store.get(f"{NS}/_topics/orders.json"))
    with pytest.raises(CorruptCatalog, match="its key says"):
        registry.get("payments")


def test_records_are_readable_json(registry: TopicRegistry, store: ObjectStore) -> None:
    registry.create_topic("orders", 2, {"retention.ms": 1})
    text = store.get(f"{NS}/_topics/orders.json").decode()
    assert '"name": "orders"' in text
    assert '"retention.ms": "1"' in text
