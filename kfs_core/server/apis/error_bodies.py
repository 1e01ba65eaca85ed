"""Error bodies derived from the response schema: one builder instead of one function per API.

An API's error body is its response with the same error code in every
place that can hold one - what a handler that raised answers, and what an
authorization denial puts in the entries it denies.  As Kafka's
``getErrorResponse`` does, the response mirrors the request: one topic entry
per topic asked for, one partition entry per partition.  `schema_error_body`
walks the response class's spec at the request's version and fills

* every ``error_code`` field (and ``<x>_error_code``) with the code,
* every ``error_message`` field with the message,
* ``throttle_time_ms`` with 0,
* each array named in the API's `Mirror` shape with one entry per entry of
  the request array it mirrors, the key fields copied across,

and leaves every other field at its spec default.  A shape only says which
request array each response array mirrors, which key fields it copies and
the few values Kafka sets apart from the defaults (-1 offsets, say).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kfs_core.server.protocol import MESSAGES

if TYPE_CHECKING:
    from kfs_core.server.apis.base import ErrorBody
    from kfs_core.server.apis.context import BrokerOptions
    from kfs_core.server.protocol import ErrorCode, Request
    from kfs_core.server.protocol.bodies import ResponseBody

__all__ = ["Mirror", "Shape", "schema_error_body"]

# A response struct's fields: a `Mirror` for an array mirroring a request array,
# anything else a value to set.  Fields not named take their defaults (or the code).
Shape = Mapping[str, Any]

# Names copied from the request item itself (a plain string, as a group id).
ITEM = ""


@dataclass(frozen=True)
class Mirror:
    """A response array with one entry per entry of the request array ``source``.

    ``copy`` maps a response field to the request item's field it takes
    (`ITEM`: the item itself); ``shape`` describes the entry's own fields.
    """

    source: str
    copy: Mapping[str, str] = field(default_factory=dict)
    shape: Shape = field(default_factory=dict)


def schema_error_body(shape: Shape) -> ErrorBody[Any, ResponseBody]:
    """The `ErrorBody` of an API whose response has this shape."""

    def error_body(
        request: Request[Any], code: ErrorCode, message: str | None, _: BrokerOptions
    ) -> ResponseBody:
        response_class = MESSAGES[request.api_key].response
        values = _fill(
            response_class.fields, request.api_version, request.body, shape, code, message
        )
        return request.response(**values)

    return error_body


def _fill(
    fields: Mapping[str, Any],
    version: int,
    source: Any,
    shape: Shape,
    code: ErrorCode,
    message: str | None,
) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, spec in fields.items():
        if not spec.for_version_q(version):
            continue
        if name in shape:
            wanted = shape[name]
            if isinstance(wanted, Mirror):
                items = getattr(source, wanted.source, None) or []
                values[name] = [
                    _entry(spec, version, item, wanted, code, message) for item in items
                ]
            else:
                values[name] = wanted
        elif name == "error_code" or name.endswith("_error_code"):
            values[name] = int(code)
        elif name == "error_message":
            values[name] = message
        elif name == "throttle_time_ms":
            values[name] = 0
    return values


def _entry(
    spec: Any, version: int, item: Any, mirror: Mirror, code: ErrorCode, message: str | None
) -> Any:
    values = _fill(spec.fields, version, item, mirror.shape, code, message)
    for name, source_name in mirror.copy.items():
        values[name] = item if source_name == ITEM else getattr(item, source_name)
    return spec.data_class(**values)
