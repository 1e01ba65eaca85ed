"""InitProducerId: producer ids for idempotent and transactional producers.

Idempotent producers get a fresh producer id at epoch 0 on every
InitProducerId, as Kafka's transaction coordinator answers a request
without a transactional id (it ignores the producer id and epoch a
KIP-360 client sends to bump its epoch: a new id resets its sequences
just as well).  The partition log checks their sequences
(`kfs_core.log.producer_state`).

A request with a transactional id goes to the transaction coordinator
(`kfs_core.groups.transactions`): the id's producer id, its epoch bumped,
any open transaction of an earlier instance aborted (the client retries on
CONCURRENT_TRANSACTIONS meanwhile).  The other transaction APIs are in
`kfs_core.server.apis.transactions`.
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Any, Final

from kfs_core.security.acls import Operation, ResourceType
from kfs_core.server.apis.access import CLUSTER_DENIED, Checker, Plan
from kfs_core.server.apis.base import Api, error_code_for
from kfs_core.server.apis.error_bodies import schema_error_body
from kfs_core.server.apis.transactions import count_refusal
from kfs_core.server.protocol.errors import ErrorCode
from kfs_core.server.protocol.messages import ApiKey, InitProducerIdRequest
from kfs_core.server.protocol.responses import InitProducerIdResponse

if TYPE_CHECKING:
    from kfs_core.server.apis.context import RequestContext
    from kfs_core.server.protocol import Request
    from kfs_core.server.protocol.bodies import InitProducerIdRequestBody

__all__ = ["APIS", "INIT_PRODUCER_ID", "ProducerIds"]


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
    body = request.body
    if body.transactional_id is not None:
        try:
            producer_id, epoch = await context.transactions.init_producer_id(
                body.transactional_id,
                body.transaction_timeout_ms,
                getattr(body, "producer_id", -1),
                getattr(body, "producer_epoch", -1),
            )
        except Exception as exc:  # noqa: BLE001 - the request's one error code
            code = error_code_for(exc)
            if code == ErrorCode.PRODUCER_FENCED and request.api_version < 4:
                code = ErrorCode.INVALID_PRODUCER_EPOCH
            count_refusal(
                context,
                ApiKey.INIT_PRODUCER_ID,
                f"InitProducerId of {body.transactional_id!r}",
                exc,
                code,
            )
            return error_body(request, code, str(exc), context.options)
        return InitProducerIdResponse(
            version=request.api_version,
            throttle_time_ms=0,
            error_code=0,
            producer_id=producer_id,
            producer_epoch=epoch,
        )
    return InitProducerIdResponse(
        version=request.api_version,
        throttle_time_ms=0,
        error_code=0,
        producer_id=context.new_producer_id(),
        producer_epoch=0,
    )


error_body = schema_error_body(InitProducerIdResponse, {"producer_id": -1, "producer_epoch": -1})


def _authorize_init(may: Checker, request: Request[Any]) -> Plan | None:
    """WRITE on the transactional id; else IDEMPOTENT_WRITE, or WRITE on any topic (KIP-679)."""
    tid = request.body.transactional_id
    if tid is not None:
        if may(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
            return None
        return Plan(whole=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
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


APIS: Final = (INIT_PRODUCER_ID,)
