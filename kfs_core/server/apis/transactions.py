"""The transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit, WriteTxnMarkers.

They translate the wire messages for the transaction coordinator
(`kfs_core.groups.transactions`) and, for TxnOffsetCommit, the group
coordinator.  WriteTxnMarkers is the partition leader's half: another
daemon's coordinator (`kfs_core.server.markers`), or an operator aborting a
hanging transaction (``kafka-transactions.sh abort``), has this daemon
append markers to partitions it leads; it needs CLUSTER_ACTION on the
cluster, as in Kafka.  InitProducerId with a transactional id is served beside the
idempotent one (`kfs_core.server.apis.producer_ids`).  As Kafka does, a
client of an older version gets INVALID_PRODUCER_EPOCH where a newer one
gets PRODUCER_FENCED (KIP-588).  Authorization follows Kafka: WRITE on the
transactional id for every call, WRITE on each topic added, READ on the
group whose offsets are committed.

Versions: librdkafka sends AddPartitionsToTxn and AddOffsetsToTxn v0,
EndTxn <= 1 and TxnOffsetCommit <= 3; kafka-python (2.1+) at most v3 of
each.  AddPartitionsToTxn v4+ batches transactions for brokers; EndTxn
v5, AddOffsetsToTxn v4 and TxnOffsetCommit v4+ are KIP-890's transactions
v2, not offered.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Final

from kfs_core.errors import TransactionError, UnknownTopicOrPartition
from kfs_core.groups.coordinator import CommitRequest
from kfs_core.groups.offset_log import OFFSETS_TOPIC
from kfs_core.groups.txn_log import TxnState
from kfs_core.security.acls import Operation, ResourceType
from kfs_core.server.apis.access import GROUP_DENIED, Checker, Plan, split, topics_rule
from kfs_core.server.apis.base import Api, error_code_for, log_failure
from kfs_core.server.apis.error_bodies import ITEM, Mirror, schema_error_body
from kfs_core.server.markers import MARKER_TIMEOUT_S
from kfs_core.server.protocol.errors import ErrorCode
from kfs_core.server.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    ApiKey,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    ListTransactionsRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)
from kfs_core.server.protocol.responses import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    DescribeProducersResponse,
    DescribeTransactionsResponse,
    EndTxnResponse,
    ListTransactionsResponse,
    TxnOffsetCommitResponse,
    WriteTxnMarkersResponse,
)

if TYPE_CHECKING:
    from kfs_core.server.apis.context import RequestContext
    from kfs_core.server.protocol import Request

__all__ = [
    "ADD_OFFSETS_TO_TXN",
    "ADD_PARTITIONS_TO_TXN",
    "APIS",
    "DESCRIBE_PRODUCERS",
    "DESCRIBE_TRANSACTIONS",
    "END_TXN",
    "LIST_TRANSACTIONS",
    "TXN_OFFSET_COMMIT",
    "WRITE_TXN_MARKERS",
    "count_refusal",
]

log = logging.getLogger(__name__)

TXN_DENIED: Final = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def fenced_code(exc: BaseException, version: int, fenced_from: int) -> ErrorCode:
    """``exc``'s error code; PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below ``fenced_from``."""
    code = error_code_for(exc)
    if code == ErrorCode.PRODUCER_FENCED and version < fenced_from:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


#: (client address, API, error code) refusals already logged; bounded, oldest forgotten.
_LOGGED: OrderedDict[tuple[str, int, int], None] = OrderedDict()
_LOGGED_MAX = 4096


def count_refusal(
    context: RequestContext, api: ApiKey, what: str, exc: Exception, code: ErrorCode
) -> None:
    """Count a refusal; log it at INFO once per client, API and error (a bug: as a failure)."""
    context.count_error(api, code)
    if not isinstance(exc, TransactionError):
        log_failure(what, exc, code)
        return
    key = (context.client_host, int(api), int(code))
    if key in _LOGGED:
        _LOGGED.move_to_end(key)
        return
    _LOGGED[key] = None
    if len(_LOGGED) > _LOGGED_MAX:
        _LOGGED.popitem(last=False)
    log.info(
        "%s from %s refused: %s (%s); logged once per client",
        what,
        context.client_host or "-",
        code.name,
        exc,
    )


# --- AddPartitionsToTxn --------------------------------------------------------------------


async def _add_partitions(
    context: RequestContext, request: Request[Any]
) -> AddPartitionsToTxnResponse:
    body = request.body
    tid = body.v3_and_below_transactional_id
    wanted: list[tuple[str, int]] = []
    codes: dict[tuple[str, int], ErrorCode] = {}
    for topic in body.v3_and_below_topics or []:
        try:
            count = (await context.log.topic(topic.name)).partitions
        except UnknownTopicOrPartition:
            count = 0
        for partition in topic.partitions or []:
            key = (topic.name, partition)
            wanted.append(key)
            if not 0 <= partition < count:
                codes[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if codes:
        for key in wanted:
            codes.setdefault(key, ErrorCode.OPERATION_NOT_ATTEMPTED)
    else:
        code = ErrorCode.NONE
        try:
            await context.transactions.add_partitions(
                tid, body.v3_and_below_producer_id, body.v3_and_below_producer_epoch, wanted
            )
        except Exception as exc:  # noqa: BLE001 - every partition answers the refusal
            code = fenced_code(exc, request.api_version, 2)
            count_refusal(
                context, ApiKey.ADD_PARTITIONS_TO_TXN, f"AddPartitionsToTxn of {tid!r}", exc, code
            )
        codes = dict.fromkeys(wanted, code)
    result = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
    by_topic: dict[str, list[Any]] = {}
    for (name, partition), code in codes.items():
        by_topic.setdefault(name, []).append(
            result.AddPartitionsToTxnPartitionResult(
                partition_index=partition, partition_error_code=int(code)
            )
        )
    return AddPartitionsToTxnResponse(
        version=request.api_version,
        throttle_time_ms=0,
        results_by_topic_v3_and_below=[
            result(name=name, results_by_partition=parts) for name, parts in by_topic.items()
        ],
    )


_add_partitions_error = schema_error_body(
    AddPartitionsToTxnResponse,
    {
        "results_by_topic_v3_and_below": Mirror(
            "v3_and_below_topics",
            {"name": "name"},
            {"results_by_partition": Mirror("partitions", {"partition_index": ITEM})},
        )
    },
)


def _authorize_add_partitions(may: Checker, request: Request[Any]) -> Plan | None:
    """WRITE on the transactional id, then WRITE on each topic."""
    tid = request.body.v3_and_below_transactional_id or ""
    if not may(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return Plan(whole=TXN_DENIED)
    topics = request.body.v3_and_below_topics or []
    if all(may(Operation.WRITE, ResourceType.TOPIC, t.name) for t in topics):
        return None
    return Plan(whole=ErrorCode.TOPIC_AUTHORIZATION_FAILED)


ADD_PARTITIONS_TO_TXN: Final = Api(
    ApiKey.ADD_PARTITIONS_TO_TXN,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    (0, 3),
    _add_partitions,
    _add_partitions_error,
    authorize=_authorize_add_partitions,
)


# --- AddOffsetsToTxn ---------------------------------------------------------------------------


async def _add_offsets(context: RequestContext, request: Request[Any]) -> AddOffsetsToTxnResponse:
    body = request.body
    code = ErrorCode.NONE
    try:
        await context.known_offsets_topic()
        partition = context.offsets_partition(body.group_id)
        await context.transactions.add_partitions(
            body.transactional_id,
            body.producer_id,
            body.producer_epoch,
            [(OFFSETS_TOPIC, partition)],
        )
    except Exception as exc:  # noqa: BLE001 - the request's one error code
        code = fenced_code(exc, request.api_version, 2)
        count_refusal(
            context,
            ApiKey.ADD_OFFSETS_TO_TXN,
            f"AddOffsetsToTxn of {body.transactional_id!r}",
            exc,
            code,
        )
    return AddOffsetsToTxnResponse(
        version=request.api_version, throttle_time_ms=0, error_code=int(code)
    )


_add_offsets_error = schema_error_body(AddOffsetsToTxnResponse, {})


def _authorize_add_offsets(may: Checker, request: Request[Any]) -> Plan | None:
    """WRITE on the transactional id, READ on the group."""
    if not may(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.body.transactional_id):
        return Plan(whole=TXN_DENIED)
    if not may(Operation.READ, ResourceType.GROUP, request.body.group_id):
        return Plan(whole=GROUP_DENIED)
    return None


ADD_OFFSETS_TO_TXN: Final = Api(
    ApiKey.ADD_OFFSETS_TO_TXN,
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    (0, 3),
    _add_offsets,
    _add_offsets_error,
    authorize=_authorize_add_offsets,
)


# --- EndTxn ------------------------------------------------------------------------------------


async def _end_txn(context: RequestContext, request: Request[Any]) -> EndTxnResponse:
    body = request.body
    code = ErrorCode.NONE
    try:
        await context.transactions.end_txn(
            body.transactional_id, body.producer_id, body.producer_epoch, bool(body.committed)
        )
    except Exception as exc:  # noqa: BLE001 - the request's one error code
        code = fenced_code(exc, request.api_version, 2)
        count_refusal(context, ApiKey.END_TXN, f"EndTxn of {body.transactional_id!r}", exc, code)
    return EndTxnResponse(version=request.api_version, throttle_time_ms=0, error_code=int(code))


_end_txn_error = schema_error_body(EndTxnResponse, {})


def _authorize_transactional_id(may: Checker, request: Request[Any]) -> Plan | None:
    """WRITE on the request's transactional id."""
    if may(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.body.transactional_id):
        return None
    return Plan(whole=TXN_DENIED)


END_TXN: Final = Api(
    ApiKey.END_TXN,
    EndTxnRequest,
    EndTxnResponse,
    (0, 3),
    _end_txn,
    _end_txn_error,
    authorize=_authorize_transactional_id,
)


# --- TxnOffsetCommit ----------------------------------------------------------------------------


async def _txn_offset_commit(
    context: RequestContext, request: Request[Any]
) -> TxnOffsetCommitResponse:
    body = request.body
    requests = [
        CommitRequest(
            topic.name,
            p.partition_index,
            p.committed_offset,
            getattr(p, "committed_leader_epoch", -1),
            p.committed_metadata,
        )
        for topic in body.topics or []
        for p in topic.partitions or []
    ]
    try:
        await context.check_coordinator(body.group_id)
        outcomes: list[Any] = await context.groups.commit_transactional(
            body.group_id,
            requests,
            producer_id=body.producer_id,
            producer_epoch=body.producer_epoch,
            member_id=getattr(body, "member_id", "") or "",
            generation=getattr(body, "generation_id", -1),
            instance_id=getattr(body, "group_instance_id", None),
        )
    except Exception as exc:  # noqa: BLE001 - every partition answers the refusal
        outcomes = [exc] * len(requests)
    answer = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    by_topic: dict[str, list[Any]] = {}
    for req, outcome in zip(requests, outcomes, strict=True):
        code = ErrorCode.NONE
        if outcome is not None:
            code = fenced_code(outcome, request.api_version, 3)
            count_refusal(
                context,
                ApiKey.TXN_OFFSET_COMMIT,
                f"TxnOffsetCommit of {body.group_id!r}",
                outcome,
                code,
            )
        by_topic.setdefault(req.topic, []).append(
            answer.TxnOffsetCommitResponsePartition(
                partition_index=req.partition, error_code=int(code)
            )
        )
    return TxnOffsetCommitResponse(
        version=request.api_version,
        throttle_time_ms=0,
        topics=[answer(name=name, partitions=parts) for name, parts in by_topic.items()],
    )


_txn_offset_commit_error = schema_error_body(
    TxnOffsetCommitResponse,
    {
        "topics": Mirror(
            "topics",
            {"name": "name"},
            {"partitions": Mirror("partitions", {"partition_index": "partition_index"})},
        )
    },
)


def _authorize_txn_offset_commit(may: Checker, request: Request[Any]) -> Plan | None:
    """WRITE on the transactional id, READ on the group, READ on each topic."""
    body = request.body
    if not may(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id):
        return Plan(whole=TXN_DENIED)
    if not may(Operation.READ, ResourceType.GROUP, body.group_id):
        return Plan(whole=GROUP_DENIED)
    return split(
        request,
        "topics",
        lambda t: may(Operation.READ, ResourceType.TOPIC, t.name),
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        "topics",
    )


TXN_OFFSET_COMMIT: Final = Api(
    ApiKey.TXN_OFFSET_COMMIT,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    (0, 3),
    _txn_offset_commit,
    _txn_offset_commit_error,
    authorize=_authorize_txn_offset_commit,
)


# --- WriteTxnMarkers ----------------------------------------------------------------------------


async def _write_one_marker(
    context: RequestContext, marker: Any, topic: str, partition: int
) -> ErrorCode:
    commit = bool(marker.transaction_result)
    try:
        await context.log.write_marker(
            topic,
            partition,
            producer_id=marker.producer_id,
            producer_epoch=marker.producer_epoch,
            commit=commit,
            coordinator_epoch=marker.coordinator_epoch,
            timeout_s=MARKER_TIMEOUT_S,
        )
        if topic == OFFSETS_TOPIC:
            await context.groups.complete_transaction(partition, marker.producer_id, commit)
    except Exception as exc:  # noqa: BLE001 - the partition's error code
        code = error_code_for(exc)
        count_refusal(
            context,
            ApiKey.WRITE_TXN_MARKERS,
            f"the marker of producer {marker.producer_id} to {topic}-{partition}",
            exc,
            code,
        )
        return code
    return ErrorCode.NONE


async def _write_txn_markers(
    context: RequestContext, request: Request[Any]
) -> WriteTxnMarkersResponse:
    result = WriteTxnMarkersResponse.WritableTxnMarkerResult
    topic_result = result.WritableTxnMarkerTopicResult
    partition_result = topic_result.WritableTxnMarkerPartitionResult
    markers = []
    for marker in request.body.markers or []:
        wanted = [(t.name, p) for t in marker.topics or [] for p in t.partition_indexes or []]
        codes = await asyncio.gather(
            *(_write_one_marker(context, marker, topic, p) for topic, p in wanted)
        )
        by_topic: dict[str, list[Any]] = {}
        for (topic, p), code in zip(wanted, codes, strict=True):
            by_topic.setdefault(topic, []).append(
                partition_result(partition_index=p, error_code=int(code))
            )
        markers.append(
            result(
                producer_id=marker.producer_id,
                topics=[topic_result(name=n, partitions=ps) for n, ps in by_topic.items()],
            )
        )
    return WriteTxnMarkersResponse(version=request.api_version, markers=markers)


_write_txn_markers_error = schema_error_body(
    WriteTxnMarkersResponse,
    {
        "markers": Mirror(
            "markers",
            {"producer_id": "producer_id"},
            {
                "topics": Mirror(
                    "topics",
                    {"name": "name"},
                    {"partitions": Mirror("partition_indexes", {"partition_index": ITEM})},
                )
            },
        )
    },
)


def _authorize_write_txn_markers(may: Checker, request: Request[Any]) -> Plan | None:
    """CLUSTER_ACTION on the cluster (other daemons, and operators aborting a transaction)."""
    if may.cluster(Operation.CLUSTER_ACTION):
        return None
    return Plan(whole=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)


WRITE_TXN_MARKERS: Final = Api(
    ApiKey.WRITE_TXN_MARKERS,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
    (1, 2),
    _write_txn_markers,
    _write_txn_markers_error,
    authorize=_authorize_write_txn_markers,
)


# --- ListTransactions, DescribeTransactions, DescribeProducers (KIP-664) -----------------------


def _state_name(state: TxnState) -> str:
    return "".join(word.capitalize() for word in state.name.split("_"))


_STATES: Final = {_state_name(s): s for s in TxnState}


async def _list_transactions(
    context: RequestContext, request: Request[Any]
) -> ListTransactionsResponse:
    body = request.body
    wanted = list(body.state_filters or [])
    unknown = [name for name in wanted if name not in _STATES]
    states = {_STATES[name] for name in wanted if name in _STATES}
    producer_ids = set(body.producer_id_filters or [])
    min_duration = getattr(body, "duration_filter", -1)
    pattern_text = getattr(body, "transactional_id_pattern", None)
    code = ErrorCode.NONE
    listed: list[Any] = []
    try:
        pattern = re.compile(pattern_text) if pattern_text else None
    except re.error:
        code, pattern = ErrorCode.INVALID_REQUEST, None  # a pattern Python cannot read
    now = int(time.time() * 1000)
    if code == ErrorCode.NONE:
        for txn in context.transactions.transactions():
            if wanted and txn.state not in states:
                continue
            if producer_ids and txn.producer_id not in producer_ids:
                continue
            if min_duration >= 0 and (txn.start_ms < 0 or now - txn.start_ms < min_duration):
                continue
            if pattern is not None and not pattern.fullmatch(txn.transactional_id):
                continue
            listed.append(
                ListTransactionsResponse.TransactionState(
                    transactional_id=txn.transactional_id,
                    producer_id=txn.producer_id,
                    transaction_state=_state_name(txn.state),
                )
            )
    return ListTransactionsResponse(
        version=request.api_version,
        throttle_time_ms=0,
        error_code=int(code),
        unknown_state_filters=unknown,
        transaction_states=listed,
    )


def _visible_transactions(
    may: Checker, request: Request[Any], response: ListTransactionsResponse
) -> ListTransactionsResponse:
    """Only the transactional ids the principal may DESCRIBE, as Kafka lists them."""
    response.transaction_states = [
        t
        for t in response.transaction_states or []
        if may(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t.transactional_id)
    ]
    return response


LIST_TRANSACTIONS: Final = Api(
    ApiKey.LIST_TRANSACTIONS,
    ListTransactionsRequest,
    ListTransactionsResponse,
    (0, 2),
    _list_transactions,
    schema_error_body(ListTransactionsResponse, {}),
    filter_response=_visible_transactions,
)


async def _describe_transactions(
    context: RequestContext, request: Request[Any]
) -> DescribeTransactionsResponse:
    state_class = DescribeTransactionsResponse.TransactionState
    topic_class = state_class.TopicData
    states = []
    for tid in request.body.transactional_ids or []:
        try:
            txn = await context.transactions.describe_coordinated(tid)
        except Exception as exc:  # noqa: BLE001 - the id's error code
            code = error_code_for(exc)
            count_refusal(
                context, ApiKey.DESCRIBE_TRANSACTIONS, f"DescribeTransactions of {tid!r}", exc, code
            )
            states.append(state_class(error_code=int(code), transactional_id=tid))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(txn.partitions):
            by_topic.setdefault(topic, []).append(partition)
        states.append(
            state_class(
                error_code=0,
                transactional_id=tid,
                transaction_state=_state_name(txn.state),
                transaction_timeout_ms=txn.timeout_ms,
                transaction_start_time_ms=txn.start_ms,
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                topics=[topic_class(topic=t, partitions=ps) for t, ps in by_topic.items()],
            )
        )
    return DescribeTransactionsResponse(
        version=request.api_version, throttle_time_ms=0, transaction_states=states
    )


def _authorize_describe_transactions(may: Checker, request: Request[Any]) -> Plan | None:
    """DESCRIBE on each transactional id."""
    return split(
        request,
        "transactional_ids",
        lambda tid: may(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid),
        TXN_DENIED,
        "transaction_states",
    )


DESCRIBE_TRANSACTIONS: Final = Api(
    ApiKey.DESCRIBE_TRANSACTIONS,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    (0, 0),
    _describe_transactions,
    schema_error_body(
        DescribeTransactionsResponse,
        {"transaction_states": Mirror("transactional_ids", {"transactional_id": ITEM})},
    ),
    authorize=_authorize_describe_transactions,
)


async def _describe_partition_producers(context: RequestContext, topic: str, partition: int) -> Any:
    answer = DescribeProducersResponse.TopicResponse.PartitionResponse
    try:
        producers = await context.log.producers(topic, partition)
    except Exception as exc:  # noqa: BLE001 - the partition's error code
        code = error_code_for(exc)
        count_refusal(
            context,
            ApiKey.DESCRIBE_PRODUCERS,
            f"DescribeProducers of {topic}-{partition}",
            exc,
            code,
        )
        return answer(partition_index=partition, error_code=int(code), error_message=str(exc))
    state = answer.ProducerState
    return answer(
        partition_index=partition,
        error_code=0,
        error_message=None,
        active_producers=[
            state(
                producer_id=a.producer_id,
                producer_epoch=a.producer_epoch,
                last_sequence=a.last_sequence,
                last_timestamp=a.last_timestamp,
                coordinator_epoch=-1,
                current_txn_start_offset=a.current_txn_start_offset,
            )
            for a in producers
        ],
    )


async def _describe_producers(
    context: RequestContext, request: Request[Any]
) -> DescribeProducersResponse:
    topics = []
    for topic in request.body.topics or []:
        partitions = await asyncio.gather(
            *(
                _describe_partition_producers(context, topic.name, p)
                for p in topic.partition_indexes or []
            )
        )
        topics.append(
            DescribeProducersResponse.TopicResponse(name=topic.name, partitions=list(partitions))
        )
    return DescribeProducersResponse(version=request.api_version, throttle_time_ms=0, topics=topics)


DESCRIBE_PRODUCERS: Final = Api(
    ApiKey.DESCRIBE_PRODUCERS,
    DescribeProducersRequest,
    DescribeProducersResponse,
    (0, 0),
    _describe_producers,
    schema_error_body(
        DescribeProducersResponse,
        {
            "topics": Mirror(
                "topics",
                {"name": "name"},
                {"partitions": Mirror("partition_indexes", {"partition_index": ITEM})},
            )
        },
    ),
    authorize=topics_rule("topics", Operation.READ, "topics"),
)

APIS: Final = (
    ADD_PARTITIONS_TO_TXN,
    ADD_OFFSETS_TO_TXN,
    END_TXN,
    TXN_OFFSET_COMMIT,
    WRITE_TXN_MARKERS,
    LIST_TRANSACTIONS,
    DESCRIBE_TRANSACTIONS,
    DESCRIBE_PRODUCERS,
)
