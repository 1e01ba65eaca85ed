"""Fetch: long polls woken by appends, byte budgets as in KIP-74, no fetch sessions.

A fetch waits until ``min_bytes`` are available or ``max_wait_ms`` passes,
woken by `AppendNotifier` when a produce lands - no polling; ``max_bytes``
overall and per partition, whole batches only, at least one batch for the
first partition with data (KIP-74).  Read-committed is answered like
read-uncommitted with LSO = HW: there are no transactions.  No fetch sessions
(KIP-227): every response says session 0, which clients read as "send full
requests".

Leader epochs (v9+): a partition whose ``current_leader_epoch`` is older
than this daemon's lease epoch answers FENCED_LEADER_EPOCH, a newer one
UNKNOWN_LEADER_EPOCH, without reading.  From v12 a partition answering
NOT_LEADER_OR_FOLLOWER (the log's: another daemon serves it) or
FENCED_LEADER_EPOCH names its current leader, so the client need not wait
for a metadata refresh.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kfs_core.security.acls import Operation
from kfs_core.server.apis.access import topics_rule
from kfs_core.server.apis.base import Api, Refused, error_code_for, log_failure
from kfs_core.server.apis.error_bodies import Mirror, schema_error_body
from kfs_core.server.protocol.errors import ErrorCode
from kfs_core.server.protocol.framing import MAX_REQUEST_BYTES
from kfs_core.server.protocol.messages import ApiKey, FetchRequest
from kfs_core.server.protocol.responses import FetchResponse

if TYPE_CHECKING:
    from kfs_core.server.apis.context import RequestContext
    from kfs_core.server.protocol import Request
    from kfs_core.server.protocol.bodies import FetchRequestBody

__all__ = ["APIS", "FETCH", "trim_to_batches"]

Buffer = bytes | bytearray | memoryview

READ_COMMITTED: Final = 1
# base offset (int64) then batch length (int32): enough to walk batches.
_BATCH_PREFIX = struct.Struct(">qi")


# The first version whose partitions may carry current_leader (a tagged field).
_CURRENT_LEADER_FROM: Final = 12
_NAMES_LEADER: Final = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})


@dataclass(frozen=True, slots=True)
class _FetchTarget:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    epoch_error: ErrorCode = ErrorCode.NONE  # answered without reading unless NONE


def trim_to_batches(records: Buffer, limit: int) -> Buffer:
    """The longest prefix of whole record batches in ``records`` that fits in ``limit`` bytes."""
    view = memoryview(records)
    end = 0
    total = len(view)
    while end + _BATCH_PREFIX.size <= total:
        _, length = _BATCH_PREFIX.unpack_from(view, end)
        batch_end = end + _BATCH_PREFIX.size + length
        if length < 0 or batch_end > total or batch_end > limit:
            break
        end = batch_end
    return records if end == total else view[:end]


async def handle(context: RequestContext, request: Request[FetchRequestBody]) -> FetchResponse:
    body = request.body
    if getattr(body, "session_id", 0) != 0 or getattr(body, "session_epoch", -1) > 0:
        # We never hand out a session id, so nobody can hold one of ours.
        return FetchResponse(
            version=request.api_version,
            throttle_time_ms=0,
            error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
            session_id=0,
            responses=[],
        )
    read_committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
    max_bytes = body.max_bytes if body.max_bytes > 0 else MAX_REQUEST_BYTES
    targets = [
        _FetchTarget(
            topic.topic,
            p.partition,
            p.fetch_offset,
            max(1, min(p.partition_max_bytes, max_bytes)),
            context.leader_epoch_error(
                topic.topic, p.partition, getattr(p, "current_leader_epoch", -1)
            ),
        )
        for topic in body.topics
        for p in topic.partitions
    ]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(body.max_wait_ms, 0) / 1000
    keys = [(t.topic, t.partition) for t in targets]
    metrics, notifier = context.metrics, context.notifier
    with notifier.watch(keys) as woken:
        while True:
            # Cleared before reading: an append during the read wakes the wait below.
            woken.clear()
            answers, total, failed = await _read_once(
                context, targets, max_bytes, read_committed, request.api_version
            )
            remaining = deadline - loop.time()
            enough = total >= body.min_bytes or failed or not targets
            if enough or remaining <= 0 or notifier.stopping:
                break
            metrics.fetch_waiting.inc()
            try:
                await asyncio.wait_for(woken.wait(), remaining)
            except TimeoutError:
                break  # nothing new since the last read: answer with it
            finally:
                metrics.fetch_waiting.dec()
    metrics.fetch_bytes.inc(total)
    by_topic: dict[str, list[Any]] = {}
    for target, partition_answer in zip(targets, answers, strict=True):
        by_topic.setdefault(target.topic, []).append(partition_answer)
        context.count_error(ApiKey.FETCH, partition_answer.error_code)
    topic_answer = FetchResponse.FetchableTopicResponse
    return FetchResponse(
        version=request.api_version,
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[
            topic_answer(topic=name, partitions=partitions) for name, partitions in by_topic.items()
        ],
    )


def _discard_outcome(read: asyncio.Future[Any]) -> None:
    if not read.cancelled():
        read.exception()  # retrieved: asyncio logs no "exception was never retrieved"


async def _read_once(
    context: RequestContext,
    targets: Sequence[_FetchTarget],
    max_bytes: int,
    read_committed: bool,
    version: int,
) -> tuple[list[Any], int, bool]:
    """Read every partition in parallel, then apply the byte budget in request order.

    Returns the partition answers, the record bytes they carry, and
    whether any partition failed (a failure ends the long poll).
    """
    reads = [
        asyncio.ensure_future(
            context.log.read(
                t.topic, t.partition, t.offset, t.max_bytes, read_committed=read_committed
            )
            if t.epoch_error == ErrorCode.NONE
            else _refuse(t.epoch_error)
        )
        for t in targets
    ]
    if reads:
        try:
            await asyncio.wait(reads)
        except asyncio.CancelledError:
            # The client went away (or the long poll ended): the reads finish on
            # their own, and a failure of one (its topic deleted meanwhile) is
            # nobody's business any more.
            for read in reads:
                read.add_done_callback(_discard_outcome)
            raise
    answers: list[Any] = []
    total = 0
    failed = False
    data = FetchResponse.FetchableTopicResponse.PartitionData
    for target, read in zip(targets, reads, strict=True):
        code, high_watermark, log_start, stable = ErrorCode.NONE, -1, -1, -1
        records: Buffer = b""
        aborted: list[Any] | None = [] if read_committed else None
        try:
            result = read.result()
        except Exception as exc:  # noqa: BLE001 - any failure is this partition's error code
            code = error_code_for(exc)
            failed = True
            log_failure(f"fetch {target.topic}-{target.partition}@{target.offset}", exc, code)
        else:
            high_watermark, log_start = result.high_watermark, result.log_start_offset
            stable = result.stable_offset
            records = result.records
            if aborted is not None:
                aborted = [
                    data.AbortedTransaction(producer_id=t.producer_id, first_offset=t.first_offset)
                    for t in result.aborted
                ]
            if total and records:  # KIP-74: only the first partition with data may overshoot
                records = trim_to_batches(records, max_bytes - total)
            total += len(records)
        answer = data(
            partition_index=target.partition,
            error_code=code,
            high_watermark=high_watermark,
            last_stable_offset=stable,
            log_start_offset=log_start,
            aborted_transactions=aborted,
            preferred_read_replica=-1,
            records=records,
        )
        if code in _NAMES_LEADER and version >= _CURRENT_LEADER_FROM:
            leader = context.cluster.leader(target.topic, target.partition)
            answer.current_leader = data.LeaderIdAndEpoch(
                leader_id=leader.node_id, leader_epoch=leader.epoch
            )
        answers.append(answer)
    return answers, total, failed


async def _refuse(code: ErrorCode) -> Any:
    """A read that fails with ``code``: a partition refused before reading."""
    raise Refused(code, f"leader epoch: {code.name}")


error_body = schema_error_body(
    FetchResponse,
    {
        "session_id": 0,
        "responses": Mirror(
            "topics",
            {"topic": "topic"},
            {
                "partitions": Mirror(
                    "partitions",
                    {"partition_index": "partition"},
                    {
                        "high_watermark": -1,
                        "last_stable_offset": -1,
                        "log_start_offset": -1,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": b"",
                    },
                )
            },
        ),
    },
)


# v4 is the first whose responses carry RecordBatch v2 unconverted.
# kafka-python sends <= 12, librdkafka <= 16; v13+ names topics by id.
FETCH: Final[Api[FetchRequestBody, FetchResponse]] = Api(
    ApiKey.FETCH,
    FetchRequest,
    FetchResponse,
    (4, 12),
    handle,
    error_body,
    authorize=topics_rule("topics", Operation.READ, "responses"),
)

APIS: Final = (FETCH,)
