"""What every API module shares: the `Api` registration record and the error helpers.

An API module declares one `Api` per Kafka API it serves: the spec-generated
request and response classes, the version range KFS speaks, the handler, and
the error body - what the response looks like when every place that can hold
an error code holds the same one (a `schema_error_body` shape, derived
from the response schema: `kfs_core.server.apis.error_bodies`).  `kfs_core.server.apis.REGISTRY` collects
them; nothing else lists APIs.

Handlers are ``async def handle(context, request) -> response body``; the
context (`kfs_core.server.apis.context.RequestContext`, built by the broker
for each request) holds what they may use: options, the cluster view, the
partition log, the topic directory, the group coordinator, metrics, the
principal's session.

The connection's state lives in context variables the connection sets
(``CLIENT_HOST``, ``SESSION``, ``ADVERTISED``); the broker reads them into
each request's context, and error bodies, which have no context, read them
directly.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from kfs_core.errors import KfsError
from kfs_core.security.sasl import Session
from kfs_core.server.protocol.errors import ErrorCode
from kfs_core.server.protocol.messages import ApiKey, MessagePair

if TYPE_CHECKING:
    import asyncio

    from kfs_core.server.apis.access import ResponseFilter, Rule
    from kfs_core.server.apis.context import BrokerOptions, RequestContext
    from kfs_core.server.protocol import Request

__all__ = [
    "ADVERTISED",
    "CLIENT_HOST",
    "SESSION",
    "Api",
    "Refused",
    "advertised_address",
    "error_code_for",
    "log_failure",
    "message_of",
]

log = logging.getLogger(__name__)

# The client's address as Kafka shows it ("/127.0.0.1"); the connection sets it,
# and the handler tasks it starts inherit it.
CLIENT_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("kfs_client_host", default="")
# The connection's security session (listener, principal, SASL state), set the same way;
# None outside a connection (a handler called directly).
SESSION: contextvars.ContextVar[Session | None] = contextvars.ContextVar(
    "kfs_session", default=None
)
# The (host, port) Metadata names for the connection's listener; None: the broker options'.
ADVERTISED: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar(
    "kfs_advertised", default=None
)


def advertised_address(options: BrokerOptions) -> tuple[str, int]:
    """The (host, port) to name for this broker: the connection's listener's, else the options'."""
    return ADVERTISED.get() or (options.advertised_host, options.advertised_port)


# An API's request body type: a Protocol of the fields its handler reads
# (`kfs_core.server.protocol.bodies`), or Any.
Req = TypeVar("Req")
# Its response type: the typed class of `kfs_core.server.protocol.responses` its
# handler and error body build.  Covariant: the registry holds every API as an
# Api[Any, ResponseBody].
Resp_co = TypeVar("Resp_co", covariant=True)

Handler = Callable[["RequestContext", "Request[Req]"], Awaitable[Resp_co]]
# Produce starts in request order on a connection and finishes later.
Starter = Callable[["RequestContext", "Request[Req]"], Awaitable["asyncio.Future[Resp_co]"]]
ErrorBody = Callable[["Request[Req]", ErrorCode, "str | None", "BrokerOptions"], Resp_co]


@dataclass(frozen=True, slots=True)
class Api(Generic[Req, Resp_co]):
    """One Kafka API as KFS serves it: messages, versions, handler and error body.

    ``Req`` and ``Resp_co`` are the body types its handler takes and gives
    (``Api[MetadataRequestBody, MetadataResponse]``), so mypy checks that a
    handler and its error body answer with the API's own response class.
    ``versions`` is (min, max): a client uses min(its max, our max), so the
    comment beside each registration says which clients send what.
    ``start`` replaces ``handle`` for the one API whose work must begin in
    request order (Produce); everything else runs as a task.  ``authorize``
    is what the ACLs must allow before the handler runs and
    ``filter_response`` what a listing may show afterwards
    (`kfs_core.server.apis.access`); None: nothing to check.
    """

    key: ApiKey
    request: Any
    response: Any
    versions: tuple[int, int]
    handle: Handler[Req, Resp_co] | None
    error_body: ErrorBody[Req, Resp_co]
    start: Starter[Req, Resp_co] | None = None
    authorize: Rule | None = None
    filter_response: ResponseFilter | None = None

    @property
    def messages(self) -> MessagePair:
        return MessagePair(self.request, self.response)


class Refused(KfsError):
    """A request the broker refuses with a specific Kafka error code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message, kafka_error_code=int(code))


def message_of(exc: BaseException) -> str:
    """The error message a response carries for ``exc``."""
    return str(exc) or type(exc).__name__


def error_code_for(exc: BaseException) -> ErrorCode:
    """The Kafka error code that stands for ``exc`` in a response.

    The mapping is the exception's own: ``kafka_error_code`` on the
    `kfs_core.errors` classes (and on `Refused`), ``error_code`` on the
    protocol layer's errors.  A timeout outside KFS's own errors is
    REQUEST_TIMED_OUT; anything else is UNKNOWN_SERVER_ERROR.
    """
    code = getattr(exc, "kafka_error_code", None)
    if code is not None:
        with contextlib.suppress(ValueError, TypeError):
            return ErrorCode(int(code))
    error_code = getattr(exc, "error_code", None)
    if isinstance(error_code, ErrorCode):
        return error_code
    if isinstance(exc, TimeoutError):
        return ErrorCode.REQUEST_TIMED_OUT
    return ErrorCode.UNKNOWN_SERVER_ERROR


_OPERATOR_ERRORS: Final = frozenset({ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.REQUEST_TIMED_OUT})


def log_failure(what: str, exc: BaseException, code: ErrorCode) -> None:
    """How a failed partition, topic or group is logged.

    Unexpected errors get their traceback; storage trouble and timeouts are
    warnings; what a client got wrong (a corrupt batch, an unknown topic) is
    debug only - the metrics count it, and a broken client must not flood
    the log.
    """
    if code == ErrorCode.UNKNOWN_SERVER_ERROR:
        log.error("%s failed unexpectedly", what, exc_info=exc)
    elif code in _OPERATOR_ERRORS or not isinstance(exc, KfsError | TimeoutError):
        log.warning("%s: %s (%s)", what, exc, code.name)
    else:
        log.debug("%s: %s (%s)", what, exc, code.name)
