"""`TopicCache`: the daemon's view of the topic registry -- partition counts and configs.

Every append, read and flush asks for its topic, so the registry's answer is
cached: a known topic for ``topic_refresh_ms`` (an older entry is still
served, and refreshed off the request path), an unknown one for at most a
second.  Admin requests that just wrote a registry record hand it over
(`TopicCache.adopt`), so altered configs and added partitions apply at once.

Deleted topics.  `TopicCache.forget` marks a name unknown at once and bumps
its generation; a registry answer or catalog load begun before that is about
the deleted topic and is dropped (`generation` lets the partition table
check the same).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from kfs_core.catalog.config import ConfigValue, TopicConfig
from kfs_core.catalog.topics import TopicRecord, TopicRegistry
from kfs_core.errors import (
    CatalogError,
    InvalidTopicName,
    LogStorageError,
    ObjectStoreError,
    TopicAlreadyExists,
    UnknownTopic,
    UnknownTopicOrPartition,
)
from kfs_core.threads import run_in

__all__ = ["TopicCache", "TopicInfo"]

log = logging.getLogger(__name__)

# How long "this topic does not exist" is believed before the registry is asked again.
_NEGATIVE_TOPIC_TTL_S = 1.0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as the log sees it: partition count and effective config."""

    name: str
    topic_id: str
    partitions: int
    config: TopicConfig

    @classmethod
    def of(cls, record: TopicRecord) -> TopicInfo:
        return cls(
            record.name,
            record.topic_id,
            record.partitions,
            TopicConfig.from_configs(record.configs),
        )

    @property
    def log_append_time(self) -> bool:
        return self.config.message_timestamp_type == "LogAppendTime"


@dataclass(slots=True)
class _TopicEntry:
    info: TopicInfo | None  # None: the registry said the topic does not exist
    fetched_at: float
    refreshing: bool = False
    revision: int = -1  # of the registry record behind ``info``


class TopicCache:
    """Registry records by topic name, cached; created through the registry on request."""

    def __init__(
        self,
        registry: TopicRegistry,
        executor: Executor,
        spawn: Callable[[Awaitable[Any]], object],
        *,
        refresh_ms: int,
    ) -> None:
        self.registry = registry
        self._executor = executor
        self._spawn = spawn
        self._refresh_s = refresh_ms / 1000
        self._topics: dict[str, _TopicEntry] = {}
        # Bumped by forget: registry answers and catalog loads begun before it
        # are about the deleted topic and must not be kept.
        self._generations: dict[str, int] = {}

    async def topic(
        self,
        name: str,
        *,
        auto_create: bool = False,
        partitions: int = 1,
        configs: Mapping[str, ConfigValue] | None = None,
    ) -> TopicInfo:
        """The topic; `UnknownTopicOrPartition` if absent, unless ``auto_create`` makes it."""
        try:
            return await self.get(name)
        except UnknownTopicOrPartition:
            if not auto_create:
                raise
        try:
            return await self.create(name, partitions, configs)
        except TopicAlreadyExists:  # another creator won the race
            return await self.get(name, fresh=True)

    async def create(
        self,
        name: str,
        partitions: int = 1,
        configs: Mapping[str, ConfigValue] | None = None,
    ) -> TopicInfo:
        """Create a topic in the registry (`TopicAlreadyExists`, `InvalidTopicName` ... as it raises)."""
        record = await run_in(self._executor, self.registry.create_topic, name, partitions, configs)
        return self.adopt(record)

    def adopt(self, record: TopicRecord) -> TopicInfo:
        """Serve ``record`` (just written to the registry: new configs, more partitions) at once."""
        info = TopicInfo.of(record)
        self._topics[record.name] = _TopicEntry(info, time.monotonic(), revision=record.revision)
        return info

    def forget(self, name: str) -> None:
        """The topic was deleted: unknown from now on, and answers already under way are void."""
        self._generations[name] = self._generations.get(name, 0) + 1
        self._topics[name] = _TopicEntry(None, time.monotonic())

    def cached_partitions(self, name: str) -> int | None:
        """How many partitions the cached record of ``name`` has; None if none is cached."""
        entry = self._topics.get(name)
        return None if entry is None or entry.info is None else entry.info.partitions

    def cached_config(self, name: str) -> TopicConfig | None:
        """The cached effective config of ``name``; None if none is cached."""
        entry = self._topics.get(name)
        return None if entry is None or entry.info is None else entry.info.config

    def generation(self, name: str) -> int:
        """Changes when the topic is deleted: compare before and after an await."""
        return self._generations.get(name, 0)

    async def get(self, name: str, *, fresh: bool = False) -> TopicInfo:
        """The cached topic (refreshed in the background when old); the registry's if ``fresh``."""
        entry = self._topics.get(name)
        if entry is not None and not fresh:
            age = time.monotonic() - entry.fetched_at
            if entry.info is None:
                if age < min(_NEGATIVE_TOPIC_TTL_S, self._refresh_s):
                    raise UnknownTopicOrPartition(f"unknown topic {name!r}", topic=name)
            else:
                if age >= self._refresh_s and not entry.refreshing:
                    # Serve the cached record; refresh it off the request path.
                    entry.refreshing = True
                    self._spawn(self._load_quietly(name))
                return entry.info
        return await self._load(name)

    async def _load(self, name: str) -> TopicInfo:
        generation = self.generation(name)
        try:
            record = await run_in(self._executor, self.registry.get, name)
        except (UnknownTopic, InvalidTopicName):
            self._topics[name] = _TopicEntry(None, time.monotonic())
            raise UnknownTopicOrPartition(f"unknown topic {name!r}", topic=name) from None
        except (ObjectStoreError, CatalogError) as exc:
            raise LogStorageError(f"reading topic {name!r} from the registry: {exc}") from exc
        if self.generation(name) != generation:
            # Deleted while the registry answered: the answer may predate the delete.
            raise UnknownTopicOrPartition(f"topic {name!r} was deleted", topic=name)
        cached = self._topics.get(name)
        if (
            cached is not None
            and cached.info is not None
            and cached.info.topic_id == record.topic_id
            and cached.revision > record.revision
        ):
            return cached.info  # adopted a newer revision while the registry answered
        return self.adopt(record)

    async def _load_quietly(self, name: str) -> None:
        try:
            await self._load(name)
        except UnknownTopicOrPartition:
            log.info("topic %s is gone from the registry", name)
        except LogStorageError as exc:
            log.warning("refreshing topic %s: %s", name, exc)
            entry = self._topics.get(name)
            if entry is not None:
                entry.refreshing = False
