"""What the group coordinator refuses, each error carrying the Kafka error code it stands for."""

from __future__ import annotations

from typing import ClassVar

from kfs_core.errors import KfsError

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


class GroupError(KfsError):
    """A group request the coordinator refused; ``kafka_error_code`` says how."""

    kafka_error_code: ClassVar[int] = -1


class OffsetMetadataTooLarge(GroupError):
    """A commit's metadata string is longer than ``offset.metadata.max.bytes``."""

    kafka_error_code = 12


class CoordinatorNotAvailable(GroupError):
    """The coordinator is still loading or has stopped."""

    kafka_error_code = 15
    retriable = True


class IllegalGeneration(GroupError):
    """The request names a generation other than the group's current one."""

    kafka_error_code = 22


class InconsistentGroupProtocol(GroupError):
    """No protocol (or protocol type) in common with the group, or unreadable protocol bytes."""

    kafka_error_code = 23


class InvalidGroupId(GroupError):
    """The group id is empty or longer than the limit."""

    kafka_error_code = 24


class UnknownMemberId(GroupError):
    """The member id is not (or no longer) a member of the group."""

    kafka_error_code = 25


class InvalidSessionTimeout(GroupError):
    """The session timeout lies outside the broker's min and max."""

    kafka_error_code = 26


class RebalanceInProgress(GroupError):
    """The group is rebalancing: the member must rejoin."""

    kafka_error_code = 27


class NonEmptyGroup(GroupError):
    """The group still has members."""

    kafka_error_code = 68


class GroupIdNotFound(GroupError):
    """No group of that id exists."""

    kafka_error_code = 69


class MemberIdRequired(GroupError):
    """KIP-394: rejoin with the member id this error carries (``member_id``)."""

    kafka_error_code = 79

    member_id: str


class FencedInstanceId(GroupError):
    """Another member has taken over this static member's ``group.instance.id``."""

    kafka_error_code = 82


class GroupSubscribedToTopic(GroupError):
    """The group's live members subscribe to the topic whose offsets are being deleted."""

    kafka_error_code = 86
