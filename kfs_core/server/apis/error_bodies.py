"""Error bodies derived from the response schema: one builder instead of one function per API.

An API's error body (``schema_error_body(MetadataResponse, shape)``) is its
response with the same error code in every place that can hold one - what a handler that raised answers, and what an
authorization denial puts in the entries it denies.  As Kafka's
``getErrorResponse`` does, the response mirrors the request: one topic entry
per topic asked for, one partition entry per partition.  `schema_error_body`
walks the response class's spec at the request's version and fills

* every ``error_code`` field (and ``<x>_error_code``) with the code,
* every ``error_message`` field with the message,
* ``throttle_time_ms`` with 0,
* each array named in the API's `Mirror` shape with one entry per entry of
  the request array it mirrors, the key fields copied across,
* each array named as a `Single` with one entry of its own shape,
* each field named as `Derived` with what it works out from the request and
  the broker options (the cluster id, the broker list, the version table),

and leaves every other field at its spec default.  A shape only says which
request array each response array mirrors, which key fields it copies and
the few values Kafka sets apart from the defaults (-1 offsets, say).

What an API does besides answering (SaslAuthenticate marks the session
failed) stays in the API's module, around the body built here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

if TYPE_CHECKING:
    from kfs_core.server.apis.context import BrokerOptions
    from kfs_core.server.protocol import ErrorCode, Request
    from kfs_core.server.protocol.bodies import ResponseBody

__all__ = ["ITEM", "Derived", "Mirror", "SchemaErrorBody", "Shape", "Single", "schema_error_body"]

# The response class an error body builds (a `kfs_core.server.protocol.responses` class).
Resp = TypeVar("Resp", bound="ResponseBody")

# A response struct's fields: a `Mirror` or a `Single` for an array, a `Derived`
# for a value worked out per request, anything else a value to set.  Fields not
# named take their defaults (or the code).
Shape = Mapping[str, Any]

# Names copied from the request item itself (a plain string, as a group id).
ITEM = ""


@dataclass(frozen=True)
class Mirror:
    """A response array with one entry per entry of the request array ``source``.

    ``source`` names the request array, or works the entries out of the
    request struct that holds them (AlterUserScramCredentials answers each
    user once, whether deleted, upserted or both).  ``copy`` maps a response
    field to the request item's field it takes (`ITEM`: the item itself);
    ``shape`` describes the entry's own fields.
    """

    source: str | Callable[[Any], Iterable[Any]]
    copy: Mapping[str, str] = field(default_factory=dict)
    shape: Shape = field(default_factory=dict)


@dataclass(frozen=True)
class Single:
    """A response array of one entry of ``shape``, which mirrors nothing in the request."""

    shape: Shape = field(default_factory=dict)


@dataclass(frozen=True)
class Derived:
    """A field's value worked out from the request and the broker options."""

    value: Callable[[Request[Any], BrokerOptions], Any]


@dataclass(frozen=True, slots=True)
class _Fill:
    """What every field of one error body is filled from."""

    request: Request[Any]
    code: ErrorCode
    message: str | None
    options: BrokerOptions


@dataclass(frozen=True)
class SchemaErrorBody(Generic[Resp]):
    """The `ErrorBody` of an API whose ``response`` has ``shape``; see the module's docstring."""

    response: type[Resp]
    shape: Shape

    def __call__(
        self, request: Request[Any], code: ErrorCode, message: str | None, options: BrokerOptions
    ) -> Resp:
        """The whole error response to ``request``."""
        response: Any = self.response  # a generated class: its schema is untyped
        values = _fill(
            response.fields, request.body, self.shape, _Fill(request, code, message, options)
        )
        return cast("Resp", response(version=request.api_version, **values))

    def entry(
        self,
        request: Request[Any],
        array: str,
        item: Any,
        code: ErrorCode,
        message: str | None,
        options: BrokerOptions,
    ) -> Any:
        """The entry of the `Mirror` array ``array`` for the request item ``item`` alone.

        What a handler answers for one failed entry among several (one group
        of a DescribeGroups) is the error body's entry for it.
        """
        response: Any = self.response
        spec = response.fields[array]
        return _entry(spec, item, self.shape[array], _Fill(request, code, message, options))


def schema_error_body(response: type[Resp], shape: Shape) -> SchemaErrorBody[Resp]:
    """The `ErrorBody` of an API whose ``response`` class has this shape."""
    return SchemaErrorBody(response, shape)


def _fill(fields: Mapping[str, Any], source: Any, shape: Shape, fill: _Fill) -> dict[str, Any]:
    version = fill.request.api_version
    values: dict[str, Any] = {}
    for name, spec in fields.items():
        if not spec.for_version_q(version):
            continue
        if name in shape:
            wanted = shape[name]
            if isinstance(wanted, Mirror):
                items = (
                    wanted.source(source)
                    if callable(wanted.source)
                    else getattr(source, wanted.source, None)
                )
                values[name] = [_entry(spec, item, wanted, fill) for item in items or []]
            elif isinstance(wanted, Single):
                values[name] = [spec.data_class(**_fill(spec.fields, None, wanted.shape, fill))]
            elif isinstance(wanted, Derived):
                values[name] = wanted.value(fill.request, fill.options)
            else:
                values[name] = wanted
        elif name == "error_code" or name.endswith("_error_code"):
            values[name] = int(fill.code)
        elif name == "error_message":
            values[name] = fill.message
        elif name == "throttle_time_ms":
            values[name] = 0
    return values


def _entry(spec: Any, item: Any, mirror: Mirror, fill: _Fill) -> Any:
    values = _fill(spec.fields, item, mirror.shape, fill)
    for name, source_name in mirror.copy.items():
        values[name] = item if source_name == ITEM else getattr(item, source_name)
    return spec.data_class(**values)
