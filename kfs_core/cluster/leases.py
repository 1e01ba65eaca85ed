"""`LeaseKeeper`: a running daemon's heartbeat loop, its partition leases, its `ClusterView`.

One keeper runs in the daemon's event loop.  Every heartbeat interval
(`tick`) it writes this daemon's heartbeat, reads the others', works out who
is live (`LivenessObserver`), the operator's pinned placements
(`ReassignmentFollower`: one GET) and the assignment (`assign`), then:

- hands over each partition it holds that is now assigned to another live
  daemon: the log's ``on_release`` stops appends, flushes and drops it, and
  the next heartbeat no longer lists it;
- takes over, through the log's ``on_takeover``, the partitions assigned
  here that a dead or stopped daemon's heartbeat still lists and that
  `may_take` allows, and the partitions pinned here that no live daemon holds
  any more (the holder handed them over).

The log opens a partition by calling `acquire`, which commits a ``lease``
action in the partition's catalog (one epoch more than the last; exactly one
daemon wins each epoch) and records the epoch in the next heartbeat.

The lease is timed by this daemon's own monotonic clock: a heartbeat that
landed, sent at ``t``, keeps every held partition valid until ``t + session
timeout - heartbeat interval``.  Another daemon counts this one dead only a
session timeout after it first *saw* that heartbeat, which is later.  Once the
deadline passes without a newer heartbeat landing, `local_epoch` says None (the
log stops acknowledging) and the next tick gives up every held partition; a
partition is only held again through a new lease, at a new epoch.  A heartbeat
that lands after the deadline (the daemon was paused, or the store slow)
revives none of them: the others may have taken them meanwhile.  Only leases
taken afterwards count on it.

Store calls run on an executor (the loop's default unless one is given);
everything else is in-memory and cheap, as `ClusterView` requires.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from kfs_core.catalog.purge import dead_holder_refusal
from kfs_core.catalog.state import PartitionState
from kfs_core.cluster.assignment import assign_topic
from kfs_core.cluster.nodes import LivenessObserver, NodeIdInUse, NodeRegistry
from kfs_core.cluster.reassignments import (
    ReassignmentFollower,
    Reassignments,
    ReassignmentStore,
)
from kfs_core.cluster.view import NO_LEADER, Leader, NodeInfo, NodeState
from kfs_core.config import Settings
from kfs_core.errors import KfsError, LeaseConflict, NotLeaderOrFollower
from kfs_core.storage import ObjectStore

__all__ = [
    "Acquired",
    "LeaseCatalog",
    "LeaseKeeper",
    "LeaseState",
    "OnRelease",
    "OnTakeover",
    "twin_moved",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

TopicPartition = tuple[str, int]
#: The log's hand-over: stop appends to the partition, flush it, drop it.
OnRelease = Callable[[str, int], Awaitable[None]]
#: The log's takeover: open these partitions (each open calls `LeaseKeeper.acquire`).
OnTakeover = Callable[[list[TopicPartition]], Awaitable[None]]

#: How many times `LeaseKeeper.start` looks at a heartbeat of its own node id
#: while it waits two heartbeat intervals for it to move.
_TWIN_POLLS = 8


class LeaseState(Protocol):
    """The lease part of a partition's catalog state (`PartitionState`)."""

    @property
    def leader_epoch(self) -> int:
        """The newest lease's epoch (-1: none yet)."""
        ...

    @property
    def leader_node_id(self) -> int | None:
        """The node id of the newest lease's holder."""
        ...

    @property
    def leader_incarnation(self) -> str | None:
        """The incarnation of the newest lease's holder."""
        ...


class LeaseCatalog(Protocol):
    """What the keeper asks of a partition's catalog (`PartitionCatalog`)."""

    def refresh(self) -> LeaseState:
        """The partition as of its newest commit."""
        ...

    def take_lease(self, node_id: int, incarnation: str) -> LeaseState:
        """Commit a ``lease`` action one epoch past the newest; `LeaseConflict` if another won."""
        ...


#: The epoch a heartbeat lists for a partition whose lease is being taken.
TAKING = -1


@dataclass(frozen=True)
class ClusterMetrics:
    """What ``/metrics`` shows of the cluster as this daemon sees it (``kfs_cluster_*``)."""

    live_nodes: int
    held_partitions: int
    lease_valid: int  # 1 while the last heartbeat that landed keeps the leases valid
    heartbeat_failures: int
    leases_taken: int
    partitions_handed_over: int


@dataclass(frozen=True)
class Acquired:
    """A lease this daemon holds, and whose it was before (None: nobody's, or unknown).

    ``catalog`` is the catalog the lease was just taken through, current as
    of the take, for the first opening of the partition to go on from
    instead of loading it cold; None when the lease was already held.
    """

    epoch: int
    previous_node_id: int | None = None
    previous_incarnation: str | None = None
    previous_durability: str | None = None
    catalog: LeaseCatalog | None = field(default=None, compare=False)
    # Just taken from another daemon (its clients' requests may still be on their way).
    moved: bool = field(default=False, compare=False)


def _holder(state: LeaseState) -> tuple[int | None, str | None]:
    node_id = state.leader_node_id
    incarnation = state.leader_incarnation
    if node_id is None or node_id < 0:
        return None, None
    return node_id, incarnation or None


class LeaseKeeper:
    """The `ClusterView` of a running daemon: heartbeats, liveness, assignment and leases.

    ``partitions`` returns every partition of every topic (the daemon's topic
    cache); ``catalog_for`` the catalog of one.  ``clock`` is the monotonic
    clock every lease and liveness time is read from (injectable for tests).
    """

    def __init__(
        self,
        store: ObjectStore,
        namespace: str,
        settings: Settings,
        listeners: Mapping[str, tuple[str, int]],
        partition_count: Callable[[str], int | None],
        catalog_for: Callable[[str, int], LeaseCatalog],
        *,
        clock: Callable[[], float] = time.monotonic,
        executor: Executor | None = None,
        rack: str | None = None,
        incarnation: str = "",
        observer_max_gap_s: float | None = None,
    ) -> None:
        """``observer_max_gap_s``: see `LivenessObserver` (a test's clock that jumps sets it)."""
        self._registry = NodeRegistry(store, namespace)
        self._follower = ReassignmentFollower(ReassignmentStore(store, namespace))
        self._pins = Reassignments()
        self._settings = settings
        self._listeners = dict(listeners)
        self._partition_count = partition_count
        self._catalog_for = catalog_for
        self._clock = clock
        self._executor = executor
        self._rack = rack
        self._interval = settings.broker_heartbeat_interval_ms / 1000
        self._session = settings.broker_session_timeout_ms / 1000
        self._observer = LivenessObserver(
            settings.broker_session_timeout_ms, clock, max_gap_s=observer_max_gap_s
        )
        # This run's random id; given, it is the one the WAL directory lock records.
        self._incarnation = incarnation
        self._seq = 0
        self._state: NodeState = "running"
        self._running = False
        self._held: dict[TopicPartition, int] = {}
        # Held when the lease lapsed, before a later heartbeat landed: never valid again.
        self._lapsed: set[TopicPartition] = set()
        self._acquired: dict[TopicPartition, Acquired] = {}
        self._attempts: dict[TopicPartition, asyncio.Future[Acquired]] = {}
        self._deadline: float | None = None
        self._last_heartbeat_ok: bool | None = None
        self._heartbeat_failures = self._leases_taken = self._handed_over = 0
        self._put_outage = False
        self._read_outage = False
        # Each topic's owners by partition, for one set of live nodes (`_owner`).
        # Assignments by (the daemons spread over, topic, partition count).
        self._owners: dict[tuple[tuple[int, ...], str, int], tuple[int, ...]] = {}
        self._assigned_over: tuple[int, ...] = ()
        self._unclean_warned: set[TopicPartition] = set()
        # Partitions of deleted topics a purge holds (`hold_for_purge`): never handed over.
        self._purging: set[TopicPartition] = set()
        # Taken by WAL recovery (`acquire` ``recovering``): kept until `recovered`.
        self._recovering: set[TopicPartition] = set()
        # What each other daemon's last running heartbeat held: a stopped one lists nothing.
        self._last_held: dict[int, dict[TopicPartition, int]] = {}
        self._on_release: OnRelease | None = None
        self._on_takeover: OnTakeover | None = None
        self._on_silence: Callable[[], None] | None = None
        self._wake = asyncio.Event()
        self._tick_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._beats: asyncio.Task[None] | None = None

    # --- life cycle ------------------------------------------------------------------

    async def start(self, *, run_loop: bool = True, dead_incarnation: str | None = None) -> None:
        """Refuse a node id live elsewhere, write the first heartbeat, start the loop.

        Raises `NodeIdInUse` when a heartbeat of this node id under another
        incarnation moves within two heartbeat intervals.  ``run_loop=False``
        leaves the ticking to the caller (`tick`).  ``dead_incarnation`` is
        one known not to run any more (the WAL directory lock's previous
        holder): its heartbeat is not watched.  The other daemons' heartbeats
        are read before this returns, so the first partitions taken respect them.
        """
        await self._refuse_twin(dead_incarnation)
        if not self._incarnation:
            self._incarnation = uuid.uuid4().hex
        self._seq = 0
        self._state = "running"
        self._running = True
        await self._heartbeat()
        if self._last_heartbeat_ok is not True:
            log.warning("node %d: the first heartbeat failed; retrying", self.node_id)
        nodes = await self._read_nodes()
        if nodes is not None:
            self._observe(nodes)
        await self._read_pins()
        if run_loop:
            self._task = asyncio.ensure_future(self._loop())
            self._beats = asyncio.ensure_future(self._beat_loop())

    async def _refuse_twin(self, dead_incarnation: str | None) -> None:
        first = await self._io(self._registry.read, self.node_id)
        if first is None or first.state != "running" or first.incarnation == dead_incarnation:
            return
        for _ in range(_TWIN_POLLS):
            await asyncio.sleep(2 * self._interval / _TWIN_POLLS)
            now = await self._io(self._registry.read, self.node_id)
            if twin_moved(first, now):
                assert now is not None
                raise NodeIdInUse(
                    f"node id {self.node_id} is in use by a running daemon "
                    f"(incarnation {now.incarnation}) on namespace "
                    f"{self._registry.namespace!r}; give this one another KFS_NODE_ID"
                )

    async def stop(self, *, flushed: bool) -> None:
        """Stop the loop; when ``flushed`` (everything is in the store), say ``stopped``.

        A ``stopped`` heartbeat holds nothing: the other daemons take this
        one's partitions at their next tick, whatever the durability mode.
        """
        self._running = False
        loops = {task for task in (self._task, self._beats) if task is not None}
        for task in loops:
            task.cancel()
        if loops:
            # Not ``await task``: that would swallow a cancellation of this stop too.
            await asyncio.wait(loops)
        for task in loops:
            if not task.cancelled() and task.exception() is not None:
                log.error("node %d: a heartbeat loop failed: %r", self.node_id, task.exception())
        self._task = self._beats = None
        if flushed:
            self._held.clear()
            self._lapsed.clear()
            self._acquired.clear()
            self._state = "stopped"
            async with self._tick_lock:
                await self._heartbeat()

    def set_callbacks(
        self,
        on_release: OnRelease,
        on_takeover: OnTakeover,
        on_silence: Callable[[], None] | None = None,
    ) -> None:
        """Register the log's hand-over and takeover; without them the keeper moves nothing.

        ``on_silence`` is called on each tick while a daemon holding
        partitions is silent past half the session timeout (`_warn_of_silence`).
        """
        self._on_release = on_release
        self._on_takeover = on_takeover
        self._on_silence = on_silence

    async def _beat_loop(self) -> None:
        """Write the heartbeat every interval, whatever the rest of the tick is waiting for.

        Reading the others' heartbeats, handing over and taking over
        (`tick`) can take longer than an interval on a slow store; the lease
        must not lapse for that.  A write that hangs is given up on (the
        lease is timed from when it was sent, so a late landing extends
        nothing) and the next one is sent on time.
        """
        # Ends on ``_running`` as well as on cancellation: Python 3.11's ``wait_for``
        # returns instead of raising when the cancel meets a finished wait.
        while self._running:
            started = self._clock()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._heartbeat(), self._session - self._interval)
            if not self._running:
                break
            await asyncio.sleep(max(0.0, self._interval - (self._clock() - started)))

    async def _loop(self) -> None:
        # A tick begins every interval (sooner when woken), however long the last took:
        # a dead daemon is seen within an interval of its session timeout.
        last = self._clock()
        while self._running:  # not only cancellation: see `_beat_loop`
            woken = False
            with contextlib.suppress(TimeoutError):
                now = self._clock()
                wait = max(0.0, self._interval - (now - last))
                # A silent daemon is counted dead the moment its session times out,
                # not up to an interval later.
                death = self._observer.next_death()
                if death is not None and now < death < now + wait:
                    wait = death - now
                woken = await asyncio.wait_for(self._wake.wait(), wait)
            self._wake.clear()
            last = self._clock()
            try:
                # Woken (a partition taken or lost): the others should know now.
                await self.tick(heartbeat=woken)
            except asyncio.CancelledError:
                if _cancelling():
                    raise
                log.warning("node %d: a tick was cancelled from inside; going on", self.node_id)
            except Exception:
                log.exception("node %d: heartbeat tick failed", self.node_id)

    # --- one heartbeat -------------------------------------------------------------

    async def tick(self, *, heartbeat: bool = True) -> None:
        """One round: write our heartbeat, read theirs, hand over and take over partitions.

        The running daemon writes its heartbeats from a task of their own
        (`_beat_loop`) and ticks with ``heartbeat=False``.
        """
        async with self._tick_lock:
            if not self._running:
                return
            await self._drop_lapsed()
            if heartbeat:
                await self._heartbeat()
            nodes = await self._read_nodes()
            if nodes is None:
                return
            self._observe(nodes)
            self._warn_of_silence()
            await self._read_pins()
            if await self._hand_over():
                await self._heartbeat()
            await self._take_over()

    def _warn_of_silence(self) -> None:
        """Tell the log that a daemon holding partitions has been silent for half a session.

        It may be dead: the log reads ahead what a takeover of its partitions
        would read, so that the takeover, if it comes, reads less.
        """
        if self._on_silence is None:
            return
        silent = [n for n in self._observer.silent(self._session / 2) if n.node_id != self.node_id]
        if any(n.held for n in silent):
            self._on_silence()

    def _observe(self, nodes: Sequence[NodeInfo]) -> None:
        others = [n for n in nodes if n.node_id != self.node_id]
        self._observer.observe(others)
        for node in others:
            if node.state == "running":
                self._last_held[node.node_id] = dict(node.held)

    async def _drop_lapsed(self) -> None:
        """Give up every held partition once the lease deadline has passed.

        Those held when it passed are given up even if a later heartbeat landed.
        """
        # A partition still being taken is `_acquire`'s to settle.
        held = [tp for tp, epoch in self._held.items() if epoch != TAKING]
        if not self._lease_valid():
            lapsed = sorted(held)
        else:
            lapsed = sorted(tp for tp in held if tp in self._lapsed)
        if not lapsed:
            return
        log.warning(
            "node %d: no heartbeat landed before the lease deadline; giving up %d partitions",
            self.node_id,
            len(lapsed),
        )
        for tp in lapsed:
            await self._release(tp, "its lease lapsed")
            self._forget(tp)

    async def _heartbeat(self) -> None:
        self._seq += 1
        info = self._info()
        sent_at = self._clock()
        try:
            await self._io(self._registry.write, info)
        except (KfsError, OSError) as exc:
            self._last_heartbeat_ok = False
            self._heartbeat_failures += 1
            if not self._put_outage:
                self._put_outage = True
                log.warning("node %d: writing the heartbeat failed: %s", self.node_id, exc)
            return
        self._last_heartbeat_ok = True
        if self._put_outage:
            self._put_outage = False
            log.info("node %d: heartbeats land again", self.node_id)
        if self._deadline is not None and self._clock() >= self._deadline and self._held:
            # Landed after the lease lapsed: what was held may be another's by now.
            self._lapsed.update(self._held)
            self._wake.set()
        self._deadline = sent_at + self._session - self._interval

    async def _read_nodes(self) -> list[NodeInfo] | None:
        try:
            nodes = await self._io(self._registry.read_all)
        except (KfsError, OSError) as exc:
            self._observer.blind()
            if not self._read_outage:
                self._read_outage = True
                log.warning("node %d: reading the heartbeats failed: %s", self.node_id, exc)
            return None
        self._read_outage = False
        return nodes

    async def _read_pins(self) -> None:
        """Take in the operator's pins (`ReassignmentFollower.read` never raises)."""
        pins = await self._io(self._follower.read)
        if pins.version != self._pins.version:
            log.info("node %d: partition reassignments version %d", self.node_id, pins.version)
            self._pins = pins
            self._owners.clear()

    async def _hand_over(self) -> bool:
        """Release what another live daemon should have (or already holds); True if any."""
        released = False
        live = {n.node_id: n for n in self._observer.live()}
        for tp, epoch in sorted(self._held.items()):
            if epoch == TAKING or tp in self._purging or tp in self._recovering:
                continue  # `_acquire` settles it; a purge or a recovery lets go itself
            newer = [n.node_id for n in live.values() if n.held.get(tp, -1) > epoch]
            owner = self._owner(tp)
            if newer:
                # Taken while this daemon was paused or cut off: its commits are fenced.
                await self._release(tp, f"node {newer[0]} holds it at a newer epoch")
                self._forget(tp)
                released = True
            elif owner is not None and owner != self.node_id and owner in live:
                if self._on_release is None:
                    continue
                if await self._release(tp, f"it is assigned to node {owner}"):
                    self._forget(tp)
                    released = True
        return released

    async def _release(self, tp: TopicPartition, why: str) -> bool:
        log.info("node %d: handing over %s-%d: %s", self.node_id, tp[0], tp[1], why)
        if self._on_release is None:
            return True
        try:
            await self._on_release(*tp)
        except asyncio.CancelledError:
            if _cancelling():
                raise
            # The log dropped the partition meanwhile (another daemon took it).
            return True
        except Exception:
            log.exception("node %d: releasing %s-%d failed", self.node_id, *tp)
            return False
        self._handed_over += 1
        return True

    async def _take_over(self) -> None:
        if self._on_takeover is None:
            return
        gone = self._observer.dead() + self._observer.stopped()
        orphaned = {
            tp for node in gone for tp in (*node.held, *self._last_held.get(node.node_id, ()))
        }
        # Pinned here and handed over by its holder: taken now, not on the first request.
        pinned = {
            tp
            for tp, target in self._pins.targets.items()
            if target == self.node_id and tp[1] < (self._partition_count(tp[0]) or 0)
        }
        # A topic not looked up yet may be ours: the log looks it up, then asks.
        keys = [
            tp
            for tp in sorted(orphaned | pinned)
            if (self._owner(tp) == self.node_id or self._partition_count(tp[0]) is None)
            and tp not in self._held
            and self.may_take(*tp)
        ]
        if not keys:
            return
        try:
            await self._on_takeover(keys)
        except asyncio.CancelledError:
            if _cancelling():
                raise
        except Exception:
            log.exception("node %d: taking over %d partitions failed", self.node_id, len(keys))

    # --- leases ------------------------------------------------------------------------

    def may_take(self, topic: str, partition: int) -> bool:
        """Whether this daemon may take the partition now (`refusal` says why not)."""
        return self.refusal(topic, partition) is None

    def refusal(self, topic: str, partition: int) -> str | None:
        """Why this daemon may not take the partition now; None when it may."""
        return self._refusal((topic, partition), self.node_id, warn=True)

    def _refusal(self, tp: TopicPartition, taker: int, *, warn: bool) -> str | None:
        for node in self._observer.live():
            if node.node_id != taker and tp in node.held:
                return f"live node {node.node_id} holds it"
        for node in self._observer.dead():
            if tp in node.held:
                why = self._dead_holder_refusal(tp, node, taker, warn=warn)
                if why is not None:
                    return why
        return None

    def _dead_holder_refusal(
        self, tp: TopicPartition, node: NodeInfo, taker: int, *, warn: bool
    ) -> str | None:
        if node.durability == "store" or node.node_id == taker:
            return None
        if self._settings.unclean_leader_election_enable:
            if warn and tp not in self._unclean_warned:
                self._unclean_warned.add(tp)
                log.warning(
                    "unclean leader election of %s-%d: node %d (durability %s) is dead; "
                    "the records only its WAL held are lost",
                    tp[0],
                    tp[1],
                    node.node_id,
                    node.durability,
                )
            return None
        return (
            f"dead node {node.node_id} holds it and its WAL (durability {node.durability}) "
            f"may hold acknowledged records: waiting for it to restart "
            f"(or unclean.leader.election.enable)"
        )

    async def _catalog_holder_refusal(
        self, tp: TopicPartition, node_id: int | None, incarnation: str | None
    ) -> str | None:
        """Why the lease the catalog records may not be taken from its holder; None if it may.

        The catalog knows a holder the heartbeats seen so far may not list: one
        that took the lease after its last heartbeat this daemon read, or that
        died before its next one.  A daemon lists a partition in its heartbeat
        before it commits the lease (`_acquire`), so a heartbeat read after the
        catalog is the truth about a live holder: it holds the partition until
        a heartbeat of its no longer lists it.
        """
        if node_id is None or node_id == self.node_id:
            return None
        node = self._observer.get(node_id)
        if node is None or node.incarnation != incarnation:
            # Never seen, or restarted since: its new incarnation recovered that WAL at start.
            return None
        if node.state == "stopped":
            return None
        if self._observer.is_live(node_id):
            fresh = await self._io(self._registry.read, node_id)
            if fresh is not None and fresh.incarnation == incarnation and tp in fresh.held:
                return f"live node {node_id} holds it"
            return None
        return self._dead_holder_refusal(tp, node, self.node_id, warn=True)

    async def acquire(self, topic: str, partition: int, *, recovering: bool = False) -> Acquired:
        """Hold the partition: its lease from the catalog, or the one already held.

        Raises `NotLeaderOrFollower` when it is another live daemon's, may not be
        taken (`refusal`), another daemon won the epoch, or this daemon's
        heartbeats are failing; a store error reading or writing the catalog
        propagates as it is.  Concurrent calls for one partition share one attempt.
        ``recovering``: the daemon's own WAL holds acknowledged records of the
        partition that no other daemon has (a restart after a crash), so it
        is taken even when assigned to another daemon; the next tick hands it
        over once they are flushed.
        """
        tp = (topic, partition)
        if tp in self._lapsed:
            raise NotLeaderOrFollower(f"{tp[0]}-{tp[1]}: its lease lapsed; it is being given up")
        if tp in self._purging:
            raise NotLeaderOrFollower(f"{tp[0]}-{tp[1]}: its deleted topic is being purged")
        if self._held.get(tp, TAKING) != TAKING and self._lease_valid():
            return self._acquired[tp]
        attempt = self._attempts.get(tp)
        if attempt is None:
            attempt = asyncio.ensure_future(self._acquire(tp, recovering))
            self._attempts[tp] = attempt
            attempt.add_done_callback(functools.partial(self._attempt_done, tp))
        return await asyncio.shield(attempt)

    def _attempt_done(self, tp: TopicPartition, attempt: asyncio.Future[Acquired]) -> None:
        self._attempts.pop(tp, None)
        if not attempt.cancelled():
            attempt.exception()  # retrieved: every waiter may have gone

    async def _acquire(self, tp: TopicPartition, recovering: bool) -> Acquired:
        name = f"{tp[0]}-{tp[1]}"
        if not self._running:
            raise NotLeaderOrFollower(f"{name}: node {self.node_id} is not running")
        if not self._lease_valid():
            raise NotLeaderOrFollower(f"{name}: node {self.node_id}'s heartbeats are failing")
        owner = self._owner(tp)
        if owner is not None and owner != self.node_id and not recovering:
            raise NotLeaderOrFollower(f"{name} is assigned to node {owner}")
        why = self.refusal(*tp)
        if why is not None:
            raise NotLeaderOrFollower(f"{name}: {why}")
        catalog = self._catalog_for(*tp)
        before = await self._io(catalog.refresh)
        previous_node, previous_incarnation = _holder(before)
        why = await self._catalog_holder_refusal(tp, previous_node, previous_incarnation)
        if why is not None:
            raise NotLeaderOrFollower(f"{name}: {why}")
        # Listed in the heartbeat before the lease lands, so that a daemon
        # reading the catalog and then this heartbeat never takes it from us.
        self._held[tp] = TAKING
        try:
            await self._heartbeat()
            if self._last_heartbeat_ok is not True or not self._lease_valid():
                raise NotLeaderOrFollower(f"{name}: node {self.node_id}'s heartbeat failed")
            state = await self._io(catalog.take_lease, self.node_id, self._incarnation)
            if tp in self._lapsed or not self._lease_valid():
                # This daemon's lease lapsed while the take was under way (it was
                # paused): the epoch just taken is not served; a later request takes
                # the next one.
                raise NotLeaderOrFollower(
                    f"{name}: node {self.node_id}'s lease lapsed while it took the partition"
                )
        except LeaseConflict as exc:
            raise NotLeaderOrFollower(f"{name}: another daemon took the lease: {exc}") from exc
        finally:
            if self._held.get(tp) == TAKING:
                del self._held[tp]
                self._lapsed.discard(tp)
        previous = self._observer.get(previous_node) if previous_node is not None else None
        durability = (
            previous.durability
            if previous is not None and previous.incarnation == previous_incarnation
            else None
        )
        if previous_node == self.node_id and previous_incarnation == self._incarnation:
            durability = self._settings.durability
        acquired = Acquired(state.leader_epoch, previous_node, previous_incarnation, durability)
        if recovering:
            self._recovering.add(tp)
        self._held[tp] = acquired.epoch
        self._acquired[tp] = acquired
        self._leases_taken += 1
        log.info("node %d: took %s at epoch %d", self.node_id, name, acquired.epoch)
        self._wake.set()
        moved = previous_node is not None and previous_node != self.node_id
        return dataclasses.replace(acquired, catalog=catalog, moved=moved)

    def lost(self, topic: str, partition: int) -> None:
        """The log found itself fenced on the partition: forget it."""
        self._forget((topic, partition))
        self._wake.set()

    def recovered(self, tps: Sequence[TopicPartition]) -> None:
        """WAL recovery flushed these: the next tick may hand them over to their assignee."""
        self._recovering.difference_update(tps)
        self._wake.set()

    # --- purges of deleted topics (`kfs_core.catalog.purge`) --------------------------------

    async def hold_for_purge(
        self, epochs: Mapping[TopicPartition, int], *, timeout_s: float
    ) -> list[int]:
        """List a purge's leases in the heartbeats; wait until no other live daemon lists them.

        A daemon still holding one of these partitions at an older epoch
        hands it over at its next tick, as to any newer holder, and its next
        heartbeat drops it; no daemon takes one while this one lists it.
        Returns the node ids still listing some after ``timeout_s`` (their
        commits are fenced by the purge's epochs all the same).
        """
        for tp, epoch in epochs.items():
            self._purging.add(tp)
            self._held[tp] = epoch
        self._wake.set()
        deadline = self._clock() + timeout_s
        while True:
            holders = sorted(
                {
                    n.node_id
                    for n in self._observer.live()
                    if n.node_id != self.node_id and any(tp in n.held for tp in epochs)
                }
            )
            if not holders or self._clock() >= deadline or not self._running:
                return holders
            await asyncio.sleep(self._interval)

    def purge_refusal(self, state: PartitionState) -> str | None:
        """Why a purge may not take this partition from its holder now (`dead_holder_refusal`)."""
        holder = self._observer.get(state.leader_node_id)
        return dead_holder_refusal(
            state,
            {} if holder is None else {holder.node_id: holder},
            set(self._live_ids()),
            unclean_leader_election=self._settings.unclean_leader_election_enable,
        )

    def end_purge(self, tps: Iterable[TopicPartition]) -> None:
        """The purge is over: these partitions are no longer held or listed."""
        for tp in tps:
            self._purging.discard(tp)
            self._forget(tp)
        self._wake.set()

    def _forget(self, tp: TopicPartition) -> None:
        self._held.pop(tp, None)
        self._recovering.discard(tp)
        self._lapsed.discard(tp)
        self._acquired.pop(tp, None)

    def _lease_valid(self) -> bool:
        """Whether this daemon's leases hold now.

        They lapse, at the deadline the last landed heartbeat set, only where
        another daemon could take a partition from a silent holder: in the
        ``store`` durability mode, or with unclean leader election.  In a
        local-WAL mode nobody may take them (the acknowledged records are on
        this machine), so a daemon cut off from the store goes on acknowledging
        into its WAL, as a single daemon rides out a store outage.
        """
        settings = self._settings
        if settings.durability != "store" and not settings.unclean_leader_election_enable:
            return self._running
        return self._deadline is not None and self._clock() < self._deadline

    # --- assignment --------------------------------------------------------------------

    def _live_ids(self) -> tuple[int, ...]:
        ids = {n.node_id for n in self._observer.live()}
        if self._running:
            ids.add(self.node_id)
        return tuple(sorted(ids))

    def _owner(self, tp: TopicPartition, *, without: int | None = None) -> int | None:
        """The partition's assignee among the live daemons: its topic spread over them.

        A topic this daemon has not looked up yet is spread as if it had
        just enough partitions; the daemon looks a topic up before it serves
        one of its partitions, so the answers it acts on agree with the others'.
        ``without``: the assignee were that daemon dead.
        """
        live = self._live_ids()
        if live != self._assigned_over:
            self._assigned_over = live
            self._owners.clear()
        over = tuple(n for n in live if n != without)
        if not over:
            return None
        topic, partition = tp
        count = self._partition_count(topic)
        if count is None or partition >= count:
            count = partition + 1
        owners = self._owners.get((over, topic, count))
        if owners is None:
            pins = self._pins.of_topic(topic)
            owners = self._owners[(over, topic, count)] = assign_topic(topic, count, over, pins)
        return owners[partition]

    # --- ClusterView -------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        """This daemon's node id."""
        return self._settings.node_id

    @property
    def incarnation(self) -> str:
        """This run's random id (empty before `start`)."""
        return self._incarnation

    def live_nodes(self) -> Sequence[NodeInfo]:
        """Every live daemon, this one included while it runs, by node id."""
        others = [n for n in self._observer.live() if n.node_id != self.node_id]
        if self._running:
            others.append(self._info())
        return sorted(others, key=lambda n: n.node_id)

    def leader(self, topic: str, partition: int) -> Leader:
        """The live holder; else the live assignee if it may take it (epoch -1); else none."""
        tp = (topic, partition)
        if self._running and tp in self._held and tp not in self._lapsed and self._lease_valid():
            return Leader(self.node_id, self._held[tp])
        # A lapsed lease is not leadership, even before the tick that drops it
        # runs (it may be waiting on the store this daemon cannot reach).
        holders = [n for n in self._observer.live() if tp in n.held]
        if holders:
            best = max(holders, key=lambda n: n.held[tp])
            return Leader(best.node_id, best.held[tp])
        owner = self._owner(tp)
        if owner is None or self._refusal(tp, owner, warn=False) is not None:
            return NO_LEADER
        if owner == self.node_id and not self._lease_valid():
            # Cut off from the store: the others count this daemon dead by now (or
            # soon) and take its partitions as assigned without it.  Name that
            # daemon, at an unknown epoch: a client that asks this daemon for
            # Metadata again and again (librdkafka asks the least idle broker)
            # still finds the new leader.
            heir = self._owner(tp, without=self.node_id)
            return NO_LEADER if heir is None else Leader(heir, -1)
        return Leader(owner, -1)

    def local_epoch(self, topic: str, partition: int) -> int | None:
        """The held epoch while the lease deadline has not passed, else None."""
        tp = (topic, partition)
        epoch = self._held.get(tp)
        if epoch is None or epoch == TAKING or tp in self._lapsed:
            return None
        return epoch if self._lease_valid() else None

    # --- for metrics -------------------------------------------------------------------

    def metrics(self) -> ClusterMetrics:
        """The ``kfs_cluster_*`` metrics: live nodes, held partitions, lease and heartbeat counts."""
        return ClusterMetrics(
            live_nodes=self.live_node_count,
            held_partitions=len(self._held),
            lease_valid=int(self._lease_valid()),
            heartbeat_failures=self._heartbeat_failures,
            leases_taken=self._leases_taken,
            partitions_handed_over=self._handed_over,
        )

    @property
    def held(self) -> Mapping[TopicPartition, int]:
        """The partitions this daemon holds, with their epochs (a copy)."""
        return dict(self._held)

    @property
    def last_heartbeat_ok(self) -> bool | None:
        """Whether the last heartbeat landed (None before the first)."""
        return self._last_heartbeat_ok

    @property
    def live_node_count(self) -> int:
        """How many daemons are live, this one included while it runs."""
        return len(self._live_ids())

    @property
    def lease_deadline(self) -> float | None:
        """The monotonic time the held leases lapse at unless a heartbeat lands first."""
        return self._deadline

    # --- plumbing ----------------------------------------------------------------------

    def _info(self) -> NodeInfo:
        return NodeInfo(
            node_id=self.node_id,
            incarnation=self._incarnation,
            listeners=self._listeners,
            durability=self._settings.durability,
            state=self._state,
            seq=self._seq,
            held={tp: e for tp, e in self._held.items() if tp not in self._lapsed},
            rack=self._rack,
        )

    async def _io(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args))


def _cancelling() -> bool:
    """Whether the running task itself is being cancelled (not a callback's own task).

    A callback can raise `asyncio.CancelledError` because something it waited
    for was cancelled; only a cancellation of the keeper's own task may end
    its loops.
    """
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def twin_moved(first: NodeInfo, now: NodeInfo | None) -> bool:
    """Whether a heartbeat of one's own node id, first seen as ``first``, shows a live twin.

    It does when it is still ``running`` and its ``(incarnation, seq)`` changed.
    """
    if now is None or now.state != "running":
        return False
    return (now.incarnation, now.seq) != (first.incarnation, first.seq)
