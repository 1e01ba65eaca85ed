"""Typed views of request bodies: Protocols of the spec's fields the handlers read.

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
    OffsetForLeaderEpochRequestBody OffsetForLeaderEpochRequest v2-v4
    JoinGroupRequestBody   JoinGroupRequest v0-v7
    SyncGroupRequestBody   SyncGroupRequest v0-v5
    HeartbeatRequestBody   HeartbeatRequest v0-v4
    LeaveGroupRequestBody  LeaveGroupRequest v0-v5
    OffsetCommitRequestBody OffsetCommitRequest v2-v9
    OffsetFetchRequestBody OffsetFetchRequest v1-v9
    OffsetDeleteRequestBody OffsetDeleteRequest v0
    DescribeGroupsRequestBody, DeleteGroupsRequestBody
    MetadataRequestBody    MetadataRequest v0-v12
    CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs,
    IncrementalAlterConfigs, DescribeLogDirs, DeleteRecords, InitProducerId,
    FindCoordinator, the SASL pair, the ACL APIs and the SCRAM credential APIs
    (ApiVersions, DescribeCluster, ListGroups and the refused transaction APIs
    read no field, or read them with a default: their bodies stay ``Any``)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = [
    "AclCreation",
    "AclFilterFields",
    "AlterConfigsRequestBody",
    "AlterConfigsResource",
    "AlterUserScramCredentialsRequestBody",
    "CommitPartition",
    "CommitTopic",
    "CreatableTopic",
    "CreateAclsRequestBody",
    "CreatePartitionsRequestBody",
    "CreatePartitionsTopic",
    "CreateTopicsRequestBody",
    "DeleteAclsRequestBody",
    "DeleteGroupsRequestBody",
    "DeleteRecordsPartition",
    "DeleteRecordsRequestBody",
    "DeleteRecordsTopic",
    "DeleteTopicsRequestBody",
    "DescribeClientQuotasRequestBody",
    "DescribeConfigsRequestBody",
    "DescribeConfigsResource",
    "DescribeGroupsRequestBody",
    "DescribeLogDirsRequestBody",
    "DescribeUserScramCredentialsRequestBody",
    "FetchPartition",
    "FetchRequestBody",
    "FetchTopic",
    "FindCoordinatorRequestBody",
    "GroupProtocol",
    "HeartbeatRequestBody",
    "InitProducerIdRequestBody",
    "JoinGroupRequestBody",
    "LeaveGroupRequestBody",
    "LeavingMember",
    "ListOffsetsPartition",
    "ListOffsetsRequestBody",
    "ListOffsetsTopic",
    "LogDirsTopic",
    "MemberAssignment",
    "MetadataRequestBody",
    "MetadataTopic",
    "OffsetCommitRequestBody",
    "OffsetDeletePartition",
    "OffsetDeleteRequestBody",
    "OffsetDeleteTopic",
    "OffsetFetchGroup",
    "OffsetFetchRequestBody",
    "OffsetFetchTopic",
    "OffsetForLeaderEpochRequestBody",
    "OffsetForLeaderPartition",
    "OffsetForLeaderTopic",
    "PartitionsAssignment",
    "ProducePartitionData",
    "ProduceRequestBody",
    "ProduceTopicData",
    "ReplicaAssignment",
    "ResponseBody",
    "SaslAuthenticateRequestBody",
    "SaslHandshakeRequestBody",
    "ScramDeletion",
    "ScramUpsertion",
    "SyncGroupRequestBody",
    "TopicConfig",
    "UserName",
]


class ResponseBody(Protocol):
    """Any response body: a spec-generated response message, at the request's version.

    Handlers and error bodies return it; `kfs_core.server.protocol.codec`
    encodes it (after checking it is the request's response class).  The
    typed classes of `kfs_core.server.protocol.responses`, which handlers
    build, all satisfy it.
    """

    @property
    def version(self) -> int | None: ...

    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...


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


class OffsetForLeaderPartition(Protocol):
    """OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition."""

    partition: int
    current_leader_epoch: int
    leader_epoch: int


class OffsetForLeaderTopic(Protocol):
    """OffsetForLeaderEpochRequest.OffsetForLeaderTopic."""

    topic: str
    partitions: Sequence[OffsetForLeaderPartition]


class OffsetForLeaderEpochRequestBody(Protocol):
    """OffsetForLeaderEpochRequest (``replica_id`` from v3: read with a default)."""

    topics: Sequence[OffsetForLeaderTopic]


# --- consumer groups ---------------------------------------------------------
# Fields only later versions carry (group_instance_id, rebalance_timeout_ms,
# SyncGroup's protocol_type and protocol_name) are read with a default.


class GroupProtocol(Protocol):
    """JoinGroupRequest.JoinGroupRequestProtocol: one assignor the member offers."""

    name: str
    metadata: bytes


class JoinGroupRequestBody(Protocol):
    """JoinGroupRequest."""

    group_id: str
    session_timeout_ms: int
    member_id: str
    protocol_type: str
    protocols: Sequence[GroupProtocol]


class MemberAssignment(Protocol):
    """SyncGroupRequest.SyncGroupRequestAssignment: the leader's assignment for one member."""

    member_id: str
    assignment: bytes


class SyncGroupRequestBody(Protocol):
    """SyncGroupRequest."""

    group_id: str
    generation_id: int
    member_id: str
    assignments: Sequence[MemberAssignment]


class HeartbeatRequestBody(Protocol):
    """HeartbeatRequest."""

    group_id: str
    generation_id: int
    member_id: str


class LeavingMember(Protocol):
    """LeaveGroupRequest.MemberIdentity (v3+: a batch of members leaves)."""

    member_id: str
    group_instance_id: str | None


class LeaveGroupRequestBody(Protocol):
    """LeaveGroupRequest: ``member_id`` up to v2, ``members`` from v3."""

    group_id: str
    member_id: str
    members: Sequence[LeavingMember]


class CommitPartition(Protocol):
    """OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition."""

    partition_index: int
    committed_offset: int
    committed_metadata: str | None


class CommitTopic(Protocol):
    """OffsetCommitRequest.OffsetCommitRequestTopic."""

    name: str
    partitions: Sequence[CommitPartition]


class OffsetCommitRequestBody(Protocol):
    """OffsetCommitRequest."""

    group_id: str
    generation_id_or_member_epoch: int
    member_id: str
    topics: Sequence[CommitTopic]


class OffsetFetchTopic(Protocol):
    """OffsetFetchRequest's topic (and, v8+, a group's topic): the partitions asked for."""

    name: str
    partition_indexes: Sequence[int]


class OffsetFetchGroup(Protocol):
    """OffsetFetchRequest.OffsetFetchRequestGroup (v8+); ``topics`` None: every committed one."""

    group_id: str
    topics: Sequence[OffsetFetchTopic] | None


class OffsetFetchRequestBody(Protocol):
    """OffsetFetchRequest: ``group_id`` and ``topics`` up to v7, ``groups`` from v8."""

    group_id: str
    topics: Sequence[OffsetFetchTopic] | None
    groups: Sequence[OffsetFetchGroup]


class OffsetDeletePartition(Protocol):
    """OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition."""

    partition_index: int


class OffsetDeleteTopic(Protocol):
    """OffsetDeleteRequest.OffsetDeleteRequestTopic."""

    name: str
    partitions: Sequence[OffsetDeletePartition]


class OffsetDeleteRequestBody(Protocol):
    """OffsetDeleteRequest."""

    group_id: str
    topics: Sequence[OffsetDeleteTopic]


class DescribeGroupsRequestBody(Protocol):
    """DescribeGroupsRequest."""

    groups: Sequence[str]


class DeleteGroupsRequestBody(Protocol):
    """DeleteGroupsRequest."""

    groups_names: Sequence[str]


# --- metadata ----------------------------------------------------------------


class MetadataTopic(Protocol):
    """MetadataRequest.MetadataRequestTopic; ``name`` None: named by id only (v10+)."""

    name: str | None


class MetadataRequestBody(Protocol):
    """MetadataRequest; ``topics`` None (or empty at v0): every topic."""

    topics: Sequence[MetadataTopic] | None


# --- topics and configs ------------------------------------------------------


class ReplicaAssignment(Protocol):
    """CreateTopicsRequest.CreatableTopic.CreatableReplicaAssignment."""

    partition_index: int
    broker_ids: Sequence[int]


class TopicConfig(Protocol):
    """A config name and value a request sets (CreateTopics, AlterConfigs)."""

    name: str
    value: str | None


class CreatableTopic(Protocol):
    """CreateTopicsRequest.CreatableTopic."""

    name: str
    num_partitions: int
    replication_factor: int
    assignments: Sequence[ReplicaAssignment]
    configs: Sequence[TopicConfig]


class CreateTopicsRequestBody(Protocol):
    """CreateTopicsRequest."""

    topics: Sequence[CreatableTopic]


class DeleteTopicsRequestBody(Protocol):
    """DeleteTopicsRequest (v1-v5: topics by name)."""

    topic_names: Sequence[str]


class PartitionsAssignment(Protocol):
    """CreatePartitionsRequest.CreatePartitionsTopic.CreatePartitionsAssignment."""

    broker_ids: Sequence[int]


class CreatePartitionsTopic(Protocol):
    """CreatePartitionsRequest.CreatePartitionsTopic: ``count`` is the new total."""

    name: str
    count: int
    assignments: Sequence[PartitionsAssignment] | None


class CreatePartitionsRequestBody(Protocol):
    """CreatePartitionsRequest."""

    topics: Sequence[CreatePartitionsTopic]
    validate_only: bool


class DescribeConfigsResource(Protocol):
    """DescribeConfigsRequest.DescribeConfigsResource; ``configuration_keys`` None: all."""

    resource_type: int
    resource_name: str
    configuration_keys: Sequence[str] | None


class DescribeConfigsRequestBody(Protocol):
    """DescribeConfigsRequest."""

    resources: Sequence[DescribeConfigsResource]


class AlterConfigsResource(Protocol):
    """AlterConfigs' and IncrementalAlterConfigs' resource (the latter's configs add an operation)."""

    resource_type: int
    resource_name: str
    configs: Sequence[TopicConfig]


class AlterConfigsRequestBody(Protocol):
    """AlterConfigsRequest and IncrementalAlterConfigsRequest."""

    resources: Sequence[AlterConfigsResource]
    validate_only: bool


# --- cluster and producer ids ------------------------------------------------


class LogDirsTopic(Protocol):
    """DescribeLogDirsRequest.DescribableLogDirTopic."""

    topic: str
    partitions: Sequence[int]


class DescribeLogDirsRequestBody(Protocol):
    """DescribeLogDirsRequest; ``topics`` None: every topic."""

    topics: Sequence[LogDirsTopic] | None


class DeleteRecordsPartition(Protocol):
    """DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition: delete below ``offset``."""

    partition_index: int
    offset: int


class DeleteRecordsTopic(Protocol):
    """DeleteRecordsRequest.DeleteRecordsTopic."""

    name: str
    partitions: Sequence[DeleteRecordsPartition]


class DeleteRecordsRequestBody(Protocol):
    """DeleteRecordsRequest."""

    topics: Sequence[DeleteRecordsTopic]
    timeout_ms: int


class InitProducerIdRequestBody(Protocol):
    """InitProducerIdRequest: ``producer_id`` and ``producer_epoch`` from v3 (KIP-360)."""

    transactional_id: str | None
    transaction_timeout_ms: int


# --- coordinator, SASL, ACLs, SCRAM users ------------------------------------


class FindCoordinatorRequestBody(Protocol):
    """FindCoordinatorRequest: ``key`` up to v3, ``coordinator_keys`` from v4."""

    key: str
    key_type: int
    coordinator_keys: Sequence[str]


class SaslHandshakeRequestBody(Protocol):
    """SaslHandshakeRequest."""

    mechanism: str | None


class SaslAuthenticateRequestBody(Protocol):
    """SaslAuthenticateRequest."""

    auth_bytes: bytes | None


class AclCreation(Protocol):
    """CreateAclsRequest.AclCreation: one binding to add."""

    resource_type: int
    resource_name: str | None
    resource_pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int


class AclFilterFields(Protocol):
    """The filter DescribeAclsRequest is, and each DeleteAclsRequest.DeleteAclsFilter."""

    resource_type_filter: int
    resource_name_filter: str | None
    pattern_type_filter: int
    principal_filter: str | None
    host_filter: str | None
    operation: int
    permission_type: int


class CreateAclsRequestBody(Protocol):
    """CreateAclsRequest."""

    creations: Sequence[AclCreation] | None


class DeleteAclsRequestBody(Protocol):
    """DeleteAclsRequest."""

    filters: Sequence[AclFilterFields] | None


class UserName(Protocol):
    """DescribeUserScramCredentialsRequest.UserName."""

    name: str | None


class DescribeUserScramCredentialsRequestBody(Protocol):
    """DescribeUserScramCredentialsRequest; ``users`` None: every user."""

    users: Sequence[UserName] | None


class ComponentData(Protocol):
    """DescribeClientQuotasRequest.ComponentData: a filter on one entity type."""

    entity_type: str
    match_type: int
    match: str | None


class DescribeClientQuotasRequestBody(Protocol):
    """DescribeClientQuotasRequest."""

    components: Sequence[ComponentData]
    strict: bool


class ScramDeletion(Protocol):
    """AlterUserScramCredentialsRequest.ScramCredentialDeletion."""

    name: str
    mechanism: int


class ScramUpsertion(Protocol):
    """AlterUserScramCredentialsRequest.ScramCredentialUpsertion."""

    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


class AlterUserScramCredentialsRequestBody(Protocol):
    """AlterUserScramCredentialsRequest."""

    deletions: Sequence[ScramDeletion] | None
    upsertions: Sequence[ScramUpsertion] | None
