"""What the group coordinator refuses: the group errors of `kfs_core.errors`, by their old home.

The classes live in `kfs_core.errors` beside every other error that names
a Kafka error code (``kafka_error_code``), so one module holds the whole
exception-to-code mapping; this module keeps the coordinator's imports
working.
"""

from __future__ import annotations

from kfs_core.errors import (
    CoordinatorNotAvailable,
    FencedInstanceId,
    GroupError,
    GroupIdNotFound,
    GroupSubscribedToTopic,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidGroupId,
    InvalidSessionTimeout,
    MemberIdRequired,
    NonEmptyGroup,
    OffsetMetadataTooLarge,
    RebalanceInProgress,
    UnknownMemberId,
)

__all__ = [
    "CoordinatorNotAvailable",
    "FencedInstanceId",
    "GroupError",
    "GroupIdNotFound",
    "GroupSubscribedToTopic",
    "IllegalGeneration",
    "InconsistentGroupProtocol",
    "InvalidGroupId",
    "InvalidSessionTimeout",
    "MemberIdRequired",
    "NonEmptyGroup",
    "OffsetMetadataTooLarge",
    "RebalanceInProgress",
    "UnknownMemberId",
]
