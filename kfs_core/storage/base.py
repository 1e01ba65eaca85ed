"""The one object-store interface every KFS component reads and writes through.

Keys are '/'-separated strings relative to the store's root (a directory for
`LocalObjectStore`, ``bucket/prefix`` for `S3ObjectStore`).  Byte ranges are
small frozen dataclasses that map straight onto an HTTP ``Range`` header.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class ByteRange:
    """A byte range of an object: ``length`` bytes from ``start``.

    A negative ``start`` with ``length=None`` is a suffix: the last ``-start``
    bytes.  ``length=None`` with ``start >= 0`` reads to the end.
    """

    start: int
    length: int | None = None

    def __post_init__(self) -> None:
        if self.start < 0 and self.length is not None:
            raise ValueError("a suffix range has no length")
        if self.length is not None and self.length <= 0:
            raise ValueError(f"range length must be positive, got {self.length}")

    @classmethod
    def last(cls, n: int) -> ByteRange:
        """The last ``n`` bytes of the object."""
        if n <= 0:
            raise ValueError(f"suffix length must be positive, got {n}")
        return cls(-n, None)

    def http_header(self) -> str:
        if self.start < 0:
            return f"bytes={self.start}"
        if self.length is None:
            return f"bytes={self.start}-"
        return f"bytes={self.start}-{self.start + self.length - 1}"


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    etag: str
    last_modified: float  # seconds since the epoch


class ObjectStore(abc.ABC):
    """put, put-if-absent, get, byte-range get, head, list by prefix, delete."""

    #: A URL that `open_store` turns back into an equivalent store.
    url: str

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> ObjectInfo:
        """Write ``data`` at ``key``, replacing any object there, atomically."""

    @abc.abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        """Write only if ``key`` does not exist; raise `ObjectAlreadyExists` otherwise.

        A real conditional write on every backend, never check-then-set.
        """

    @abc.abstractmethod
    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        """The object's bytes (or a range of them); `ObjectNotFound` if absent.

        A range that starts past the end raises `ObjectStoreError`; one that
        runs past the end is cut short, as HTTP does.
        """

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo:
        """Size, etag and mtime; `ObjectNotFound` if absent."""

    @abc.abstractmethod
    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in key order."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key``; deleting a missing key is not an error."""

    def exists(self, key: str) -> bool:
        from kfs_core.errors import ObjectNotFound

        try:
            self.head(key)
        except ObjectNotFound:
            return False
        return True

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the default has none."""
