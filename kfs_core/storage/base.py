"""The one object-store interface every KFS component reads and writes through.

Keys are '/'-separated strings relative to the store's root (a directory for
`LocalObjectStore`, ``bucket/prefix`` for `S3ObjectStore`).  Byte ranges are
small frozen dataclasses that map straight onto an HTTP ``Range`` header.

Key rules are the same on every backend, so code that works against one store
works against all of them (`check_key`): a key is non-empty, at most 1024 bytes
of UTF-8, has no leading or trailing ``/``, no empty, ``.`` or ``..`` segments,
no backslash or NUL, no segment longer than 255 bytes, and no segment starting
with ``.kfs-tmp`` (reserved for a backend's scratch files).  Breaking a rule
raises ``ValueError``.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

#: Segments starting with this are reserved for a backend's temporary files.
RESERVED_SEGMENT_PREFIX = ".kfs-tmp"
MAX_KEY_BYTES = 1024  # S3's limit
MAX_SEGMENT_BYTES = 255  # NAME_MAX of common filesystems


def _check_segment(segment: str, what: str, value: str) -> None:
    if segment in ("", ".", ".."):
        raise ValueError(f"{what} {value!r} has an empty, '.' or '..' segment")
    if segment.startswith(RESERVED_SEGMENT_PREFIX):
        raise ValueError(
            f"{what} {value!r}: segments starting with {RESERVED_SEGMENT_PREFIX!r} are reserved"
        )
    if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
        raise ValueError(f"{what} {value!r} has a segment longer than {MAX_SEGMENT_BYTES} bytes")


def _check_characters(value: str, what: str) -> None:
    if "\\" in value:
        raise ValueError(f"{what} {value!r} contains a backslash; use '/' between segments")
    if "\0" in value:
        raise ValueError(f"{what} {value!r} contains a NUL character")
    if value.startswith("/"):
        raise ValueError(f"{what} {value!r} is absolute; keys are relative to the store root")


def check_key(key: str) -> str:
    """Return ``key`` unchanged if it follows the key rules; raise ValueError otherwise."""
    if not isinstance(key, str):
        raise TypeError(f"object key must be a str, got {type(key).__name__}")
    if not key:
        raise ValueError("object key is empty")
    _check_characters(key, "object key")
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise ValueError(f"object key {key[:60]!r}... is longer than {MAX_KEY_BYTES} bytes")
    for segment in key.split("/"):
        _check_segment(segment, "object key", key)
    return key


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` unchanged if it is a valid listing prefix; raise ValueError otherwise.

    A prefix is a key's beginning: it may be empty, end with ``/`` or stop in
    the middle of a segment (``"ns/topic/0/segment-0000"``).  Its complete
    segments follow the key rules; the unfinished last one only filters names.
    """
    if not isinstance(prefix, str):
        raise TypeError(f"listing prefix must be a str, got {type(prefix).__name__}")
    _check_characters(prefix, "listing prefix")
    for segment in prefix.split("/")[:-1]:
        _check_segment(segment, "listing prefix", prefix)
    return prefix


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

    def resolve(self, size: int) -> tuple[int, int]:
        """``(start, stop)`` of this range within an object of ``size`` bytes.

        Follows HTTP: a range starting at or past the end is unsatisfiable
        (ValueError), one running past the end is cut short, and a suffix
        longer than the object means all of it.
        """
        if self.start < 0:
            return max(0, size + self.start), size
        if self.start >= size:
            raise ValueError(
                f"range {self.http_header()} starts at or past the end of a {size}-byte object"
            )
        stop = size if self.length is None else min(size, self.start + self.length)
        return self.start, stop

    def http_header(self) -> str:
        if self.start < 0:
            return f"bytes={self.start}"
        if self.length is None:
            return f"bytes={self.start}-"
        return f"bytes={self.start}-{self.start + self.length - 1}"


@dataclass(frozen=True)
class ObjectInfo:
    """What a store knows about one object.

    ``etag`` is opaque and unquoted.  Different content means a different
    etag; rewriting the same bytes may keep it (S3: an MD5 of the content) or
    change it (local: derived from the file's identity).
    """

    key: str
    size: int
    etag: str
    last_modified: float  # seconds since the epoch


class ObjectStore(abc.ABC):
    """put, put-if-absent, get, byte-range get, head, list by prefix, delete."""

    #: A URL that `open_store` turns back into an equivalent store.
    url: str
    #: How many PUTs are worth running side by side, all flushes together;
    #: None: each flush runs up to the daemon's ``upload_concurrency``.  An
    #: object store over HTTP hides each request's latency behind the others;
    #: a local disk does not, and more writes queued ahead of the WAL's only delay it.
    put_concurrency: int | None = None

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> ObjectInfo:
        """Write ``data`` at ``key``, replacing any object there, atomically."""

    def put_parts(self, key: str, parts: Sequence[bytes | bytearray | memoryview]) -> ObjectInfo:
        """`put` of the concatenation of ``parts``.

        A backend that can write the parts one after another (the local
        store) does so without joining them first; this default joins.
        """
        return self.put(key, b"".join(parts))

    def put_many(
        self, objects: Sequence[tuple[str, Sequence[bytes | bytearray | memoryview]]]
    ) -> list[ObjectInfo]:
        """`put_parts` of each ``(key, parts)`` in order; all durable when it returns.

        Not atomic as a whole: a failure may leave the earlier objects
        written, and not yet durable.  A backend that can make several objects durable together
        (the local store: one directory fsync) overrides this.
        """
        return [self.put_parts(key, parts) for key, parts in objects]

    @abc.abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        """Write only if ``key`` does not exist; raise `ObjectAlreadyExists` otherwise.

        A real conditional write on every backend, never check-then-set.
        """

    @abc.abstractmethod
    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        """The object's bytes (or a range of them); `ObjectNotFound` if absent.

        A range that starts at or past the end raises `ObjectStoreError`; one
        that runs past the end is cut short, and a suffix longer than the
        object returns all of it (an empty object gives ``b""``), as HTTP does.
        """

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo:
        """Size, etag and mtime; `ObjectNotFound` if absent."""

    @abc.abstractmethod
    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in key order.

        Key order is code-point order, which is S3's UTF-8 byte order.  With
        ``start_after``, only keys sorting strictly after it are returned
        (the way to resume a listing).  The prefix is checked (`check_prefix`)
        when this is called; objects are fetched lazily as the iterator runs.
        """

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
