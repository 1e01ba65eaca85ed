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

`MESSAGES` pairs each API key with its two classes.  Nothing here knows
which versions KFS serves or what it answers: each API family's module in
`kfs_core.server.apis` registers its messages, its version range and its
handler in one table (`kfs_core.server.apis.REGISTRY`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
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
        AlterConfigsRequest,
        AlterConfigsResponse,
        AlterUserScramCredentialsRequest,
        AlterUserScramCredentialsResponse,
        CreateAclsRequest,
        CreateAclsResponse,
        CreatePartitionsRequest,
        CreatePartitionsResponse,
        CreateTopicsRequest,
        CreateTopicsResponse,
        DeleteAclsRequest,
        DeleteAclsResponse,
        DeleteGroupsRequest,
        DeleteGroupsResponse,
        DeleteRecordsRequest,
        DeleteRecordsResponse,
        DeleteTopicsRequest,
        DeleteTopicsResponse,
        DescribeAclsRequest,
        DescribeAclsResponse,
        DescribeClusterRequest,
        DescribeClusterResponse,
        DescribeConfigsRequest,
        DescribeConfigsResponse,
        DescribeGroupsRequest,
        DescribeGroupsResponse,
        DescribeLogDirsRequest,
        DescribeLogDirsResponse,
        DescribeUserScramCredentialsRequest,
        DescribeUserScramCredentialsResponse,
        IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse,
        ListGroupsRequest,
        ListGroupsResponse,
    )
    from kafka.protocol.admin.client_quotas import (
        DescribeClientQuotasRequest,
        DescribeClientQuotasResponse,
    )
    from kafka.protocol.admin.transactions import (
        DescribeProducersRequest,
        DescribeProducersResponse,
        DescribeTransactionsRequest,
        DescribeTransactionsResponse,
        ListTransactionsRequest,
        ListTransactionsResponse,
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
        OffsetDeleteRequest,
        OffsetDeleteResponse,
        OffsetFetchRequest,
        OffsetFetchResponse,
        OffsetForLeaderEpochRequest,
        OffsetForLeaderEpochResponse,
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
        AddOffsetsToTxnRequest,
        AddOffsetsToTxnResponse,
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnResponse,
        EndTxnRequest,
        EndTxnResponse,
        InitProducerIdRequest,
        InitProducerIdResponse,
        ProduceRequest,
        ProduceResponse,
        TxnOffsetCommitRequest,
        TxnOffsetCommitResponse,
        WriteTxnMarkersRequest,
        WriteTxnMarkersResponse,
    )
    from kafka.protocol.sasl import (
        SaslAuthenticateRequest,
        SaslAuthenticateResponse,
        SaslHandshakeRequest,
        SaslHandshakeResponse,
    )

__all__ = [
    "MESSAGES",
    "AddOffsetsToTxnRequest",
    "AddOffsetsToTxnResponse",
    "AddPartitionsToTxnRequest",
    "AddPartitionsToTxnResponse",
    "AlterConfigsRequest",
    "AlterConfigsResponse",
    "AlterUserScramCredentialsRequest",
    "AlterUserScramCredentialsResponse",
    "ApiKey",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "CreateAclsRequest",
    "CreateAclsResponse",
    "CreatePartitionsRequest",
    "CreatePartitionsResponse",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "DeleteAclsRequest",
    "DeleteAclsResponse",
    "DeleteGroupsRequest",
    "DeleteGroupsResponse",
    "DeleteRecordsRequest",
    "DeleteRecordsResponse",
    "DeleteTopicsRequest",
    "DeleteTopicsResponse",
    "DescribeAclsRequest",
    "DescribeAclsResponse",
    "DescribeClientQuotasRequest",
    "DescribeClientQuotasResponse",
    "DescribeClusterRequest",
    "DescribeClusterResponse",
    "DescribeConfigsRequest",
    "DescribeConfigsResponse",
    "DescribeGroupsRequest",
    "DescribeGroupsResponse",
    "DescribeLogDirsRequest",
    "DescribeLogDirsResponse",
    "DescribeProducersRequest",
    "DescribeProducersResponse",
    "DescribeTransactionsRequest",
    "DescribeTransactionsResponse",
    "DescribeUserScramCredentialsRequest",
    "DescribeUserScramCredentialsResponse",
    "EndTxnRequest",
    "EndTxnResponse",
    "FetchRequest",
    "FetchResponse",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "IncrementalAlterConfigsRequest",
    "IncrementalAlterConfigsResponse",
    "InitProducerIdRequest",
    "InitProducerIdResponse",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "ListGroupsRequest",
    "ListGroupsResponse",
    "ListOffsetsRequest",
    "ListOffsetsResponse",
    "ListTransactionsRequest",
    "ListTransactionsResponse",
    "MessagePair",
    "MetadataRequest",
    "MetadataResponse",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetDeleteRequest",
    "OffsetDeleteResponse",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "OffsetForLeaderEpochRequest",
    "OffsetForLeaderEpochResponse",
    "ProduceRequest",
    "ProduceResponse",
    "SaslAuthenticateRequest",
    "SaslAuthenticateResponse",
    "SaslHandshakeRequest",
    "SaslHandshakeResponse",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "TxnOffsetCommitRequest",
    "TxnOffsetCommitResponse",
    "WriteTxnMarkersRequest",
    "WriteTxnMarkersResponse",
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
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


class MessagePair(NamedTuple):
    """The request and response classes of one API, generated from its two specs."""

    request: Any
    response: Any


# The classes of every API above, by key: the protocol's message table.  Which
# versions KFS serves is the server's choice (`kfs_core.server.apis.REGISTRY`).
MESSAGES: Final[Mapping[ApiKey, MessagePair]] = MappingProxyType(
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
        ApiKey.DESCRIBE_GROUPS: MessagePair(DescribeGroupsRequest, DescribeGroupsResponse),
        ApiKey.LIST_GROUPS: MessagePair(ListGroupsRequest, ListGroupsResponse),
        ApiKey.SASL_HANDSHAKE: MessagePair(SaslHandshakeRequest, SaslHandshakeResponse),
        ApiKey.API_VERSIONS: MessagePair(ApiVersionsRequest, ApiVersionsResponse),
        ApiKey.CREATE_TOPICS: MessagePair(CreateTopicsRequest, CreateTopicsResponse),
        ApiKey.DELETE_TOPICS: MessagePair(DeleteTopicsRequest, DeleteTopicsResponse),
        ApiKey.DELETE_RECORDS: MessagePair(DeleteRecordsRequest, DeleteRecordsResponse),
        ApiKey.INIT_PRODUCER_ID: MessagePair(InitProducerIdRequest, InitProducerIdResponse),
        ApiKey.OFFSET_FOR_LEADER_EPOCH: MessagePair(
            OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
        ),
        ApiKey.ADD_PARTITIONS_TO_TXN: MessagePair(
            AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
        ),
        ApiKey.ADD_OFFSETS_TO_TXN: MessagePair(AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
        ApiKey.END_TXN: MessagePair(EndTxnRequest, EndTxnResponse),
        ApiKey.WRITE_TXN_MARKERS: MessagePair(WriteTxnMarkersRequest, WriteTxnMarkersResponse),
        ApiKey.TXN_OFFSET_COMMIT: MessagePair(TxnOffsetCommitRequest, TxnOffsetCommitResponse),
        ApiKey.DESCRIBE_ACLS: MessagePair(DescribeAclsRequest, DescribeAclsResponse),
        ApiKey.CREATE_ACLS: MessagePair(CreateAclsRequest, CreateAclsResponse),
        ApiKey.DELETE_ACLS: MessagePair(DeleteAclsRequest, DeleteAclsResponse),
        ApiKey.DESCRIBE_CONFIGS: MessagePair(DescribeConfigsRequest, DescribeConfigsResponse),
        ApiKey.ALTER_CONFIGS: MessagePair(AlterConfigsRequest, AlterConfigsResponse),
        ApiKey.DESCRIBE_LOG_DIRS: MessagePair(DescribeLogDirsRequest, DescribeLogDirsResponse),
        ApiKey.SASL_AUTHENTICATE: MessagePair(SaslAuthenticateRequest, SaslAuthenticateResponse),
        ApiKey.CREATE_PARTITIONS: MessagePair(CreatePartitionsRequest, CreatePartitionsResponse),
        ApiKey.DELETE_GROUPS: MessagePair(DeleteGroupsRequest, DeleteGroupsResponse),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: MessagePair(
            IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse
        ),
        ApiKey.OFFSET_DELETE: MessagePair(OffsetDeleteRequest, OffsetDeleteResponse),
        ApiKey.DESCRIBE_CLIENT_QUOTAS: MessagePair(
            DescribeClientQuotasRequest, DescribeClientQuotasResponse
        ),
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: MessagePair(
            DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse
        ),
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: MessagePair(
            AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse
        ),
        ApiKey.DESCRIBE_CLUSTER: MessagePair(DescribeClusterRequest, DescribeClusterResponse),
        ApiKey.DESCRIBE_PRODUCERS: MessagePair(DescribeProducersRequest, DescribeProducersResponse),
        ApiKey.DESCRIBE_TRANSACTIONS: MessagePair(
            DescribeTransactionsRequest, DescribeTransactionsResponse
        ),
        ApiKey.LIST_TRANSACTIONS: MessagePair(ListTransactionsRequest, ListTransactionsResponse),
    }
)
