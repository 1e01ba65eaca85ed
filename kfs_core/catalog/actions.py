"""Catalog actions and the commit file that carries them.

A commit ``_log/{version:020d}.json`` is one JSON document, one action a line
so that ``cat`` and ``diff`` stay useful and ``jq`` reads it whole::

    {"format":1,"version":7,"commit_id":"3f0c…","writer":"host:1234","timestamp_ms":1700000000000,"operation":"add_segments","actions":[
    {"action":"add","segment":{"base_offset":0,"last_offset":99,…,"key":"orders/0/segment-00000000000000000000.kfs",…}},
    {"action":"set_log_start_offset","offset":0}
    ]}

Actions:

- ``add``: a `SegmentEntry` becomes live.
- ``remove``: a live segment becomes a tombstone (with its removal time, so
  retention deletes the objects only after a grace period).
- ``replace``: inputs become tombstones and outputs live, atomically
  (compaction); an input that is not live aborts the whole commit.
- ``set_log_start_offset``: moves the log start offset forwards.
- ``topic_config``: the topic config overrides in effect from this commit on.
- ``lease``: ``{"action":"lease","epoch":E,"node_id":N,"incarnation":"…","start_offset":S}``,
  daemon ``node_id`` (its run ``incarnation``) owns the partition from this
  commit on, as leader epoch ``E``; a writer may only commit the newest
  lease's epoch plus one (`LeaseConflict`), so exactly one daemon wins each
  epoch.  ``start_offset`` is the log's end (the high watermark) the lease
  was committed on, where epoch ``E`` begins; the writer must give exactly
  that (`LeaseStartMoved` otherwise).  A lease written before the field
  existed has none, and its epoch begins at the high watermark of the state
  it applies to -- the same offset, from its place in the log.  A daemon's
  own commits carry its epoch and are refused once a newer lease stands
  (`FencedLeaderEpoch`, see `kfs_core.catalog.commit`).
- ``leader_epoch_start``: ``{"action":"leader_epoch_start","epoch":E,"start_offset":S}``,
  the newest lease's epoch ``E`` begins at ``S`` rather than where its lease
  said: the records from there to ``S`` were acknowledged under earlier
  epochs, and the new holder replayed them (from the ``store`` mode's WAL
  objects, or its local WAL after a restart) before it served.  Committed
  by the holder of ``E`` (fenced by it) before it commits those records;
  ``E`` must be the newest lease's epoch and ``S`` at least the high
  watermark (`InvalidCatalogAction`).  The history of epochs these two
  actions build is `kfs_core.catalog.epochs`.

Field order is declaration order, so the same commit always encodes to the
same bytes.  Unknown fields are refused (``extra="forbid"``): an old reader
must not silently drop what a newer writer recorded and then checkpoint it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from kfs_core.catalog import layout
from kfs_core.errors import CorruptCatalog

if TYPE_CHECKING:
    from kfs_core.formats.segment import SealedSegment

FORMAT_VERSION: Literal[1] = 1
MAX_CODEC = 4  # Kafka attribute codes: none 0, gzip 1, snappy 2, lz4 3, zstd 4

NonNegative = Annotated[StrictInt, Field(ge=0)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AbortedRange(_Model):
    """An aborted transaction's records: producer ``producer_id``'s, ``first_offset``..``last_offset``.

    ``last_offset`` is the abort marker's (Kafka's ``AbortedTxn``).
    """

    producer_id: NonNegative
    first_offset: NonNegative
    last_offset: NonNegative


class OpenTransaction(_Model):
    """A transaction still open at a segment's last offset: its producer and first offset."""

    producer_id: NonNegative
    first_offset: NonNegative


def _empty(value: tuple[Any, ...]) -> bool:
    return not value


def _false(value: bool) -> bool:
    return not value


class SegmentEntry(_Model):
    """One immutable segment object (and its index) as the catalog knows it.

    ``key`` and ``index_key`` are relative to the namespace:
    ``{topic}/{partition}/segment-{base_offset:020d}.kfs`` and ``.index``.
    ``codec`` is the Kafka codec of the segment's batches, 0 when mixed or
    none, as in the segment header's flags.

    Transactions (`kfs_core.log.transactions`): ``aborted`` lists the
    aborted transactions whose abort marker the segment holds, ``open_txns``
    the transactions open at its last offset; both are left out of the JSON
    when empty, so a segment without transactional batches reads as before.
    A ``read_committed`` read answers from them and the records alone.
    """

    base_offset: NonNegative
    last_offset: NonNegative
    record_count: NonNegative
    size_bytes: NonNegative
    index_size_bytes: NonNegative
    min_timestamp: StrictInt
    max_timestamp: StrictInt
    codec: Annotated[StrictInt, Field(ge=0, le=MAX_CODEC)]
    created_ms: StrictInt
    key: StrictStr
    index_key: StrictStr
    aborted: tuple[AbortedRange, ...] = Field(default=(), exclude_if=_empty)
    open_txns: tuple[OpenTransaction, ...] = Field(default=(), exclude_if=_empty)

    @model_validator(mode="after")
    def _consistent(self) -> SegmentEntry:
        if self.last_offset < self.base_offset:
            raise ValueError(f"last_offset {self.last_offset} < base_offset {self.base_offset}")
        span = self.last_offset - self.base_offset + 1
        if self.record_count > span:
            raise ValueError(f"record_count {self.record_count} > offset span {span}")
        if self.min_timestamp > self.max_timestamp:
            raise ValueError(
                f"min_timestamp {self.min_timestamp} > max_timestamp {self.max_timestamp}"
            )
        if not self.key.endswith(layout.SEGMENT_SUFFIX):
            raise ValueError(f"segment key {self.key!r} does not end in {layout.SEGMENT_SUFFIX}")
        if not self.index_key.endswith(layout.INDEX_SUFFIX):
            raise ValueError(f"index key {self.index_key!r} does not end in {layout.INDEX_SUFFIX}")
        # Every field counts as set (the transaction fields' JSON leaves them out
        # when empty), so every entry's "fields set" is the same:
        # one shared set instead of a set of its own (a frozenset would do,
        # but pydantic's serializer takes only a set; the entry is frozen and
        # `model_copy` is its own, so nothing adds to it).  A partition of
        # 10,000 segments holds 10,000 entries for the daemon's life, and the
        # garbage collector's full collections walked each entry's set (about
        # seven times the cost of walking the entries themselves).
        object.__setattr__(self, "__pydantic_fields_set__", _EVERY_SEGMENT_FIELD)
        return self

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A new entry with ``update``'s fields changed, validated as any entry is.

        ``deep`` changes nothing: every field is immutable.  (pydantic's
        own copy would add ``update``'s names to the shared fields set, and
        skip the validation.)
        """
        return type(self)(**{**self.__dict__, **(update or {})})

    @classmethod
    def for_partition(
        cls,
        topic: str,
        partition: int,
        *,
        base_offset: int,
        last_offset: int,
        record_count: int,
        size_bytes: int,
        index_size_bytes: int,
        min_timestamp: int,
        max_timestamp: int,
        codec: int,
        created_ms: int,
        key_suffix: str = "",
    ) -> SegmentEntry:
        """An entry with the standard keys of ``topic``/``partition``."""
        key = layout.segment_key(topic, partition, base_offset, key_suffix)
        return cls(
            base_offset=base_offset,
            last_offset=last_offset,
            record_count=record_count,
            size_bytes=size_bytes,
            index_size_bytes=index_size_bytes,
            min_timestamp=min_timestamp,
            max_timestamp=max_timestamp,
            codec=codec,
            created_ms=created_ms,
            key=key,
            index_key=layout.index_key_for(key),
        )

    @classmethod
    def for_sealed(
        cls, topic: str, partition: int, sealed: SealedSegment, *, key_suffix: str = ""
    ) -> SegmentEntry:
        """The entry describing a segment `SegmentWriter.finish` just sealed."""
        meta = sealed.meta
        return cls.for_partition(
            topic,
            partition,
            base_offset=meta.base_offset,
            last_offset=meta.last_offset,
            record_count=meta.record_count,
            size_bytes=meta.size,
            index_size_bytes=len(sealed.index),
            min_timestamp=meta.min_timestamp,
            max_timestamp=meta.max_timestamp,
            codec=meta.codec,
            created_ms=meta.created_ms,
            key_suffix=key_suffix,
        )


_EVERY_SEGMENT_FIELD = set(SegmentEntry.model_fields)


class Tombstone(_Model):
    """A removed segment whose objects may still exist: retention deletes them after a grace.

    Only what deletion and its accounting need is kept, so checkpoints stay small.
    """

    key: StrictStr
    index_key: StrictStr
    base_offset: NonNegative
    last_offset: NonNegative
    size_bytes: NonNegative
    index_size_bytes: NonNegative
    removed_ms: StrictInt

    @classmethod
    def of(cls, segment: SegmentEntry, removed_ms: int) -> Tombstone:
        return cls(
            key=segment.key,
            index_key=segment.index_key,
            base_offset=segment.base_offset,
            last_offset=segment.last_offset,
            size_bytes=segment.size_bytes,
            index_size_bytes=segment.index_size_bytes,
            removed_ms=removed_ms,
        )


class SegmentRef(_Model):
    """Names a live segment by key; the base offset is recorded for readers of the log."""

    key: StrictStr
    base_offset: NonNegative

    @classmethod
    def of(cls, segment: SegmentEntry) -> SegmentRef:
        return cls(key=segment.key, base_offset=segment.base_offset)


class AddSegment(_Model):
    action: Literal["add"] = "add"
    segment: SegmentEntry


class RemoveSegment(_Model):
    action: Literal["remove"] = "remove"
    key: StrictStr
    base_offset: NonNegative
    removed_ms: StrictInt


class ReplaceSegments(_Model):
    action: Literal["replace"] = "replace"
    inputs: Annotated[tuple[SegmentRef, ...], Field(min_length=1)]
    outputs: tuple[SegmentEntry, ...]
    removed_ms: StrictInt


class SetLogStartOffset(_Model):
    """The log start offset moves forwards (DeleteRecords, retention).

    ``past_end`` lets it pass the high watermark, which moves with it: a
    purge of a deleted topic starts the partition above every offset the
    topic ever assigned (`kfs_core.catalog.purge`).  Left out of the JSON
    when false.
    """

    action: Literal["set_log_start_offset"] = "set_log_start_offset"
    offset: NonNegative
    past_end: StrictBool = Field(default=False, exclude_if=_false)


class SetTopicConfig(_Model):
    """The complete set of topic config overrides in effect from this commit on."""

    action: Literal["topic_config"] = "topic_config"
    configs: dict[StrictStr, StrictStr]


class TakeLease(_Model):
    """Daemon ``node_id`` (run ``incarnation``) leads the partition as leader epoch ``epoch``.

    ``start_offset``: the log's end when the lease was taken, where the epoch
    begins (None in leases written before it was recorded; left out of the JSON then).
    """

    action: Literal["lease"] = "lease"
    epoch: Annotated[StrictInt, Field(ge=1)]
    node_id: NonNegative
    incarnation: StrictStr
    start_offset: NonNegative | None = Field(default=None, exclude_if=lambda v: v is None)


class SetLeaderEpochStart(_Model):
    """The newest lease's epoch ``epoch`` begins at ``start_offset``, past what its holder replayed."""

    action: Literal["leader_epoch_start"] = "leader_epoch_start"
    epoch: Annotated[StrictInt, Field(ge=1)]
    start_offset: NonNegative


Action = Annotated[
    AddSegment
    | RemoveSegment
    | ReplaceSegments
    | SetLogStartOffset
    | SetTopicConfig
    | TakeLease
    | SetLeaderEpochStart,
    Field(discriminator="action"),
]


class Commit(_Model):
    """One commit file: who wrote it, when, and its actions (applied atomically, in order)."""

    format: Literal[1] = FORMAT_VERSION
    version: NonNegative
    commit_id: StrictStr
    writer: StrictStr
    timestamp_ms: StrictInt
    operation: StrictStr
    actions: tuple[Action, ...]


def carry_transactions(
    inputs: Sequence[SegmentEntry],
    outputs: Sequence[SegmentEntry],
    removed_markers: AbstractSet[int] = frozenset(),
) -> list[SegmentEntry]:
    """``outputs`` that replace ``inputs`` (in offset order), with their transaction fields.

    A rewrite keeps every control batch it does not remove with its whole
    transaction (``removed_markers``: the offsets of those abort markers,
    whose transactions are forgotten), so each other input's aborted
    transaction goes to the output that holds its abort marker; the last output takes
    the transactions open at the last input's end (only a partition's newest
    segment is read for those).  Without this, a merged or compacted segment
    would forget its aborted transactions and ``read_committed`` readers
    would get their records.
    """
    aborted = sorted(
        (a for entry in inputs for a in entry.aborted if a.last_offset not in removed_markers),
        key=lambda a: a.last_offset,
    )
    last_open = inputs[-1].open_txns if inputs else ()
    carried: list[SegmentEntry] = []
    for i, out in enumerate(outputs):
        mine = tuple(a for a in aborted if out.base_offset <= a.last_offset <= out.last_offset)
        open_txns = last_open if i == len(outputs) - 1 else ()
        changed = mine or open_txns
        carried.append(
            out.model_copy(update={"aborted": mine, "open_txns": open_txns}) if changed else out
        )
    placed = sum(len(o.aborted) for o in carried)
    if placed != len(aborted):
        raise ValueError(
            f"{len(aborted) - placed} aborted transaction(s) of the inputs have their marker "
            "in no output"
        )
    return carried


def encode_document(header: Mapping[str, Any], lists: Sequence[tuple[str, Sequence[str]]]) -> bytes:
    """``header`` as compact JSON, then each named list with one pre-encoded item a line."""
    return encode_document_blocks(
        header, [(name, [",\n".join(items).encode()] if items else []) for name, items in lists]
    )


def encode_document_blocks(
    header: Mapping[str, Any], lists: Sequence[tuple[str, Sequence[bytes]]]
) -> bytes:
    r"""As `encode_document`, each list given as blocks of lines already joined with ``,\n``.

    A checkpoint keeps the blocks of its older segments from one checkpoint
    to the next, so writing one costs a copy of them, not a pass over each.
    """
    parts = [json.dumps(dict(header), separators=(",", ":"), ensure_ascii=False)[:-1].encode()]
    for name, given in lists:
        blocks = [b for b in given if b]
        if blocks:
            parts.append(f',"{name}":[\n'.encode())
            for i, block in enumerate(blocks):
                parts += (b",\n", block) if i else (block,)
            parts.append(b"\n]")
        else:
            parts.append(f',"{name}":[]'.encode())
    parts.append(b"}\n")
    return b"".join(parts)


def encode_commit(commit: Commit) -> bytes:
    """Stable, human-readable bytes for ``commit`` (see the module docstring)."""
    header = commit.model_dump(mode="json", exclude={"actions"})
    return encode_document(header, [("actions", [a.model_dump_json() for a in commit.actions])])


def decode_commit(data: bytes, key: str, expected_version: int | None = None) -> Commit:
    """Parse a commit file; `CorruptCatalog` naming ``key`` if it is not one."""
    commit = parse_model(Commit, data, key)
    if expected_version is not None and commit.version != expected_version:
        raise CorruptCatalog(
            f"commit records version {commit.version} but its key says {expected_version}",
            object_name=key,
            offset=0,
        )
    return commit


M = TypeVar("M", bound=BaseModel)
_LINE_COLUMN = re.compile(r"line (\d+) column (\d+)")


def parse_model(model: type[M], data: bytes, key: str) -> M:
    """``model.model_validate_json(data)``, turning every failure into `CorruptCatalog`."""
    try:
        return model.model_validate_json(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        offset = 0
        if error["type"] == "json_invalid":
            offset = _byte_offset(data, str(error["msg"]))
            detail = str(error["msg"])
        else:
            where = ".".join(str(part) for part in error["loc"])
            detail = f"{where or 'document'}: {error['msg']}"
            if exc.error_count() > 1:
                more = exc.error_count() - 1
                detail += f" (and {more} more problem{'s' if more > 1 else ''})"
        raise CorruptCatalog(
            f"not a valid {model.__name__}: {detail}", object_name=key, offset=offset
        ) from None


def _byte_offset(data: bytes, message: str) -> int:
    """Turn serde_json's "line L column C" into a byte offset into ``data``."""
    match = _LINE_COLUMN.search(message)
    if match is None:
        return 0
    line, column = int(match.group(1)), int(match.group(2))
    start = 0
    for _ in range(line - 1):
        newline = data.find(b"\n", start)
        if newline < 0:
            break
        start = newline + 1
    return min(start + max(column - 1, 0), len(data))
