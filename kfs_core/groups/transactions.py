"""The transaction coordinator: Kafka's state machine of transactional ids.

A transactional producer (``transactional.id``) asks the coordinator of its
id for a producer id and epoch (InitProducerId), names each partition it
writes to before writing (AddPartitionsToTxn; AddOffsetsToTxn for the
group whose offsets it commits in the transaction), then ends the
transaction (EndTxn).  As Kafka's ``TransactionCoordinator``:

===================  ==========================================================
state                what happens next
===================  ==========================================================
Empty                AddPartitions -> Ongoing.  InitProducerId bumps the epoch.
Ongoing              AddPartitions adds partitions.  EndTxn -> PrepareCommit or
                     PrepareAbort.  InitProducerId from a new instance, or the
                     timeout, bumps the epoch (fencing the old producer) and
                     aborts.
PrepareCommit/Abort  The markers are written to every partition of the
                     transaction; then CompleteCommit/CompleteAbort.  Requests
                     for the id meanwhile get CONCURRENT_TRANSACTIONS (retriable).
CompleteCommit/Abort As Empty; an EndTxn retry of the same outcome succeeds.
===================  ==========================================================

Every state change is durable in ``__transaction_state``
(`kfs_core.groups.txn_log`) before it takes effect or is answered: a
PrepareCommit that is answered is a commit, whatever crashes afterwards.
A coordinator that loads a partition of that topic (at start, or when it
takes the partition over from another daemon) resumes the markers of every
transaction it finds in PrepareCommit or PrepareAbort, and aborts open ones
once they pass their timeout.

Markers (`MarkerWriter`) are control batches the partition's leader appends
(`kfs_core.log.log_manager.LogManager.write_marker`); a marker to a
``__consumer_offsets`` partition also settles the offsets the transaction
committed there (TxnOffsetCommit, ``offsets_done``).

With several daemons a daemon coordinates the ids whose
``__transaction_state`` partition it leads (``leadership``), loads each
such partition on first use (COORDINATOR_LOAD_IN_PROGRESS meanwhile) and
forgets it once another daemon holds it (NOT_COORDINATOR).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kfs_core.errors import (
    ConcurrentTransactions,
    CoordinatorLoadInProgress,
    CoordinatorNotAvailable,
    InvalidProducerIdMapping,
    InvalidTransactionTimeout,
    KfsError,
    LogError,
    NotCoordinator,
    NotLeaderOrFollower,
    ProducerFenced,
    TransactionalIdNotFound,
    TransactionStateInvalid,
    UnknownTopicOrPartition,
)
from kfs_core.groups.txn_log import TransactionLog, TxnRecord, TxnState

__all__ = [
    "MarkerWriter",
    "TransactionCoordinator",
    "TransactionMetrics",
    "TransactionSettings",
    "TxnMetadata",
]

log = logging.getLogger(__name__)

#: Kafka's producer epochs are int16; one epoch short of the maximum, a new producer id.
MAX_EPOCH = 32_767
_PREPARED = {TxnState.PREPARE_COMMIT: True, TxnState.PREPARE_ABORT: False}


#: How long a request waits for the last transaction's markers before CONCURRENT_TRANSACTIONS.
COMPLETION_WAIT_S = 1.0


@dataclass(frozen=True, slots=True)
class TransactionSettings:
    """The coordinator's limits, named after Kafka's broker configs."""

    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    abort_check_interval_ms: int = 10_000  # ...abort.timed.out.transaction.cleanup.interval.ms
    marker_retry_ms: int = 100  # between attempts at a marker that failed


@dataclass(slots=True)
class TxnMetadata:
    """One transactional id, as its coordinator keeps it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]] = frozenset()
    start_ms: int = -1
    last_update_ms: int = 0
    # The epoch before the coordinator bumped it to abort (KIP-360), else -1.
    last_producer_epoch: int = -1
    busy: bool = False  # a state change is being written
    completing: asyncio.Task[None] | None = field(default=None, repr=False)

    def record(self) -> TxnRecord:
        return TxnRecord(
            self.producer_id,
            self.producer_epoch,
            self.timeout_ms,
            self.state,
            self.partitions,
            self.last_update_ms,
            self.start_ms,
        )


@dataclass(frozen=True)
class TransactionMetrics:
    """The ``kfs_transactions_*`` metrics of this daemon's coordinator."""

    transactional_ids: int  # coordinated here now (gauge)
    open_transactions: int  # Ongoing, PrepareCommit or PrepareAbort (gauge)
    commits: int
    aborts: int
    timed_out: int  # aborted by the coordinator past transaction.timeout.ms


class MarkerWriter(Protocol):
    """Appends a transaction marker to a partition (through its leader)."""

    def __call__(
        self,
        topic: str,
        partition: int,
        *,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> Awaitable[object]: ...


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    """Every transactional id this daemon coordinates (see the module docstring)."""

    def __init__(
        self,
        txn_log: TransactionLog,
        write_marker: MarkerWriter,
        new_producer_id: Callable[[], int],
        settings: TransactionSettings | None = None,
        *,
        leadership: Callable[[int], int | None] | None = None,
        offsets_done: Callable[[int, int, bool], Awaitable[None]] | None = None,
        clock: Callable[[], int] = _now_ms,
    ) -> None:
        self.settings = settings or TransactionSettings()
        self._log = txn_log
        self._write_marker = write_marker
        self._new_producer_id = new_producer_id
        self._leadership = leadership
        self._offsets_done = offsets_done
        self._clock = clock
        self._txns: dict[str, TxnMetadata] = {}
        self._started = False
        self._loaded_epochs: dict[int, int] = {}
        self._loading: dict[int, asyncio.Task[None]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self.commits = 0
        self.aborts = 0
        self.timed_out = 0

    # --- lifecycle ------------------------------------------------------------------

    async def start(self) -> int:
        """Load the transactional ids of the partitions this daemon leads; how many."""
        for partition in range(await self._log.existing_partitions()):
            with contextlib.suppress(NotLeaderOrFollower):
                await self._load(partition)
        self._started = True
        self._sweeper = asyncio.create_task(self._sweep_loop(), name="kfs-txn-timeouts")
        return len(self._txns)

    async def close(self) -> None:
        self._started = False
        tasks = [t for t in (self._sweeper, *self._loading.values()) if t is not None]
        tasks += [m.completing for m in self._txns.values() if m.completing is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _load(self, partition: int) -> None:
        """Read one ``__transaction_state`` partition and resume what it left half done."""
        epoch = None if self._leadership is None else self._leadership(partition)
        records = await self._log.load_partition(partition)
        if self._leadership is not None:
            epoch = self._leadership(partition)
            if epoch is None:
                raise NotLeaderOrFollower(
                    f"__transaction_state-{partition} moved to another daemon during its load"
                )
        for tid in [t for t in self._txns if self._log.partition_for(t) == partition]:
            self._forget(tid)
        for tid, record in records.items():
            txn = TxnMetadata(
                tid,
                record.producer_id,
                record.producer_epoch,
                record.timeout_ms,
                record.state,
                record.partitions,
                record.start_ms,
                record.last_update_ms,
            )
            self._txns[tid] = txn
            if txn.state in _PREPARED:
                self._complete_later(txn)
        if epoch is not None:
            self._loaded_epochs[partition] = epoch
        log.info(
            "loaded %d transactional id(s) from %s-%d",
            len(records),
            "__transaction_state",
            partition,
        )

    def _forget(self, tid: str) -> None:
        txn = self._txns.pop(tid)
        if txn.completing is not None:
            txn.completing.cancel()

    # --- whose ids ------------------------------------------------------------------

    async def _ready(self, tid: str) -> None:
        """Raise unless this daemon coordinates ``tid`` with its state loaded (or wait for it)."""
        if not self._started:
            raise CoordinatorNotAvailable("the transaction coordinator is starting or stopped")
        if self._leadership is None:
            return
        await self._log.ensure_topic()
        self._forget_lost_partitions()
        partition = self._log.partition_for(tid)
        if self._current(partition):
            return
        # Reading the partition opens it: this daemon takes its lease if it is its to take.
        task = self._loading.get(partition)
        if task is None or task.done():
            task = self._loading[partition] = asyncio.ensure_future(self._load(partition))
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(task), 5.0)
        if task.done():
            self._loading.pop(partition, None)
            if not task.cancelled() and isinstance(task.exception(), NotLeaderOrFollower):
                raise NotCoordinator(f"another daemon coordinates transactional id {tid!r}")
        if not self._current(partition):
            raise CoordinatorLoadInProgress(f"loading the state of transactional id {tid!r}")

    def _current(self, partition: int) -> bool:
        assert self._leadership is not None
        epoch = self._leadership(partition)
        return epoch is not None and self._loaded_epochs.get(partition) == epoch

    def _forget_lost_partitions(self) -> None:
        for partition in [p for p in self._loaded_epochs if not self._current(p)]:
            del self._loaded_epochs[partition]
            for tid in [t for t in self._txns if self._log.partition_for(t) == partition]:
                self._forget(tid)

    def partition_for(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition of ``transactional_id``."""
        return self._log.partition_for(transactional_id)

    async def ensure_topic(self) -> None:
        """Create ``__transaction_state`` unless it exists, and learn its partition count."""
        await self._log.ensure_topic()

    # --- the state machine ------------------------------------------------------------

    async def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> tuple[int, int]:
        """InitProducerId with a transactional id: the producer id and its new epoch."""
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            raise InvalidTransactionTimeout(
                f"transaction.timeout.ms {timeout_ms} is not in (0, transaction.max.timeout.ms "
                f"{self.settings.max_timeout_ms}]"
            )
        await self._ready(transactional_id)
        txn = self._txns.get(transactional_id)
        if txn is None:
            txn = TxnMetadata(
                transactional_id,
                self._new_producer_id(),
                -1,
                timeout_ms,
                TxnState.EMPTY,
                last_update_ms=self._clock(),
            )
            self._txns[transactional_id] = txn
        await self._settled(txn)
        self._not_busy(txn)
        if producer_id >= 0 and (
            producer_id != txn.producer_id
            or producer_epoch not in (txn.producer_epoch, txn.last_producer_epoch)
        ):
            raise ProducerFenced(
                f"transactional id {transactional_id!r}: producer {producer_id} epoch "
                f"{producer_epoch} is not the current one ({txn.producer_id} epoch "
                f"{txn.producer_epoch})"
            )
        if txn.state in _PREPARED or txn.state == TxnState.PREPARE_EPOCH_FENCE:
            raise ConcurrentTransactions(
                f"transactional id {transactional_id!r}: its last transaction is being completed"
            )
        if txn.state == TxnState.ONGOING:
            await self._abort(txn, bump=True, why="a new producer instance took the id")
            raise ConcurrentTransactions(
                f"transactional id {transactional_id!r}: aborting the open transaction of the "
                "previous producer"
            )
        pid, epoch = txn.producer_id, txn.producer_epoch + 1
        if epoch >= MAX_EPOCH:
            pid, epoch = self._new_producer_id(), 0
        await self._write(
            txn,
            producer_id=pid,
            producer_epoch=epoch,
            last_producer_epoch=-1,
            timeout_ms=timeout_ms,
            state=TxnState.EMPTY,
            partitions=frozenset(),
            start_ms=-1,
        )
        return pid, epoch

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[tuple[str, int]],
    ) -> None:
        """AddPartitionsToTxn (and AddOffsetsToTxn's offsets partition): the transaction grows."""
        await self._ready(transactional_id)
        txn = self._producer(transactional_id, producer_id, producer_epoch)
        await self._settled(txn)
        self._not_busy(txn)
        if txn.state in _PREPARED or txn.state == TxnState.PREPARE_EPOCH_FENCE:
            raise ConcurrentTransactions(
                f"transactional id {transactional_id!r}: its last transaction is being completed"
            )
        wanted = frozenset(partitions)
        if txn.state == TxnState.ONGOING and wanted <= txn.partitions:
            return
        now = self._clock()
        begins = txn.state != TxnState.ONGOING
        await self._write(
            txn,
            state=TxnState.ONGOING,
            partitions=txn.partitions | wanted,
            start_ms=now if begins else txn.start_ms,
        )

    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        """EndTxn: commit or abort; answered once PrepareCommit/PrepareAbort is durable."""
        await self._ready(transactional_id)
        txn = self._producer(transactional_id, producer_id, producer_epoch)
        self._not_busy(txn)
        outcome = "commit" if commit else "abort"
        state = txn.state
        if state == TxnState.ONGOING:
            target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            await self._write(txn, state=target)
            self._complete_later(txn)
            return
        if state in _PREPARED:
            if _PREPARED[state] == commit:
                raise ConcurrentTransactions(
                    f"transactional id {transactional_id!r}: the {outcome} is being completed"
                )
        elif state == TxnState.COMPLETE_COMMIT and commit:
            return  # a retry of the commit
        elif state == TxnState.COMPLETE_ABORT and not commit:
            return
        raise TransactionStateInvalid(
            f"transactional id {transactional_id!r}: cannot {outcome} in state {state.kafka_name}"
        )

    def _producer(self, tid: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        txn = self._txns.get(tid)
        if txn is None or txn.producer_id != producer_id:
            raise InvalidProducerIdMapping(
                f"transactional id {tid!r} has no producer {producer_id}; call InitProducerId"
            )
        if producer_epoch != txn.producer_epoch:
            raise ProducerFenced(
                f"transactional id {tid!r}: epoch {producer_epoch} is fenced by epoch "
                f"{txn.producer_epoch}"
            )
        return txn

    async def _settled(self, txn: TxnMetadata) -> None:
        """Let the last transaction's markers finish, for at most `COMPLETION_WAIT_S`.

        The next transaction of a busy producer begins right after EndTxn, while
        its markers are still being written; Kafka answers CONCURRENT_TRANSACTIONS
        then, and the client backs off (``retry.backoff.ms``, 100 ms) and retries.
        Waiting here for the few milliseconds the markers take answers it at once.
        """
        completing = txn.completing
        if completing is not None and not completing.done():
            await asyncio.wait({completing}, timeout=COMPLETION_WAIT_S)

    def _not_busy(self, txn: TxnMetadata) -> None:
        if txn.busy:
            raise ConcurrentTransactions(
                f"transactional id {txn.transactional_id!r}: another request is changing it"
            )

    async def _write(self, txn: TxnMetadata, **changes: object) -> None:
        """Make ``changes`` durable, then apply them; one change at a time per id."""
        changes.setdefault("last_update_ms", self._clock())
        record = dataclasses.replace(txn, **changes).record()  # type: ignore[arg-type]
        txn.busy = True
        try:
            try:
                await self._log.append(txn.transactional_id, record)
            except NotLeaderOrFollower as exc:
                raise NotCoordinator(
                    f"this daemon no longer coordinates {txn.transactional_id!r}: {exc}"
                ) from exc
            except (LogError, KfsError) as exc:
                raise CoordinatorNotAvailable(
                    f"storing the state of {txn.transactional_id!r} failed: {exc}"
                ) from exc
            for name, value in changes.items():
                setattr(txn, name, value)
        finally:
            txn.busy = False

    # --- completion: markers ------------------------------------------------------------

    async def _abort(self, txn: TxnMetadata, *, bump: bool, why: str) -> None:
        """Abort an open transaction (fencing its producer with a new epoch when ``bump``)."""
        changes: dict[str, object] = {"state": TxnState.PREPARE_ABORT}
        if bump:
            changes["last_producer_epoch"] = txn.producer_epoch
            changes["producer_epoch"] = txn.producer_epoch + 1
        log.info(
            "aborting the transaction of %r (producer %d): %s",
            txn.transactional_id,
            txn.producer_id,
            why,
        )
        await self._write(txn, **changes)
        self._complete_later(txn)

    def _complete_later(self, txn: TxnMetadata) -> None:
        if txn.completing is None or txn.completing.done():
            txn.completing = asyncio.ensure_future(self._complete(txn))

    async def _complete(self, txn: TxnMetadata) -> None:
        """Write the markers of a prepared transaction (all at once), then record it complete."""
        commit = _PREPARED[txn.state]

        async def mark(topic: str, partition: int) -> None:
            await self._marker(txn, topic, partition, commit)
            if topic == "__consumer_offsets" and self._offsets_done is not None:
                await self._offsets_done(partition, txn.producer_id, commit)

        # Together, so the partitions' appends share the WAL's group commit.
        await asyncio.gather(*(mark(t, p) for t, p in sorted(txn.partitions)))
        while True:
            try:
                await self._write(
                    txn,
                    state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
                    partitions=frozenset(),
                )
                break
            except NotCoordinator:
                return  # the next coordinator completes it
            except CoordinatorNotAvailable as exc:
                log.warning("%s; retrying", exc)
                await asyncio.sleep(self.settings.marker_retry_ms / 1000)
        if commit:
            self.commits += 1
        else:
            self.aborts += 1

    async def _marker(self, txn: TxnMetadata, topic: str, partition: int, commit: bool) -> None:
        """One marker, retried until its partition takes it (or no longer needs it)."""
        warned = False
        while True:
            try:
                await self._write_marker(
                    topic,
                    partition,
                    producer_id=txn.producer_id,
                    producer_epoch=txn.producer_epoch,
                    commit=commit,
                    coordinator_epoch=0,
                )
                return
            except UnknownTopicOrPartition:
                return  # deleted: nothing to mark
            except LogError as exc:
                if exc.kafka_error_code == 47:  # a newer epoch wrote there: already settled
                    return
                if not warned:
                    warned = True
                    log.warning(
                        "writing the %s marker of %r to %s-%d failed (%s); retrying",
                        "commit" if commit else "abort",
                        txn.transactional_id,
                        topic,
                        partition,
                        exc,
                    )
            await asyncio.sleep(self.settings.marker_retry_ms / 1000)

    # --- timeouts and expiration ----------------------------------------------------------

    async def abort_timed_out(self) -> int:
        """Abort every open transaction past its timeout (bumping the epoch); how many."""
        now = self._clock()
        aborted = 0
        for txn in list(self._txns.values()):
            if (
                txn.state == TxnState.ONGOING
                and not txn.busy
                and txn.start_ms >= 0
                and now - txn.start_ms > txn.timeout_ms
            ):
                with contextlib.suppress(KfsError):
                    await self._abort(
                        txn, bump=True, why=f"open longer than its timeout of {txn.timeout_ms} ms"
                    )
                    aborted += 1
                    self.timed_out += 1
        return aborted

    async def expire_ids(self) -> int:
        """Forget ids idle for ``transactional.id.expiration.ms`` (a tombstone each); how many."""
        now = self._clock()
        expired = 0
        for txn in list(self._txns.values()):
            idle = now - txn.last_update_ms > self.settings.id_expiration_ms
            settled = txn.state in (
                TxnState.EMPTY,
                TxnState.COMPLETE_COMMIT,
                TxnState.COMPLETE_ABORT,
            )
            if idle and settled and not txn.busy:
                with contextlib.suppress(KfsError):
                    await self._log.append(txn.transactional_id, None)
                    self._txns.pop(txn.transactional_id, None)
                    expired += 1
        return expired

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.abort_check_interval_ms / 1000)
            try:
                if self._leadership is not None:
                    self._forget_lost_partitions()
                await self.abort_timed_out()
                await self.expire_ids()
            except Exception:
                log.exception("the transaction timeout sweep failed; retrying later")

    # --- operators -------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnMetadata:
        txn = self._txns.get(transactional_id)
        if txn is None:
            raise TransactionalIdNotFound(f"no transactional id {transactional_id!r}")
        return txn

    async def describe_coordinated(self, transactional_id: str) -> TxnMetadata:
        """DescribeTransactions: the id's state, if this daemon coordinates it.

        Raises `NotCoordinator`, `CoordinatorLoadInProgress` or
        `TransactionalIdNotFound`, as Kafka's coordinator answers.
        """
        await self._ready(transactional_id)
        return self.describe(transactional_id)

    def metrics(self) -> TransactionMetrics:
        """Counts for the metrics endpoint."""
        open_states = (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
        return TransactionMetrics(
            transactional_ids=len(self._txns),
            open_transactions=sum(1 for t in self._txns.values() if t.state in open_states),
            commits=self.commits,
            aborts=self.aborts,
            timed_out=self.timed_out,
        )

    def transactions(self) -> Sequence[TxnMetadata]:
        """Every transactional id this daemon coordinates now, by id."""
        if self._leadership is not None:
            self._forget_lost_partitions()
        return [self._txns[t] for t in sorted(self._txns)]
