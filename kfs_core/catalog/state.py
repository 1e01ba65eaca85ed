"""Partition state: what a replay of the commit log yields, and its checkpoint file.

`StateBuilder` is the one place that applies actions.  It validates a whole
commit against the state before changing anything, so a commit is applied
entirely or not at all; writers call it before they commit (typed errors:
`SegmentOverlap`, `ReplaceConflict` ...) and readers call it on every commit
they replay (an action that does not apply there means the log is damaged:
`CorruptCatalog` naming the commit).  `PartitionState` is the immutable
snapshot callers get.

Tombstones (removed segments whose objects may still exist) expire
``tombstone_retention_ms`` after their removal, measured on the newest commit
timestamp the state has seen, so a replay from any checkpoint gives the same
state.  A checkpoint therefore holds the live segments and the unexpired
tombstones only.

A checkpoint ``_log/{version:020d}.checkpoint.json`` is one JSON document, one
segment or tombstone a line::

    {"format":1,"version":40,"timestamp_ms":…,"log_start_offset":0,"high_watermark":4100,"config":{},"segments":[
    {"base_offset":0,…},
    …
    ],"tombstones":[
    {"key":"orders/0/segment-….kfs",…,"removed_ms":…}
    ]}

and ``_log/_last_checkpoint`` is ``{"format":1,"version":40,"size":123456}``.
A partition that has had a lease commit also has ``"leader_epoch"``,
``"leader_node_id"``, ``"leader_incarnation"`` and ``"leader_epochs"`` in
the header, after ``"config"``; one that never had one leaves them out (the
checkpoint reads as it did before leases existed).  ``"leader_epochs"`` is
the history of leader epochs (`kfs_core.catalog.epochs`), oldest first, so it
outlives the commits it came from::

    "leader_epochs":[{"epoch":3,"start_offset":0},{"epoch":4,"start_offset":4100}]

A checkpoint written before the history was kept has only the newest
lease; its epoch then counts from the checkpoint's log start offset.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from pydantic import StrictInt, StrictStr

from kfs_core.catalog import epochs
from kfs_core.catalog.actions import (
    FORMAT_VERSION,
    Action,
    AddSegment,
    Commit,
    NonNegative,
    RemoveSegment,
    ReplaceSegments,
    SegmentEntry,
    SetLeaderEpochStart,
    SetLogStartOffset,
    SetTopicConfig,
    TakeLease,
    Tombstone,
    _Model,
    encode_document_blocks,
    parse_model,
)
from kfs_core.catalog.epochs import EpochEntry
from kfs_core.errors import (
    CatalogError,
    CorruptCatalog,
    InvalidCatalogAction,
    LeaseConflict,
    LeaseStartMoved,
    LogStartOffsetRegression,
    RemoveConflict,
    ReplaceConflict,
    SegmentOverlap,
)

#: How long removed segments stay in the state (and in checkpoints) as tombstones.
#: Retention deletes the objects after its grace period, which must be shorter;
#: an object whose tombstone expired first is an orphan, and the orphan sweep
#: deletes it.
TOMBSTONE_RETENTION_MS = 3_600_000
# Checkpoint lines are kept encoded in blocks of this many (a block is about 300 KB).
_BLOCK_LINES = 1024


class Checkpoint(_Model):
    """The file form of a `PartitionState`."""

    format: Literal[1] = FORMAT_VERSION
    version: NonNegative
    timestamp_ms: StrictInt
    log_start_offset: NonNegative
    high_watermark: NonNegative
    config: dict[str, str]
    leader_epoch: NonNegative = 0
    leader_node_id: StrictInt = -1
    leader_incarnation: StrictStr = ""
    leader_epochs: tuple[EpochEntry, ...] = ()
    segments: tuple[SegmentEntry, ...]
    tombstones: tuple[Tombstone, ...]


class CheckpointPointer(_Model):
    """``_last_checkpoint``: the newest checkpoint's version and byte size (a hint)."""

    format: Literal[1] = FORMAT_VERSION
    version: NonNegative
    size: NonNegative


@dataclass(frozen=True)
class PartitionState:
    """A partition as of one catalog version.

    ``segments`` are the live segments sorted by base offset; ``version`` is -1
    for a partition with no commits.  The high watermark is the offset after
    the newest live segment (or the log start offset); it never moves back,
    even when segments are removed, because offsets are never reused.
    ``leader_epoch``, ``leader_node_id`` and ``leader_incarnation`` are the
    newest lease's (0, -1 and "" when the partition never had one);
    ``leader_epochs`` is where each leader epoch began (`kfs_core.catalog.epochs`).
    """

    topic: str
    partition: int
    version: int
    segments: tuple[SegmentEntry, ...]
    tombstones: tuple[Tombstone, ...]
    log_start_offset: int
    high_watermark: int
    config: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    timestamp_ms: int = 0
    leader_epoch: int = 0
    leader_node_id: int = -1
    leader_incarnation: str = ""
    leader_epochs: tuple[EpochEntry, ...] = ()
    # No segment live at this version or later was removed by a later one:
    # every segment of the state at any version >= ``removals_through`` is
    # still live here.  -1 when no segment was ever removed; a state loaded
    # from a checkpoint says the checkpoint's version (it cannot know more).
    removals_through: int = field(default=-1, compare=False)

    @property
    def size_bytes(self) -> int:
        """Bytes of the live segments (data only, as Kafka's ``retention.bytes`` counts)."""
        return sum(s.size_bytes for s in self.segments)

    @property
    def record_count(self) -> int:
        return sum(s.record_count for s in self.segments)

    def end_offset_for_epoch(self, requested: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(leader epoch, end offset)`` of epoch ``requested``.

        ``log_end_offset`` is where the newest epoch ends (the log's end,
        which may be past this state's high watermark); see
        `kfs_core.catalog.epochs.end_offset_for`.
        """
        return epochs.end_offset_for(
            self.leader_epochs, requested, log_end_offset, self.log_start_offset
        )

    def segment_for(self, offset: int) -> SegmentEntry | None:
        """The live segment whose offset range holds ``offset``, if any."""
        i = bisect.bisect_right(self.segments, offset, key=_base_offset) - 1
        if i >= 0 and self.segments[i].last_offset >= offset:
            return self.segments[i]
        return None

    def segments_from(self, offset: int) -> Iterator[SegmentEntry]:
        """Live segments holding ``offset`` or anything after it, in offset order.

        An iterator, not a slice: a reader usually needs the first one or
        two, and copying the rest of a long partition's tuple would cost
        every Fetch a pass over it.
        """
        segments = self.segments
        i = bisect.bisect_right(segments, offset, key=_base_offset) - 1
        if i < 0 or segments[i].last_offset < offset:
            i += 1
        return (segments[j] for j in range(i, len(segments)))

    def find(self, key: str) -> SegmentEntry | None:
        """The live segment with this key."""
        return next((s for s in self.segments if s.key == key), None)

    def holds(self, segment: SegmentEntry) -> bool:
        """Whether ``segment`` is live in this state (by its key, at its base offset)."""
        live = self.segment_for(segment.base_offset)
        return live is not None and live.key == segment.key

    def gone_since(self, earlier: PartitionState) -> list[SegmentEntry]:
        """The segments live in ``earlier`` (an older state of this partition) but not here."""
        if self.removals_through <= earlier.version:
            return []  # nothing was removed after ``earlier``: the common case, a flush
        live = {s.key for s in self.segments}
        return [s for s in earlier.segments if s.key not in live]


def _base_offset(segment: SegmentEntry) -> int:
    return segment.base_offset


# A validated commit, ready to apply: the operations in order.
_Op = (
    tuple[Literal["add"], SegmentEntry]
    | tuple[Literal["remove"], SegmentEntry, int]
    | tuple[Literal["log_start"], int]
    | tuple[Literal["config"], dict[str, str]]
    | tuple[Literal["lease"], int, int, str, int]
    | tuple[Literal["epoch_start"], int, int]
)


@dataclass
class _Overlay:
    """The changes of a commit being validated, on top of the builder's state."""

    removed: set[str] = field(default_factory=set)
    added: dict[str, SegmentEntry] = field(default_factory=dict)
    log_start_offset: int = 0
    high_watermark: int = 0
    leader_epoch: int = 0
    ops: list[_Op] = field(default_factory=list)


class StateBuilder:
    """The mutable state a replay builds; `snapshot` freezes it into a `PartitionState`."""

    def __init__(
        self,
        topic: str,
        partition: int,
        *,
        tombstone_retention_ms: int = TOMBSTONE_RETENTION_MS,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.tombstone_retention_ms = tombstone_retention_ms
        self.version = -1
        self.timestamp_ms = 0
        self.log_start_offset = 0
        self.high_watermark = 0
        self.config: dict[str, str] = {}
        self.leader_epoch = 0
        self.leader_node_id = -1
        self.leader_incarnation = ""
        self.leader_epochs: tuple[EpochEntry, ...] = ()
        #: The size of the checkpoint this state was loaded from or last wrote (0: none).
        self.checkpoint_bytes = 0
        self._bases: list[int] = []  # sorted base offsets of the live segments
        self._by_base: dict[int, SegmentEntry] = {}
        self._by_key: dict[str, SegmentEntry] = {}
        self._tombstones: dict[str, Tombstone] = {}
        self._oldest_tombstone_ms: int | None = None  # none expires before this is due
        self._removals_through = -1  # see `PartitionState.removals_through`
        # Entries are immutable, so each is encoded once for all checkpoints:
        # here until its line goes into a block (below), then only there.
        self._lines: dict[str, bytes] = {}
        self._snapshot: PartitionState | None = None
        # What the last snapshot froze, and the segments added after all of
        # it since (a flush's commit): the next snapshot extends those tuples
        # rather than rebuilding them, so a commit costs the same whether the
        # partition has ten segments or fifty thousand.  None: rebuild.
        self._frozen_segments: tuple[SegmentEntry, ...] | None = None
        self._frozen_tombstones: tuple[Tombstone, ...] | None = None
        self._appended: list[SegmentEntry] = []
        # The checkpoint lines of the first segments of the last snapshot, in
        # order, while no change but additions after all of them came since,
        # in blocks (encoded, joined: `_BLOCK_LINES` each, or a loaded
        # checkpoint's) and the rest.  The blocks' lines belong to the segments
        # of ``_block_order`` from ``_block_first`` on (it may go on past them).
        self._segment_blocks: list[bytes] = []
        self._blocked = 0  # segments whose lines are in the blocks
        self._block_order: Sequence[SegmentEntry] = ()
        self._block_first = 0
        self._segment_lines: list[bytes] = []

    # --- loading -------------------------------------------------------------

    @classmethod
    def from_checkpoint(
        cls,
        checkpoint: Checkpoint,
        topic: str,
        partition: int,
        key: str,
        *,
        tombstone_retention_ms: int = TOMBSTONE_RETENTION_MS,
        data: bytes | None = None,
    ) -> StateBuilder:
        """A builder at the checkpoint's version; `CorruptCatalog` if it is inconsistent.

        ``data``, the checkpoint file the checkpoint was decoded from, gives
        the next checkpoint its segments' lines as they stand there, rather
        than encoding each again.
        """
        builder = cls(topic, partition, tombstone_retention_ms=tombstone_retention_ms)
        builder.version = checkpoint.version
        builder.timestamp_ms = checkpoint.timestamp_ms
        builder.log_start_offset = checkpoint.log_start_offset
        builder.high_watermark = checkpoint.high_watermark
        builder.config = dict(checkpoint.config)
        builder.leader_epoch = checkpoint.leader_epoch
        builder.leader_node_id = checkpoint.leader_node_id
        builder.leader_incarnation = checkpoint.leader_incarnation
        builder.leader_epochs = _checkpointed_epochs(checkpoint, key)
        previous: SegmentEntry | None = None
        for segment in checkpoint.segments:
            if previous is not None and segment.base_offset <= previous.last_offset:
                raise CorruptCatalog(
                    f"segments {previous.key} and {segment.key} overlap or are out of order",
                    object_name=key,
                    offset=0,
                )
            if segment.key in builder._by_key:
                raise CorruptCatalog(f"segment {segment.key} listed twice", object_name=key)
            builder._bases.append(segment.base_offset)
            builder._by_base[segment.base_offset] = segment
            builder._by_key[segment.key] = segment
            previous = segment
        if previous is not None and previous.last_offset + 1 > checkpoint.high_watermark:
            raise CorruptCatalog(
                f"high watermark {checkpoint.high_watermark} is below segment {previous.key}",
                object_name=key,
                offset=0,
            )
        builder._tombstones = {t.key: t for t in checkpoint.tombstones}
        builder._oldest_tombstone_ms = min(
            (t.removed_ms for t in checkpoint.tombstones), default=None
        )
        builder._removals_through = checkpoint.version  # what came before is unknown
        builder.checkpoint_bytes = len(data) if data is not None else 0
        if data is not None and (block := _segment_lines_of(data, len(checkpoint.segments))):
            builder._segment_blocks, builder._blocked = [block], len(checkpoint.segments)
            builder._block_order = checkpoint.segments
        return builder

    # --- validating and applying ---------------------------------------------

    def plan(self, actions: Sequence[Action], *, writer_checks: bool = True) -> Sequence[_Op]:
        """Validate ``actions`` against this state; the operations that apply them.

        Raises `ReplaceConflict`/`RemoveConflict` when a segment named as input
        is not live, `SegmentOverlap`, `LogStartOffsetRegression` or
        `InvalidCatalogAction` otherwise.  ``writer_checks`` adds the checks
        that depend on more than the replayed state (keys of tombstones, keys
        outside this partition's directory, a lease's epoch: `LeaseConflict`
        unless it is the newest lease's plus one); replays leave them out.
        """
        o = _Overlay(
            log_start_offset=self.log_start_offset,
            high_watermark=self.high_watermark,
            leader_epoch=self.leader_epoch,
        )
        for action in actions:
            if isinstance(action, AddSegment):
                segment = action.segment
                self._check_new_key(segment, o, writer_checks)
                if segment.base_offset < o.log_start_offset:
                    raise SegmentOverlap(
                        f"segment {segment.key} starts at {segment.base_offset}, below the log "
                        f"start offset {o.log_start_offset}",
                        key=segment.key,
                    )
                self._check_no_overlap(segment, o)
                self._add(segment, o)
            elif isinstance(action, RemoveSegment):
                live = self._live(action.key, o)
                if live is None:
                    raise RemoveConflict(
                        f"cannot remove {action.key}: it is no longer live", keys=[action.key]
                    )
                self._check_ref(live, action.base_offset)
                self._remove(live, action.removed_ms, o)
            elif isinstance(action, ReplaceSegments):
                self._plan_replace(action, o, writer_checks)
            elif isinstance(action, SetLogStartOffset):
                if action.offset < o.log_start_offset:
                    raise LogStartOffsetRegression(
                        f"log start offset may not move back from {o.log_start_offset} "
                        f"to {action.offset}",
                        current=o.log_start_offset,
                        requested=action.offset,
                    )
                if action.offset > o.high_watermark and action.past_end:
                    o.high_watermark = action.offset
                elif action.offset > o.high_watermark:
                    raise LogStartOffsetRegression(
                        f"log start offset {action.offset} is past the high watermark "
                        f"{o.high_watermark}",
                        current=o.log_start_offset,
                        requested=action.offset,
                    )
                o.log_start_offset = action.offset
                o.ops.append(("log_start", action.offset))
            elif isinstance(action, SetTopicConfig):
                o.ops.append(("config", dict(action.configs)))
            elif isinstance(action, TakeLease):
                if writer_checks and action.epoch != o.leader_epoch + 1:
                    raise LeaseConflict(
                        f"{self.topic}/{self.partition}: lease epoch {action.epoch} is not the "
                        f"next after the catalog's {o.leader_epoch}: another daemon took the "
                        "lease first",
                        epoch=action.epoch,
                        catalog_epoch=o.leader_epoch,
                    )
                start = o.high_watermark if action.start_offset is None else action.start_offset
                if writer_checks and start != o.high_watermark:
                    raise LeaseStartMoved(
                        f"{self.topic}/{self.partition}: lease epoch {action.epoch} starts at "
                        f"{start}, but the log ends at {o.high_watermark} now"
                    )
                o.leader_epoch = action.epoch
                o.ops.append(("lease", action.epoch, action.node_id, action.incarnation, start))
            elif isinstance(action, SetLeaderEpochStart):
                if writer_checks and action.epoch != o.leader_epoch:
                    raise InvalidCatalogAction(
                        f"{self.topic}/{self.partition}: epoch {action.epoch} is not the newest "
                        f"lease's ({o.leader_epoch}); only the newest epoch's start may move"
                    )
                if writer_checks and action.start_offset < o.high_watermark:
                    raise InvalidCatalogAction(
                        f"{self.topic}/{self.partition}: epoch {action.epoch} cannot start at "
                        f"{action.start_offset}, below the high watermark {o.high_watermark}"
                    )
                o.ops.append(("epoch_start", action.epoch, action.start_offset))
            else:  # pragma: no cover - the Action union is closed
                raise InvalidCatalogAction(f"unknown action {action!r}")
        return o.ops

    def _plan_replace(self, action: ReplaceSegments, o: _Overlay, writer_checks: bool) -> None:
        missing = [ref.key for ref in action.inputs if self._live(ref.key, o) is None]
        if missing:
            raise ReplaceConflict(
                f"replace inputs are no longer live: {', '.join(missing)}", keys=missing
            )
        if len({ref.key for ref in action.inputs}) != len(action.inputs):
            raise InvalidCatalogAction("replace names an input twice")
        inputs = [self._live(ref.key, o) for ref in action.inputs]
        low = min(s.base_offset for s in inputs if s is not None)
        high = max(s.last_offset for s in inputs if s is not None)
        for ref, segment in zip(action.inputs, inputs, strict=True):
            assert segment is not None
            self._check_ref(segment, ref.base_offset)
            self._remove(segment, action.removed_ms, o)
        for output in action.outputs:
            if output.base_offset < low or output.last_offset > high:
                raise InvalidCatalogAction(
                    f"replace output {output.key} [{output.base_offset}, {output.last_offset}] "
                    f"lies outside its inputs' offsets [{low}, {high}]: offsets are never "
                    "renumbered",
                    key=output.key,
                )
            self._check_new_key(output, o, writer_checks)
            self._check_no_overlap(output, o)
            self._add(output, o)

    def _live(self, key: str, o: _Overlay) -> SegmentEntry | None:
        if key in o.added:
            return o.added[key]
        if key in o.removed:
            return None
        return self._by_key.get(key)

    @staticmethod
    def _check_ref(segment: SegmentEntry, base_offset: int) -> None:
        if segment.base_offset != base_offset:
            raise InvalidCatalogAction(
                f"segment {segment.key} starts at {segment.base_offset}, not {base_offset}",
                key=segment.key,
            )

    def _check_new_key(self, segment: SegmentEntry, o: _Overlay, writer_checks: bool) -> None:
        key = segment.key
        if self._live(key, o) is not None or key in o.removed:
            raise InvalidCatalogAction(
                f"segment key {key} is already in the catalog; segment objects are immutable",
                key=key,
            )
        if not writer_checks:
            return
        if key in self._tombstones:
            raise InvalidCatalogAction(
                f"segment key {key} was removed and awaits deletion; write a new key",
                key=key,
            )
        directory = f"{self.topic}/{self.partition}/"
        for k in (key, segment.index_key):
            if not k.startswith(directory) or "/" in k[len(directory) :]:
                raise InvalidCatalogAction(
                    f"key {k} is not in this partition's directory {directory}", key=k
                )

    def _check_no_overlap(self, segment: SegmentEntry, o: _Overlay) -> None:
        lo, hi = segment.base_offset, segment.last_offset
        clash = [s for s in o.added.values() if s.base_offset <= hi and s.last_offset >= lo]
        # Live segments do not overlap, so their last offsets rise with their
        # base offsets: walk back from the last one starting at or before `hi`.
        i = bisect.bisect_right(self._bases, hi) - 1
        while i >= 0:
            live = self._by_base[self._bases[i]]
            if live.last_offset < lo:
                break
            if live.key not in o.removed:
                clash.append(live)
            i -= 1
        if clash:
            other = clash[0]
            raise SegmentOverlap(
                f"segment {segment.key} [{lo}, {hi}] overlaps live segment {other.key} "
                f"[{other.base_offset}, {other.last_offset}]",
                key=segment.key,
                other=other.key,
            )

    @staticmethod
    def _add(segment: SegmentEntry, o: _Overlay) -> None:
        o.added[segment.key] = segment
        o.high_watermark = max(o.high_watermark, segment.last_offset + 1)
        o.ops.append(("add", segment))

    @staticmethod
    def _remove(segment: SegmentEntry, removed_ms: int, o: _Overlay) -> None:
        o.added.pop(segment.key, None)
        o.removed.add(segment.key)
        o.ops.append(("remove", segment, removed_ms))

    def apply_ops(self, ops: Iterable[_Op], version: int, timestamp_ms: int) -> None:
        """Apply a validated plan as ``version``; only for ``version == self.version + 1``."""
        if version != self.version + 1:
            raise CatalogError(f"cannot apply version {version} on top of {self.version}")
        for op in ops:
            if op[0] == "add":
                segment = op[1]
                if not self._bases or segment.base_offset > self._bases[-1]:
                    self._bases.append(segment.base_offset)
                    self._appended.append(segment)
                else:
                    bisect.insort(self._bases, segment.base_offset)
                    self._reordered()
                self._by_base[segment.base_offset] = segment
                self._by_key[segment.key] = segment
                self.high_watermark = max(self.high_watermark, segment.last_offset + 1)
            elif op[0] == "remove":
                segment, removed_ms = op[1], op[2]
                del self._by_key[segment.key]
                del self._by_base[segment.base_offset]
                del self._bases[bisect.bisect_left(self._bases, segment.base_offset)]
                if self._blocked and segment.key == self._block_order[self._block_first].key:
                    self._drop_first_blocked_line()  # retention: the oldest goes
                else:
                    self._reordered()
                self._lines.pop(segment.key, None)
                self._tombstones[segment.key] = Tombstone.of(segment, removed_ms)
                if self._oldest_tombstone_ms is None or removed_ms < self._oldest_tombstone_ms:
                    self._oldest_tombstone_ms = removed_ms
                self._frozen_tombstones = None
                self._removals_through = version
            elif op[0] == "log_start":
                self.log_start_offset = op[1]
                self.high_watermark = max(self.high_watermark, op[1])
                self.leader_epochs = epochs.trim(self.leader_epochs, self.log_start_offset)
            elif op[0] == "lease":
                self.leader_epoch = op[1]
                self.leader_node_id = op[2]
                self.leader_incarnation = op[3]
                self.leader_epochs = epochs.trim(
                    epochs.record(self.leader_epochs, op[1], op[4]), self.log_start_offset
                )
            elif op[0] == "epoch_start":
                self.leader_epochs = epochs.trim(
                    epochs.record(self.leader_epochs, op[1], op[2]), self.log_start_offset
                )
            else:
                self.config = op[1]
        self.version = version
        self.timestamp_ms = max(self.timestamp_ms, timestamp_ms)
        self._snapshot = None

    def apply(self, commit: Commit, key: str) -> None:
        """Replay a committed ``commit`` read from ``key``."""
        if commit.version != self.version + 1:
            raise CorruptCatalog(
                f"commit {commit.version} does not follow version {self.version}",
                object_name=key,
                offset=0,
            )
        try:
            ops = self.plan(commit.actions, writer_checks=False)
        except CatalogError as exc:
            raise CorruptCatalog(
                f"commit does not apply to version {self.version}: {exc}", object_name=key, offset=0
            ) from exc
        self.apply_ops(ops, commit.version, commit.timestamp_ms)

    # --- reading ---------------------------------------------------------------

    def _expire_tombstones(self) -> None:
        cutoff = self.timestamp_ms - self.tombstone_retention_ms
        if self._oldest_tombstone_ms is None or self._oldest_tombstone_ms >= cutoff:
            return  # none is due: no need to look at each
        expired = [k for k, t in self._tombstones.items() if t.removed_ms < cutoff]
        for k in expired:
            del self._tombstones[k]
            self._lines.pop("\0" + k, None)
        self._oldest_tombstone_ms = min(
            (t.removed_ms for t in self._tombstones.values()), default=None
        )
        self._frozen_tombstones = None

    def _reordered(self) -> None:
        """A segment went, or came before others: the next snapshot rebuilds the tuples.

        The blocks no longer match the order of the segments; their lines go
        back to ``_lines`` (split, not encoded again) for the next checkpoint.
        """
        self._frozen_segments = None
        lines = (line for block in self._segment_blocks for line in block.split(b",\n"))
        first = self._block_first
        for segment, line in zip(
            self._block_order[first : first + self._blocked], lines, strict=True
        ):
            self._lines[segment.key] = line
        self._segment_blocks, self._blocked, self._segment_lines = [], 0, []
        self._block_order, self._block_first = (), 0

    def _drop_first_blocked_line(self) -> None:
        """The first segment went: its line leaves the first block, the rest stay as they are."""
        self._frozen_segments = None
        first = self._segment_blocks[0]
        cut = first.find(b",\n")
        if cut < 0:
            del self._segment_blocks[0]
        else:
            self._segment_blocks[0] = first[cut + 2 :]
        self._blocked -= 1
        self._block_first += 1

    def snapshot(self) -> PartitionState:
        """The state as an immutable `PartitionState` (cached until the next change)."""
        if self._snapshot is None:
            self._expire_tombstones()
            if self._frozen_segments is None:
                self._frozen_segments = tuple(self._by_base[b] for b in self._bases)
            elif self._appended:
                self._frozen_segments += tuple(self._appended)
            self._appended.clear()
            if self._frozen_tombstones is None:
                self._frozen_tombstones = tuple(self._tombstones.values())
            self._snapshot = PartitionState(
                topic=self.topic,
                partition=self.partition,
                version=self.version,
                segments=self._frozen_segments,
                tombstones=self._frozen_tombstones,
                log_start_offset=self.log_start_offset,
                high_watermark=self.high_watermark,
                config=MappingProxyType(dict(self.config)),
                timestamp_ms=self.timestamp_ms,
                leader_epoch=self.leader_epoch,
                leader_node_id=self.leader_node_id,
                leader_incarnation=self.leader_incarnation,
                leader_epochs=self.leader_epochs,
                removals_through=self._removals_through,
            )
        return self._snapshot

    def live_segment(self, key: str) -> SegmentEntry | None:
        return self._by_key.get(key)

    def segment_at_base(self, base_offset: int) -> SegmentEntry | None:
        return self._by_base.get(base_offset)

    def encode_checkpoint(self) -> bytes:
        """The checkpoint file for the current version (live segments, unexpired tombstones)."""
        if self.version < 0:
            raise CatalogError("an empty partition has no checkpoint")
        self._expire_tombstones()
        header: dict[str, object] = {
            "format": FORMAT_VERSION,
            "version": self.version,
            "timestamp_ms": self.timestamp_ms,
            "log_start_offset": self.log_start_offset,
            "high_watermark": self.high_watermark,
            "config": self.config,
        }
        header.update(lease_header(self.snapshot()))
        segments = self.snapshot().segments
        # The lines of a prefix of ``segments`` are kept from the previous call.
        blocks, lines = self._segment_blocks, self._segment_lines
        lines += (self._line(s.key, s) for s in segments[self._blocked + len(lines) :])
        self._block_order, self._block_first = segments, 0
        while len(lines) >= _BLOCK_LINES:
            blocks.append(b",\n".join(lines[:_BLOCK_LINES]))
            for segment in segments[self._blocked : self._blocked + _BLOCK_LINES]:
                self._lines.pop(segment.key, None)  # held once: in the block
            del lines[:_BLOCK_LINES]
            self._blocked += _BLOCK_LINES
        tombstones = [self._line("\0" + t.key, t) for t in self._tombstones.values()]
        return encode_document_blocks(
            header,
            [
                ("segments", [*blocks, b",\n".join(lines)]),
                ("tombstones", [b",\n".join(tombstones)]),
            ],
        )

    def _line(self, cache_key: str, item: SegmentEntry | Tombstone) -> bytes:
        line = self._lines.get(cache_key)
        if line is None:
            line = self._lines[cache_key] = item.model_dump_json().encode()
        return line


def lease_header(state: PartitionState) -> dict[str, object]:
    """The lease fields of a checkpoint header (none for a partition that never had a lease)."""
    if not state.leader_epoch:
        return {}
    return {
        "leader_epoch": state.leader_epoch,
        "leader_node_id": state.leader_node_id,
        "leader_incarnation": state.leader_incarnation,
        "leader_epochs": [e.model_dump() for e in state.leader_epochs],
    }


def _checkpointed_epochs(checkpoint: Checkpoint, key: str) -> tuple[EpochEntry, ...]:
    """The checkpoint's epoch history, checked; its newest lease alone if it predates histories."""
    history = checkpoint.leader_epochs
    if not history:
        if not checkpoint.leader_epoch:
            return ()
        return (
            EpochEntry(epoch=checkpoint.leader_epoch, start_offset=checkpoint.log_start_offset),
        )
    for before, after in itertools.pairwise(history):
        if after.epoch <= before.epoch or after.start_offset < before.start_offset:
            raise CorruptCatalog(
                f"leader epochs out of order: epoch {after.epoch} at {after.start_offset} "
                f"follows epoch {before.epoch} at {before.start_offset}",
                object_name=key,
                offset=0,
            )
    if history[-1].epoch != checkpoint.leader_epoch:
        raise CorruptCatalog(
            f"the newest leader epoch {history[-1].epoch} is not the lease's "
            f"{checkpoint.leader_epoch}",
            object_name=key,
            offset=0,
        )
    return tuple(history)


def _segment_lines_of(data: bytes, count: int) -> bytes | None:
    """The ``count`` segment lines of checkpoint file ``data``, joined as they stand; None if not found."""
    start = data.find(b',"segments":[\n')
    end = data.find(b'\n],"tombstones":', start)
    if count == 0 or start < 0 or end < 0:
        return None
    block = data[start + len(b',"segments":[\n') : end]
    return block if block.count(b"\n") == count - 1 else None


def decode_checkpoint(data: bytes, key: str, expected_version: int | None = None) -> Checkpoint:
    """Parse a checkpoint file; `CorruptCatalog` naming ``key`` if it is not one."""
    checkpoint = parse_model(Checkpoint, data, key)
    if expected_version is not None and checkpoint.version != expected_version:
        raise CorruptCatalog(
            f"checkpoint records version {checkpoint.version} but its key says {expected_version}",
            object_name=key,
            offset=0,
        )
    return checkpoint


def encode_pointer(version: int, size: int) -> bytes:
    return CheckpointPointer(version=version, size=size).model_dump_json().encode() + b"\n"


def decode_pointer(data: bytes, key: str) -> CheckpointPointer:
    return parse_model(CheckpointPointer, data, key)
