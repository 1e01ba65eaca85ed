"""The Kafka message schemas KFS serves: API keys and their message classes.

The classes come from kafka-python 3.x, which generates them at import time
from Apache Kafka's own JSON message specs
(``clients/src/main/resources/common/message/*.json``, shipped in
``kafka/protocol/schemas/resources/``) and compiles one encoder and decoder
per (message, version).  They are symmetrical, so a server can decode the
``*Request`` classes and encode the ``*Response`` classes exactly as a client
does the opposite.  Field names are the spec's, in snake_case
(``TopicData`` -> ``topic_data``); nested structs are attributes of their
message class (``ProduceRequest.TopicProduceData.PartitionProduceData``).

Where kafka-python departs from the specs, a handler sees its version:
MetadataResponse's ``ClusterAuthorizedOperations`` and
``TopicAuthorizedOperations`` are both named ``authorized_operations`` and
hold a set of operation bit numbers, ``None`` being Kafka's INT32_MIN "not
requested" (the bytes on the wire are the spec's int32).

Nothing here knows which versions KFS serves: that is
`kfs_core.server.protocol.SUPPORTED_VERSIONS`.
"""

from __future__ import annotations

import warnings
from enum import IntEnum
from types import MappingProxyType
from typing import Any, Final, NamedTuple

# kafka-python reads its JSON specs with importlib.resources.read_text /
# open_text, which Python 3.11 deprecates; silence exactly that, only here.
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=r"(read_text|open_text) is deprecated", category=DeprecationWarning
    )
    from kafka.protocol.admin import (
        CreateTopicsRequest,
        CreateTopicsResponse,
        DeleteTopicsRequest,
        DeleteTopicsResponse,
        DescribeConfigsRequest,
        DescribeConfigsResponse,
    )
    from kafka.protocol.consumer import (
        FetchRequest,
        FetchResponse,
        HeartbeatRequest,
        HeartbeatResponse,
        JoinGroupRequest,
        JoinGroupResponse,
        LeaveGroupRequest,
        LeaveGroupResponse,
        ListOffsetsRequest,
        ListOffsetsResponse,
        OffsetCommitRequest,
        OffsetCommitResponse,
        OffsetFetchRequest,
        OffsetFetchResponse,
        SyncGroupRequest,
        SyncGroupResponse,
    )
    from kafka.protocol.metadata import (
        ApiVersionsRequest,
        ApiVersionsResponse,
        FindCoordinatorRequest,
        FindCoordinatorResponse,
        MetadataRequest,
        MetadataResponse,
    )
    from kafka.protocol.producer import (
        InitProducerIdRequest,
        InitProducerIdResponse,
        ProduceRequest,
        ProduceResponse,
    )

__all__ = [
    "MESSAGES",
    "ApiKey",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "DeleteTopicsRequest",
    "DeleteTopicsResponse",
    "DescribeConfigsRequest",
    "DescribeConfigsResponse",
    "FetchRequest",
    "FetchResponse",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "InitProducerIdRequest",
    "InitProducerIdResponse",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "ListOffsetsRequest",
    "ListOffsetsResponse",
    "MessagePair",
    "MetadataRequest",
    "MetadataResponse",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "ProduceRequest",
    "ProduceResponse",
    "SyncGroupRequest",
    "SyncGroupResponse",
]


class ApiKey(IntEnum):
    """The Kafka APIs KFS serves (``ApiKeys.java`` ids)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    DESCRIBE_CONFIGS = 32


class MessagePair(NamedTuple):
    """The request and response classes of one API, generated from its two specs."""

    request: Any
    response: Any


MESSAGES: Final = MappingProxyType(
    {
        ApiKey.PRODUCE: MessagePair(ProduceRequest, ProduceResponse),
        ApiKey.FETCH: MessagePair(FetchRequest, FetchResponse),
        ApiKey.LIST_OFFSETS: MessagePair(ListOffsetsRequest, ListOffsetsResponse),
        ApiKey.METADATA: MessagePair(MetadataRequest, MetadataResponse),
        ApiKey.OFFSET_COMMIT: MessagePair(OffsetCommitRequest, OffsetCommitResponse),
        ApiKey.OFFSET_FETCH: MessagePair(OffsetFetchRequest, OffsetFetchResponse),
        ApiKey.FIND_COORDINATOR: MessagePair(FindCoordinatorRequest, FindCoordinatorResponse),
        ApiKey.JOIN_GROUP: MessagePair(JoinGroupRequest, JoinGroupResponse),
        ApiKey.HEARTBEAT: MessagePair(HeartbeatRequest, HeartbeatResponse),
        ApiKey.LEAVE_GROUP: MessagePair(LeaveGroupRequest, LeaveGroupResponse),
        ApiKey.SYNC_GROUP: MessagePair(SyncGroupRequest, SyncGroupResponse),
        ApiKey.API_VERSIONS: MessagePair(ApiVersionsRequest, ApiVersionsResponse),
        ApiKey.CREATE_TOPICS: MessagePair(CreateTopicsRequest, CreateTopicsResponse),
        ApiKey.DELETE_TOPICS: MessagePair(DeleteTopicsRequest, DeleteTopicsResponse),
        ApiKey.INIT_PRODUCER_ID: MessagePair(InitProducerIdRequest, InitProducerIdResponse),
        ApiKey.DESCRIBE_CONFIGS: MessagePair(DescribeConfigsRequest, DescribeConfigsResponse),
    }
)
