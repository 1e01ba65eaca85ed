"""Topic lookups for the API handlers, and the topic ids Kafka puts on the wire.

`TopicDirectory` is the handlers' one way to topics: the log manager's cached
view for lookups and auto-creation, the registry for admin requests.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping

from kfs_core.catalog.config import (
    ConfigValue,
    TopicConfig,
    validate_configs,
    validate_topic_name,
)
from kfs_core.catalog.topics import MAX_PARTITIONS, TopicDescription, TopicRecord, TopicRegistry
from kfs_core.errors import (
    InvalidPartitions,
    TopicAlreadyExists,
    UnknownTopic,
    UnknownTopicOrPartition,
)
from kfs_core.log.log_manager import LogManager
from kfs_core.log.topic_cache import TopicInfo as LogTopicInfo

__all__ = ["TopicDirectory", "topic_uuid"]

log = logging.getLogger(__name__)


class TopicDirectory:
    """Topic lookups for the handlers: the log manager's cached view, the registry for admin.

    Lookups and auto-creation go through `LogManager.topic`, so the broker
    and the log share one cache.  Names are checked here first, because the
    log reports an illegal name as an unknown topic and Kafka answers
    INVALID_TOPIC_EXCEPTION.  Listing, describing, altering and deleting
    read and write the registry directly (in a worker thread): admin requests
    want the registry's current truth, not a cache.  What an alter or a
    partition increase wrote goes into the log's topic cache at once
    (`LogManager.adopt_topic`), so Metadata, Produce and the flush use it.
    """

    def __init__(self, partition_log: LogManager) -> None:
        self._log = partition_log
        self._registry: TopicRegistry = partition_log.registry
        # (name, topic id) -> replication factor: fixed at creation, so never stale.
        self._replication: dict[tuple[str, str], int] = {}

    async def replication_factor(self, info: LogTopicInfo) -> int:
        """The replication factor the topic was created with (1 if the registry cannot say).

        Read from the registry once per topic (it never changes), then kept.
        """
        key = (info.name, info.topic_id)
        factor = self._replication.get(key)
        if factor is None:
            try:
                record = await asyncio.to_thread(self._registry.get, info.name)
            except Exception as exc:  # noqa: BLE001 - a listing must not fail on one topic
                log.debug("replication factor of topic %r: %s", info.name, exc)
                return 1
            if record.topic_id != info.topic_id:
                return 1  # deleted and created again since the lookup
            factor = self._replication[key] = record.replication_factor
        return factor

    async def lookup(self, name: str) -> LogTopicInfo | None:
        """The topic, or None if it does not exist; `InvalidTopicName` for an illegal name."""
        validate_topic_name(name)
        try:
            return await self._log.topic(name)
        except UnknownTopicOrPartition:
            return None

    async def by_id(self, topic_id: uuid.UUID) -> LogTopicInfo | None:
        """The live topic whose id (as `topic_uuid` puts it on the wire) is ``topic_id``."""
        return next((t for t in await self.all() if topic_uuid(t.topic_id) == topic_id), None)

    async def lookup_or_create(self, name: str, partitions: int) -> LogTopicInfo:
        """The topic, created with ``partitions`` and default configs if it does not exist."""
        validate_topic_name(name)
        try:
            return await self._log.topic(name)
        except UnknownTopicOrPartition:
            pass
        info = await self._log.topic(name, auto_create=True, partitions=partitions)
        log.info("auto-created topic %r with %d partition(s)", name, info.partitions)
        return info

    async def all(self) -> list[LogTopicInfo]:
        """Every live topic in the registry."""
        names = await asyncio.to_thread(self._registry.list_topics)
        found = await asyncio.gather(*(self.lookup(n) for n in names), return_exceptions=True)
        return [info for info in found if isinstance(info, LogTopicInfo)]

    async def create(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str],
        *,
        validate_only: bool,
        replication_factor: int = 1,
    ) -> tuple[LogTopicInfo, dict[str, str]]:
        """Create a topic (or only check that it could be); the info and its config overrides.

        ``replication_factor`` (at least 1) is kept in the registry for
        Metadata to report; durability does not depend on it.
        """
        validate_topic_name(name)
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidPartitions(
                f"number of partitions must be from 1 to {MAX_PARTITIONS}, got {partitions}"
            )
        overrides = validate_configs(configs)
        if validate_only:
            if await asyncio.to_thread(self._registry.exists, name):
                raise TopicAlreadyExists(f"topic {name!r} already exists", topic=name)
            config = TopicConfig.from_configs(overrides)
            return LogTopicInfo(name, uuid.uuid4().hex, partitions, config), overrides
        if replication_factor == 1:
            info = await self._log.create_topic(name, partitions, overrides)
        else:  # the log creates with the default factor only
            record = await asyncio.to_thread(
                self._registry.create_topic, name, partitions, overrides, replication_factor
            )
            info = self._log.adopt_topic(record)
        self._replication[(name, info.topic_id)] = replication_factor
        return info, overrides

    async def describe(self, name: str) -> TopicDescription:
        validate_topic_name(name)
        try:
            return await asyncio.to_thread(self._registry.describe, name)
        except UnknownTopic:
            raise UnknownTopicOrPartition(f"unknown topic {name!r}", topic=name) from None

    async def create_partitions(self, name: str, total: int) -> int:
        """Raise the topic's partition count to ``total``; Metadata and Produce see it at once.

        `InvalidPartitions` unless ``total`` is larger than the current count.
        """
        record = await self._registry_call(name, self._registry.create_partitions, total)
        self._log.adopt_topic(record)
        return record.partitions

    async def edit_configs(
        self,
        name: str,
        edit: Callable[[Mapping[str, str]], Mapping[str, ConfigValue]],
        *,
        validate_only: bool,
    ) -> dict[str, str]:
        """Replace the topic's config overrides with ``edit(current)``; the new overrides.

        The log flushes, validates and stamps by the new configs from the moment
        this returns.  `InvalidConfig` for an unknown name or a bad value.
        """
        if validate_only:
            current = (await self.describe(name)).record.configs
            return validate_configs(edit(dict(current)))
        record = await self._registry_call(name, self._registry.edit_configs, edit)
        self._log.adopt_topic(record)
        return dict(record.configs)

    async def _registry_call(
        self, name: str, change: Callable[..., TopicRecord], *args: object
    ) -> TopicRecord:
        """``change(name, *args)`` in a worker thread; an unknown topic as Kafka names it."""
        validate_topic_name(name)
        try:
            return await asyncio.to_thread(change, name, *args)
        except UnknownTopic:
            raise UnknownTopicOrPartition(f"unknown topic {name!r}", topic=name) from None

    async def delete(self, name: str) -> None:
        """Mark the topic deleted in the registry, drop it from the log at once, purge it.

        Produce, Fetch and Metadata answer UNKNOWN_TOPIC_OR_PARTITION from the
        moment this returns; the topic's unflushed batches are discarded.  Its
        data is removed in the background, then the name is free again
        (`LogManager.purge_topic`).
        """
        validate_topic_name(name)
        try:
            await asyncio.to_thread(self._registry.delete_topic, name)
        except UnknownTopic:
            raise UnknownTopicOrPartition(f"unknown topic {name!r}", topic=name) from None
        await self._log.forget_topic(name)
        self._log.purge_topic(name)


def topic_uuid(topic_id: str) -> uuid.UUID:
    """The registry's topic id (32 hex digits) as the UUID Kafka puts on the wire."""
    try:
        return uuid.UUID(hex=topic_id)
    except ValueError:
        return uuid.uuid5(uuid.NAMESPACE_URL, f"kfs-topic:{topic_id}")
