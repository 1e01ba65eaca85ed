"""Every Kafka API the daemon serves, one module per API family, registered once here.

`REGISTRY` maps each API key to its `Api`: request and response classes,
the version range KFS speaks, the handler and the error body.  The protocol
layer derives its version table and message classes from it, ApiVersions
answers from it, and the broker dispatches through it.  Each family module
lists its `Api` declarations in ``APIS``; adding an API to a family is one
declaration there, a new family is one line below.

    module          APIs
    produce         Produce
    fetch           Fetch
    offsets         ListOffsets
    metadata        Metadata
    topics          CreateTopics, DeleteTopics, CreatePartitions,
                    DescribeConfigs, AlterConfigs, IncrementalAlterConfigs
    groups          FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
                    LeaveGroup, OffsetCommit, OffsetFetch, ListGroups,
                    DescribeGroups, DeleteGroups, OffsetDelete
    cluster         DescribeCluster, DescribeLogDirs, DeleteRecords
    producer_ids    InitProducerId; AddPartitionsToTxn, AddOffsetsToTxn,
                    EndTxn, TxnOffsetCommit (refused: no transactions)
    sasl            SaslHandshake, SaslAuthenticate
    acls            DescribeAcls, CreateAcls, DeleteAcls
    users           DescribeUserScramCredentials, AlterUserScramCredentials
    (here)          ApiVersions: the table itself
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from kfs_core.server.apis import (
    acls,
    cluster,
    fetch,
    groups,
    metadata,
    offsets,
    produce,
    producer_ids,
    sasl,
    topics,
    users,
)
from kfs_core.server.apis.base import Api
from kfs_core.server.protocol_errors import ErrorCode
from kfs_core.server.protocol_messages import ApiKey, ApiVersionsRequest, ApiVersionsResponse

if TYPE_CHECKING:
    from kfs_core.server.broker import Broker, BrokerOptions
    from kfs_core.server.protocol import Request

__all__ = ["REGISTRY", "SUPPORTED_VERSIONS", "Api", "api_versions_body"]


def api_versions_body(
    api_version: int,
    error_code: ErrorCode = ErrorCode.NONE,
    table: Mapping[int, tuple[int, int]] | None = None,
) -> Any:
    """The ApiVersions response body listing ``table`` (by default every registered API)."""
    versions = SUPPORTED_VERSIONS if table is None else table
    return ApiVersionsResponse(
        version=api_version,
        error_code=int(error_code),
        api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=int(key), min_version=low, max_version=high)
            for key, (low, high) in sorted(versions.items())
        ],
        throttle_time_ms=0,
    )


async def _api_versions(broker: Broker, request: Request) -> Any:
    return api_versions_body(request.api_version)


def _api_versions_error(
    request: Request, code: ErrorCode, message: str | None, _: BrokerOptions
) -> Any:
    return api_versions_body(request.api_version, code)


# v4 is v3 on the wire; kafka-python opens with v4, librdkafka with v3.
API_VERSIONS = Api(
    ApiKey.API_VERSIONS,
    ApiVersionsRequest,
    ApiVersionsResponse,
    (0, 4),
    _api_versions,
    _api_versions_error,
)


def _collect(*families: tuple[Api, ...]) -> dict[ApiKey, Api]:
    table: dict[ApiKey, Api] = {}
    for api in (*(api for family in families for api in family), API_VERSIONS):
        if api.key in table:
            raise ValueError(f"{api.key.name} is registered twice")
        table[api.key] = api
    return table


REGISTRY: Final[Mapping[ApiKey, Api]] = MappingProxyType(
    _collect(
        produce.APIS,
        fetch.APIS,
        offsets.APIS,
        metadata.APIS,
        topics.APIS,
        cluster.APIS,
        groups.APIS,
        producer_ids.APIS,
        sasl.APIS,
        acls.APIS,
        users.APIS,
    )
)

# The versions KFS serves, per API: (min, max).
SUPPORTED_VERSIONS: Final[Mapping[int, tuple[int, int]]] = MappingProxyType(
    {key: api.versions for key, api in REGISTRY.items()}
)
