"""The daemon's consumer groups as the KFS page shows them, read over the Kafka protocol.

Group state lives in ``kfs serve`` (its coordinator and ``__consumer_offsets``),
not in the store, so `read_consumer_groups` asks the daemon through a
confluent-kafka ``AdminClient`` that `KfsHook.get_admin_client` builds, the way
Kafka's ``kafka-consumer-groups.sh --describe`` asks a broker:

- ListGroups, then DescribeGroups for every group: state, assignor, members
  and the partitions assigned to each;
- OffsetFetch per group: the committed offsets;
- ListOffsets (latest) for every partition a group commits to or is assigned:
  the log end offset, so ``lag = log end - committed``.

The whole read has one deadline, and gives up at once when librdkafka reports
every broker down (`BrokerWatch`), so an absent daemon costs the page well
under a second on a refused port and at most the deadline on a silent one.
A group or a partition whose answer is an error keeps the error in its own
``error`` field; the other groups are unaffected.  confluent-kafka is imported
where it is used: DAG files import the hook, and parsing a DAG stays cheap.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final, TypeVar

from pydantic import BaseModel, Field, computed_field

__all__ = [
    "AssignedPartition",
    "BrokerWatch",
    "ConsumerGroup",
    "DaemonNotConfigured",
    "DaemonUnreachable",
    "GroupMember",
    "GroupPartition",
    "read_consumer_groups",
]

_POLL_S: Final = 0.05
#: librdkafka's ConsumerGroupState names -> Kafka's (as kafka-consumer-groups.sh prints them).
_STATE_NAMES: Final = {
    "UNKNOWN": "Unknown",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "EMPTY": "Empty",
    "DEAD": "Dead",
}

K = TypeVar("K")


class DaemonNotConfigured(Exception):
    """The ``kfs`` connection names no daemon address (``bootstrap_servers``)."""


class DaemonUnreachable(Exception):
    """The daemon did not answer the admin requests in time, or no broker is up."""


# --- the read model -------------------------------------------------------------------


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


# --- reading ---------------------------------------------------------------------------


class BrokerWatch:
    """An ``error_cb`` for the AdminClient: notes when librdkafka says every broker is down.

    librdkafka retries an unreachable broker until a request times out; this
    callback hears at once that none is up, so the read stops waiting.  The
    errors before it say why, e.g. that the address the daemon advertises in
    its Metadata answer does not resolve where the page runs.
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


class _Deadline:
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
        """Each future's result, or the KafkaError it failed with."""
        from confluent_kafka import KafkaException

        while not all(f.done() for f in futures.values()):
            self.admin.poll(_POLL_S)
            if self.watch.all_brokers_down:
                raise DaemonUnreachable(
                    f"cannot reach the daemon at {self.bootstrap}: {self.watch.why()}"
                )
            if time.monotonic() > self.ends:
                raise DaemonUnreachable(
                    f"{what}: no answer from the daemon at {self.bootstrap} "
                    f"within {self.timeout_s:g} s"
                )
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


def _state_name(state: Any) -> str:
    name = str(getattr(state, "name", state))
    return _STATE_NAMES.get(name, name.title())


def read_consumer_groups(
    admin: Any, watch: BrokerWatch, *, bootstrap: str, timeout_s: float
) -> list[ConsumerGroup]:
    """Every consumer group of the daemon behind ``admin``, sorted by id, within ``timeout_s``.

    Raises `DaemonUnreachable` when the daemon does not answer the listing in
    time; every later failure stays with the group or partition it concerns.
    """
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    # confluent-kafka's stubs neither re-export nor annotate OffsetSpec.
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

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
    owners: dict[str, dict[tuple[str, int], GroupMember]] = {g: {} for g in group_ids}
    for group_id, outcome in deadline.wait(described, "describe groups").items():
        group = groups[group_id]
        if _is_error(outcome):
            group.error = f"describe: {_error_text(outcome)}"
            continue
        group.state = _state_name(outcome.state)
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

    committed: dict[str, dict[tuple[str, int], int | None]] = {g: {} for g in group_ids}
    for group_id, outcome in deadline.wait(fetched, "committed offsets").items():
        if _is_error(outcome):
            groups[group_id].error = f"committed offsets: {_error_text(outcome)}"
            continue
        for tp in outcome.topic_partitions or ():
            offset = tp.offset if tp.error is None and tp.offset >= 0 else None
            committed[group_id][(tp.topic, tp.partition)] = offset

    keys = sorted({key for g in group_ids for key in (*committed[g], *owners[g])})
    log_ends: dict[tuple[str, int], int | str] = {}
    if keys:
        offset_spec: Any = OffsetSpec
        spec = offset_spec.latest()
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
