"""The daemon's consumer groups over the Kafka protocol: the one confluent-kafka admin wrapper.

Group state lives in ``kfs serve`` (its coordinator and ``__consumer_offsets``),
not in the store, so whoever shows it asks the daemon through a confluent-kafka
``AdminClient``, the way Kafka's ``kafka-consumer-groups.sh`` asks a broker.
Two callers do, and both go through this module:

- ``kfs groups`` (`kfs_core.cli.groups`) through `GroupAdmin`: one request at a
  time (ListGroups, DescribeGroups, OffsetFetch, ListOffsets, OffsetCommit,
  DeleteGroups), each with its own timeout;
- the Airflow plugin's KFS page (``KfsAdminHook.consumer_groups`` in
  ``kfs_airflow.hooks``) through `read_consumer_groups`: every group with its
  members, committed offsets and lag, all within one deadline.

The page's open transactions (`read_open_transactions`) come through
kafka-python's admin client instead: confluent-kafka's does not speak
ListTransactions and DescribeTransactions (``kfs transactions`` uses it too,
and `kafka_python_security` for its settings).

What they share: `admin_client` (librdkafka's own log lines off, errors
through ``error_cb``), `BrokerWatch` (the ``error_cb`` that hears at once that
every broker is down: librdkafka would retry until the request timed out),
`wait_for` (poll until the futures are done), and librdkafka's group state
names in Kafka's words (`state_name`).  Failures are one-line exceptions:
`DaemonUnreachable` (`BrokersDown`, `NoAnswer`) when the daemon does not
answer, `AdminError` when its answer is an error; each caller words them for
its own reader.

confluent-kafka is imported where it is used: DAG files import the plugin's
hooks, and parsing a DAG stays cheap.  This module is the part of `kfs_core`
outside `kfs_core.cli` that drives a Kafka client; it never imports click or
the daemon.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from pydantic import BaseModel, Field, computed_field

__all__ = [
    "INACTIVE_STATES",
    "KAFKA_PYTHON_SECURITY",
    "OPEN_TRANSACTION_STATES",
    "STATE_NAMES",
    "AdminError",
    "AssignedPartition",
    "BrokerWatch",
    "BrokersDown",
    "ConsumerGroup",
    "DaemonUnreachable",
    "GroupAdmin",
    "GroupMember",
    "GroupPartition",
    "GroupView",
    "MemberView",
    "NoAnswer",
    "OpenTransaction",
    "PartitionKey",
    "admin_client",
    "kafka_python_security",
    "rdkafka_state",
    "read_consumer_groups",
    "read_open_transactions",
    "state_name",
    "wait_for",
]

K = TypeVar("K")
PartitionKey = tuple[str, int]

_POLL_S: Final = 0.05
#: librdkafka's ConsumerGroupState names -> Kafka's (as kafka-consumer-groups.sh prints them).
STATE_NAMES: Final = {
    "UNKNOWN": "Unknown",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "EMPTY": "Empty",
    "DEAD": "Dead",
}
#: States in which Kafka lets reset-offsets move a group: no member is consuming.
INACTIVE_STATES: Final = frozenset({"Empty", "Dead"})


# --- errors ------------------------------------------------------------------------------


class AdminError(Exception):
    """The daemon answered an admin request with an error (or it could not be asked)."""


class DaemonUnreachable(AdminError):
    """The daemon did not answer the admin requests in time, or no broker is up."""


class BrokersDown(DaemonUnreachable):
    """librdkafka reports every broker down; ``why`` holds the errors it gave first."""

    def __init__(self, bootstrap: str, why: str) -> None:
        super().__init__(bootstrap, why)
        self.bootstrap = bootstrap
        self.why = why

    def __str__(self) -> str:
        return f"cannot reach the daemon at {self.bootstrap}: {self.why}"


class NoAnswer(DaemonUnreachable):
    """Request ``what`` had no answer from the daemon within ``timeout_s``."""

    def __init__(self, what: str, bootstrap: str, timeout_s: float) -> None:
        super().__init__(what, bootstrap, timeout_s)
        self.what = what
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s

    def __str__(self) -> str:
        return (
            f"{self.what}: no answer from the daemon at {self.bootstrap} "
            f"within {self.timeout_s:g} s"
        )


# --- the client and waiting on it ----------------------------------------------------------


class BrokerWatch:
    """An ``error_cb`` for the AdminClient: notes when librdkafka says every broker is down.

    librdkafka retries an unreachable broker until a request times out; this
    callback hears at once that none is up, so the wait stops.  The errors
    before it say why, e.g. that the address the daemon advertises in its
    Metadata answer does not resolve where the client runs.
    """

    def __init__(self) -> None:
        self.all_brokers_down = False
        self.errors: list[str] = []

    def __call__(self, error: Any) -> None:
        from confluent_kafka import KafkaError

        text = str(error.str())
        if text not in self.errors and len(self.errors) < 3:
            self.errors.append(text)
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            self.all_brokers_down = True

    def why(self) -> str:
        return "; ".join(self.errors)


def admin_client(
    bootstrap: str,
    *,
    client_id: str,
    security: Mapping[str, str] | None = None,
    **config: Any,
) -> Any:
    """A confluent-kafka AdminClient on ``bootstrap`` that keeps librdkafka's log off stderr.

    ``security`` holds Kafka's client properties for a TLS/SASL listener
    (``security.protocol``, ``sasl.mechanism`` ...); ``config`` adds librdkafka
    settings (``error_cb``, socket timeouts ...).  Errors reach the reader as one
    line through ``error_cb``, never as librdkafka's own retry lines.
    """
    from confluent_kafka.admin import AdminClient

    return AdminClient(
        {
            **(security or {}),
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "log_level": 0,
            **config,
        }
    )


def wait_for(
    admin: Any,
    futures: Mapping[K, Any],
    watch: BrokerWatch,
    *,
    what: str,
    bootstrap: str,
    deadline: float,
    timeout_s: float,
) -> dict[K, Any]:
    """Each future's result, or the KafkaError it failed with.

    Polls ``admin`` until every future is done; raises `BrokersDown` as soon as
    ``watch`` hears that no broker is up and `NoAnswer` past ``deadline`` (a
    `time.monotonic` instant; ``timeout_s`` is what the message names).
    """
    from confluent_kafka import KafkaException

    while not all(f.done() for f in futures.values()):
        admin.poll(_POLL_S)
        if watch.all_brokers_down:
            raise BrokersDown(bootstrap, watch.why())
        if time.monotonic() > deadline:
            raise NoAnswer(what, bootstrap, timeout_s)
    outcomes: dict[K, Any] = {}
    for key, future in futures.items():
        try:
            outcomes[key] = future.result()
        except KafkaException as exc:
            outcomes[key] = exc.args[0]
    return outcomes


def _is_error(outcome: Any) -> bool:
    from confluent_kafka import KafkaError

    return isinstance(outcome, KafkaError)


def _error_text(outcome: Any) -> str:
    return str(outcome.str()) if hasattr(outcome, "str") else str(outcome)


def _offset_spec() -> Any:
    # confluent-kafka's stubs neither re-export nor annotate OffsetSpec.
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    return OffsetSpec


def state_name(state: Any) -> str:
    """A librdkafka ``ConsumerGroupState`` (or its name) in Kafka's words."""
    name = str(getattr(state, "name", state))
    return STATE_NAMES.get(name, name.title())


def rdkafka_state(state: str) -> str:
    """Kafka's name of a group state (any case) as librdkafka's ``ConsumerGroupState`` name."""
    for rdkafka_name, kafka_name in STATE_NAMES.items():
        if kafka_name.lower() == state.lower():
            return rdkafka_name
    raise AdminError(f"unknown group state {state!r}")


# --- one request at a time: kfs groups -----------------------------------------------------


@dataclass(frozen=True)
class MemberView:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assigned: tuple[PartitionKey, ...]


@dataclass(frozen=True)
class GroupView:
    """What DescribeGroups says of a group, in Kafka's words."""

    group_id: str
    state: str
    assignor: str
    members: tuple[MemberView, ...]

    @classmethod
    def of(cls, description: Any) -> GroupView:
        members = tuple(
            MemberView(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.host,
                tuple(
                    sorted(
                        (tp.topic, tp.partition)
                        for tp in (m.assignment.topic_partitions if m.assignment else ())
                    )
                ),
            )
            for m in description.members
        )
        return cls(
            description.group_id,
            state_name(description.state),
            description.partition_assignor or "",
            members,
        )

    @property
    def exists(self) -> bool:
        # DescribeGroups answers an unknown group as Dead with no members, as Kafka does.
        return self.state != "Dead"

    def owners(self) -> dict[PartitionKey, MemberView]:
        return {key: m for m in self.members for key in m.assigned}


class GroupAdmin:
    """An AdminClient that fails fast and in one line: each request waits ``timeout_s``.

    librdkafka retries an unreachable broker until the request times out;
    `BrokerWatch` hears at once that every broker is down, so the wait gives
    up with `BrokersDown`.  An error answer raises `AdminError` with the
    message ``kfs groups`` prints.
    """

    def __init__(
        self, bootstrap: str, timeout_s: float, security: dict[str, str] | None = None
    ) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self._watch = BrokerWatch()
        self._client = admin_client(
            bootstrap, client_id="kfs-groups", security=security, error_cb=self._watch
        )

    def _wait(self, futures: Mapping[K, Any], what: str) -> dict[K, Any]:
        return wait_for(
            self._client,
            futures,
            self._watch,
            what=what,
            bootstrap=self.bootstrap,
            deadline=time.monotonic() + self.timeout_s,
            timeout_s=self.timeout_s,
        )

    def _one(self, futures: Mapping[K, Any], what: str) -> Any:
        (outcome,) = self._wait(futures, what).values()
        if _is_error(outcome):
            raise AdminError(f"{what}: {outcome.str()}")
        return outcome

    def list_groups(self, states: Sequence[str]) -> list[Any]:
        from confluent_kafka import ConsumerGroupState

        wanted = {ConsumerGroupState[rdkafka_state(s)] for s in states}
        future = self._client.list_consumer_groups(
            request_timeout=self.timeout_s, **({"states": wanted} if wanted else {})
        )
        result = self._one({"": future}, "list groups")
        if result.errors:
            raise AdminError(f"list groups: {result.errors[0]}")
        return list(result.valid)

    def describe(self, group_id: str) -> GroupView:
        futures = self._client.describe_consumer_groups([group_id], request_timeout=self.timeout_s)
        found = self._one(futures, f"describe group {group_id!r}")
        return GroupView.of(found)

    def committed(self, group_id: str) -> dict[PartitionKey, int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        futures = self._client.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id)], request_timeout=self.timeout_s
        )
        listed = self._one(futures, f"committed offsets of group {group_id!r}")
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in listed.topic_partitions or ()
            if tp.offset >= 0
        }

    def partitions(self, topics: Iterable[str]) -> dict[str, list[int]]:
        """Each topic's partition ids; an unknown topic is an error (never auto-created)."""
        from confluent_kafka import TopicCollection

        names = sorted(set(topics))
        if not names:
            return {}
        futures = self._client.describe_topics(
            TopicCollection(names), request_timeout=self.timeout_s
        )
        found: dict[str, list[int]] = {}
        for name, outcome in self._wait(futures, "describe topics").items():
            if _is_error(outcome):
                raise AdminError(f"topic {name!r}: {outcome.str()}")
            found[name] = sorted(p.id for p in outcome.partitions)
        return found

    def earliest(self, keys: Sequence[PartitionKey]) -> dict[PartitionKey, int]:
        return self._offsets(keys, _offset_spec().earliest())

    def latest(self, keys: Sequence[PartitionKey]) -> dict[PartitionKey, int]:
        return self._offsets(keys, _offset_spec().latest())

    def at_time(self, keys: Sequence[PartitionKey], timestamp_ms: int) -> dict[PartitionKey, int]:
        """The first offset at or after the time; -1 where no record is that late."""
        return self._offsets(keys, _offset_spec().for_timestamp(timestamp_ms))

    def _offsets(self, keys: Sequence[PartitionKey], spec: Any) -> dict[PartitionKey, int]:
        from confluent_kafka import TopicPartition

        if not keys:
            return {}
        futures = self._client.list_offsets(
            {TopicPartition(t, p): spec for t, p in keys}, request_timeout=self.timeout_s
        )
        found: dict[PartitionKey, int] = {}
        for tp, outcome in self._wait(futures, "list offsets").items():
            if _is_error(outcome):
                raise AdminError(f"offsets of {tp.topic}/{tp.partition}: {outcome.str()}")
            found[(tp.topic, tp.partition)] = outcome.offset
        return found

    def alter(self, group_id: str, offsets: Mapping[PartitionKey, int]) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        request = ConsumerGroupTopicPartitions(
            group_id, [TopicPartition(t, p, offset) for (t, p), offset in sorted(offsets.items())]
        )
        futures = self._client.alter_consumer_group_offsets(
            [request], request_timeout=self.timeout_s
        )
        altered = self._one(futures, f"reset offsets of group {group_id!r}")
        failed = [tp for tp in altered.topic_partitions or () if tp.error is not None]
        if failed:
            tp = failed[0]
            raise AdminError(
                f"reset offsets of group {group_id!r}: {tp.topic}/{tp.partition}: "
                f"{tp.error.str()} ({len(failed)} partition(s) failed)"
            )

    def delete(self, group_id: str) -> None:
        from confluent_kafka import KafkaError

        futures = self._client.delete_consumer_groups([group_id], request_timeout=self.timeout_s)
        (outcome,) = self._wait(futures, f"delete group {group_id!r}").values()
        if not _is_error(outcome):
            return
        if outcome.code() == KafkaError.NON_EMPTY_GROUP:
            raise AdminError(
                f"consumer group {group_id!r} is not empty: stop its consumers, then delete it"
            )
        if outcome.code() == KafkaError.GROUP_ID_NOT_FOUND:
            raise AdminError(f"consumer group {group_id!r} does not exist")
        raise AdminError(f"delete group {group_id!r}: {outcome.str()}")


# --- every group at once, within one deadline: the KFS page -------------------------------


class AssignedPartition(BaseModel):
    topic: str
    partition: int


class GroupMember(BaseModel):
    member_id: str
    client_id: str = ""
    host: str = ""
    #: ``group.instance.id`` of a static member.
    instance_id: str | None = None
    assignment: list[AssignedPartition] = Field(default_factory=list)


class GroupPartition(BaseModel):
    topic: str
    partition: int
    #: None: the group has committed nothing for this partition.
    committed_offset: int | None = None
    #: None: the daemon did not say (see ``error``).
    log_end_offset: int | None = None
    #: The member the partition is assigned to, if any.
    member_id: str | None = None
    client_id: str | None = None
    error: str | None = None

    @computed_field  # type: ignore[prop-decorator]  # mypy: no decorators over @property; pydantic's documented ignore
    @property
    def lag(self) -> int | None:
        """Records not yet committed; None without a commit or a log end (Kafka shows "-")."""
        if self.committed_offset is None or self.log_end_offset is None:
            return None
        return max(self.log_end_offset - self.committed_offset, 0)


class ConsumerGroup(BaseModel):
    group_id: str
    #: Kafka's name: Stable, PreparingRebalance, CompletingRebalance, Empty, Dead.
    state: str = "Unknown"
    #: The assignor the members agreed on ("range", "cooperative-sticky" ...), if any.
    protocol: str = ""
    #: A group that only commits offsets (no members ever joined).
    simple: bool = False
    members: list[GroupMember] = Field(default_factory=list)
    partitions: list[GroupPartition] = Field(default_factory=list)
    error: str | None = None

    @computed_field  # type: ignore[prop-decorator]  # mypy: no decorators over @property; pydantic's documented ignore
    @property
    def total_lag(self) -> int | None:
        lags = [p.lag for p in self.partitions if p.lag is not None]
        return sum(lags) if lags else None


class _Deadline:
    """One deadline for every wait of a read, and what is left of it for each request."""

    def __init__(self, admin: Any, watch: BrokerWatch, bootstrap: str, timeout_s: float) -> None:
        self.admin = admin
        self.watch = watch
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self.ends = time.monotonic() + timeout_s

    @property
    def left_s(self) -> float:
        return max(self.ends - time.monotonic(), 0.1)

    def wait(self, futures: Mapping[K, Any], what: str) -> dict[K, Any]:
        return wait_for(
            self.admin,
            futures,
            self.watch,
            what=what,
            bootstrap=self.bootstrap,
            deadline=self.ends,
            timeout_s=self.timeout_s,
        )


def read_consumer_groups(
    admin: Any, watch: BrokerWatch, *, bootstrap: str, timeout_s: float
) -> list[ConsumerGroup]:
    """Every consumer group of the daemon behind ``admin``, sorted by id, within ``timeout_s``.

    The read asks what ``kafka-consumer-groups.sh --describe`` asks: ListGroups,
    then DescribeGroups for every group (state, assignor, members and their
    partitions), OffsetFetch per group (the committed offsets) and ListOffsets
    (latest) for every partition a group commits to or is assigned, so
    ``lag = log end - committed``.

    Raises `DaemonUnreachable` when the daemon does not answer the listing in
    time; every later failure stays in the ``error`` of the group or partition
    it concerns, and the other groups are unaffected.
    """
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    deadline = _Deadline(admin, watch, bootstrap, timeout_s)
    (listed,) = deadline.wait(
        {"": admin.list_consumer_groups(request_timeout=deadline.left_s)}, "list groups"
    ).values()
    if _is_error(listed):
        raise DaemonUnreachable(f"list groups at {bootstrap}: {_error_text(listed)}")
    group_ids = sorted({g.group_id for g in listed.valid})
    if not group_ids:
        return []

    groups = {group_id: ConsumerGroup(group_id=group_id) for group_id in group_ids}
    described = admin.describe_consumer_groups(group_ids, request_timeout=deadline.left_s)
    fetched = {
        group_id: admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id)], request_timeout=deadline.left_s
        )[group_id]
        for group_id in group_ids
    }
    owners: dict[str, dict[PartitionKey, GroupMember]] = {g: {} for g in group_ids}
    for group_id, outcome in deadline.wait(described, "describe groups").items():
        group = groups[group_id]
        if _is_error(outcome):
            group.error = f"describe: {_error_text(outcome)}"
            continue
        group.state = state_name(outcome.state)
        group.protocol = outcome.partition_assignor or ""
        group.simple = bool(outcome.is_simple_consumer_group)
        for m in outcome.members:
            assigned = sorted(
                (tp.topic, tp.partition)
                for tp in (m.assignment.topic_partitions if m.assignment else ())
            )
            member = GroupMember(
                member_id=m.member_id,
                client_id=m.client_id or "",
                host=m.host or "",
                instance_id=m.group_instance_id or None,
                assignment=[AssignedPartition(topic=t, partition=p) for t, p in assigned],
            )
            group.members.append(member)
            for key in assigned:
                owners[group_id][key] = member
        group.members.sort(key=lambda member: (member.client_id, member.member_id))

    committed: dict[str, dict[PartitionKey, int | None]] = {g: {} for g in group_ids}
    for group_id, outcome in deadline.wait(fetched, "committed offsets").items():
        if _is_error(outcome):
            groups[group_id].error = f"committed offsets: {_error_text(outcome)}"
            continue
        for tp in outcome.topic_partitions or ():
            offset = tp.offset if tp.error is None and tp.offset >= 0 else None
            committed[group_id][(tp.topic, tp.partition)] = offset

    keys = sorted({key for g in group_ids for key in (*committed[g], *owners[g])})
    log_ends: dict[PartitionKey, int | str] = {}
    if keys:
        spec = _offset_spec().latest()
        futures = admin.list_offsets(
            {TopicPartition(t, p): spec for t, p in keys}, request_timeout=deadline.left_s
        )
        for tp, outcome in deadline.wait(futures, "log end offsets").items():
            key = (tp.topic, tp.partition)
            log_ends[key] = (
                f"log end: {_error_text(outcome)}" if _is_error(outcome) else outcome.offset
            )

    for group_id, group in groups.items():
        for key in sorted({*committed[group_id], *owners[group_id]}):
            owner = owners[group_id].get(key)
            end = log_ends.get(key)
            group.partitions.append(
                GroupPartition(
                    topic=key[0],
                    partition=key[1],
                    committed_offset=committed[group_id].get(key),
                    log_end_offset=end if isinstance(end, int) else None,
                    member_id=owner.member_id if owner else None,
                    client_id=owner.client_id if owner else None,
                    error=end if isinstance(end, str) else None,
                )
            )
    return list(groups.values())


# --- transactions: the KFS page ------------------------------------------------------------

#: librdkafka's client properties as kafka-python names them (its admin client speaks
#: ListTransactions and DescribeTransactions, which confluent-kafka's does not).
KAFKA_PYTHON_SECURITY: Final = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
}
#: The states of a transaction that holds its partitions' last stable offset back.
OPEN_TRANSACTION_STATES: Final = ("Ongoing", "PrepareCommit", "PrepareAbort")


def kafka_python_security(config: Mapping[str, str]) -> dict[str, Any]:
    """Librdkafka security settings (``--command-config``, a connection's extra) for kafka-python."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key == "ssl.endpoint.identification.algorithm":
            out["ssl_check_hostname"] = value.lower() not in ("", "none")
        elif key in KAFKA_PYTHON_SECURITY:
            out[KAFKA_PYTHON_SECURITY[key]] = value
    return out


class OpenTransaction(BaseModel):
    """A transaction a coordinator holds open, as DescribeTransactions tells it."""

    transactional_id: str
    coordinator: int
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    started_ms: int | None = None
    partitions: list[str] = Field(default_factory=list)  # "topic/partition"
    #: Milliseconds open when read (None: not started).
    open_ms: int | None = None

    @computed_field  # type: ignore[prop-decorator]  # mypy: no decorators over @property; pydantic's documented ignore
    @property
    def hanging(self) -> bool:
        """Open longer than its own timeout: its coordinator should have aborted it by now."""
        return self.open_ms is not None and self.open_ms > self.timeout_ms


def read_open_transactions(
    bootstrap: str, security: Mapping[str, str], *, timeout_s: float
) -> list[OpenTransaction]:
    """Every open transaction of the daemons behind ``bootstrap``, longest open first.

    ListTransactions (its open states), then DescribeTransactions of those
    ids, through kafka-python's admin client.  Raises `DaemonUnreachable`
    when no daemon answers in time.
    """
    import kafka.errors
    from kafka import KafkaAdminClient

    timeout_ms = int(timeout_s * 1000)
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id="kfs-airflow",
            request_timeout_ms=timeout_ms,
            bootstrap_timeout_ms=timeout_ms,
            **kafka_python_security(security),
        )
    except kafka.errors.KafkaError as exc:
        raise NoAnswer("ListTransactions", bootstrap, timeout_s) from exc
    try:
        listed = [
            t.transactional_id
            for txns in admin.list_transactions(
                state_filters=list(OPEN_TRANSACTION_STATES)
            ).values()
            for t in txns
        ]
        described = admin.describe_transactions(listed) if listed else {}
    except kafka.errors.KafkaError as exc:
        raise NoAnswer("ListTransactions", bootstrap, timeout_s) from exc
    finally:
        admin.close()
    now = int(time.time() * 1000)
    out = []
    for tid, d in described.items():
        started = d.transaction_start_time_ms if d.transaction_start_time_ms >= 0 else None
        out.append(
            OpenTransaction(
                transactional_id=tid,
                coordinator=d.coordinator_id,
                producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                state=str(getattr(d.state, "value", d.state)),
                timeout_ms=d.transaction_timeout_ms,
                started_ms=started,
                partitions=sorted(f"{tp.topic}/{tp.partition}" for tp in d.topic_partitions),
                open_ms=None if started is None else max(now - started, 0),
            )
        )
    return sorted(out, key=lambda t: (-(t.open_ms or 0), t.transactional_id))
