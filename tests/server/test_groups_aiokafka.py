"""Subscribing consumers from aiokafka (its own protocol code, asyncio) against `kfs serve`.

Two `AIOKafkaConsumer` members of one group share a 3-partition topic: the
coordinator gives them disjoint assignments covering every partition, each
record is consumed exactly once, ``commit()`` stores the positions, and a new
member of the group starts after them.  When a member leaves, the other takes
over its partitions from the committed offsets, without redelivery.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from testkit.daemon import Daemon

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PARTITIONS = 3
DEADLINE_S = 60.0

Record = tuple[int, int, bytes]  # (partition, offset, value)


async def until(
    condition: Callable[[], Awaitable[Any]], what: str, timeout: float = DEADLINE_S
) -> Any:
    """Await ``condition`` until it returns something truthy, within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await condition()
        if value:
            return value
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


async def create_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, values: Sequence[bytes]) -> None:
    """``values`` round-robin over the partitions; every send acknowledged."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value, partition=i % PARTITIONS)
            for i, value in enumerate(values)
        ]
        await producer.flush()
        for future in futures:
            await future
    finally:
        await producer.stop()


def member(bootstrap: str, topic: str, group: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=10_000,
        heartbeat_interval_ms=500,
        fetch_max_wait_ms=100,
    )


async def poll(consumer: AIOKafkaConsumer, into: list[Record]) -> None:
    batches = await consumer.getmany(timeout_ms=100)
    for tp, messages in batches.items():
        into += [(tp.partition, m.offset, m.value) for m in messages]


async def consume_until(
    members: Sequence[AIOKafkaConsumer], count: int, what: str
) -> list[list[Record]]:
    """Poll every member until ``count`` records arrived in all; what each member got."""
    got: list[list[Record]] = [[] for _ in members]

    async def enough() -> bool:
        await asyncio.gather(*(poll(c, into) for c, into in zip(members, got, strict=True)))
        return sum(map(len, got)) >= count

    await until(enough, what)
    return got


async def stable_assignment(members: Sequence[AIOKafkaConsumer], topic: str) -> None:
    """Wait until each member owns a non-empty share and the shares partition the topic."""
    early: list[Record] = []

    async def stable() -> bool:
        # polling lets the members' coordinator tasks run; nothing is produced yet
        await asyncio.gather(*(poll(c, early) for c in members))
        shares = [c.assignment() for c in members]
        if not all(shares):
            return False
        owned = [tp.partition for share in shares for tp in share]
        return sorted(owned) == list(range(PARTITIONS)) and all(
            tp.topic == topic for share in shares for tp in share
        )

    await until(stable, f"a stable assignment of {topic!r} over {len(members)} members")
    assert early == []


def names(prefix: str) -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    return f"{prefix}-{suffix}", f"group-{prefix}-{suffix}"


def test_two_members_consume_each_record_once_and_commit(local_daemon: Daemon) -> None:
    bootstrap = local_daemon.bootstrap
    topic, group = names("aio-two")
    first = [b"first-%d" % i for i in range(300)]
    later = [b"later-%d" % i for i in range(30)]

    async def scenario() -> None:
        await create_topic(bootstrap, topic)
        members = [member(bootstrap, topic, group) for _ in range(2)]
        for consumer in members:
            await consumer.start()
        try:
            await stable_assignment(members, topic)
            assignments = [c.assignment() for c in members]
            await produce(bootstrap, topic, first)
            got = await consume_until(members, len(first), "both members to consume")

            values = [v for records in got for (_, _, v) in records]
            assert sorted(values) == sorted(first), "each record exactly once"
            for records, share in zip(got, assignments, strict=True):
                assert records, "both members consumed"
                assert {TopicPartition(topic, p) for (p, _, _) in records} <= share
            # the group did not rebalance while consuming
            assert [c.assignment() for c in members] == assignments

            for consumer in members:
                await consumer.commit()
            for consumer, share in zip(members, assignments, strict=True):
                for tp in share:
                    assert await consumer.committed(tp) == len(first) // PARTITIONS
        finally:
            for consumer in members:
                await consumer.stop()

        await produce(bootstrap, topic, later)
        resumed = member(bootstrap, topic, group)
        await resumed.start()
        try:
            (records,) = await consume_until([resumed], len(later), "the new member")
            # a little longer: nothing from before the commit may follow
            await asyncio.gather(*(poll(resumed, records) for _ in range(3)))
        finally:
            await resumed.stop()
        assert sorted(v for (_, _, v) in records) == sorted(later)
        firsts = {p: min(o for (q, o, _) in records if q == p) for p in range(PARTITIONS)}
        assert firsts == dict.fromkeys(range(PARTITIONS), len(first) // PARTITIONS)

    asyncio.run(scenario())


def test_leaving_member_hands_its_partitions_over_at_committed_offsets(
    local_daemon: Daemon,
) -> None:
    bootstrap = local_daemon.bootstrap
    topic, group = names("aio-leave")
    first = [b"first-%d" % i for i in range(90)]
    later = [b"later-%d" % i for i in range(60)]

    async def scenario() -> None:
        await create_topic(bootstrap, topic)
        stayer, leaver = member(bootstrap, topic, group), member(bootstrap, topic, group)
        await stayer.start()
        await leaver.start()
        try:
            await stable_assignment([stayer, leaver], topic)
            await produce(bootstrap, topic, first)
            got = await consume_until([stayer, leaver], len(first), "both members")
            assert sorted(v for records in got for (_, _, v) in records) == sorted(first)
            await leaver.commit()
            await stayer.commit()
            await leaver.stop()  # LeaveGroup: the stayer rejoins and owns everything

            redelivered: list[Record] = []

            async def owns_all() -> bool:
                await poll(stayer, redelivered)  # the rejoin happens while polling
                return len(stayer.assignment()) == PARTITIONS

            await until(owns_all, "the remaining member to own every partition")
            assert redelivered == []
            await produce(bootstrap, topic, later)
            (after,) = await consume_until([stayer], len(later), "the remaining member")
            await asyncio.gather(*(poll(stayer, after) for _ in range(3)))
            assert sorted(v for (_, _, v) in after) == sorted(later), "no redelivery"
        finally:
            await stayer.stop()

    asyncio.run(scenario())
