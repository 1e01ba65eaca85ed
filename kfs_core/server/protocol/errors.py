"""Kafka error codes, and the errors the protocol layer raises.

`ErrorCode` holds the codes a broker puts in its responses, named as in
Kafka's ``org.apache.kafka.common.protocol.Errors``.  The exceptions below are
what `kfs_core.server.protocol.codec` raises when a frame cannot become a request;
each maps to the Kafka error code it stands for (``error_code``), and tells
the server what Kafka does in that case:

* `UnsupportedVersion` of ApiVersions: answer with an ApiVersions v0 body
  carrying UNSUPPORTED_VERSION and the version table (the client retries with
  a version from that table).
* every other `RequestError`, and every `FrameError`: Kafka closes the
  connection without a response, because the client can no longer be trusted
  to be in step with the byte stream.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, ClassVar

from kfs_core.errors import KfsError

__all__ = [
    "ErrorCode",
    "FrameError",
    "FrameTooLarge",
    "InvalidResponse",
    "MalformedRequest",
    "ProtocolError",
    "RequestError",
    "TruncatedFrame",
    "UnknownApiKey",
    "UnsupportedVersion",
]


class ErrorCode(IntEnum):
    """Kafka protocol error codes (``Errors.java``), as a broker sends them."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127


# --- errors ----------------------------------------------------------------


class ProtocolError(KfsError):
    """Bytes on a client connection that the protocol layer cannot accept."""

    error_code: ClassVar[ErrorCode] = ErrorCode.INVALID_REQUEST


class FrameError(ProtocolError):
    """The 4-byte size prefix, or the frame it announces, is unusable.

    ``size`` is the announced size (-1 when unknown), ``limit`` the largest
    size the server accepts.  Kafka closes the connection.
    """

    size: int
    limit: int

    def __init__(
        self, message: str = "", *, size: int = -1, limit: int = -1, **fields: Any
    ) -> None:
        super().__init__(message, size=size, limit=limit, **fields)


class FrameTooLarge(FrameError):
    """The size prefix is negative or above ``socket.request.max.bytes``."""


class TruncatedFrame(FrameError):
    """The connection ended inside a size prefix or a frame."""


class RequestError(ProtocolError):
    """A frame whose request header or body cannot be served.

    Carries what could be read of the header, so the server can answer (or
    log) against the right correlation id; a field that could not be read is
    ``None``.
    """

    api_key: int | None
    api_version: int | None
    correlation_id: int | None
    client_id: str | None

    def __init__(
        self,
        message: str = "",
        *,
        api_key: int | None = None,
        api_version: int | None = None,
        correlation_id: int | None = None,
        client_id: str | None = None,
        **fields: Any,
    ) -> None:
        super().__init__(
            message,
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
            client_id=client_id,
            **fields,
        )


class MalformedRequest(RequestError):
    """The header or body is truncated, has trailing bytes, or holds invalid values."""


class UnknownApiKey(RequestError):
    """The header names an API key this server does not implement."""


class UnsupportedVersion(RequestError):
    """The header names a version of a known API outside the server's range."""

    error_code: ClassVar[ErrorCode] = ErrorCode.UNSUPPORTED_VERSION


class InvalidResponse(ProtocolError):
    """A response body could not be encoded: a server bug, never the client's fault."""

    error_code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR
