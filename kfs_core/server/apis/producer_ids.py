"""InitProducerId, and the transaction APIs KFS refuses.

Idempotent producers get a fresh producer id at epoch 0 on every
InitProducerId, as Kafka's transaction coordinator answers a request
without a transactional id (it ignores the producer id and epoch a
KIP-360 client sends to bump its epoch: a new id resets its sequences
just as well).  The partition log checks their sequences
(`kfs_core.log.producer_state`).

Transactions need a transaction coordinator, which KFS does not have:
InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn and TxnOffsetCommit all answer
TRANSACTIONAL_ID_AUTHORIZATION_FAILED - what Kafka answers a principal
that may not use transactional ids.  Clients treat it as fatal, so a
transactional producer fails at ``init_transactions()`` with that error
instead of retrying or, worse, seeming to commit.  A produced batch with
the transactional bit is refused by the log with INVALID_TXN_STATE.
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Any, Final, TypeVar

from kfs_core.security.acls import Operation
from kfs_core.server.apis.access import CLUSTER_DENIED, Checker, Plan
from kfs_core.server.apis.base import Api, ErrorBody, Handler
from kfs_core.server.apis.error_bodies import ITEM, Mirror, schema_error_body
from kfs_core.server.protocol.errors import ErrorCode
from kfs_core.server.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    ApiKey,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)
from kfs_core.server.protocol.responses import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    InitProducerIdResponse,
    TxnOffsetCommitResponse,
)

if TYPE_CHECKING:
    from kfs_core.server.apis.context import RequestContext
    from kfs_core.server.protocol import Request
    from kfs_core.server.protocol.bodies import (
        InitProducerIdRequestBody,
    )

__all__ = [
    "ADD_OFFSETS_TO_TXN",
    "ADD_PARTITIONS_TO_TXN",
    "APIS",
    "END_TXN",
    "INIT_PRODUCER_ID",
    "TXN_OFFSET_COMMIT",
    "ProducerIds",
]

NO_TRANSACTIONS: Final = "KFS does not support transactions; use an idempotent producer"
_REFUSED: Final = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


class ProducerIds:
    """Hands out producer ids, distinct across restarts.

    They stay distinct unless more than 4096 are handed out per millisecond
    the daemon has been up.
    """

    def __init__(self) -> None:
        self._next = itertools.count((time.time_ns() // 1_000_000) << 12)

    def new(self) -> int:
        return next(self._next)


async def handle(
    context: RequestContext, request: Request[InitProducerIdRequestBody]
) -> InitProducerIdResponse:
    if request.body.transactional_id is not None:
        context.count_error(ApiKey.INIT_PRODUCER_ID, _REFUSED)
        return error_body(request, _REFUSED, NO_TRANSACTIONS, context.options)
    return InitProducerIdResponse(
        version=request.api_version,
        throttle_time_ms=0,
        error_code=0,
        producer_id=context.new_producer_id(),
        producer_epoch=0,
    )


error_body = schema_error_body(InitProducerIdResponse, {"producer_id": -1, "producer_epoch": -1})


def _authorize_init(may: Checker, request: Request[Any]) -> Plan | None:
    """IDEMPOTENT_WRITE on the cluster, or WRITE on any topic (KIP-679)."""
    if request.body.transactional_id is not None:
        return None  # transactions are refused by the handler
    if may.cluster(Operation.IDEMPOTENT_WRITE) or may.may_write_some_topic():
        return None
    return Plan(whole=CLUSTER_DENIED)


# Both clients send <= 4; v5 is KIP-890 transactions v2.
INIT_PRODUCER_ID: Final[Api[InitProducerIdRequestBody, InitProducerIdResponse]] = Api(
    ApiKey.INIT_PRODUCER_ID,
    InitProducerIdRequest,
    InitProducerIdResponse,
    (0, 4),
    handle,
    error_body,
    authorize=_authorize_init,
)


# --- transactions: refused --------------------------------------------------------------


Refusal = TypeVar("Refusal")


def _refusal(error_body: ErrorBody[Any, Refusal]) -> Handler[Any, Refusal]:
    """A handler that refuses every request with ``error_body`` carrying `_REFUSED`."""

    async def refuse(context: RequestContext, request: Request[Any]) -> Refusal:
        context.count_error(request.api_key, _REFUSED)
        return error_body(request, _REFUSED, NO_TRANSACTIONS, context.options)

    return refuse


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


_add_offsets_error = schema_error_body(AddOffsetsToTxnResponse, {})
_end_txn_error = schema_error_body(EndTxnResponse, {})


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


# Versions: librdkafka sends AddPartitionsToTxn and AddOffsetsToTxn v0,
# EndTxn <= 1 and TxnOffsetCommit <= 3; kafka-python (2.1+) at most v3 of
# each.  AddPartitionsToTxn v4+ batches transactions for brokers; EndTxn
# v5, AddOffsetsToTxn v4 and TxnOffsetCommit v4+ are KIP-890.
ADD_PARTITIONS_TO_TXN = Api(
    ApiKey.ADD_PARTITIONS_TO_TXN,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    (0, 3),
    _refusal(_add_partitions_error),
    _add_partitions_error,
)
ADD_OFFSETS_TO_TXN = Api(
    ApiKey.ADD_OFFSETS_TO_TXN,
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    (0, 3),
    _refusal(_add_offsets_error),
    _add_offsets_error,
)
END_TXN = Api(
    ApiKey.END_TXN,
    EndTxnRequest,
    EndTxnResponse,
    (0, 3),
    _refusal(_end_txn_error),
    _end_txn_error,
)
TXN_OFFSET_COMMIT = Api(
    ApiKey.TXN_OFFSET_COMMIT,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    (0, 3),
    _refusal(_txn_offset_commit_error),
    _txn_offset_commit_error,
)

APIS: Final = (
    INIT_PRODUCER_ID,
    ADD_PARTITIONS_TO_TXN,
    ADD_OFFSETS_TO_TXN,
    END_TXN,
    TXN_OFFSET_COMMIT,
)
