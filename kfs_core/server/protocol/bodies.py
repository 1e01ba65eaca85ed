"""Typed views of the request bodies the data path reads: Protocols of the spec's fields.

kafka-python generates its message classes at import time, so to a type
checker they are ``Any``.  These Protocols name the fields a handler reads,
with the types kafka-python decodes them to (its generated ``.pyi`` stubs,
and `kfs_core.server.protocol.fastpath` for Produce's zero-copy
``records``), so mypy checks the handlers that declare
``Request[ProduceRequestBody]`` and the like.  Fields that only some
versions carry (Fetch's ``session_id``, ``isolation_level``) are left out:
the handlers read them with a default.

    Protocol               message (versions KFS serves)
    ProduceRequestBody     ProduceRequest v3-v9
    FetchRequestBody       FetchRequest v4-v12
    ListOffsetsRequestBody ListOffsetsRequest v1-v7
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = [
    "FetchPartition",
    "FetchRequestBody",
    "FetchTopic",
    "ListOffsetsPartition",
    "ListOffsetsRequestBody",
    "ListOffsetsTopic",
    "ProducePartitionData",
    "ProduceRequestBody",
    "ProduceTopicData",
]


class ProducePartitionData(Protocol):
    """ProduceRequest.TopicProduceData.PartitionProduceData."""

    index: int
    # A view of the request frame (the fast-path decoder), None for a null batch.
    records: bytes | bytearray | memoryview | None


class ProduceTopicData(Protocol):
    """ProduceRequest.TopicProduceData."""

    name: str
    partition_data: Sequence[ProducePartitionData]


class ProduceRequestBody(Protocol):
    """ProduceRequest."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: Sequence[ProduceTopicData]


class FetchPartition(Protocol):
    """FetchRequest.FetchTopic.FetchPartition."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int


class FetchTopic(Protocol):
    """FetchRequest.FetchTopic."""

    topic: str
    partitions: Sequence[FetchPartition]


class FetchRequestBody(Protocol):
    """FetchRequest."""

    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    topics: Sequence[FetchTopic]


class ListOffsetsPartition(Protocol):
    """ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition."""

    partition_index: int
    timestamp: int


class ListOffsetsTopic(Protocol):
    """ListOffsetsRequest.ListOffsetsTopic."""

    name: str
    partitions: Sequence[ListOffsetsPartition]


class ListOffsetsRequestBody(Protocol):
    """ListOffsetsRequest."""

    topics: Sequence[ListOffsetsTopic]
