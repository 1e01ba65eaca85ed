"""`TopicRegistry`: which topics a namespace has, their partition counts and configs.

Layout, under ``{ns}/_topics/``::

    {name}.json                              revision 0: created with put_if_absent
    {name}/{topic_id}/{revision:020d}.json   revisions 1, 2, … (alter, add partitions, delete)

Each record is complete (name, topic id, partitions, config overrides,
deleted flag), so the newest revision is the topic.  A change reads the newest
revision, applies itself and writes the next revision with put_if_absent; the
loser of a race re-reads and applies its change again to the winner's record,
so concurrent `alter_configs` calls never lose an update.  The store has no
compare-and-swap on a fixed key, which is why revisions are separate objects.

The topic id (a UUID, like Kafka's) names the revision directory, so the
revisions of a deleted and later re-created topic can never be mistaken for
the new topic's.  `delete_topic` only marks the topic deleted: it vanishes
from `list_topics`/`get`, and creating it again fails with
`TopicAlreadyExists` ("marked for deletion", as Kafka says) until its data
is removed and `purge_topic` called (`kfs_core.catalog.purge`, which the
daemon runs right after DeleteTopics), because segment keys do not carry the
topic id.

The registry is the single source of truth for topic configs.  Partition
logs can record a ``topic_config`` action (`PartitionCatalog.set_topic_config`),
but `alter_configs` does not fan out to them: N partition commits cannot be
made atomic with the registry write, and two sources that can disagree are
worse than one.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, StrictBool, StrictInt, StrictStr

from kfs_core.catalog import layout
from kfs_core.catalog.actions import FORMAT_VERSION, NonNegative, _Model, parse_model
from kfs_core.catalog.config import (
    DEFAULT_CONFIGS,
    ConfigValue,
    TopicConfig,
    validate_config,
    validate_configs,
    validate_topic_name,
)
from kfs_core.catalog.log_files import io_pool
from kfs_core.clock import now_ms
from kfs_core.errors import (
    CatalogCommitConflict,
    CorruptCatalog,
    InvalidConfig,
    InvalidPartitions,
    ObjectAlreadyExists,
    ObjectNotFound,
    TopicAlreadyExists,
    UnknownTopic,
)
from kfs_core.storage.base import ObjectStore

MAX_PARTITIONS = 1 << 20
_MAX_ATTEMPTS = 32


class TopicRecord(_Model):
    """One revision of a topic: the whole topic as of that revision."""

    format: Literal[1] = FORMAT_VERSION
    name: StrictStr
    topic_id: StrictStr
    revision: NonNegative
    partitions: Annotated[StrictInt, Field(ge=1, le=MAX_PARTITIONS)]
    configs: dict[StrictStr, StrictStr]  # overrides only; defaults are not stored
    deleted: StrictBool = False
    created_ms: StrictInt
    updated_ms: StrictInt
    # What CreateTopics asked for and Metadata reports; not stored durability.
    # Documents written before it existed read as 1.
    replication_factor: Annotated[StrictInt, Field(ge=1)] = 1


@dataclass(frozen=True)
class TopicDescription:
    """What ``kafka-topics --describe`` shows: the record plus the effective config."""

    record: TopicRecord
    config: TopicConfig
    effective_configs: Mapping[str, str]  # every config name, override or default

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def partitions(self) -> int:
        return self.record.partitions

    def is_default(self, config_name: str) -> bool:
        return config_name not in self.record.configs


class TopicRegistry:
    """Create, read, alter and delete the topics of one namespace."""

    def __init__(
        self, store: ObjectStore, namespace: str, *, clock: Callable[[], int] | None = None
    ) -> None:
        self.store = store
        self.namespace = namespace
        self._clock = clock or now_ms
        self._prefix = layout.topics_prefix(namespace)
        self._rng = random.Random()

    def __repr__(self) -> str:
        return f"TopicRegistry({self.store!r}, {self.namespace!r})"

    # --- keys ------------------------------------------------------------------

    def _record_key(self, name: str) -> str:
        return f"{self._prefix}{name}.json"

    def _revisions_prefix(self, name: str, topic_id: str) -> str:
        return f"{self._prefix}{name}/{topic_id}/"

    def _revision_key(self, name: str, topic_id: str, revision: int) -> str:
        return f"{self._revisions_prefix(name, topic_id)}{revision:0{layout.VERSION_DIGITS}d}.json"

    # --- reading ---------------------------------------------------------------

    def get(self, name: str) -> TopicRecord:
        """The topic's newest record; `UnknownTopic` if absent or deleted."""
        validate_topic_name(name)
        record = self._current(name)
        if record is None or record.deleted:
            raise UnknownTopic(f"unknown topic {name!r}", topic=name)
        return record

    def exists(self, name: str) -> bool:
        try:
            self.get(name)
        except UnknownTopic:
            return False
        return True

    def describe(self, name: str) -> TopicDescription:
        record = self.get(name)
        return TopicDescription(
            record=record,
            config=TopicConfig.from_configs(record.configs),
            effective_configs={**DEFAULT_CONFIGS, **record.configs},
        )

    def list_topics(self, *, include_deleted: bool = False) -> list[str]:
        """Names of the topics, sorted; deleted ones (awaiting purge) only on request."""
        names: list[str] = []
        with_revisions: set[str] = set()
        for info in self.store.list(self._prefix):
            rest = info.key[len(self._prefix) :]
            if "/" in rest:
                with_revisions.add(rest.split("/", 1)[0])
            elif rest.endswith(".json"):
                names.append(rest[: -len(".json")])
        # A topic never altered is alive at revision 0: no GET needed.
        to_read = [n for n in names if n in with_revisions]
        records = dict(zip(to_read, io_pool().map(self._current, to_read), strict=True))
        alive = [n for n in names if n not in records]
        for n, record in records.items():
            if record is not None and (include_deleted or not record.deleted):
                alive.append(n)
        return sorted(alive)

    def deleted_topics(self) -> list[str]:
        """Topics marked deleted whose data and registry entry are yet to be purged."""
        every = set(self.list_topics(include_deleted=True))
        return sorted(every - set(self.list_topics()))

    def deleted_record(self, name: str) -> TopicRecord | None:
        """The newest record of ``name`` if it is marked deleted (awaiting purge); else None."""
        validate_topic_name(name)
        record = self._current(name)
        return record if record is not None and record.deleted else None

    # --- writing ---------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        configs: Mapping[str, ConfigValue] | None = None,
        replication_factor: int = 1,
    ) -> TopicRecord:
        """Create a topic; `TopicAlreadyExists` if it exists (or awaits purge)."""
        validate_topic_name(name)
        _check_partitions(partitions)
        now = self._clock()
        record = TopicRecord(
            name=name,
            topic_id=uuid.uuid4().hex,
            revision=0,
            partitions=partitions,
            configs=validate_configs(configs),
            created_ms=now,
            updated_ms=now,
            replication_factor=replication_factor,
        )
        try:
            self.store.put_if_absent(self._record_key(name), _encode(record))
        except ObjectAlreadyExists:
            current = self._current(name)
            if current is not None and current.deleted:
                raise TopicAlreadyExists(
                    f"topic {name!r} is marked for deletion; it can be created again once "
                    "its data is removed (seconds after the delete)",
                    topic=name,
                ) from None
            raise TopicAlreadyExists(f"topic {name!r} already exists", topic=name) from None
        return record

    def alter_configs(
        self,
        name: str,
        set_configs: Mapping[str, ConfigValue] | None = None,
        delete_configs: Iterable[str] = (),
    ) -> TopicRecord:
        """Set and/or reset (to the default) config overrides, like IncrementalAlterConfigs."""
        updates = validate_configs(set_configs)
        resets = list(delete_configs)
        for key in resets:
            if key in updates:
                raise InvalidConfig(f"{key}: cannot both set and delete it", key=key)
            validate_config(key, DEFAULT_CONFIGS.get(key, ""))  # unknown names are errors

        def change(record: TopicRecord) -> dict[str, object]:
            configs = {k: v for k, v in record.configs.items() if k not in resets}
            configs.update(updates)
            return {"configs": validate_configs(configs)}  # checked together again

        return self._update(name, change)

    def edit_configs(
        self, name: str, edit: Callable[[Mapping[str, str]], Mapping[str, ConfigValue]]
    ) -> TopicRecord:
        """Replace the overrides with ``edit(current overrides)``, validated.

        For changes computed from the current values (AlterConfigs' "these and
        no others", IncrementalAlterConfigs' APPEND and SUBTRACT): when another
        writer wins the race, ``edit`` runs again on the winner's record.
        """

        def change(record: TopicRecord) -> dict[str, object]:
            return {"configs": validate_configs(edit(dict(record.configs)))}

        return self._update(name, change)

    def create_partitions(self, name: str, total: int) -> TopicRecord:
        """Raise the partition count to ``total`` (Kafka never lowers it)."""
        _check_partitions(total)

        def change(record: TopicRecord) -> dict[str, object]:
            if total <= record.partitions:
                raise InvalidPartitions(
                    f"topic {name!r} has {record.partitions} partitions; the new count must be "
                    f"larger, got {total}",
                    topic=name,
                    partitions=total,
                )
            return {"partitions": total}

        return self._update(name, change)

    def delete_topic(self, name: str) -> TopicRecord:
        """Mark the topic deleted; `kfs_core.catalog.purge` removes its data, then calls `purge_topic`."""
        return self._update(name, lambda record: {"deleted": True})

    def purge_topic(self, name: str) -> None:
        """Forget a deleted topic entirely (once its data is removed): the name is free again."""
        validate_topic_name(name)
        record = self._current(name)
        if record is None:
            return
        if not record.deleted:
            raise UnknownTopic(f"topic {name!r} is not marked deleted; delete it first", topic=name)
        # List before the record goes: once it has, the name may be created again.
        leftovers = [info.key for info in self.store.list(f"{self._prefix}{name}/")]
        self.store.delete(self._record_key(name))
        for key in leftovers:
            self.store.delete(key)

    # --- internals ---------------------------------------------------------------

    def _current(self, name: str) -> TopicRecord | None:
        key = self._record_key(name)
        try:
            data = self.store.get(key)
        except ObjectNotFound:
            return None
        record = _decode(data, key, name, None, 0)
        newest = None
        for info in self.store.list(self._revisions_prefix(name, record.topic_id)):
            newest = info.key
        if newest is None:
            return record
        revision = int(newest.rsplit("/", 1)[1].split(".", 1)[0])
        try:
            data = self.store.get(newest)
        except ObjectNotFound:  # purged under us
            return None
        return _decode(data, newest, name, record.topic_id, revision)

    def _update(
        self, name: str, change: Callable[[TopicRecord], Mapping[str, object]]
    ) -> TopicRecord:
        validate_topic_name(name)
        for attempt in range(1, _MAX_ATTEMPTS + 1):
            current = self._current(name)
            if current is None or current.deleted:
                raise UnknownTopic(f"unknown topic {name!r}", topic=name)
            fields = dict(current.model_dump())
            fields.update(change(current))
            fields.update(revision=current.revision + 1, updated_ms=self._clock())
            record = TopicRecord.model_validate(fields)
            try:
                self.store.put_if_absent(
                    self._revision_key(name, record.topic_id, record.revision), _encode(record)
                )
            except ObjectAlreadyExists:
                time.sleep(self._rng.uniform(0, min(0.5, 0.002 * 2**attempt)))
                continue
            return record
        raise CatalogCommitConflict(
            f"topic {name!r}: lost {_MAX_ATTEMPTS} races to update the registry; giving up",
            topic=name,
        )


def _check_partitions(partitions: object) -> None:
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise InvalidPartitions(f"partition count must be an integer, got {partitions!r}")
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidPartitions(
            f"partition count must be from 1 to {MAX_PARTITIONS}, got {partitions}",
            partitions=partitions,
        )


def _encode(record: TopicRecord) -> bytes:
    # Replication factor 1 is left out: the document stays what older readers accept.
    unset = {"replication_factor"} if record.replication_factor == 1 else None
    return record.model_dump_json(indent=1, exclude=unset).encode() + b"\n"


def _decode(data: bytes, key: str, name: str, topic_id: str | None, revision: int) -> TopicRecord:
    record = parse_model(TopicRecord, data, key)
    expected = (name, topic_id or record.topic_id, revision)
    found = (record.name, record.topic_id, record.revision)
    if found != expected:
        raise CorruptCatalog(
            f"record says (name, topic id, revision) = {found}, its key says {expected}",
            object_name=key,
            offset=0,
        )
    return record
