"""Kafka's classic group APIs spoken over a `RawClient`: one member's JoinGroup, SyncGroup, Heartbeat.

For tests that must see exact error codes and member ids, which client
libraries hide behind their retries.  The subscription and assignment are
the consumer protocol's version 0.
"""

from __future__ import annotations

import struct
import warnings
from typing import Any

from kfs_core.server.protocol import ErrorCode
from testkit.raw_client import RawClient

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest

__all__ = ["assignment", "heartbeat", "join", "joined", "subscription", "sync"]


def _str(value: str) -> bytes:
    return struct.pack(">h", len(value)) + value.encode()


def subscription(*topics: str) -> bytes:
    return struct.pack(">hi", 0, len(topics)) + b"".join(map(_str, topics)) + b"\xff" * 4


def assignment(topic: str, partitions: list[int]) -> bytes:
    body = _str(topic) + struct.pack(">i", len(partitions))
    body += b"".join(struct.pack(">i", p) for p in partitions)
    return struct.pack(">hi", 0, 1) + body + b"\xff" * 4


def join(
    client: RawClient,
    group: str,
    member_id: str = "",
    metadata: bytes | None = None,
    session_timeout_ms: int = 10_000,
    instance_id: str | None = None,
) -> Any:
    protocol = JoinGroupRequest.JoinGroupRequestProtocol
    return client.request(
        JoinGroupRequest(
            version=5,
            group_id=group,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=10_000,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type="consumer",
            protocols=[protocol(name="range", metadata=metadata or subscription("t"))],
        )
    )


def joined(client: RawClient, group: str, topic: str, instance_id: str | None = None) -> Any:
    """A one-member group, joined (KIP-394 round trip) and synced."""
    first = join(client, group, metadata=subscription(topic), instance_id=instance_id)
    if first.error_code == ErrorCode.MEMBER_ID_REQUIRED:
        first = join(client, group, first.member_id, subscription(topic), instance_id=instance_id)
    assert first.error_code == 0, first
    synced = sync(client, group, first.generation_id, first.member_id, [0])
    assert synced.error_code == 0
    return first


def sync(
    client: RawClient,
    group: str,
    generation: int,
    member_id: str,
    partitions: list[int] | None = None,
    raw_assignment: bytes | None = None,
    topic: str = "t",
) -> Any:
    data = raw_assignment if raw_assignment is not None else assignment(topic, partitions or [])
    return client.request(
        SyncGroupRequest(
            version=3,
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=None,
            assignments=[
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=member_id, assignment=data)
            ],
        )
    )


def heartbeat(
    client: RawClient, group: str, generation: int, member_id: str, instance_id: str | None = None
) -> int:
    return int(
        client.request(
            HeartbeatRequest(
                version=3,
                group_id=group,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=instance_id,
            )
        ).error_code
    )
