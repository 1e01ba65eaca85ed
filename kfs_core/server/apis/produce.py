"""Produce: acks 0, 1 and -1, appended through the partition log.

All acks values are durable per the WAL mode before the answer; acks=0 gets
no answer; any other acks value is INVALID_REQUIRED_ACKS.  Per-partition
error codes come from the log's typed errors.

Ordering: `start` runs in request order on a connection.  It does the topic
lookups and opens the partitions, then starts one `LogManager.append_many`
for all of them, which assigns offsets without waiting: appends of
pipelined requests reach the log in request order while their WAL fsyncs
overlap (group commit).  The request frame is handed over with it
(``owned``): offsets are assigned in the frame and the log keeps views of
it, no copies.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final

from kfs_core.errors import LogError
from kfs_core.log.log_manager import AppendResult
from kfs_core.security.acls import Operation
from kfs_core.server.apis.access import topics_rule
from kfs_core.server.apis.base import Api, error_code_for, log_failure, message_of
from kfs_core.server.apis.error_bodies import Mirror, schema_error_body
from kfs_core.server.protocol.errors import ErrorCode
from kfs_core.server.protocol.messages import ApiKey, ProduceRequest
from kfs_core.server.protocol.responses import ProduceResponse

if TYPE_CHECKING:
    from kfs_core.server.apis.context import RequestContext
    from kfs_core.server.protocol import Request
    from kfs_core.server.protocol.bodies import ProduceRequestBody

__all__ = ["APIS", "PRODUCE"]

Buffer = bytes | bytearray | memoryview

VALID_ACKS: Final = (0, 1, -1)

# Each topic of a produce request, and each of its partitions with an error
# decided up front or (an int) the position of its append in `append_many`.
_ProducePlan = list[tuple[str, list[tuple[int, ErrorCode | int]]]]


async def start(
    context: RequestContext, request: Request[ProduceRequestBody]
) -> asyncio.Future[ProduceResponse]:
    """Resolve the topics (auto-creating) and open the partitions, then start the appends.

    Everything that may wait happens here, before the next request on the
    connection is read; the appends themselves then start in request
    order and assign their offsets without waiting (unless the memory
    pool is full, and then its waiters are served in order too).
    """
    body = request.body
    options = context.options
    timeout_s = max(body.timeout_ms, 0) / 1000
    acks_ok = body.acks in VALID_ACKS
    plan: _ProducePlan = []
    appends: list[tuple[str, int, Buffer]] = []
    for topic_data in body.topic_data:
        name = topic_data.name
        outcomes: list[tuple[int, ErrorCode | int]] = []
        plan.append((name, outcomes))
        topic_error = ErrorCode.NONE if acks_ok else ErrorCode.INVALID_REQUIRED_ACKS
        if topic_error == ErrorCode.NONE:
            try:
                if options.auto_create_topics and context.may_create_topic(name):
                    await context.topics.lookup_or_create(name, options.default_partitions)
                elif await context.topics.lookup(name) is None:
                    topic_error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            except Exception as exc:  # noqa: BLE001 - any failure is this topic's error code
                topic_error = error_code_for(exc)
                log_failure(f"produce to topic {name!r}", exc, topic_error)
        for partition_data in topic_data.partition_data:
            index, records = partition_data.index, partition_data.records
            if topic_error != ErrorCode.NONE:
                outcomes.append((index, topic_error))
            elif records is None:
                outcomes.append((index, ErrorCode.CORRUPT_MESSAGE))
            else:
                context.metrics.produce_bytes.inc(len(records))
                outcomes.append((index, len(appends)))  # its place among the appends
                appends.append((name, index, records))
    if appends:
        await context.log.open_partitions(((n, i) for n, i, _ in appends), timeout_s)
    return asyncio.ensure_future(_finish(context, request, plan, appends, timeout_s))


async def _finish(
    context: RequestContext,
    request: Request[ProduceRequestBody],
    plan: _ProducePlan,
    appends: list[tuple[str, int, Buffer]],
    timeout_s: float,
) -> ProduceResponse:
    results: list[AppendResult | Exception] = []
    if appends:
        # The request frame is ours: offsets are assigned in it, no copy.
        try:
            results = await context.log.append_many(appends, timeout_s=timeout_s, owned=True)
        except LogError as exc:
            # Refused as a whole before anything was stored (the log is closing, has
            # failed, or its WAL disk is full): every partition answers its code.
            results = [exc] * len(appends)
    answer = ProduceResponse.TopicProduceResponse
    partition_answer = answer.PartitionProduceResponse
    responses = []
    for name, outcomes in plan:
        partitions = []
        for index, outcome in outcomes:
            base_offset, append_time, start_offset, message = -1, -1, -1, None
            if isinstance(outcome, ErrorCode):
                code = outcome
            else:
                result = results[outcome]
                if isinstance(result, Exception):
                    code = error_code_for(result)
                    message = message_of(result)
                    log_failure(f"produce to {name}-{index}", result, code)
                else:
                    code = ErrorCode.NONE
                    base_offset = result.base_offset
                    append_time = result.log_append_time
                    start_offset = result.log_start_offset
                    context.notifier.notify(name, index)
            context.count_error(ApiKey.PRODUCE, code)
            partitions.append(
                partition_answer(
                    index=index,
                    error_code=code,
                    base_offset=base_offset,
                    log_append_time_ms=append_time,
                    log_start_offset=start_offset,
                    record_errors=[],
                    error_message=message,
                )
            )
        responses.append(answer(name=name, partition_responses=partitions))
    return ProduceResponse(version=request.api_version, responses=responses, throttle_time_ms=0)


error_body = schema_error_body(
    ProduceResponse,
    {
        "responses": Mirror(
            "topic_data",
            {"name": "name"},
            {
                "partition_responses": Mirror(
                    "partition_data", {"index": "index"}, {"base_offset": -1}
                )
            },
        )
    },
)


# v3 is the first to carry RecordBatch v2, the only format KFS stores.
# kafka-python sends <= 9, librdkafka <= 10; v10 only adds KIP-951 leader
# hints, meaningless on a single broker; v13 names topics by id.
PRODUCE: Final[Api[ProduceRequestBody, ProduceResponse]] = Api(
    ApiKey.PRODUCE,
    ProduceRequest,
    ProduceResponse,
    (3, 9),
    None,
    error_body,
    start=start,
    authorize=topics_rule("topic_data", Operation.WRITE, "responses"),
)

APIS: Final = (PRODUCE,)
