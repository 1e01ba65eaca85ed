"""InitProducerId: producer ids and epochs for idempotent producers.

Transactions need a transaction coordinator, which KFS does not have: a
transactional id is refused.
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Any, Final

from kfs_core.server.apis.base import Api
from kfs_core.server.protocol_errors import ErrorCode
from kfs_core.server.protocol_messages import (
    ApiKey,
    InitProducerIdRequest,
    InitProducerIdResponse,
)

if TYPE_CHECKING:
    from kfs_core.server.broker import Broker, BrokerOptions
    from kfs_core.server.protocol import Request

__all__ = ["APIS", "INIT_PRODUCER_ID", "ProducerIds"]

_MAX_EPOCH: Final = 32767


class ProducerIds:
    """Hands out producer ids: distinct across restarts unless more than 4096
    are handed out per millisecond the daemon has been up."""

    def __init__(self) -> None:
        self._next = itertools.count((time.time_ns() // 1_000_000) << 12)

    def new(self) -> int:
        return next(self._next)


async def handle(broker: Broker, request: Request) -> Any:
    body = request.body
    if body.transactional_id is not None:
        return request.response(
            throttle_time_ms=0,
            error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            producer_id=-1,
            producer_epoch=-1,
        )
    producer_id = getattr(body, "producer_id", -1)
    epoch = getattr(body, "producer_epoch", -1)
    if producer_id >= 0 and 0 <= epoch < _MAX_EPOCH:
        # KIP-360: an idempotent producer bumps its epoch to reset its sequences.
        return request.response(
            throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=epoch + 1
        )
    return request.response(
        throttle_time_ms=0, error_code=0, producer_id=broker.producer_ids.new(), producer_epoch=0
    )


def error_body(request: Request, code: ErrorCode, message: str | None, _: BrokerOptions) -> Any:
    return request.response(
        throttle_time_ms=0, error_code=int(code), producer_id=-1, producer_epoch=-1
    )


# Both clients send <= 4; v5 is KIP-890 transactions v2.
INIT_PRODUCER_ID = Api(
    ApiKey.INIT_PRODUCER_ID,
    InitProducerIdRequest,
    InitProducerIdResponse,
    (0, 4),
    handle,
    error_body,
)

APIS: Final = (INIT_PRODUCER_ID,)
