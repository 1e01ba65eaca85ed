"""Every Kafka API the daemon serves, one module per API family, registered once here.

`REGISTRY` maps each API key to its `Api`: request and response classes,
the version range KFS speaks, the handler and the error body.  The server
decodes requests against its version table (`SUPPORTED_VERSIONS`), ApiVersions
answers from it, and the broker dispatches through it.  Each family module
lists its `Api` declarations in ``APIS``; adding an API to a family is one
declaration there, a new family is one line below.

    module          APIs
    produce         Produce
    fetch           Fetch
    offsets         ListOffsets, OffsetForLeaderEpoch
    metadata        Metadata
    topics          CreateTopics, DeleteTopics, CreatePartitions,
                    DescribeConfigs, AlterConfigs, IncrementalAlterConfigs
    groups          FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
                    LeaveGroup, OffsetCommit, OffsetFetch, ListGroups,
                    DescribeGroups, DeleteGroups, OffsetDelete
    cluster         DescribeCluster, DescribeLogDirs, DeleteRecords
    producer_ids    InitProducerId (idempotent and transactional producers)
    transactions    AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit
    sasl            SaslHandshake, SaslAuthenticate
    acls            DescribeAcls, CreateAcls, DeleteAcls
    users           DescribeUserScramCredentials, AlterUserScramCredentials,
                    DescribeClientQuotas
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
    transactions,
    users,
)
from kfs_core.server.apis.base import Api
from kfs_core.server.apis.error_bodies import Derived, SchemaErrorBody, schema_error_body
from kfs_core.server.protocol import MESSAGES, ErrorCode, VersionTable
from kfs_core.server.protocol import api_versions_body as _api_versions_body
from kfs_core.server.protocol.messages import ApiKey, ApiVersionsRequest
from kfs_core.server.protocol.responses import ApiVersionsResponse

if TYPE_CHECKING:
    from kfs_core.server.apis.context import BrokerOptions, RequestContext
    from kfs_core.server.protocol import Request
    from kfs_core.server.protocol.bodies import ResponseBody

__all__ = ["REGISTRY", "SUPPORTED_VERSIONS", "Api", "api_versions_body"]


def api_versions_body(
    api_version: int,
    error_code: ErrorCode = ErrorCode.NONE,
    table: VersionTable | None = None,
) -> ApiVersionsResponse:
    """The ApiVersions response body listing ``table`` (by default every registered API)."""
    return _api_versions_body(
        api_version, SUPPORTED_VERSIONS if table is None else table, error_code
    )


async def _api_versions(context: RequestContext, request: Request[Any]) -> ApiVersionsResponse:
    return api_versions_body(request.api_version)


def _version_rows(request: Request[Any], _: BrokerOptions) -> list[ApiVersionsResponse.ApiVersion]:
    return api_versions_body(request.api_version).api_keys


# An error still lists the versions, so the client can pick one and retry.
_api_versions_error = schema_error_body(ApiVersionsResponse, {"api_keys": Derived(_version_rows)})


# v4 is v3 on the wire; kafka-python opens with v4, librdkafka with v3.
API_VERSIONS = Api(
    ApiKey.API_VERSIONS,
    ApiVersionsRequest,
    ApiVersionsResponse,
    (0, 4),
    _api_versions,
    _api_versions_error,
)


def _collect(
    *families: tuple[Api[Any, ResponseBody], ...],
) -> dict[ApiKey, Api[Any, ResponseBody]]:
    table: dict[ApiKey, Api[Any, ResponseBody]] = {}
    for api in (*(api for family in families for api in family), API_VERSIONS):
        if api.key in table:
            raise ValueError(f"{api.key.name} is registered twice")
        if api.messages != MESSAGES[api.key]:
            raise ValueError(f"{api.key.name} is registered with another API's messages")
        if (
            isinstance(api.error_body, SchemaErrorBody)
            and api.error_body.response is not api.response
        ):
            raise ValueError(f"{api.key.name}'s error body builds another API's response")
        table[api.key] = api
    return table


REGISTRY: Final[Mapping[ApiKey, Api[Any, ResponseBody]]] = MappingProxyType(
    _collect(
        produce.APIS,
        fetch.APIS,
        offsets.APIS,
        metadata.APIS,
        topics.APIS,
        cluster.APIS,
        groups.APIS,
        producer_ids.APIS,
        transactions.APIS,
        sasl.APIS,
        acls.APIS,
        users.APIS,
    )
)

# The versions KFS serves, per API: (min, max), what requests are decoded
# against.  A client uses min(its max, our max), so each max is the highest
# version either client sends - librdkafka 2.16 (confluent-kafka;
# INTRODUCTION.md and its rd_kafka_broker_ApiVersion_supported() calls) or
# kafka-python 3.0 (its max_version= arguments, else its spec's maximum) -
# unless a higher version means something KFS does not implement; each
# registration says why.  Each min is the lowest version the spec still
# defines (Kafka 4.0 dropped older ones) that can carry what KFS stores.
# tests/server/test_protocol_clients.py checks what both clients pick.
SUPPORTED_VERSIONS: Final[VersionTable] = MappingProxyType(
    {key: api.versions for key, api in REGISTRY.items()}
)
