"""The KFS exception hierarchy: one root, `KfsError`, with a `retriable` flag.

Each error the Kafka server can answer with names its Kafka error code in the
class attribute ``kafka_error_code`` (``None``: no Kafka meaning, the server
answers UNKNOWN_SERVER_ERROR).  That attribute is the one exception-to-code
mapping: the server reads it (`kfs_core.server.apis.base.error_code_for`),
and a subclass inherits its parent's code.  Codes are plain ints here, so
no contract module imports the protocol layer; the names in the comments
are those of `kfs_core.server.protocol.ErrorCode`.

Every exception that carries fields keeps them in ``self.fields`` and rebuilds
itself from them when unpickled, so errors cross Spark executor and Airflow
task boundaries intact.  Keep "commit failed, retry" (`CatalogCommitConflict`)
apart from "commit state unknown" (`CatalogCommitStateUnknown`).
"""

from __future__ import annotations

from typing import Any, ClassVar


class KfsError(Exception):
    """Root of every error KFS raises on purpose."""

    retriable: bool = False
    kafka_error_code: ClassVar[int | None] = None

    def __init__(self, message: str = "", **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields
        for name, value in fields.items():
            setattr(self, name, value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.fields))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[KfsError], message: str, fields: dict[str, Any]) -> KfsError:
    return cls(message, **fields)


# --- data corruption -------------------------------------------------------


class CorruptionError(KfsError):
    """Stored bytes are not what a KFS writer produced.

    ``object_name`` names the file or object key, ``offset`` the byte offset
    where the reader found the problem.
    """

    object_name: str
    offset: int

    def __init__(
        self, message: str = "", *, object_name: str = "?", offset: int = -1, **fields: Any
    ) -> None:
        super().__init__(message, object_name=object_name, offset=offset, **fields)

    def __str__(self) -> str:
        return f"{self.object_name}: corrupt at byte {self.offset}: {self.message}"


class CorruptRecordBatch(CorruptionError):
    """A Kafka RecordBatch failed its CRC, magic or length checks."""

    kafka_error_code = 2  # CORRUPT_MESSAGE


class CorruptSegment(CorruptionError):
    """A `.kfs` segment file is truncated, bit-flipped or has the wrong magic."""


class CorruptIndex(CorruptionError):
    """A `.index` file is truncated, bit-flipped or has the wrong magic."""


class CorruptWal(CorruptionError):
    """A WAL frame failed its checks somewhere other than the torn tail."""


class UnsupportedCodec(KfsError):
    """A batch names a compression codec this build cannot handle."""

    kafka_error_code = 76  # UNSUPPORTED_COMPRESSION_TYPE


# --- object stores ---------------------------------------------------------


class ObjectStoreError(KfsError):
    """An object store request failed."""

    kafka_error_code = 56  # KAFKA_STORAGE_ERROR


class ObjectNotFound(ObjectStoreError):
    """The key does not exist."""


class ObjectAlreadyExists(ObjectStoreError):
    """A put-if-absent found the key already there: the conditional write lost."""


class PreconditionFailed(ObjectStoreError):
    """A conditional write (If-Match) found a different version."""


class TransientStoreError(ObjectStoreError):
    """Throttling, a 5xx or a network error that survived the retries."""

    retriable = True


# --- catalog ---------------------------------------------------------------


class CatalogError(KfsError):
    """The catalog refused or could not perform an operation."""


class CatalogCommitConflict(CatalogError):
    """Another writer committed this version first; re-read and retry."""

    retriable = True


class CatalogCommitStateUnknown(CatalogError):
    """The commit request failed in a way that leaves its outcome unknown."""


class ReplaceConflict(CatalogError):
    """A replace named input segments that are no longer live (removed meanwhile)."""


class CorruptCatalog(CorruptionError, CatalogError):
    """A catalog commit or checkpoint could not be parsed."""


class UnknownTopic(CatalogError):
    """The topic does not exist in the catalog."""

    kafka_error_code = 3  # UNKNOWN_TOPIC_OR_PARTITION


class TopicAlreadyExists(CatalogError):
    """A topic of that name already exists."""

    kafka_error_code = 36  # TOPIC_ALREADY_EXISTS


class InvalidTopicName(CatalogError):
    """The topic name breaks Kafka's rules."""

    kafka_error_code = 17  # INVALID_TOPIC_EXCEPTION


class InvalidConfig(CatalogError):
    """A topic config name is unknown or its value is out of range."""

    kafka_error_code = 40  # INVALID_CONFIG


class RemoveConflict(ReplaceConflict):
    """A remove named segments that are no longer live; a remove is a replace without outputs."""


class InvalidCatalogAction(CatalogError):
    """An action breaks a catalog rule: a reused key, outputs outside their inputs' offsets ..."""


class SegmentOverlap(InvalidCatalogAction):
    """An added segment's offsets overlap a live segment or lie below the log start offset."""


class SegmentConflict(InvalidCatalogAction):
    """A flush's segments collide with another writer's under the same keys or offsets.

    Retrying cannot help while the other entries stand: a second daemon is
    writing the partition.  The flush keeps its batches (in memory and in the
    WAL) and goes on retrying; callers waiting for it get this error instead.
    """


class LogStartOffsetRegression(InvalidCatalogAction):
    """The log start offset may only move forwards, and never past the high watermark."""


class LeaseConflict(CatalogError):
    """Another daemon took the lease first: a lease's epoch must be the newest lease's plus one.

    Never retried into success: the epoch it asked for is taken.  ``epoch``
    is the one asked for, ``catalog_epoch`` the newest lease's.
    """

    epoch: int
    catalog_epoch: int


class LeaseStartMoved(InvalidCatalogAction):
    """A lease's ``start_offset`` is no longer the log's end: a commit landed before it.

    `PartitionCatalog.take_lease` takes the lease again at the new end.
    """


class FencedLeaderEpoch(CatalogError):
    """A daemon's commit carries a leader epoch that is no longer the partition's newest lease.

    Another daemon took the partition (its lease commit is newer): the commit
    is refused, and the daemon must stop serving the partition.
    ``leader_epoch`` is the commit's, ``catalog_epoch`` the catalog's.
    """

    topic: str
    partition: int
    leader_epoch: int
    catalog_epoch: int

    kafka_error_code = 74  # FENCED_LEADER_EPOCH
    retriable = True


class CatalogVersionNotFound(CatalogError):
    """The requested catalog version does not exist: not yet committed, or expired."""


class InvalidPartitions(CatalogError):
    """A partition count is out of range (Kafka's INVALID_PARTITIONS)."""

    kafka_error_code = 37  # INVALID_PARTITIONS


# --- write-ahead log manager -----------------------------------------------


class WalError(KfsError):
    """The WAL refused or could not perform an operation."""

    kafka_error_code = 56  # KAFKA_STORAGE_ERROR


class WalNotRecovered(WalError):
    """An append or checkpoint before `WalWriter.recover()` scanned the WAL directory."""


class WalClosed(WalError):
    """An append or checkpoint after `WalWriter.close()`."""


class WalWriteFailed(WalError):
    """A write or fsync of the WAL failed.

    The frames it covered were never acknowledged and nothing is acknowledged
    after it: after a failed fsync the kernel may have dropped the dirty pages,
    so retrying could report durability that does not exist.  The daemon must
    stop and recover from the files on restart.  ``path`` names the WAL file.
    """


# --- partition log (produce, fetch, list offsets) ---------------------------
#
# What `kfs_core.log.LogManager` refuses.


class LogError(KfsError):
    """A produce, fetch or offset lookup the partition log refused."""

    kafka_error_code: ClassVar[int] = -1  # UNKNOWN_SERVER_ERROR


class OffsetOutOfRange(LogError):
    """The offset lies below the log start offset or above the high watermark."""

    kafka_error_code = 1


class CorruptMessage(LogError):
    """A produced batch failed its CRC-32C, length or magic check."""

    kafka_error_code = 2


class UnknownTopicOrPartition(LogError):
    """The topic does not exist, or has no partition of that number."""

    kafka_error_code = 3
    retriable = True  # as in Kafka: metadata may not have caught up yet


class RequestTimedOut(LogError):
    """The produce did not complete in its timeout (a full memory pool, a slow WAL)."""

    kafka_error_code = 7
    retriable = True


class MessageTooLarge(LogError):
    """A batch is larger than the topic's ``max.message.bytes`` (or the whole memory pool)."""

    kafka_error_code = 10


class InvalidRecord(LogError):
    """A produced batch is well formed but breaks a rule (record count, control batch ...)."""

    kafka_error_code = 87


class LogStorageError(LogError):
    """The WAL or the object store failed underneath a produce or fetch."""

    kafka_error_code = 56  # KAFKA_STORAGE_ERROR: clients refresh metadata and retry
    retriable = True


class LogClosed(LogError):
    """The log is shutting down; the client should look for the partition again."""

    kafka_error_code = 6  # NOT_LEADER_OR_FOLLOWER
    retriable = True


class NotLeaderOrFollower(LogError):
    """This daemon does not lead the partition (another holds its lease, or it is handing it over)."""

    kafka_error_code = 6  # NOT_LEADER_OR_FOLLOWER
    retriable = True


class PeerUnavailable(LogError):
    """Another daemon could not be asked: not live, no listener to reach it, or no answer.

    Retriable, as NOT_LEADER_OR_FOLLOWER is to a client: the caller tries
    again once the cluster view has moved on (`kfs_core.cluster.peers`).
    """

    kafka_error_code = 6  # NOT_LEADER_OR_FOLLOWER
    retriable = True


class UnknownLeaderEpoch(LogError):
    """A request names a leader epoch newer than the one this daemon knows for the partition."""

    kafka_error_code = 75  # UNKNOWN_LEADER_EPOCH
    retriable = True


class StoreWalUnavailable(LogStorageError):
    """A ``store``-mode WAL object could not be written: its appends are not acknowledged.

    Unlike `WalWriteFailed` the WAL goes on: later appends are tried again.
    """


# --- consumer groups -------------------------------------------------------
#
# What the group coordinator (`kfs_core.groups`) refuses.


class GroupError(KfsError):
    """A group request the coordinator refused; ``kafka_error_code`` says how."""

    kafka_error_code: ClassVar[int] = -1  # UNKNOWN_SERVER_ERROR


class OffsetMetadataTooLarge(GroupError):
    """A commit's metadata string is longer than ``offset.metadata.max.bytes``."""

    kafka_error_code = 12  # OFFSET_METADATA_TOO_LARGE


class CoordinatorNotAvailable(GroupError):
    """The coordinator is still loading or has stopped."""

    kafka_error_code = 15  # COORDINATOR_NOT_AVAILABLE
    retriable = True


class CoordinatorLoadInProgress(GroupError):
    """This daemon has just become the group's coordinator and is reading its offsets."""

    kafka_error_code = 14  # COORDINATOR_LOAD_IN_PROGRESS
    retriable = True


class NotCoordinator(GroupError):
    """Another daemon coordinates the group: the client finds it with FindCoordinator."""

    kafka_error_code = 16  # NOT_COORDINATOR
    retriable = True


class IllegalGeneration(GroupError):
    """The request names a generation other than the group's current one."""

    kafka_error_code = 22  # ILLEGAL_GENERATION


class InconsistentGroupProtocol(GroupError):
    """No protocol (or protocol type) in common with the group, or unreadable protocol bytes."""

    kafka_error_code = 23  # INCONSISTENT_GROUP_PROTOCOL


class InvalidGroupId(GroupError):
    """The group id is empty or longer than the limit."""

    kafka_error_code = 24  # INVALID_GROUP_ID


class UnknownMemberId(GroupError):
    """The member id is not (or no longer) a member of the group."""

    kafka_error_code = 25  # UNKNOWN_MEMBER_ID


class InvalidSessionTimeout(GroupError):
    """The session timeout lies outside the broker's min and max."""

    kafka_error_code = 26  # INVALID_SESSION_TIMEOUT


class RebalanceInProgress(GroupError):
    """The group is rebalancing: the member must rejoin."""

    kafka_error_code = 27  # REBALANCE_IN_PROGRESS


class NonEmptyGroup(GroupError):
    """The group still has members."""

    kafka_error_code = 68  # NON_EMPTY_GROUP


class GroupIdNotFound(GroupError):
    """No group of that id exists."""

    kafka_error_code = 69  # GROUP_ID_NOT_FOUND


class MemberIdRequired(GroupError):
    """KIP-394: rejoin with the member id this error carries (``member_id``)."""

    kafka_error_code = 79  # MEMBER_ID_REQUIRED

    member_id: str


class FencedInstanceId(GroupError):
    """Another member has taken over this static member's ``group.instance.id``."""

    kafka_error_code = 82  # FENCED_INSTANCE_ID


class GroupSubscribedToTopic(GroupError):
    """The group's live members subscribe to the topic whose offsets are being deleted."""

    kafka_error_code = 86  # GROUP_SUBSCRIBED_TO_TOPIC


# --- transactions -------------------------------------------------------------------
#
# What the transaction coordinator (`kfs_core.groups.transactions`) refuses.  The
# coordinator-wide refusals (not this daemon's, loading) are the group errors above.


class TransactionError(GroupError):
    """A transactional request the coordinator refused; ``kafka_error_code`` says how."""


class ConcurrentTransactions(TransactionError):
    """The transactional id's previous transaction is still being completed: retry."""

    kafka_error_code = 51  # CONCURRENT_TRANSACTIONS
    retriable = True


class ProducerFenced(TransactionError):
    """A newer producer with the same transactional id has a newer epoch."""

    kafka_error_code = 90  # PRODUCER_FENCED


class InvalidProducerIdMapping(TransactionError):
    """The producer id is not the one the coordinator gave the transactional id."""

    kafka_error_code = 49  # INVALID_PRODUCER_ID_MAPPING


class InvalidTransactionTimeout(TransactionError):
    """``transaction.timeout.ms`` above ``transaction.max.timeout.ms`` (or not positive)."""

    kafka_error_code = 50  # INVALID_TRANSACTION_TIMEOUT


class TransactionStateInvalid(TransactionError):
    """The request does not fit the transaction's state (EndTxn with nothing begun, say)."""

    kafka_error_code = 48  # INVALID_TXN_STATE


class TransactionalIdNotFound(TransactionError):
    """No such transactional id (DescribeTransactions)."""

    kafka_error_code = 105  # TRANSACTIONAL_ID_NOT_FOUND
