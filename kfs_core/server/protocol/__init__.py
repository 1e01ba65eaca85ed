"""The Kafka wire protocol as the KFS daemon speaks it, with nothing of the daemon in it.

A leaf package: it knows frames, primitive types, message schemas and error
codes, and imports nothing of the broker, its APIs or the log above it (as
aiokafka's ``protocol/``).  Which versions of which APIs the server answers
is the server's table (`kfs_core.server.apis.SUPPORTED_VERSIONS`), passed to
the decoder as an argument.

    module      holds
    framing     the 4-byte size prefix; `FrameStream`, the server connection's reader
    wire        primitive types (ints, strings, bytes, varints, tagged fields)
    messages    `ApiKey` and the spec-generated message classes of each API (`MESSAGES`)
    bodies      Protocols of the request fields the handlers read (typed views of them)
    responses   the response classes, typed by the generated stub ``responses.pyi``
    response_stubs  writes that stub from the message schemas
    codec       `Request`; request headers and bodies decoded, responses encoded
    fastpath    zero-copy Produce request decoding and Fetch response encoding
    errors      `ErrorCode` and the errors raised for frames that cannot be requests

The names below are the ones the rest of the daemon uses.
"""

from kfs_core.server.protocol.codec import (
    Request,
    VersionTable,
    api_versions_body,
    decode_request,
    encode_response,
    encode_response_parts,
    error_response_frame,
    is_flexible,
)
from kfs_core.server.protocol.errors import (
    ErrorCode,
    FrameError,
    FrameTooLarge,
    InvalidResponse,
    MalformedRequest,
    ProtocolError,
    RequestError,
    TruncatedFrame,
    UnknownApiKey,
    UnsupportedVersion,
)
from kfs_core.server.protocol.framing import MAX_REQUEST_BYTES, check_frame_size, read_frame
from kfs_core.server.protocol.messages import MESSAGES, ApiKey, MessagePair

__all__ = [
    "MAX_REQUEST_BYTES",
    "MESSAGES",
    "ApiKey",
    "ErrorCode",
    "FrameError",
    "FrameTooLarge",
    "InvalidResponse",
    "MalformedRequest",
    "MessagePair",
    "ProtocolError",
    "Request",
    "RequestError",
    "TruncatedFrame",
    "UnknownApiKey",
    "UnsupportedVersion",
    "VersionTable",
    "api_versions_body",
    "check_frame_size",
    "decode_request",
    "encode_response",
    "encode_response_parts",
    "error_response_frame",
    "is_flexible",
    "read_frame",
]
