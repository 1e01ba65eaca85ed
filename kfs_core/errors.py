"""The KFS exception hierarchy: one root, `KfsError`, with a `retriable` flag.

Every exception that carries fields keeps them in ``self.fields`` and rebuilds
itself from them when unpickled, so errors cross Spark executor and Airflow
task boundaries intact.  Keep "commit failed, retry" (`CatalogCommitConflict`)
apart from "commit state unknown" (`CatalogCommitStateUnknown`).
"""

from __future__ import annotations

from typing import Any


class KfsError(Exception):
    """Root of every error KFS raises on purpose."""

    retriable: bool = False

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

    def __init__(self, message: str = "", *, object_name: str = "?", offset: int = -1,
                 **fields: Any) -> None:
        super().__init__(message, object_name=object_name, offset=offset, **fields)

    def __str__(self) -> str:
        return f"{self.object_name}: corrupt at byte {self.offset}: {self.message}"


class CorruptRecordBatch(CorruptionError):
    """A Kafka RecordBatch failed its CRC, magic or length checks."""


class CorruptSegment(CorruptionError):
    """A `.kfs` segment file is truncated, bit-flipped or has the wrong magic."""


class CorruptIndex(CorruptionError):
    """A `.index` file is truncated, bit-flipped or has the wrong magic."""


class CorruptWal(CorruptionError):
    """A WAL frame failed its checks somewhere other than the torn tail."""


class UnsupportedCodec(KfsError):
    """A batch names a compression codec this build cannot handle."""


# --- object stores ---------------------------------------------------------


class ObjectStoreError(KfsError):
    """An object store request failed."""


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


class TopicAlreadyExists(CatalogError):
    """A topic of that name already exists."""


class InvalidTopicName(CatalogError):
    """The topic name breaks Kafka's rules."""


class InvalidConfig(CatalogError):
    """A topic config name is unknown or its value is out of range."""


class RemoveConflict(ReplaceConflict):
    """A remove named segments that are no longer live; a remove is a replace without outputs."""


class InvalidCatalogAction(CatalogError):
    """An action breaks a catalog rule: a reused key, outputs outside their inputs' offsets ..."""


class SegmentOverlap(InvalidCatalogAction):
    """An added segment's offsets overlap a live segment or lie below the log start offset."""


class LogStartOffsetRegression(InvalidCatalogAction):
    """The log start offset may only move forwards, and never past the high watermark."""


class CatalogVersionNotFound(CatalogError):
    """The requested catalog version does not exist: not yet committed, or expired."""


class InvalidPartitions(CatalogError):
    """A partition count is out of range (Kafka's INVALID_PARTITIONS)."""
