"""ListOffsets: earliest (-2), latest (-1) and by timestamp.

The max-timestamp spec (-3, KIP-734) and the tiered-storage specs get
INVALID_REQUEST.  (Committed consumer offsets are the groups' business:
`kfs_core.server.apis.groups`.)

From v4 a partition's ``current_leader_epoch`` older than this daemon's
lease epoch answers FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH;
an answer carries this daemon's epoch.  A partition another daemon serves
is NOT_LEADER_OR_FOLLOWER, from the log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kfs_core.security.acls import Operation
from kfs_core.server.apis.access import topics_rule
from kfs_core.server.apis.base import Api, Refused, error_code_for, log_failure
from kfs_core.server.apis.error_bodies import Mirror, schema_error_body
from kfs_core.server.protocol.errors import ErrorCode
from kfs_core.server.protocol.messages import ApiKey, ListOffsetsRequest
from kfs_core.server.protocol.responses import ListOffsetsResponse

if TYPE_CHECKING:
    from kfs_core.server.apis.context import RequestContext
    from kfs_core.server.protocol import Request
    from kfs_core.server.protocol.bodies import ListOffsetsRequestBody

__all__ = ["APIS", "LIST_OFFSETS"]

EARLIEST_TIMESTAMP: Final = -2  # the log start offset (-1 is the high watermark)


async def handle(
    context: RequestContext, request: Request[ListOffsetsRequestBody]
) -> ListOffsetsResponse:
    answer = ListOffsetsResponse.ListOffsetsTopicResponse
    partition_answer = answer.ListOffsetsPartitionResponse
    topics = []
    for topic in request.body.topics:
        partitions = []
        for p in topic.partitions:
            code, offset, timestamp = ErrorCode.NONE, -1, -1
            try:
                epoch_error = context.leader_epoch_error(
                    topic.name, p.partition_index, getattr(p, "current_leader_epoch", -1)
                )
                if epoch_error != ErrorCode.NONE:
                    raise Refused(epoch_error, f"leader epoch: {epoch_error.name}")
                if p.timestamp < EARLIEST_TIMESTAMP:
                    # -3 (max timestamp, KIP-734) and the tiered-storage specs.
                    raise Refused(
                        ErrorCode.INVALID_REQUEST,
                        f"ListOffsets timestamp {p.timestamp} is not supported",
                    )
                found = await context.log.list_offsets(topic.name, p.partition_index, p.timestamp)
                offset, timestamp = found.offset, found.timestamp
            except Exception as exc:  # noqa: BLE001 - any failure is this partition's error code
                code = error_code_for(exc)
                log_failure(f"list offsets of {topic.name}-{p.partition_index}", exc, code)
            context.count_error(ApiKey.LIST_OFFSETS, code)
            partitions.append(
                partition_answer(
                    partition_index=p.partition_index,
                    error_code=code,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=context.local_epoch(topic.name, p.partition_index)
                    if code == ErrorCode.NONE
                    else -1,
                )
            )
        topics.append(answer(name=topic.name, partitions=partitions))
    return ListOffsetsResponse(version=request.api_version, throttle_time_ms=0, topics=topics)


error_body = schema_error_body(
    ListOffsetsResponse,
    {
        "topics": Mirror(
            "topics",
            {"name": "name"},
            {
                "partitions": Mirror(
                    "partitions",
                    {"partition_index": "partition_index"},
                    {"timestamp": -1, "offset": -1},
                )
            },
        )
    },
)


# v0 (offset arrays) is gone from the spec.  librdkafka sends <= 7;
# kafka-python would send 11, but v8+ only add tiered-storage offset specs
# (-4, -5, -6) and a timeout, none of which KFS implements.
LIST_OFFSETS: Final[Api[ListOffsetsRequestBody, ListOffsetsResponse]] = Api(
    ApiKey.LIST_OFFSETS,
    ListOffsetsRequest,
    ListOffsetsResponse,
    (1, 7),
    handle,
    error_body,
    authorize=topics_rule("topics", Operation.DESCRIBE, "topics"),
)

APIS: Final = (LIST_OFFSETS,)
