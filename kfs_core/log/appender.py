"""`Appender`: the append path -- validate, charge, assign offsets, log to the WAL, acknowledge.

`LogManager.append_many` (``append`` for one partition) hands every
partition of one produce request to `Appender.append_many`.  It validates
each partition's batches (`validate_produce`), charges their size to the
`MemoryPool` (waiting while it is full), then, in one step with no await
inside (`_assign_and_log`), checks the idempotent producers, assigns offsets
in place, stamps LogAppendTime when the topic asks for it, puts the batches
into the partitions' buffers and queues one WAL group (a frame per
partition).  Nothing else runs on the loop in between, so offsets are
assigned in exactly WAL order without a lock, and the step ends once the
frames are queued, not when they are durable, so concurrent producers share
fsyncs.  When the WAL acknowledges (per its durability mode, `_on_wal_done`),
each partition's high watermark moves past its batches and the producer gets
an `AppendResult` per partition.  This is the daemon's hot path: keep awaits
out of `_assign_and_log` and per-batch work to what is there.

Idempotent producers.  In that same step each partition's
`ProducerStateTable` checks the producer id, epoch and sequence of its
batches (`kfs_core.log.producer_state`): a retry of one of a producer's
last 5 batches is answered with the original offsets once they are
visible and is not written again; a gap or an old epoch is refused.  The
state is rebuilt when a partition opens (`kfs_core.log.partition_table`)
from a snapshot written after each flush (``{wal}/producer-state/``), the
segments committed since, and the WAL (`Appender.replay`).

Replay.  At start-up the batches WAL recovery returns enter the buffers here
too (`replay`), above what the catalog already holds, so every way a batch
gets into a partition buffer is in this module.  A takeover in the ``store``
durability mode replays the previous holders' WAL objects the same way, with
``stop_at_gap``: a batch that breaks its idempotent producer's sequence
(`ProducerStateTable.breaks_sequence`: the producer's previous batch never
landed, so the holder refused this one) ends the replay there, and the
partition's offsets continue at that batch.  Kept, it would make the
producer's retry of the missing batch out of order -- fatal to a Kafka
client -- or, accepted after it, reorder the producer's records; left out,
the retries append both batches in order, once each.  Nothing acknowledged
is left out: see `kfs_core.log.producer_state` ("Replay and sequence gaps").
The start-up replay of the local WAL keeps such a batch (every frame there
was written in order by this daemon) and only says so in a warning.

Transactions.  Transactional batches and the coordinator's markers
(`append_internal`: control batches, which clients may not send) are checked,
assigned offsets and logged in `_assign_and_log` like any batch; once the
WAL has them queued each partition's `PartitionTransactions` takes them in
(which transactions are open, which were aborted), and the last stable
offset follows from it and the high watermark (`kfs_core.log.transactions`).
A plain batch from a producer whose transaction is open here is refused
(INVALID_TXN_STATE), as Kafka refuses it.

WAL failure.  A failed WAL write or fsync (`WalWriteFailed`) puts the log
into its failed state (`kfs_core.log.failure`): every append from then on,
and every one still waiting for the WAL, gets `LogStorageError`
(KAFKA_STORAGE_ERROR).  A WAL whose disk is full (`WalWriter.out_of_space`)
refuses new appends the same way, before any offset is assigned.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from kfs_core.config import Settings
from kfs_core.errors import (
    LogClosed,
    LogError,
    LogStorageError,
    MessageTooLarge,
    NotLeaderOrFollower,
    RequestTimedOut,
    WalError,
)
from kfs_core.log.buffer import BufferedBatch
from kfs_core.log.failure import LogFailure
from kfs_core.log.flusher import Flusher
from kfs_core.log.metrics import LogMetrics
from kfs_core.log.partition import Partition, PendingAppend, deleted_error, not_leader
from kfs_core.log.partition_table import PartitionTable
from kfs_core.log.pool import MemoryPool
from kfs_core.log.producer_state import (
    BatchMetadata,
    InvalidTxnState,
    OutOfOrderSequence,
    ProducerEntry,
    batch_offsets,
    end_sequence,
)
from kfs_core.log.topic_cache import TopicInfo
from kfs_core.log.validate import validate_produce
from kfs_core.log.wal import RecoveredBatch, WalAppend, WalLike, WalPosition
from kfs_core.records.batch import (
    assign_offsets_into,
    iter_batch_headers,
    stamp_log_append_time_into,
)
from kfs_core.records.header import BatchHeader, read_batch_header

__all__ = ["AppendResult", "Appender", "Replayed"]

log = logging.getLogger(__name__)


#: How long a produce refused with NOT_LEADER_OR_FOLLOWER explains a sequence gap behind it.
REFUSAL_MEMORY_S = 30.0
#: How long after a partition moved here any gap in a producer's sequence is answered
#: NOT_LEADER_OR_FOLLOWER: the batch before it may still be on its way.
MOVED_GRACE_S = 10.0
#: Refused batches remembered per partition and producer.
_REFUSALS_KEPT = 8


class Refusals:
    """Why a gap in a producer's sequence is a move's doing, not a lost batch (`explains`).

    A client pipelines its produce requests.  When a partition moves between
    two of them, the first is refused (NOT_LEADER_OR_FOLLOWER: retried
    later, in order) and the next can reach the new holder first and find a
    gap in its producer's sequence.  Kafka's answer to a gap,
    OUT_OF_ORDER_SEQUENCE_NUMBER, makes librdkafka bump the producer's epoch
    and send again, under the new epoch, what it had in flight to other
    partitions -- records that may already be stored there, which are then
    stored twice.  A gap that begins at a batch this daemon refused moments
    ago, or that opens within `MOVED_GRACE_S` of the partition moving here
    (another daemon may have refused the batch before it, as the move went
    on), is refused the same way, and the client retries both in order.
    """

    def __init__(self) -> None:
        # (topic, partition) -> producer id -> [(epoch, first sequence, when refused)]
        self._refused: dict[tuple[str, int], dict[int, list[tuple[int, int, float]]]] = {}

    def refused(self, topic: str, partition: int, records: bytes | bytearray | memoryview) -> None:
        """Remember the idempotent batch of a produce refused with NOT_LEADER_OR_FOLLOWER."""
        try:
            header = read_batch_header(records, 0, object_name=f"{topic}-{partition}")
        except Exception:  # noqa: BLE001 - not a batch this can read: nothing to remember
            return
        if header.producer_id < 0 or header.base_sequence < 0:
            return
        now = time.monotonic()
        producers = self._refused.setdefault((topic, partition), {})
        kept = producers.setdefault(header.producer_id, [])
        kept.append((header.producer_epoch, header.base_sequence, now))
        del kept[:-_REFUSALS_KEPT]
        for pid in [pid for pid, k in producers.items() if now - k[-1][2] > REFUSAL_MEMORY_S]:
            del producers[pid]

    def explains(self, p: Partition, header: BatchHeader, now_ms: int) -> str | None:
        """Why ``header``'s gap is a move's doing (see the class docstring), else None."""
        entry = p.producers.entry(header.producer_id, now_ms)
        if entry is None or entry.epoch != header.producer_epoch or not entry.batches:
            return None  # a new epoch not at sequence 0 is no gap
        expected = end_sequence(entry.last_seq, 1)
        if header.base_sequence == expected:
            return None
        now = time.monotonic()
        for epoch, first_seq, when in self._refused.get((p.topic, p.partition), {}).get(
            header.producer_id, ()
        ):
            if epoch == entry.epoch and first_seq == expected and now - when <= REFUSAL_MEMORY_S:
                return "the batch before it was refused here as not led moments ago"
        moved = now - p.moved_at if p.moved_at is not None else math.inf
        if moved < MOVED_GRACE_S:
            return (
                f"the partition moved here {moved:.1f} s ago and the batch before it may "
                "still be on its way"
            )
        return None


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What a produce response reports for one partition."""

    base_offset: int
    log_append_time: int  # the stamped time for LogAppendTime topics, else -1 (as Kafka)
    log_start_offset: int


class Replayed(NamedTuple):
    """What `Appender.replay` did with one recovered WAL frame."""

    added: int  # batches buffered
    skipped: int  # batches the catalog already had
    stopped: bool  # a batch broke its producer's sequence: it and the rest were left out


@dataclass(eq=False, slots=True)
class _StagedAppend:
    """One partition of a produce request on its way: validated, then charged, then logged."""

    index: int  # its place in the request
    p: Partition
    info: TopicInfo
    buf: bytearray | memoryview  # ours to edit in place
    batches: list[tuple[int, BatchHeader]]
    base_offset: int = -1  # assigned by `Appender._assign_and_log`
    append_time: int = -1  # stamped LogAppendTime, else -1
    duplicate: bool = False  # a producer's retry: answered with the original offsets


class Appender:
    """The append path of one `LogManager`: from a produce request's bytes to its acknowledgement.

    Runs on the manager's loop.  ``lifecycle`` reads the manager's state
    (appends are taken only while it is ``"running"``); the partitions come
    from ``table``; the charge to ``pool`` passes to the partition buffers,
    which the flusher releases.
    """

    def __init__(
        self,
        table: PartitionTable,
        wal: WalLike,
        settings: Settings,
        *,
        pool: MemoryPool,
        flusher: Flusher,
        failure: LogFailure,
        metrics: LogMetrics,
        clock: Callable[[], int],
        lifecycle: Callable[[], str],
    ) -> None:
        self._table = table
        self.wal = wal
        self.settings = settings
        self._pool = pool
        self._flusher = flusher
        self._failure = failure
        self._metrics = metrics
        self._clock = clock
        self._lifecycle = lifecycle
        self._refusals = Refusals()

    async def append_many(
        self,
        appends: Sequence[tuple[str, int, bytes | bytearray | memoryview]],
        *,
        timeout_s: float,
        owned: bool = False,
    ) -> list[AppendResult | Exception]:
        """`LogManager.append_many`: one outcome per append, in order.

        Each partition is looked up (opened first if it is not open) and
        validated, the valid ones are charged to the pool in order
        (`_charge`), then logged together and awaited (`_log_and_wait`).
        With ``owned`` the ``records`` buffers that are writable memoryviews
        are edited in place and kept; others are copied first.
        """
        self.check_writable()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        outcomes: list[AppendResult | Exception | None] = [None] * len(appends)
        staged: list[_StagedAppend] = []
        try:
            async with asyncio.timeout_at(deadline):
                for index, (topic, partition, records) in enumerate(appends):
                    try:
                        p, info = await self._table.lookup(topic, partition)
                        staged.append(self._validate(index, p, info, records, owned))
                    except Exception as exc:  # noqa: BLE001 - the append's own outcome; the rest go on
                        if isinstance(exc, NotLeaderOrFollower):
                            self._refusals.refused(topic, partition, records)
                        outcomes[index] = exc
        except TimeoutError:
            for index, (topic, partition, _) in enumerate(appends):
                if outcomes[index] is None and not any(s.index == index for s in staged):
                    outcomes[index] = RequestTimedOut(
                        f"{topic}-{partition}: the partition did not open in time"
                    )
        staged = await self._charge(staged, outcomes, deadline)
        if staged:
            await self._log_and_wait(staged, outcomes, deadline, timeout_s)
        assert all(outcome is not None for outcome in outcomes)
        return outcomes  # type: ignore[return-value]

    async def append_internal(
        self, topic: str, partition: int, batch: bytes, *, timeout_s: float
    ) -> AppendResult:
        """Append one batch a coordinator of this daemon built (`LogManager.append_internal`).

        Not validated as a produce is: a transaction marker is a control
        batch, which clients may not send, and a transactional offset
        commit carries a producer id without a sequence.  The producer's
        epoch is checked as for any batch.
        """
        self.check_writable()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        async with asyncio.timeout_at(deadline):
            p, info = await self._table.lookup(topic, partition)
        buf = bytearray(batch)
        header = read_batch_header(buf, object_name=p.name)
        outcomes: list[AppendResult | Exception | None] = [None]
        staged = await self._charge(
            [_StagedAppend(0, p, info, buf, [(0, header)])], outcomes, deadline
        )
        if staged:
            await self._log_and_wait(staged, outcomes, deadline, timeout_s)
        outcome = outcomes[0]
        if isinstance(outcome, Exception):
            raise outcome
        assert outcome is not None
        return outcome

    def _validate(
        self,
        index: int,
        p: Partition,
        info: TopicInfo,
        records: bytes | bytearray | memoryview,
        owned: bool,
    ) -> _StagedAppend:
        """Check one partition's batches; its buffer is ours to edit in place from here on."""
        if owned and isinstance(records, memoryview) and not records.readonly:
            buf: bytearray | memoryview = records
        else:
            buf = bytearray(records)  # the caller may reuse its buffer
        try:
            batches = validate_produce(
                buf,
                max_message_bytes=info.config.max_message_bytes,
                name=p.name,
                decode_records=self.settings.decode_records,
            )
            if len(buf) > self._pool.capacity:
                raise MessageTooLarge(
                    f"{p.name}: {len(buf)} bytes do not fit the memory pool of "
                    f"{self._pool.capacity} bytes",
                    size=len(buf),
                    limit=self._pool.capacity,
                )
        except LogError:
            self._metrics.produce_rejected += 1
            raise
        return _StagedAppend(index, p, info, buf, batches)

    async def _charge(
        self,
        staged: list[_StagedAppend],
        outcomes: list[AppendResult | Exception | None],
        deadline: float,
    ) -> list[_StagedAppend]:
        """Charge the staged appends to the pool, in order; the rest time out with the first."""
        loop = asyncio.get_running_loop()
        for k, item in enumerate(staged):
            try:
                await self._pool.acquire(len(item.buf), max(deadline - loop.time(), 0.0))
            except RequestTimedOut as exc:
                for later in staged[k:]:
                    self._metrics.produce_timeouts += 1
                    outcomes[later.index] = exc
                return staged[:k]
            except BaseException:  # cancelled: give back what this request holds
                for earlier in staged[:k]:
                    self._pool.release(len(earlier.buf))
                raise
        return staged

    async def _log_and_wait(
        self,
        staged: list[_StagedAppend],
        outcomes: list[AppendResult | Exception | None],
        deadline: float,
        timeout_s: float,
    ) -> None:
        """Assign offsets, buffer and queue the WAL group in one step; wait for visibility.

        Once ``staged`` is charged, the charge is the buffer's (released by
        the flush) or, for an append refused here, given back here.
        """
        ready: list[_StagedAppend] = []
        for item in staged:
            try:
                self.check_writable(item.p)
            except LogError as exc:
                outcomes[item.index] = exc
                self._pool.release(len(item.buf))
            else:
                ready.append(item)
        if not ready:
            return
        try:
            pending = self._assign_and_log(ready)
        except Exception as exc:  # noqa: BLE001 - the WAL refused the group: nothing was assigned
            refusal: Exception = exc
            if isinstance(exc, WalError):  # it failed or is closed
                refusal = LogStorageError(self._failure.fail(exc).message)
            for item in ready:
                self._pool.release(len(item.buf))
                outcomes[item.index] = refusal
            return
        try:
            async with asyncio.timeout_at(deadline):
                for item, visible in zip(ready, pending, strict=True):
                    try:
                        await asyncio.shield(visible)
                    except LogError as exc:  # the WAL failed, or the topic was deleted
                        outcomes[item.index] = exc
                    else:
                        outcomes[item.index] = AppendResult(
                            item.base_offset, item.append_time, item.p.state.log_start_offset
                        )
        except TimeoutError:
            for item in ready:
                if outcomes[item.index] is None:
                    self._metrics.produce_timeouts += 1
                    outcomes[item.index] = RequestTimedOut(
                        f"{item.p.name}: the WAL did not acknowledge within {timeout_s}s; the "
                        "write may still become visible"
                    )
        m = self._metrics
        for item in ready:
            if isinstance(outcomes[item.index], AppendResult) and not item.duplicate:
                m.produce_requests += 1
                m.produce_batches += len(item.batches)
                m.produce_records += sum(header.record_count for _, header in item.batches)
                m.produce_bytes += len(item.buf)

    def _assign_and_log(self, ready: list[_StagedAppend]) -> list[asyncio.Future[None]]:
        """Check producers, assign offsets, stamp, buffer and queue in the WAL: one step, no await.

        Offsets are assigned in exactly WAL order without a lock: nothing else
        runs on the loop between the assignment and the WAL queueing the
        frames.  The producer-state check runs in the same step, so no other
        append comes between a producer's check and its offsets.  Returns
        each append's visibility future; a refused one holds its error, a
        producer's retry (``duplicate``) that of its original batch.
        """
        loop = asyncio.get_running_loop()
        now_ms = self._clock()
        next_offsets: dict[tuple[str, int], int] = {}
        wal_appends: list[WalAppend] = []
        logged: list[_StagedAppend] = []
        answered: dict[int, asyncio.Future[None]] = {}  # refused and duplicates, by index
        undo: list[tuple[Partition, dict[int, Any]]] = []
        try:
            for item in ready:
                p = item.p
                headers = [header for _, header in item.batches]
                try:
                    _check_transaction(p, headers)
                    original = p.producers.check(headers, now_ms)
                except LogError as exc:
                    why = (
                        self._refusals.explains(p, headers[0], now_ms)
                        if isinstance(exc, OutOfOrderSequence)
                        else None
                    )
                    if why is not None:
                        exc = NotLeaderOrFollower(
                            f"{exc}: {why}; retry both in order",
                            topic=p.topic,
                            partition=p.partition,
                        )
                    self._metrics.produce_rejected += 1
                    refused: asyncio.Future[None] = loop.create_future()
                    refused.set_exception(exc)
                    refused.exception()  # read by the caller unless it timed out first
                    answered[item.index] = refused
                    continue
                if original is not None:
                    item.duplicate = True
                    item.base_offset = original.first_offset
                    item.append_time = original.timestamp if item.info.log_append_time else -1
                    answered[item.index] = self._visible_future(p, original)
                    continue
                base_offset = next_offsets.get((p.topic, p.partition), p.next_offset)
                next_offset = assign_offsets_into(
                    item.buf, base_offset, object_name=p.name, leader_epoch=p.epoch
                )
                if item.info.log_append_time:
                    item.append_time = self._clock()
                    for pos, _ in item.batches:
                        stamp_log_append_time_into(
                            item.buf, item.append_time, pos, object_name=p.name
                        )
                item.base_offset = base_offset
                next_offsets[(p.topic, p.partition)] = next_offset
                wal_appends.append(
                    WalAppend(
                        p.topic,
                        p.partition,
                        base_offset,
                        item.buf,
                        next_offset - 1,
                        crcs_checked=True,
                    )
                )
                placed = batch_offsets(headers, base_offset)
                undo.append((p, p.producers.apply(placed, now_ms, item.append_time)))
                logged.append(item)
            # Queued before any partition changes: if the WAL refuses, nothing happened.
            if wal_appends:
                written = self.wal.append_group(wal_appends)
        except BaseException:
            for p, previous in reversed(undo):
                p.producers.restore(previous)
            raise
        logged_indexes = {item.index for item in logged}
        now = time.monotonic()
        appends: list[tuple[Partition, PendingAppend]] = []
        for item in logged:
            p = item.p
            view = memoryview(item.buf)
            offset = item.base_offset
            for pos, header in item.batches:
                last = offset + header.last_offset_delta
                max_timestamp = (
                    item.append_time if item.info.log_append_time else header.max_timestamp
                )
                data = view[pos : pos + header.total_size]
                p.buffer.append(BufferedBatch(offset, last, max_timestamp, data, now))
                if header.is_transactional:
                    p.txns.observe(offset, header, data)
                offset = last + 1
            p.next_offset = offset
            pending = PendingAppend(offset - 1, loop.create_future())
            p.pending.append(pending)
            appends.append((p, pending))
            answered[item.index] = pending.visible
        if appends:
            asyncio.wrap_future(written, loop=loop).add_done_callback(
                functools.partial(self._on_wal_done, appends)
            )
        for item in ready:
            if item.index not in logged_indexes:
                self._pool.release(len(item.buf))  # refused or a retry: nothing buffered
        return [answered[item.index] for item in ready]

    def _visible_future(self, p: Partition, original: BatchMetadata) -> asyncio.Future[None]:
        """Done when the batch ``original`` (already assigned) is visible, or fails with it."""
        for pending in p.pending:
            if pending.last_offset >= original.last_offset:
                return pending.visible
        visible: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        visible.set_result(None)  # below the high watermark already
        return visible

    def _on_wal_done(
        self,
        appends: list[tuple[Partition, PendingAppend]],
        group: asyncio.Future[list[WalPosition]],
    ) -> None:
        error: BaseException | None
        error = WalError("the WAL append was cancelled") if group.cancelled() else group.exception()
        if isinstance(error, LogError) and error.retriable:
            # The ``store`` mode's WAL: a PUT that failed, or a lease that lapsed
            # before it landed.  The WAL goes on; these partitions start over from
            # the store (their acknowledged batches are in it) on the next request.
            for p in {id(p): p for p, _ in appends}.values():
                current = self._table.partitions.get((p.topic, p.partition))
                if current is not None and current is not p:
                    continue  # a late refusal of a dropped partition: the new one is fine
                if not p.leaving:
                    log.warning(
                        "%s: the WAL refused an append (%s); the partition starts over "
                        "from the store on its next request",
                        p.name,
                        error,
                    )
                self._table.discard(p)
                self.wal.forget_partition(p.topic, p.partition)
            return
        if error is not None:
            failure = self._failure.fail(error)
            # The WAL acknowledges nothing after its first failure, so neither
            # these appends nor any later one of their partitions become visible.
            for p, pending in appends:
                for later in p.pending:
                    if later.last_offset >= pending.last_offset and not later.visible.done():
                        later.visible.set_exception(LogStorageError(failure.message))
                        later.visible.exception()  # its producer may have timed out already
            return
        for p, pending in appends:
            pending.acked = True
            while p.pending and p.pending[0].acked:
                done = p.pending.popleft()
                p.high_watermark = done.last_offset + 1
                if not done.visible.done():
                    done.visible.set_result(None)
            if (
                p.flush_task is None
                and p.buffer.visible_bytes(p.high_watermark) >= self.settings.segment_bytes
            ):
                self._flusher.wake()

    def check_writable(self, p: Partition | None = None) -> None:
        """Raise what refuses an append now: the failed WAL, a log not running, a full disk."""
        self._failure.check()
        state = self._lifecycle()
        if state != "running":
            raise LogClosed(f"the log is {state}; not accepting appends")
        if self.wal.out_of_space:
            # Refused before any offset is assigned; what the WAL holds queued
            # is written once there is space again.
            raise LogStorageError(
                f"the WAL's disk is full ({self.wal.directory}): appends are refused "
                "until space is freed"
            )
        if p is not None and p.deleted:
            raise deleted_error(p)
        if p is not None and p.leaving:
            raise not_leader(p)

    def replay(
        self, p: Partition, record: RecoveredBatch, *, stop_at_gap: bool = False
    ) -> Replayed:
        """Buffer the batches of one recovered WAL frame that the catalog does not have.

        With ``stop_at_gap`` (a takeover's replay of the store WAL) the first
        batch that breaks its producer's sequence is not buffered, nor any
        after it (see the module docstring), and the outcome says so.
        """
        added = skipped = 0
        now = time.monotonic()
        now_ms = self._clock()
        view = memoryview(record.batch)
        for pos, header in iter_batch_headers(record.batch, verify_crc=False, object_name=p.name):
            if header.base_offset < p.next_offset:
                # Flushed before its WAL checkpoint was written.  Segments hold
                # whole batches, so a batch is either all in the catalog or not.
                if header.last_offset >= p.next_offset:
                    log.warning(
                        "%s: WAL batch %d..%d straddles the catalog's high watermark %d; "
                        "keeping the catalog's copy",
                        p.name,
                        header.base_offset,
                        header.last_offset,
                        p.next_offset,
                    )
                # Remembered all the same: the segments may have been read only in
                # part (`PartitionTable._load_producers`).
                p.producers.replay((header,), now_ms)
                skipped += 1
                continue
            if header.base_offset > p.next_offset:
                log.warning(
                    "%s: WAL batch %d..%d would leave offsets %d..%d empty; %s",
                    p.name,
                    header.base_offset,
                    header.last_offset,
                    p.next_offset,
                    header.base_offset - 1,
                    "the replay stops here" if stop_at_gap else "kept",
                )
                if stop_at_gap:
                    return Replayed(added, skipped, stopped=True)
            broken = p.producers.breaks_sequence(header, now_ms)
            if broken is not None:
                self._warn_gap(p, header, broken, left_out=stop_at_gap)
                if stop_at_gap:
                    return Replayed(added, skipped, stopped=True)
            p.producers.replay((header,), now_ms)
            data = view[pos : pos + header.total_size]  # shares the recovered frame's bytes
            if header.is_transactional:
                p.txns.observe(header.base_offset, header, data)
            p.buffer.append(
                BufferedBatch(
                    header.base_offset, header.last_offset, header.max_timestamp, data, now
                )
            )
            self._pool.force_acquire(len(data))
            p.next_offset = header.last_offset + 1
            added += 1
        return Replayed(added, skipped, stopped=False)

    def _warn_gap(
        self, p: Partition, header: BatchHeader, broken: ProducerEntry, *, left_out: bool
    ) -> None:
        log.warning(
            "%s: WAL batch %d..%d of producer %d (epoch %d, sequence %d) does not follow its "
            "last batch (epoch %d, sequence %d, offset %d); %s",
            p.name,
            header.base_offset,
            header.last_offset,
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            broken.epoch,
            broken.last_seq,
            broken.last_offset,
            f"an earlier batch of it never landed, so no holder acknowledged this one: the "
            f"replay stops here and offsets continue at {header.base_offset}"
            if left_out
            else "kept",
        )


def _check_transaction(p: Partition, headers: Sequence[BatchHeader]) -> None:
    """Refuse a plain batch from a producer whose transaction is open here (Kafka's rule)."""
    for header in headers:
        pid = header.producer_id
        if not header.is_transactional and pid >= 0 and p.txns.is_open(pid):
            raise InvalidTxnState(
                f"{p.name}: producer {pid} sent a non-transactional batch while its "
                "transaction is open here"
            )
