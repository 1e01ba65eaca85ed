"""The consumer-group APIs, answered from the group coordinator (`kfs_core.groups`).

FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit
and OffsetFetch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from kfs_core.server.apis.base import Api
from kfs_core.server.protocol_errors import ErrorCode
from kfs_core.server.protocol_messages import (
    ApiKey,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

if TYPE_CHECKING:
    from kfs_core.server.broker import Broker, BrokerOptions
    from kfs_core.server.protocol import Request

__all__ = [
    "APIS",
    "FIND_COORDINATOR",
    "HEARTBEAT",
    "JOIN_GROUP",
    "LEAVE_GROUP",
    "OFFSET_COMMIT",
    "OFFSET_FETCH",
    "SYNC_GROUP",
]


async def _not_available(broker: Broker, request: Request) -> Any:
    return broker.error_response(
        request,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        "KFS has no group coordinator yet; assign partitions instead",
    )


def _find_coordinator_error(
    request: Request, code: ErrorCode, message: str | None, _: BrokerOptions
) -> Any:
    if request.api_version >= 4:
        coordinator = FindCoordinatorResponse.Coordinator
        return request.response(
            throttle_time_ms=0,
            coordinators=[
                coordinator(
                    key=k, node_id=-1, host="", port=-1, error_code=int(code), error_message=message
                )
                for k in request.body.coordinator_keys
            ],
        )
    return request.response(
        throttle_time_ms=0,
        error_code=int(code),
        error_message=message,
        node_id=-1,
        host="",
        port=-1,
    )


def _offset_commit_error(
    request: Request, code: ErrorCode, message: str | None, _: BrokerOptions
) -> Any:
    committed = OffsetCommitResponse.OffsetCommitResponseTopic
    return request.response(
        throttle_time_ms=0,
        topics=[
            committed(
                name=t.name,
                partitions=[
                    committed.OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=int(code)
                    )
                    for p in t.partitions
                ],
            )
            for t in request.body.topics
        ],
    )


def _offset_fetch_error(
    request: Request, code: ErrorCode, message: str | None, _: BrokerOptions
) -> Any:
    body = request.body
    if request.api_version >= 8:
        group = OffsetFetchResponse.OffsetFetchResponseGroup
        return request.response(
            throttle_time_ms=0,
            groups=[
                group(group_id=g.group_id, topics=[], error_code=int(code)) for g in body.groups
            ],
        )
    fetched = OffsetFetchResponse.OffsetFetchResponseTopic
    return request.response(
        throttle_time_ms=0,
        error_code=int(code),
        topics=[
            fetched(
                name=t.name,
                partitions=[
                    fetched.OffsetFetchResponsePartition(
                        partition_index=index,
                        committed_offset=-1,
                        metadata="",
                        error_code=int(code),
                    )
                    for index in t.partition_indexes
                ],
            )
            for t in body.topics or ()
        ],
    )


def _code_only_error(
    request: Request, code: ErrorCode, message: str | None, _: BrokerOptions
) -> Any:
    return request.response(throttle_time_ms=0, error_code=int(code))


# kafka-python uses v4 (batched keys) when offered, librdkafka <= 2; v5/v6
# add transaction-abortable errors and share-group keys.
FIND_COORDINATOR = Api(
    ApiKey.FIND_COORDINATOR,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    (0, 4),
    _not_available,
    _find_coordinator_error,
)
# kafka-python sends <= 7, librdkafka <= 5; v8/v9 are KIP-800 reasons and
# KIP-814 skipped assignments.
JOIN_GROUP = Api(
    ApiKey.JOIN_GROUP, JoinGroupRequest, JoinGroupResponse, (0, 7), _not_available, _code_only_error
)
HEARTBEAT = Api(
    ApiKey.HEARTBEAT, HeartbeatRequest, HeartbeatResponse, (0, 4), _not_available, _code_only_error
)
LEAVE_GROUP = Api(
    ApiKey.LEAVE_GROUP,
    LeaveGroupRequest,
    LeaveGroupResponse,
    (0, 5),
    _not_available,
    _code_only_error,
)
SYNC_GROUP = Api(
    ApiKey.SYNC_GROUP, SyncGroupRequest, SyncGroupResponse, (0, 5), _not_available, _code_only_error
)
# v9 is v8 plus KIP-848 member epochs (librdkafka 9, kafka-python 8); v10
# names topics by id.
OFFSET_COMMIT = Api(
    ApiKey.OFFSET_COMMIT,
    OffsetCommitRequest,
    OffsetCommitResponse,
    (2, 9),
    _not_available,
    _offset_commit_error,
)
OFFSET_FETCH = Api(
    ApiKey.OFFSET_FETCH,
    OffsetFetchRequest,
    OffsetFetchResponse,
    (1, 9),
    _not_available,
    _offset_fetch_error,
)

APIS: Final = (
    FIND_COORDINATOR,
    JOIN_GROUP,
    SYNC_GROUP,
    HEARTBEAT,
    LEAVE_GROUP,
    OFFSET_COMMIT,
    OFFSET_FETCH,
)
