"""Every Kafka API the daemon serves, one module per API family, registered once here.

`REGISTRY` maps each API key to its `Api`: request and response classes,
the version range KFS speaks, the handler and the error body.  The protocol
layer derives its version table and message classes from it, ApiVersions
answers from it, and the broker dispatches through it; adding an API is one
module (or one `Api` in a family's module) and one line below.

    module          APIs
    produce         Produce
    fetch           Fetch
    offsets         ListOffsets
    metadata        Metadata
    topics          CreateTopics, DeleteTopics, DescribeConfigs
    groups          FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
                    LeaveGroup, OffsetCommit, OffsetFetch
    producer_ids    InitProducerId
    (here)          ApiVersions: the table itself
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from kfs_core.server.apis import fetch, groups, metadata, offsets, produce, producer_ids, topics
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

REGISTRY: Final[Mapping[ApiKey, Api]] = MappingProxyType(
    {
        api.key: api
        for api in (
            produce.PRODUCE,
            fetch.FETCH,
            offsets.LIST_OFFSETS,
            metadata.METADATA,
            groups.OFFSET_COMMIT,
            groups.OFFSET_FETCH,
            groups.FIND_COORDINATOR,
            groups.JOIN_GROUP,
            groups.HEARTBEAT,
            groups.LEAVE_GROUP,
            groups.SYNC_GROUP,
            API_VERSIONS,
            topics.CREATE_TOPICS,
            topics.DELETE_TOPICS,
            producer_ids.INIT_PRODUCER_ID,
            topics.DESCRIBE_CONFIGS,
        )
    }
)

# The versions KFS serves, per API: (min, max).
SUPPORTED_VERSIONS: Final[Mapping[int, tuple[int, int]]] = MappingProxyType(
    {key: api.versions for key, api in REGISTRY.items()}
)
