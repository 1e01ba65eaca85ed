"""Typed stubs of the response classes (`kfs_core.server.protocol.responses`).

Generated from kafka-python's message schemas by
`kfs_core.server.protocol.response_stubs`; do not edit, rerun it:
python -m kfs_core.server.protocol.response_stubs
"""

import uuid
from typing import Any

__all__ = [
    "AddOffsetsToTxnResponse",
    "AddPartitionsToTxnResponse",
    "AlterConfigsResponse",
    "AlterUserScramCredentialsResponse",
    "ApiVersionsResponse",
    "CreateAclsResponse",
    "CreatePartitionsResponse",
    "CreateTopicsResponse",
    "DeleteAclsResponse",
    "DeleteGroupsResponse",
    "DeleteRecordsResponse",
    "DeleteTopicsResponse",
    "DescribeAclsResponse",
    "DescribeClientQuotasResponse",
    "DescribeClusterResponse",
    "DescribeConfigsResponse",
    "DescribeGroupsResponse",
    "DescribeLogDirsResponse",
    "DescribeProducersResponse",
    "DescribeTransactionsResponse",
    "DescribeUserScramCredentialsResponse",
    "EndTxnResponse",
    "FetchResponse",
    "FindCoordinatorResponse",
    "HeartbeatResponse",
    "IncrementalAlterConfigsResponse",
    "InitProducerIdResponse",
    "JoinGroupResponse",
    "LeaveGroupResponse",
    "ListGroupsResponse",
    "ListOffsetsResponse",
    "ListTransactionsResponse",
    "MetadataResponse",
    "OffsetCommitResponse",
    "OffsetDeleteResponse",
    "OffsetFetchResponse",
    "OffsetForLeaderEpochResponse",
    "ProduceResponse",
    "SaslAuthenticateResponse",
    "SaslHandshakeResponse",
    "SyncGroupResponse",
    "TxnOffsetCommitResponse",
    "WriteTxnMarkersResponse",
]

class AddOffsetsToTxnResponse:
    throttle_time_ms: int
    error_code: int
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        error_code: int = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class AddPartitionsToTxnResponse:
    class AddPartitionsToTxnResult:
        class AddPartitionsToTxnTopicResult:
            class AddPartitionsToTxnPartitionResult:
                partition_index: int
                partition_error_code: int
                def __init__(
                    self,
                    *,
                    version: int | None = None,
                    partition_index: int = ...,
                    partition_error_code: int = ...,
                ) -> None: ...

            name: str
            results_by_partition: list[AddPartitionsToTxnPartitionResult]
            def __init__(
                self,
                *,
                version: int | None = None,
                name: str = ...,
                results_by_partition: list[AddPartitionsToTxnPartitionResult] = ...,
            ) -> None: ...

        transactional_id: str
        topic_results: list[AddPartitionsToTxnTopicResult]
        def __init__(
            self,
            *,
            version: int | None = None,
            transactional_id: str = ...,
            topic_results: list[AddPartitionsToTxnTopicResult] = ...,
        ) -> None: ...

    class AddPartitionsToTxnTopicResult:
        class AddPartitionsToTxnPartitionResult:
            partition_index: int
            partition_error_code: int
            def __init__(
                self,
                *,
                version: int | None = None,
                partition_index: int = ...,
                partition_error_code: int = ...,
            ) -> None: ...

        name: str
        results_by_partition: list[AddPartitionsToTxnPartitionResult]
        def __init__(
            self,
            *,
            version: int | None = None,
            name: str = ...,
            results_by_partition: list[AddPartitionsToTxnPartitionResult] = ...,
        ) -> None: ...

    throttle_time_ms: int
    error_code: int
    results_by_transaction: list[AddPartitionsToTxnResult]
    results_by_topic_v3_and_below: list[AddPartitionsToTxnTopicResult]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        results_by_transaction: list[AddPartitionsToTxnResult] = ...,
        results_by_topic_v3_and_below: list[AddPartitionsToTxnTopicResult] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class AlterConfigsResponse:
    class AlterConfigsResourceResponse:
        error_code: int
        error_message: str | None
        resource_type: int
        resource_name: str
        def __init__(
            self,
            *,
            version: int | None = None,
            error_code: int = ...,
            error_message: str | None = ...,
            resource_type: int = ...,
            resource_name: str = ...,
        ) -> None: ...

    throttle_time_ms: int
    responses: list[AlterConfigsResourceResponse]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        responses: list[AlterConfigsResourceResponse] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class AlterUserScramCredentialsResponse:
    class AlterUserScramCredentialsResult:
        user: str
        error_code: int
        error_message: str | None
        def __init__(
            self,
            *,
            version: int | None = None,
            user: str = ...,
            error_code: int = ...,
            error_message: str | None = ...,
        ) -> None: ...

    throttle_time_ms: int
    results: list[AlterUserScramCredentialsResult]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        results: list[AlterUserScramCredentialsResult] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class ApiVersionsResponse:
    class ApiVersion:
        api_key: int
        min_version: int
        max_version: int
        def __init__(
            self,
            *,
            version: int | None = None,
            api_key: int = ...,
            min_version: int = ...,
            max_version: int = ...,
        ) -> None: ...

    class SupportedFeatureKey:
        name: str
        min_version: int
        max_version: int
        def __init__(
            self,
            *,
            version: int | None = None,
            name: str = ...,
            min_version: int = ...,
            max_version: int = ...,
        ) -> None: ...

    class FinalizedFeatureKey:
        name: str
        max_version_level: int
        min_version_level: int
        def __init__(
            self,
            *,
            version: int | None = None,
            name: str = ...,
            max_version_level: int = ...,
            min_version_level: int = ...,
        ) -> None: ...

    error_code: int
    api_keys: list[ApiVersion]
    throttle_time_ms: int
    supported_features: list[SupportedFeatureKey]
    finalized_features_epoch: int
    finalized_features: list[FinalizedFeatureKey]
    zk_migration_ready: bool
    def __init__(
        self,
        *,
        version: int,
        error_code: int = ...,
        api_keys: list[ApiVersion] = ...,
        throttle_time_ms: int = ...,
        supported_features: list[SupportedFeatureKey] = ...,
        finalized_features_epoch: int = ...,
        finalized_features: list[FinalizedFeatureKey] = ...,
        zk_migration_ready: bool = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class CreateAclsResponse:
    class AclCreationResult:
        error_code: int
        error_message: str | None
        def __init__(
            self,
            *,
            version: int | None = None,
            error_code: int = ...,
            error_message: str | None = ...,
        ) -> None: ...

    throttle_time_ms: int
    results: list[AclCreationResult]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        results: list[AclCreationResult] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class CreatePartitionsResponse:
    class CreatePartitionsTopicResult:
        name: str
        error_code: int
        error_message: str | None
        def __init__(
            self,
            *,
            version: int | None = None,
            name: str = ...,
            error_code: int = ...,
            error_message: str | None = ...,
        ) -> None: ...

    throttle_time_ms: int
    results: list[CreatePartitionsTopicResult]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        results: list[CreatePartitionsTopicResult] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class CreateTopicsResponse:
    class CreatableTopicResult:
        class CreatableTopicConfigs:
            name: str
            value: str | None
            read_only: bool
            config_source: int
            is_sensitive: bool
            def __init__(
                self,
                *,
                version: int | None = None,
                name: str = ...,
                value: str | None = ...,
                read_only: bool = ...,
                config_source: int = ...,
                is_sensitive: bool = ...,
            ) -> None: ...

        name: str
        topic_id: uuid.UUID | None
        error_code: int
        error_message: str | None
        topic_config_error_code: int
        num_partitions: int
        replication_factor: int
        configs: list[CreatableTopicConfigs] | None
        def __init__(
            self,
            *,
            version: int | None = None,
            name: str = ...,
            topic_id: uuid.UUID | None = ...,
            error_code: int = ...,
            error_message: str | None = ...,
            topic_config_error_code: int = ...,
            num_partitions: int = ...,
            replication_factor: int = ...,
            configs: list[CreatableTopicConfigs] | None = ...,
        ) -> None: ...

    throttle_time_ms: int
    topics: list[CreatableTopicResult]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        topics: list[CreatableTopicResult] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class DeleteAclsResponse:
    class DeleteAclsFilterResult:
        class DeleteAclsMatchingAcl:
            error_code: int
            error_message: str | None
            resource_type: int
            resource_name: str
            pattern_type: int
            principal: str
            host: str
            operation: int
            permission_type: int
            def __init__(
                self,
                *,
                version: int | None = None,
                error_code: int = ...,
                error_message: str | None = ...,
                resource_type: int = ...,
                resource_name: str = ...,
                pattern_type: int = ...,
                principal: str = ...,
                host: str = ...,
                operation: int = ...,
                permission_type: int = ...,
            ) -> None: ...

        error_code: int
        error_message: str | None
        matching_acls: list[DeleteAclsMatchingAcl]
        def __init__(
            self,
            *,
            version: int | None = None,
            error_code: int = ...,
            error_message: str | None = ...,
            matching_acls: list[DeleteAclsMatchingAcl] = ...,
        ) -> None: ...

    throttle_time_ms: int
    filter_results: list[DeleteAclsFilterResult]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        filter_results: list[DeleteAclsFilterResult] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class DeleteGroupsResponse:
    class DeletableGroupResult:
        group_id: str
        error_code: int
        def __init__(
            self,
            *,
            version: int | None = None,
            group_id: str = ...,
            error_code: int = ...,
        ) -> None: ...

    throttle_time_ms: int
    results: list[DeletableGroupResult]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        results: list[DeletableGroupResult] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class DeleteRecordsResponse:
    class DeleteRecordsTopicResult:
        class DeleteRecordsPartitionResult:
            partition_index: int
            low_watermark: int
            error_code: int
            def __init__(
                self,
                *,
                version: int | None = None,
                partition_index: int = ...,
                low_watermark: int = ...,
                error_code: int = ...,
            ) -> None: ...

        name: str
        partitions: list[DeleteRecordsPartitionResult]
        def __init__(
            self,
            *,
            version: int | None = None,
            name: str = ...,
            partitions: list[DeleteRecordsPartitionResult] = ...,
        ) -> None: ...

    throttle_time_ms: int
    topics: list[DeleteRecordsTopicResult]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        topics: list[DeleteRecordsTopicResult] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class DeleteTopicsResponse:
    class DeletableTopicResult:
        name: str | None
        topic_id: uuid.UUID | None
        error_code: int
        error_message: str | None
        def __init__(
            self,
            *,
            version: int | None = None,
            name: str | None = ...,
            topic_id: uuid.UUID | None = ...,
            error_code: int = ...,
            error_message: str | None = ...,
        ) -> None: ...

    throttle_time_ms: int
    responses: list[DeletableTopicResult]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        responses: list[DeletableTopicResult] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class DescribeAclsResponse:
    class DescribeAclsResource:
        class AclDescription:
            principal: str
            host: str
            operation: int
            permission_type: int
            def __init__(
                self,
                *,
                version: int | None = None,
                principal: str = ...,
                host: str = ...,
                operation: int = ...,
                permission_type: int = ...,
            ) -> None: ...

        resource_type: int
        resource_name: str
        pattern_type: int
        acls: list[AclDescription]
        def __init__(
            self,
            *,
            version: int | None = None,
            resource_type: int = ...,
            resource_name: str = ...,
            pattern_type: int = ...,
            acls: list[AclDescription] = ...,
        ) -> None: ...

    throttle_time_ms: int
    error_code: int
    error_message: str | None
    resources: list[DescribeAclsResource]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        error_message: str | None = ...,
        resources: list[DescribeAclsResource] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class DescribeClientQuotasResponse:
    class EntryData:
        class EntityData:
            entity_type: str
            entity_name: str | None
            def __init__(
                self,
                *,
                version: int | None = None,
                entity_type: str = ...,
                entity_name: str | None = ...,
            ) -> None: ...

        class ValueData:
            key: str
            value: float
            def __init__(
                self,
                *,
                version: int | None = None,
                key: str = ...,
                value: float = ...,
            ) -> None: ...

        entity: list[EntityData]
        values: list[ValueData]
        def __init__(
            self,
            *,
            version: int | None = None,
            entity: list[EntityData] = ...,
            values: list[ValueData] = ...,
        ) -> None: ...

    throttle_time_ms: int
    error_code: int
    error_message: str | None
    entries: list[EntryData] | None
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        error_message: str | None = ...,
        entries: list[EntryData] | None = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class DescribeClusterResponse:
    class DescribeClusterBroker:
        broker_id: int
        host: str
        port: int
        rack: str | None
        is_fenced: bool
        def __init__(
            self,
            *,
            version: int | None = None,
            broker_id: int = ...,
            host: str = ...,
            port: int = ...,
            rack: str | None = ...,
            is_fenced: bool = ...,
        ) -> None: ...

    throttle_time_ms: int
    error_code: int
    error_message: str | None
    endpoint_type: int
    cluster_id: str
    controller_id: int
    brokers: list[DescribeClusterBroker]
    authorized_operations: set[int] | None
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        error_message: str | None = ...,
        endpoint_type: int = ...,
        cluster_id: str = ...,
        controller_id: int = ...,
        brokers: list[DescribeClusterBroker] = ...,
        authorized_operations: set[int] | None = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class DescribeConfigsResponse:
    class DescribeConfigsResult:
        class DescribeConfigsResourceResult:
            class DescribeConfigsSynonym:
                name: str
                value: str | None
                source: int
                def __init__(
                    self,
                    *,
                    version: int | None = None,
                    name: str = ...,
                    value: str | None = ...,
                    source: int = ...,
                ) -> None: ...

            name: str
            value: str | None
            read_only: bool
            config_source: int
            is_default: bool
            is_sensitive: bool
            synonyms: list[DescribeConfigsSynonym]
            config_type: int
            documentation: str | None
            def __init__(
                self,
                *,
                version: int | None = None,
                name: str = ...,
                value: str | None = ...,
                read_only: bool = ...,
                config_source: int = ...,
                is_default: bool = ...,
                is_sensitive: bool = ...,
                synonyms: list[DescribeConfigsSynonym] = ...,
                config_type: int = ...,
                documentation: str | None = ...,
            ) -> None: ...

        error_code: int
        error_message: str | None
        resource_type: int
        resource_name: str
        configs: list[DescribeConfigsResourceResult]
        def __init__(
            self,
            *,
            version: int | None = None,
            error_code: int = ...,
            error_message: str | None = ...,
            resource_type: int = ...,
            resource_name: str = ...,
            configs: list[DescribeConfigsResourceResult] = ...,
        ) -> None: ...

    throttle_time_ms: int
    results: list[DescribeConfigsResult]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        results: list[DescribeConfigsResult] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class DescribeGroupsResponse:
    class DescribedGroup:
        class DescribedGroupMember:
            member_id: str
            group_instance_id: str | None
            client_id: str
            client_host: str
            member_metadata: bytes | bytearray | memoryview
            member_assignment: bytes | bytearray | memoryview
            def __init__(
                self,
                *,
                version: int | None = None,
                member_id: str = ...,
                group_instance_id: str | None = ...,
                client_id: str = ...,
                client_host: str = ...,
                member_metadata: bytes | bytearray | memoryview = ...,
                member_assignment: bytes | bytearray | memoryview = ...,
            ) -> None: ...

        error_code: int
        error_message: str | None
        group_id: str
        group_state: str
        protocol_type: str
        protocol_data: str
        members: list[DescribedGroupMember]
        authorized_operations: set[int] | None
        def __init__(
            self,
            *,
            version: int | None = None,
            error_code: int = ...,
            error_message: str | None = ...,
            group_id: str = ...,
            group_state: str = ...,
            protocol_type: str = ...,
            protocol_data: str = ...,
            members: list[DescribedGroupMember] = ...,
            authorized_operations: set[int] | None = ...,
        ) -> None: ...

    throttle_time_ms: int
    groups: list[DescribedGroup]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        groups: list[DescribedGroup] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class DescribeLogDirsResponse:
    class DescribeLogDirsResult:
        class DescribeLogDirsTopic:
            class DescribeLogDirsPartition:
                partition_index: int
                partition_size: int
                offset_lag: int
                is_future_key: bool
                def __init__(
                    self,
                    *,
                    version: int | None = None,
                    partition_index: int = ...,
                    partition_size: int = ...,
                    offset_lag: int = ...,
                    is_future_key: bool = ...,
                ) -> None: ...

            name: str
            partitions: list[DescribeLogDirsPartition]
            def __init__(
                self,
                *,
                version: int | None = None,
                name: str = ...,
                partitions: list[DescribeLogDirsPartition] = ...,
            ) -> None: ...

        error_code: int
        log_dir: str
        topics: list[DescribeLogDirsTopic]
        total_bytes: int
        usable_bytes: int
        is_cordoned: bool
        def __init__(
            self,
            *,
            version: int | None = None,
            error_code: int = ...,
            log_dir: str = ...,
            topics: list[DescribeLogDirsTopic] = ...,
            total_bytes: int = ...,
            usable_bytes: int = ...,
            is_cordoned: bool = ...,
        ) -> None: ...

    throttle_time_ms: int
    error_code: int
    results: list[DescribeLogDirsResult]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        results: list[DescribeLogDirsResult] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class DescribeProducersResponse:
    class TopicResponse:
        class PartitionResponse:
            class ProducerState:
                producer_id: int
                producer_epoch: int
                last_sequence: int
                last_timestamp: int
                coordinator_epoch: int
                current_txn_start_offset: int
                def __init__(
                    self,
                    *,
                    version: int | None = None,
                    producer_id: int = ...,
                    producer_epoch: int = ...,
                    last_sequence: int = ...,
                    last_timestamp: int = ...,
                    coordinator_epoch: int = ...,
                    current_txn_start_offset: int = ...,
                ) -> None: ...

            partition_index: int
            error_code: int
            error_message: str | None
            active_producers: list[ProducerState]
            def __init__(
                self,
                *,
                version: int | None = None,
                partition_index: int = ...,
                error_code: int = ...,
                error_message: str | None = ...,
                active_producers: list[ProducerState] = ...,
            ) -> None: ...

        name: str
        partitions: list[PartitionResponse]
        def __init__(
            self,
            *,
            version: int | None = None,
            name: str = ...,
            partitions: list[PartitionResponse] = ...,
        ) -> None: ...

    throttle_time_ms: int
    topics: list[TopicResponse]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        topics: list[TopicResponse] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class DescribeTransactionsResponse:
    class TransactionState:
        class TopicData:
            topic: str
            partitions: list[int]
            def __init__(
                self,
                *,
                version: int | None = None,
                topic: str = ...,
                partitions: list[int] = ...,
            ) -> None: ...

        error_code: int
        transactional_id: str
        transaction_state: str
        transaction_timeout_ms: int
        transaction_start_time_ms: int
        producer_id: int
        producer_epoch: int
        topics: list[TopicData]
        def __init__(
            self,
            *,
            version: int | None = None,
            error_code: int = ...,
            transactional_id: str = ...,
            transaction_state: str = ...,
            transaction_timeout_ms: int = ...,
            transaction_start_time_ms: int = ...,
            producer_id: int = ...,
            producer_epoch: int = ...,
            topics: list[TopicData] = ...,
        ) -> None: ...

    throttle_time_ms: int
    transaction_states: list[TransactionState]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        transaction_states: list[TransactionState] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class DescribeUserScramCredentialsResponse:
    class DescribeUserScramCredentialsResult:
        class CredentialInfo:
            mechanism: int
            iterations: int
            def __init__(
                self,
                *,
                version: int | None = None,
                mechanism: int = ...,
                iterations: int = ...,
            ) -> None: ...

        user: str
        error_code: int
        error_message: str | None
        credential_infos: list[CredentialInfo]
        def __init__(
            self,
            *,
            version: int | None = None,
            user: str = ...,
            error_code: int = ...,
            error_message: str | None = ...,
            credential_infos: list[CredentialInfo] = ...,
        ) -> None: ...

    throttle_time_ms: int
    error_code: int
    error_message: str | None
    results: list[DescribeUserScramCredentialsResult]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        error_message: str | None = ...,
        results: list[DescribeUserScramCredentialsResult] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class EndTxnResponse:
    throttle_time_ms: int
    error_code: int
    producer_id: int
    producer_epoch: int
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        producer_id: int = ...,
        producer_epoch: int = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class FetchResponse:
    class FetchableTopicResponse:
        class PartitionData:
            class EpochEndOffset:
                epoch: int
                end_offset: int
                def __init__(
                    self,
                    *,
                    version: int | None = None,
                    epoch: int = ...,
                    end_offset: int = ...,
                ) -> None: ...

            class LeaderIdAndEpoch:
                leader_id: int
                leader_epoch: int
                def __init__(
                    self,
                    *,
                    version: int | None = None,
                    leader_id: int = ...,
                    leader_epoch: int = ...,
                ) -> None: ...

            class SnapshotId:
                end_offset: int
                epoch: int
                def __init__(
                    self,
                    *,
                    version: int | None = None,
                    end_offset: int = ...,
                    epoch: int = ...,
                ) -> None: ...

            class AbortedTransaction:
                producer_id: int
                first_offset: int
                def __init__(
                    self,
                    *,
                    version: int | None = None,
                    producer_id: int = ...,
                    first_offset: int = ...,
                ) -> None: ...

            partition_index: int
            error_code: int
            high_watermark: int
            last_stable_offset: int
            log_start_offset: int
            diverging_epoch: EpochEndOffset
            current_leader: LeaderIdAndEpoch
            snapshot_id: SnapshotId
            aborted_transactions: list[AbortedTransaction] | None
            preferred_read_replica: int
            records: bytes | bytearray | memoryview | None
            def __init__(
                self,
                *,
                version: int | None = None,
                partition_index: int = ...,
                error_code: int = ...,
                high_watermark: int = ...,
                last_stable_offset: int = ...,
                log_start_offset: int = ...,
                diverging_epoch: EpochEndOffset = ...,
                current_leader: LeaderIdAndEpoch = ...,
                snapshot_id: SnapshotId = ...,
                aborted_transactions: list[AbortedTransaction] | None = ...,
                preferred_read_replica: int = ...,
                records: bytes | bytearray | memoryview | None = ...,
            ) -> None: ...

        topic: str
        topic_id: uuid.UUID | None
        partitions: list[PartitionData]
        def __init__(
            self,
            *,
            version: int | None = None,
            topic: str = ...,
            topic_id: uuid.UUID | None = ...,
            partitions: list[PartitionData] = ...,
        ) -> None: ...

    class NodeEndpoint:
        node_id: int
        host: str
        port: int
        rack: str | None
        def __init__(
            self,
            *,
            version: int | None = None,
            node_id: int = ...,
            host: str = ...,
            port: int = ...,
            rack: str | None = ...,
        ) -> None: ...

    throttle_time_ms: int
    error_code: int
    session_id: int
    responses: list[FetchableTopicResponse]
    node_endpoints: list[NodeEndpoint]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        session_id: int = ...,
        responses: list[FetchableTopicResponse] = ...,
        node_endpoints: list[NodeEndpoint] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class FindCoordinatorResponse:
    class Coordinator:
        key: str
        node_id: int
        host: str
        port: int
        error_code: int
        error_message: str | None
        def __init__(
            self,
            *,
            version: int | None = None,
            key: str = ...,
            node_id: int = ...,
            host: str = ...,
            port: int = ...,
            error_code: int = ...,
            error_message: str | None = ...,
        ) -> None: ...

    throttle_time_ms: int
    error_code: int
    error_message: str | None
    node_id: int
    host: str
    port: int
    coordinators: list[Coordinator]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        error_message: str | None = ...,
        node_id: int = ...,
        host: str = ...,
        port: int = ...,
        coordinators: list[Coordinator] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class HeartbeatResponse:
    throttle_time_ms: int
    error_code: int
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        error_code: int = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class IncrementalAlterConfigsResponse:
    class AlterConfigsResourceResponse:
        error_code: int
        error_message: str | None
        resource_type: int
        resource_name: str
        def __init__(
            self,
            *,
            version: int | None = None,
            error_code: int = ...,
            error_message: str | None = ...,
            resource_type: int = ...,
            resource_name: str = ...,
        ) -> None: ...

    throttle_time_ms: int
    responses: list[AlterConfigsResourceResponse]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        responses: list[AlterConfigsResourceResponse] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class InitProducerIdResponse:
    throttle_time_ms: int
    error_code: int
    producer_id: int
    producer_epoch: int
    ongoing_txn_producer_id: int
    ongoing_txn_producer_epoch: int
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        producer_id: int = ...,
        producer_epoch: int = ...,
        ongoing_txn_producer_id: int = ...,
        ongoing_txn_producer_epoch: int = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class JoinGroupResponse:
    class JoinGroupResponseMember:
        member_id: str
        group_instance_id: str | None
        metadata: bytes | bytearray | memoryview
        def __init__(
            self,
            *,
            version: int | None = None,
            member_id: str = ...,
            group_instance_id: str | None = ...,
            metadata: bytes | bytearray | memoryview = ...,
        ) -> None: ...

    throttle_time_ms: int
    error_code: int
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    skip_assignment: bool
    member_id: str
    members: list[JoinGroupResponseMember]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        generation_id: int = ...,
        protocol_type: str | None = ...,
        protocol_name: str | None = ...,
        leader: str = ...,
        skip_assignment: bool = ...,
        member_id: str = ...,
        members: list[JoinGroupResponseMember] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class LeaveGroupResponse:
    class MemberResponse:
        member_id: str
        group_instance_id: str | None
        error_code: int
        def __init__(
            self,
            *,
            version: int | None = None,
            member_id: str = ...,
            group_instance_id: str | None = ...,
            error_code: int = ...,
        ) -> None: ...

    throttle_time_ms: int
    error_code: int
    members: list[MemberResponse]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        members: list[MemberResponse] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class ListGroupsResponse:
    class ListedGroup:
        group_id: str
        protocol_type: str
        group_state: str
        group_type: str
        def __init__(
            self,
            *,
            version: int | None = None,
            group_id: str = ...,
            protocol_type: str = ...,
            group_state: str = ...,
            group_type: str = ...,
        ) -> None: ...

    throttle_time_ms: int
    error_code: int
    groups: list[ListedGroup]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        groups: list[ListedGroup] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class ListOffsetsResponse:
    class ListOffsetsTopicResponse:
        class ListOffsetsPartitionResponse:
            partition_index: int
            error_code: int
            old_style_offsets: list[int]
            timestamp: int
            offset: int
            leader_epoch: int
            def __init__(
                self,
                *,
                version: int | None = None,
                partition_index: int = ...,
                error_code: int = ...,
                old_style_offsets: list[int] = ...,
                timestamp: int = ...,
                offset: int = ...,
                leader_epoch: int = ...,
            ) -> None: ...

        name: str
        partitions: list[ListOffsetsPartitionResponse]
        def __init__(
            self,
            *,
            version: int | None = None,
            name: str = ...,
            partitions: list[ListOffsetsPartitionResponse] = ...,
        ) -> None: ...

    throttle_time_ms: int
    topics: list[ListOffsetsTopicResponse]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        topics: list[ListOffsetsTopicResponse] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class ListTransactionsResponse:
    class TransactionState:
        transactional_id: str
        producer_id: int
        transaction_state: str
        def __init__(
            self,
            *,
            version: int | None = None,
            transactional_id: str = ...,
            producer_id: int = ...,
            transaction_state: str = ...,
        ) -> None: ...

    throttle_time_ms: int
    error_code: int
    unknown_state_filters: list[str]
    transaction_states: list[TransactionState]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        unknown_state_filters: list[str] = ...,
        transaction_states: list[TransactionState] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class MetadataResponse:
    class MetadataResponseBroker:
        node_id: int
        host: str
        port: int
        rack: str | None
        def __init__(
            self,
            *,
            version: int | None = None,
            node_id: int = ...,
            host: str = ...,
            port: int = ...,
            rack: str | None = ...,
        ) -> None: ...

    class MetadataResponseTopic:
        class MetadataResponsePartition:
            error_code: int
            partition_index: int
            leader_id: int
            leader_epoch: int
            replica_nodes: list[int]
            isr_nodes: list[int]
            offline_replicas: list[int]
            def __init__(
                self,
                *,
                version: int | None = None,
                error_code: int = ...,
                partition_index: int = ...,
                leader_id: int = ...,
                leader_epoch: int = ...,
                replica_nodes: list[int] = ...,
                isr_nodes: list[int] = ...,
                offline_replicas: list[int] = ...,
            ) -> None: ...

        error_code: int
        name: str | None
        topic_id: uuid.UUID | None
        is_internal: bool
        partitions: list[MetadataResponsePartition]
        authorized_operations: set[int] | None
        def __init__(
            self,
            *,
            version: int | None = None,
            error_code: int = ...,
            name: str | None = ...,
            topic_id: uuid.UUID | None = ...,
            is_internal: bool = ...,
            partitions: list[MetadataResponsePartition] = ...,
            authorized_operations: set[int] | None = ...,
        ) -> None: ...

    throttle_time_ms: int
    brokers: list[MetadataResponseBroker]
    cluster_id: str | None
    controller_id: int
    topics: list[MetadataResponseTopic]
    authorized_operations: set[int] | None
    error_code: int
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        brokers: list[MetadataResponseBroker] = ...,
        cluster_id: str | None = ...,
        controller_id: int = ...,
        topics: list[MetadataResponseTopic] = ...,
        authorized_operations: set[int] | None = ...,
        error_code: int = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class OffsetCommitResponse:
    class OffsetCommitResponseTopic:
        class OffsetCommitResponsePartition:
            partition_index: int
            error_code: int
            def __init__(
                self,
                *,
                version: int | None = None,
                partition_index: int = ...,
                error_code: int = ...,
            ) -> None: ...

        name: str
        topic_id: uuid.UUID | None
        partitions: list[OffsetCommitResponsePartition]
        def __init__(
            self,
            *,
            version: int | None = None,
            name: str = ...,
            topic_id: uuid.UUID | None = ...,
            partitions: list[OffsetCommitResponsePartition] = ...,
        ) -> None: ...

    throttle_time_ms: int
    topics: list[OffsetCommitResponseTopic]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        topics: list[OffsetCommitResponseTopic] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class OffsetDeleteResponse:
    class OffsetDeleteResponseTopic:
        class OffsetDeleteResponsePartition:
            partition_index: int
            error_code: int
            def __init__(
                self,
                *,
                version: int | None = None,
                partition_index: int = ...,
                error_code: int = ...,
            ) -> None: ...

        name: str
        partitions: list[OffsetDeleteResponsePartition]
        def __init__(
            self,
            *,
            version: int | None = None,
            name: str = ...,
            partitions: list[OffsetDeleteResponsePartition] = ...,
        ) -> None: ...

    error_code: int
    throttle_time_ms: int
    topics: list[OffsetDeleteResponseTopic]
    def __init__(
        self,
        *,
        version: int,
        error_code: int = ...,
        throttle_time_ms: int = ...,
        topics: list[OffsetDeleteResponseTopic] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class OffsetFetchResponse:
    class OffsetFetchResponseTopic:
        class OffsetFetchResponsePartition:
            partition_index: int
            committed_offset: int
            committed_leader_epoch: int
            metadata: str | None
            error_code: int
            def __init__(
                self,
                *,
                version: int | None = None,
                partition_index: int = ...,
                committed_offset: int = ...,
                committed_leader_epoch: int = ...,
                metadata: str | None = ...,
                error_code: int = ...,
            ) -> None: ...

        name: str
        partitions: list[OffsetFetchResponsePartition]
        def __init__(
            self,
            *,
            version: int | None = None,
            name: str = ...,
            partitions: list[OffsetFetchResponsePartition] = ...,
        ) -> None: ...

    class OffsetFetchResponseGroup:
        class OffsetFetchResponseTopics:
            class OffsetFetchResponsePartitions:
                partition_index: int
                committed_offset: int
                committed_leader_epoch: int
                metadata: str | None
                error_code: int
                def __init__(
                    self,
                    *,
                    version: int | None = None,
                    partition_index: int = ...,
                    committed_offset: int = ...,
                    committed_leader_epoch: int = ...,
                    metadata: str | None = ...,
                    error_code: int = ...,
                ) -> None: ...

            name: str
            topic_id: uuid.UUID | None
            partitions: list[OffsetFetchResponsePartitions]
            def __init__(
                self,
                *,
                version: int | None = None,
                name: str = ...,
                topic_id: uuid.UUID | None = ...,
                partitions: list[OffsetFetchResponsePartitions] = ...,
            ) -> None: ...

        group_id: str
        topics: list[OffsetFetchResponseTopics]
        error_code: int
        def __init__(
            self,
            *,
            version: int | None = None,
            group_id: str = ...,
            topics: list[OffsetFetchResponseTopics] = ...,
            error_code: int = ...,
        ) -> None: ...

    throttle_time_ms: int
    topics: list[OffsetFetchResponseTopic]
    error_code: int
    groups: list[OffsetFetchResponseGroup]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        topics: list[OffsetFetchResponseTopic] = ...,
        error_code: int = ...,
        groups: list[OffsetFetchResponseGroup] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class OffsetForLeaderEpochResponse:
    class OffsetForLeaderTopicResult:
        class EpochEndOffset:
            error_code: int
            partition: int
            leader_epoch: int
            end_offset: int
            def __init__(
                self,
                *,
                version: int | None = None,
                error_code: int = ...,
                partition: int = ...,
                leader_epoch: int = ...,
                end_offset: int = ...,
            ) -> None: ...

        topic: str
        partitions: list[EpochEndOffset]
        def __init__(
            self,
            *,
            version: int | None = None,
            topic: str = ...,
            partitions: list[EpochEndOffset] = ...,
        ) -> None: ...

    throttle_time_ms: int
    topics: list[OffsetForLeaderTopicResult]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        topics: list[OffsetForLeaderTopicResult] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class ProduceResponse:
    class TopicProduceResponse:
        class PartitionProduceResponse:
            class BatchIndexAndErrorMessage:
                batch_index: int
                batch_index_error_message: str | None
                def __init__(
                    self,
                    *,
                    version: int | None = None,
                    batch_index: int = ...,
                    batch_index_error_message: str | None = ...,
                ) -> None: ...

            class LeaderIdAndEpoch:
                leader_id: int
                leader_epoch: int
                def __init__(
                    self,
                    *,
                    version: int | None = None,
                    leader_id: int = ...,
                    leader_epoch: int = ...,
                ) -> None: ...

            index: int
            error_code: int
            base_offset: int
            log_append_time_ms: int
            log_start_offset: int
            record_errors: list[BatchIndexAndErrorMessage]
            error_message: str | None
            current_leader: LeaderIdAndEpoch
            def __init__(
                self,
                *,
                version: int | None = None,
                index: int = ...,
                error_code: int = ...,
                base_offset: int = ...,
                log_append_time_ms: int = ...,
                log_start_offset: int = ...,
                record_errors: list[BatchIndexAndErrorMessage] = ...,
                error_message: str | None = ...,
                current_leader: LeaderIdAndEpoch = ...,
            ) -> None: ...

        name: str
        topic_id: uuid.UUID | None
        partition_responses: list[PartitionProduceResponse]
        def __init__(
            self,
            *,
            version: int | None = None,
            name: str = ...,
            topic_id: uuid.UUID | None = ...,
            partition_responses: list[PartitionProduceResponse] = ...,
        ) -> None: ...

    class NodeEndpoint:
        node_id: int
        host: str
        port: int
        rack: str | None
        def __init__(
            self,
            *,
            version: int | None = None,
            node_id: int = ...,
            host: str = ...,
            port: int = ...,
            rack: str | None = ...,
        ) -> None: ...

    responses: list[TopicProduceResponse]
    throttle_time_ms: int
    node_endpoints: list[NodeEndpoint]
    def __init__(
        self,
        *,
        version: int,
        responses: list[TopicProduceResponse] = ...,
        throttle_time_ms: int = ...,
        node_endpoints: list[NodeEndpoint] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class SaslAuthenticateResponse:
    error_code: int
    error_message: str | None
    auth_bytes: bytes | bytearray | memoryview
    session_lifetime_ms: int
    def __init__(
        self,
        *,
        version: int,
        error_code: int = ...,
        error_message: str | None = ...,
        auth_bytes: bytes | bytearray | memoryview = ...,
        session_lifetime_ms: int = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class SaslHandshakeResponse:
    error_code: int
    mechanisms: list[str]
    def __init__(
        self,
        *,
        version: int,
        error_code: int = ...,
        mechanisms: list[str] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class SyncGroupResponse:
    throttle_time_ms: int
    error_code: int
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes | bytearray | memoryview
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        error_code: int = ...,
        protocol_type: str | None = ...,
        protocol_name: str | None = ...,
        assignment: bytes | bytearray | memoryview = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class TxnOffsetCommitResponse:
    class TxnOffsetCommitResponseTopic:
        class TxnOffsetCommitResponsePartition:
            partition_index: int
            error_code: int
            def __init__(
                self,
                *,
                version: int | None = None,
                partition_index: int = ...,
                error_code: int = ...,
            ) -> None: ...

        name: str
        partitions: list[TxnOffsetCommitResponsePartition]
        def __init__(
            self,
            *,
            version: int | None = None,
            name: str = ...,
            partitions: list[TxnOffsetCommitResponsePartition] = ...,
        ) -> None: ...

    throttle_time_ms: int
    topics: list[TxnOffsetCommitResponseTopic]
    def __init__(
        self,
        *,
        version: int,
        throttle_time_ms: int = ...,
        topics: list[TxnOffsetCommitResponseTopic] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...

class WriteTxnMarkersResponse:
    class WritableTxnMarkerResult:
        class WritableTxnMarkerTopicResult:
            class WritableTxnMarkerPartitionResult:
                partition_index: int
                error_code: int
                def __init__(
                    self,
                    *,
                    version: int | None = None,
                    partition_index: int = ...,
                    error_code: int = ...,
                ) -> None: ...

            name: str
            partitions: list[WritableTxnMarkerPartitionResult]
            def __init__(
                self,
                *,
                version: int | None = None,
                name: str = ...,
                partitions: list[WritableTxnMarkerPartitionResult] = ...,
            ) -> None: ...

        producer_id: int
        topics: list[WritableTxnMarkerTopicResult]
        def __init__(
            self,
            *,
            version: int | None = None,
            producer_id: int = ...,
            topics: list[WritableTxnMarkerTopicResult] = ...,
        ) -> None: ...

    markers: list[WritableTxnMarkerResult]
    def __init__(
        self,
        *,
        version: int,
        markers: list[WritableTxnMarkerResult] = ...,
    ) -> None: ...
    @property
    def version(self) -> int | None: ...
    def encode(self, *args: Any, **kwargs: Any) -> bytes: ...
