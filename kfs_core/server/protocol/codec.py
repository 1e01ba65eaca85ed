"""Request decoding and response encoding: a frame's header and body.

`decode_request` turns a request frame into a `Request`, checking it against
the table of versions the caller serves (the server passes its registry's,
`kfs_core.server.apis.SUPPORTED_VERSIONS`: this layer knows the messages, not
which of them KFS answers); `encode_response` / `encode_response_parts` turn a
response body back into a frame, and `error_response_frame` says what to send
when a frame could not be decoded.  Bodies are the spec-generated message
classes of `kfs_core.server.protocol.messages`, so a handler reads
``request.body.topic_data`` and builds ``ProduceResponse(version=request.api_version,
throttle_time_ms=0, responses=[...])`` with the field names of Kafka's JSON
specs, which mypy checks (`kfs_core.server.protocol.responses`).

Request frame (after the 4-byte size prefix, see `kfs_core.server.protocol.framing`):

    request header v1 (classic versions of the API)
      int16   api_key
      int16   api_version
      int32   correlation_id
      string  client_id        nullable, always int16-length (even in v2)
    request header v2 (flexible versions): v1 + tagged fields
    body

Response frame:

    int32   size
    response header v0: int32 correlation_id
    response header v1 (flexible versions): v0 + tagged fields
    body

ApiVersions is the exception: its response header is always v0, whatever
the version, because the client reads it before it knows what we support.

Header versions above follow from the API version alone; the request header
v0 (no client id) belongs to ControlledShutdown v0, which KFS does not serve.
"""

from __future__ import annotations

import functools
import logging
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, cast

from kfs_core.server.protocol.errors import (
    ErrorCode,
    InvalidResponse,
    MalformedRequest,
    ProtocolError,
    UnknownApiKey,
    UnsupportedVersion,
)
from kfs_core.server.protocol.fastpath import decode_produce_request, encode_fetch_response
from kfs_core.server.protocol.framing import SIZE_PREFIX
from kfs_core.server.protocol.messages import MESSAGES, ApiKey
from kfs_core.server.protocol.responses import ApiVersionsResponse

if TYPE_CHECKING:
    from kfs_core.server.protocol.bodies import ResponseBody
from kfs_core.server.protocol.wire import (
    I16,
    I32,
    I64,
    READ_ERRORS,
    read_string,
    skip_tagged_fields,
)

log = logging.getLogger(__name__)

__all__ = [
    "BodyT",
    "Request",
    "VersionTable",
    "api_versions_body",
    "decode_request",
    "encode_response",
    "encode_response_parts",
    "error_response_frame",
    "is_flexible",
]

# The versions a server speaks, per API key: (min, max).
VersionTable = Mapping[int, tuple[int, int]]

_HEADER_FIXED = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_TAGGED_FIELDS_NONE = b"\x00"  # a flexible header's empty tagged-field section


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether this version of the API uses compact types and tagged fields (its spec's flexibleVersions)."""
    return bool(MESSAGES[ApiKey(api_key)].request.flexible_version_q(api_version))


# The body's type: a spec-generated request class, or a `Protocol` listing the
# fields a handler reads (`kfs_core.server.protocol.bodies`).
BodyT = TypeVar("BodyT")


@dataclass(frozen=True, slots=True)
class Request(Generic[BodyT]):
    """A decoded request: the header's fields and the body.

    ``body`` is an instance of ``MESSAGES[api_key].request`` decoded at
    ``api_version``.  Produce ``records`` are ``memoryview`` slices of the
    request frame, not copies: they keep the frame alive, and are writable
    when the frame is a ``bytearray`` (offsets can be assigned in place).
    """

    api_key: ApiKey
    api_version: int
    correlation_id: int
    client_id: str | None
    body: BodyT

    @property
    def flexible(self) -> bool:
        """Whether the request used header v2 and this version's compact encoding."""
        return is_flexible(self.api_key, self.api_version)

    @property
    def expects_response(self) -> bool:
        """False only for Produce with acks=0, which Kafka never answers."""
        body: Any = self.body
        return not (self.api_key == ApiKey.PRODUCE and body.acks == 0)

    def response(self, **fields: Any) -> ResponseBody:
        """A response body of the matching class and version, built from spec field names.

        Unchecked by mypy: for code that serves several APIs (AlterConfigs
        and IncrementalAlterConfigs share a handler); a handler builds its
        API's typed class from `kfs_core.server.protocol.responses` instead.
        """
        return cast(
            "ResponseBody", MESSAGES[self.api_key].response(version=self.api_version, **fields)
        )


# --- decoding --------------------------------------------------------------


def decode_request(frame: bytes | bytearray | memoryview, versions: VersionTable) -> Request[Any]:
    """Decode one request frame (without its size prefix).

    Raises `UnknownApiKey` or `UnsupportedVersion` for a well-formed header
    that names something outside ``versions``, and `MalformedRequest`
    when the header or the body is truncated or invalid.  Bytes after a
    complete body are ignored, as Kafka ignores them.
    """
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    if len(buf) < _HEADER_FIXED.size:
        raise MalformedRequest(
            f"request of {len(buf)} bytes is shorter than the {_HEADER_FIXED.size}-byte header"
        )
    api_key, api_version, correlation_id = _HEADER_FIXED.unpack_from(buf, 0)
    context: dict[str, Any] = {
        "api_key": api_key,
        "api_version": api_version,
        "correlation_id": correlation_id,
    }
    if api_key not in versions:
        context["client_id"] = _client_id_or_none(buf)
        raise UnknownApiKey(f"unknown API key {api_key}", **context)
    key = ApiKey(api_key)
    flexible = is_flexible(key, api_version)
    try:
        client_id, pos = read_string(buf, _HEADER_FIXED.size, compact=False, nullable=True)
        if flexible:
            pos = skip_tagged_fields(buf, pos)
    except READ_ERRORS as exc:
        raise MalformedRequest(f"{key.name} v{api_version} header: {exc}", **context) from exc
    context["client_id"] = client_id
    low, high = versions[key]
    if not low <= api_version <= high:
        if key == ApiKey.PRODUCE and 0 <= api_version < LEGACY_PRODUCE_END:
            context["legacy_produce"] = _legacy_produce_partitions(buf, pos)
        raise UnsupportedVersion(
            f"{key.name} v{api_version} is not supported (v{low}-v{high} are)", **context
        )
    try:
        if key == ApiKey.PRODUCE:
            body, end = decode_produce_request(buf, pos, api_version)
        else:
            # The decoder kafka-python compiles for this version, called
            # directly because its public decode() drops the end position,
            # which is how truncated and over-long bodies show.
            request_class = MESSAGES[key].request
            decode = request_class._struct.compiled_decode_from(
                api_version, compact=flexible, tagged=flexible, data_class=request_class
            )
            body, end = decode(buf, pos)
    except READ_ERRORS as exc:
        raise MalformedRequest(f"{key.name} v{api_version} body: {exc}", **context) from exc
    if end > len(buf):
        raise MalformedRequest(
            f"{key.name} v{api_version} body runs past the end of the frame", **context
        )
    if key != ApiKey.PRODUCE:  # the produce decoder checks its own fields
        null = _forbidden_null(_null_plan(key, api_version), body)
        if null is not None:
            raise MalformedRequest(
                f"{key.name} v{api_version} body: {null} is null, which the spec does not allow",
                **context,
            )
    if end < len(buf):
        # Kafka parses the body and ignores what follows it, and clients rely on
        # that: librdkafka 2.16's all-topics Metadata v12 carries 4 bytes more.
        log.debug(
            "%s v%d from %r: %d byte(s) after the body ignored",
            key.name,
            api_version,
            client_id,
            len(buf) - end,
        )
    return Request(key, api_version, correlation_id, client_id, body)


_NULLABLE_SIMPLE_TYPES: Final = frozenset({"string", "bytes", "records"})


# One step of a null check: (attribute, dotted path, must not be null, kind, sub-plan);
# kind is "structs" (an array of structs), "items" (an array of plain values), "struct" or "".
_NullStep = tuple[str, str, bool, str, tuple[Any, ...]]


@functools.cache
def _null_plan(api_key: ApiKey, version: int) -> tuple[_NullStep, ...]:
    """What `_forbidden_null` looks at for one request version, worked out once from the spec."""
    return _plan_fields(MESSAGES[api_key].request.fields, version, "")


def _plan_fields(fields: Mapping[str, Any], version: int, path: str) -> tuple[_NullStep, ...]:
    steps: list[_NullStep] = []
    for name, spec in fields.items():
        if not spec.for_version_q(version) or spec.tagged_field_q(version):
            continue
        nullable_type = spec.is_array() or spec.type_str in _NULLABLE_SIMPLE_TYPES
        required = nullable_type and not spec.nullable_for_version_q(version)
        kind = ""
        sub: tuple[_NullStep, ...] = ()
        if spec.is_struct_array():
            kind, sub = "structs", _plan_fields(spec.fields, version, f"{path}{spec.name}[].")
        elif spec.is_array():
            kind = "items"
        elif spec.is_struct():
            kind, sub = "struct", _plan_fields(spec.fields, version, f"{path}{spec.name}.")
        if kind in ("structs", "struct") and not sub:
            kind = ""  # nothing inside can be null: no need to walk it
        if required or kind:
            steps.append((name, f"{path}{spec.name}", required, kind, sub))
    return tuple(steps)


def _forbidden_null(plan: tuple[_NullStep, ...], body: Any) -> str | None:
    """The first field (a dotted path) that is null where the spec says it never is, or None.

    kafka-python decodes a length of -1 as None for every string, bytes and
    array field; Kafka's own parser refuses it where the field is not
    nullable, and so must we, or a handler meets a None it cannot iterate.
    ``plan`` is `_null_plan`'s for the request's API and version.
    """
    for name, where, required, kind, sub in plan:
        value = getattr(body, name, None)
        if value is None:
            if required:
                return where
            continue
        if kind == "structs":
            for item in value:
                found = _forbidden_null(sub, item)
                if found is not None:
                    return found
        elif kind == "items":
            if any(item is None for item in value):
                return f"{where}[]"
        elif kind == "struct":
            found = _forbidden_null(sub, value)
            if found is not None:
                return found
    return None


def _client_id_or_none(buf: memoryview) -> str | None:
    """The client id of a header we will not decode further, for error reports."""
    try:
        client_id, _ = read_string(buf, _HEADER_FIXED.size, compact=False, nullable=True)
    except READ_ERRORS:
        return None
    return client_id


# --- encoding --------------------------------------------------------------


def _response_header(api_key: ApiKey, api_version: int, correlation_id: int) -> bytes:
    header = I32.pack(correlation_id)
    if api_key != ApiKey.API_VERSIONS and is_flexible(api_key, api_version):
        header += _TAGGED_FIELDS_NONE
    return header


def _encode_frame(
    api_key: ApiKey, api_version: int, correlation_id: int, body: Any
) -> list[bytes | bytearray | memoryview]:
    response_class = MESSAGES[api_key].response
    if not isinstance(body, response_class):
        raise InvalidResponse(
            f"{api_key.name} needs a {response_class.__name__} body, got {type(body).__name__}"
        )
    header = _response_header(api_key, api_version, correlation_id)
    try:
        if api_key == ApiKey.FETCH:
            parts = encode_fetch_response(body, api_version, header)
            if parts is not None:
                return parts
        # Setting the version of an object that already has it trips over
        # kafka-python's header bookkeeping on decoded objects; skip it then.
        same_version = body.version == api_version
        payload = body.encode() if same_version else body.encode(version=api_version)
    except (struct.error, AttributeError, TypeError, ValueError, OverflowError) as exc:
        raise InvalidResponse(f"{api_key.name} v{api_version} response: {exc!r}") from exc
    return [SIZE_PREFIX.pack(len(header) + len(payload)) + header, payload]


def encode_response_parts(request: Request[Any], body: Any) -> list[bytes | bytearray | memoryview]:
    """The size-prefixed response frame to ``request`` as buffers for ``writelines``.

    Fetch responses keep large ``records`` as the buffers they were given.
    Raises `InvalidResponse` if ``body`` is not the request's response class
    or holds values its schema cannot encode.
    """
    return _encode_frame(request.api_key, request.api_version, request.correlation_id, body)


def encode_response(request: Request[Any], body: Any) -> bytes:
    """The size-prefixed response frame to ``request``, as one byte string."""
    return b"".join(encode_response_parts(request, body))


def api_versions_body(
    api_version: int, versions: VersionTable, error_code: ErrorCode = ErrorCode.NONE
) -> ApiVersionsResponse:
    """The ApiVersions response body listing ``versions``."""
    return ApiVersionsResponse(
        version=api_version,
        error_code=int(error_code),
        api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=int(key), min_version=low, max_version=high)
            for key, (low, high) in sorted(versions.items())
        ],
        throttle_time_ms=0,
    )


def error_response_frame(error: ProtocolError, versions: VersionTable) -> bytes | None:
    """What Kafka sends for a frame that failed to decode, or ``None`` to close the connection.

    An ApiVersions request of an unsupported version gets an ApiVersions v0
    body (header v0) with UNSUPPORTED_VERSION and ``versions``, from which
    the client picks a version to retry with (KIP-511).  Kafka lists only the
    ApiVersions row there; clients read only that row, so the whole table
    does no harm.  A Produce v0-v2 (what Kafka 3.x still served; old clients
    pinned to an old version send them) gets UNSUPPORTED_VERSION for each of
    its partitions, so the producer fails with a reason instead of a dropped
    connection.  Every other decoding error closes the connection, as in Kafka.
    """
    if not isinstance(error, UnsupportedVersion) or error.correlation_id is None:
        return None
    if error.api_key == ApiKey.API_VERSIONS:
        body = api_versions_body(0, versions, ErrorCode.UNSUPPORTED_VERSION)
        return b"".join(_encode_frame(ApiKey.API_VERSIONS, 0, error.correlation_id, body))
    legacy = getattr(error, "legacy_produce", None)
    if error.api_key == ApiKey.PRODUCE and legacy is not None and error.api_version is not None:
        return _legacy_produce_refusal(error.api_version, error.correlation_id, legacy)
    return None


# --- Produce v0-v2 -------------------------------------------------------------------

LEGACY_PRODUCE_END: Final = 3  # Produce v0-v2: gone from Kafka 4's spec, served by Kafka 3.x
_LEGACY_ACKS_AND_TIMEOUT: Final = struct.Struct(">hi")
_PARTITION_AND_SIZE: Final = struct.Struct(">ii")


@dataclass(frozen=True)
class LegacyProduce:
    """What a Produce v0-v2 names: its acks and each topic's partitions."""

    acks: int
    topics: tuple[tuple[str, tuple[int, ...]], ...]


def _legacy_produce_partitions(buf: bytes | memoryview, pos: int) -> LegacyProduce | None:
    """Produce v0-v2's body (acks, timeout, [topic, [partition, records]]); None if unreadable."""
    try:
        acks, _ = _LEGACY_ACKS_AND_TIMEOUT.unpack_from(buf, pos)
        pos += _LEGACY_ACKS_AND_TIMEOUT.size
        (topic_count,) = I32.unpack_from(buf, pos)
        pos += I32.size
        topics = []
        for _ in range(topic_count):
            name, pos = read_string(buf, pos, compact=False, nullable=False)
            (partition_count,) = I32.unpack_from(buf, pos)
            pos += I32.size
            partitions = []
            for _ in range(partition_count):
                partition, size = _PARTITION_AND_SIZE.unpack_from(buf, pos)
                pos += _PARTITION_AND_SIZE.size + max(size, 0)
                partitions.append(partition)
            topics.append((str(name), tuple(partitions)))
    except READ_ERRORS:
        return None
    if pos != len(buf):
        return None
    return LegacyProduce(acks, tuple(topics))


def _legacy_produce_refusal(
    version: int, correlation_id: int, legacy: LegacyProduce
) -> bytes | None:
    """A Produce v0-v2 response: UNSUPPORTED_VERSION, offset -1 for each partition.

    acks=0 expects no answer: None, and the connection closes, as Kafka
    tells such a producer of a failure.
    """
    if legacy.acks == 0:
        return None
    out = bytearray(I32.pack(correlation_id))  # response header v0
    out += I32.pack(len(legacy.topics))
    for name, partitions in legacy.topics:
        encoded = name.encode()
        out += I16.pack(len(encoded)) + encoded
        out += I32.pack(len(partitions))
        for partition in partitions:
            out += I32.pack(partition) + I16.pack(ErrorCode.UNSUPPORTED_VERSION) + I64.pack(-1)
            if version >= 2:
                out += I64.pack(-1)  # log_append_time_ms
    if version >= 1:
        out += I32.pack(0)  # throttle_time_ms
    return SIZE_PREFIX.pack(len(out)) + bytes(out)
