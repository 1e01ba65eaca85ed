"""`LocalObjectStore`: the embedded default, an `ObjectStore` on a local directory.

Each key is a file under the root: ``ns/topic/0/segment-….kfs`` lives at
``{root}/ns/topic/0/segment-….kfs``.  A write goes to a temporary file in the
target directory, is fsynced, and then appears under its name in one atomic
step: ``os.replace`` for `put`; ``os.link`` for `put_if_absent`, which fails
when the name exists, so the kernel decides the conditional write and there is
no check-then-set window.  The directory is fsynced afterwards so the new name
survives a crash.  Temporary files are named ``.kfs-tmp-<random>``; that prefix
is reserved by the key rules (`check_key`), so they are never listed and can
never be read as objects.  A crash can leave one behind: `purge_temp_files`
removes old ones.  Objects of `DIRECT_MIN_BYTES` and more (segments) are
written with ``O_DIRECT`` where the filesystem allows
(`kfs_core.storage.direct_io`), so a flush does not fill the page cache with
bytes nobody reads soon; smaller ones go through the page cache.

Etags come from ``stat`` (device, inode, size, mtime in nanoseconds), hashed
to 32 hex digits.  Every write creates a new file, a new inode with a fresh
mtime, so the etag changes with every version, and `head` and `list` cost one
``stat`` instead of reading a whole segment to hash it.

A directory tree cannot hold a key that is both an object and the prefix of
other keys (``a/b`` and ``a/b/c``), which S3 allows; writing one raises
`ObjectStoreError`.  KFS's key layout never does this.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from kfs_core.errors import ObjectAlreadyExists, ObjectNotFound, ObjectStoreError
from kfs_core.storage import direct_io
from kfs_core.storage.base import (
    RESERVED_SEGMENT_PREFIX,
    ByteRange,
    ObjectInfo,
    ObjectStore,
    check_key,
    check_prefix,
)
from kfs_core.storage.direct_io import Buffer

_TEMP_PREFIX = RESERVED_SEGMENT_PREFIX + "-"
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
# Objects this large (segments) are written with O_DIRECT where the filesystem
# allows (`kfs_core.storage.direct_io`): nothing reads them back soon enough to
# be worth a page-cache copy.  Smaller ones (catalog commits, indexes,
# snapshots) are read again at once and go through the page cache.
DIRECT_MIN_BYTES = 1 << 20
# In this process, a delete prunes empty directories and a writer makes its
# directories and creates its temporary file under this one lock, so no delete
# can prune a directory between a writer's mkdir and its create.  (One lock for
# every store: two stores may share a root.)  It guards only those few system
# calls, not the write itself.
_DIRECTORY_LOCK = threading.Lock()
# Another process's delete may still prune a directory between our mkdir and
# our create; we recreate it and try again this many times.
_CREATE_ATTEMPTS = 16


class LocalObjectStore(ObjectStore):
    """An `ObjectStore` on a directory; thread-safe and picklable (it holds only a path)."""

    # One write at a time, all flushes together: a PUT here is a disk write and
    # fsyncs with no network latency to hide.  Four side by side in one flush
    # only made the writing threads take turns at the GIL: 0.3 ms more of the
    # daemon's CPU per produced MB (`bench.produce_cpu`), at the same
    # throughput; four partitions' flushes side by side queued their segments
    # ahead of the WAL's writes on a disk that serves one request at a time.
    put_concurrency = 1

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = os.path.abspath(os.fspath(root))
        self._direct = True  # large writes try O_DIRECT until the filesystem refuses it
        try:
            os.makedirs(self._root, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as exc:
            raise ObjectStoreError(
                f"store root {self._root} exists and is not a directory", root=self._root
            ) from exc
        self.url = _path_to_url(self._root)

    @property
    def root(self) -> str:
        """The absolute path of the store's directory."""
        return self._root

    def __repr__(self) -> str:
        return f"LocalObjectStore({self._root!r})"

    # --- writes ---------------------------------------------------------------

    def put(self, key: str, data: bytes) -> ObjectInfo:
        return self.put_parts(key, (data,))

    def put_parts(self, key: str, parts: Sequence[Buffer]) -> ObjectInfo:
        return self.put_many(((key, parts),))[0]

    def put_many(self, objects: Sequence[tuple[str, Sequence[Buffer]]]) -> list[ObjectInfo]:
        """Each object written, fsynced and renamed into place in turn; then each directory fsynced once.

        A flush's segments and their indexes share a directory: one
        directory fsync makes all their names durable, where one per object
        cost a device flush each.
        """
        infos = []
        directories: dict[str, str] = {}  # directory -> the first key written there
        for key, parts in objects:
            path = self._path(key)
            directory = os.path.dirname(path)
            temp, written = self._write_temp(key, directory, parts)
            try:
                os.replace(temp, path)
            except OSError as exc:
                _remove_quietly(temp)
                if os.path.isdir(path):
                    raise self._prefix_conflict(key, key) from exc
                raise self._os_error("put", key, exc) from exc
            directories.setdefault(directory, key)
            infos.append(_info(key, written))
        for directory, key in directories.items():
            self._sync_directory(key, directory)
        return infos

    def put_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        path = self._path(key)
        directory = os.path.dirname(path)
        temp, written = self._write_temp(key, directory, (data,))
        try:
            os.link(temp, path, follow_symlinks=False)
        except FileExistsError:
            if os.path.isdir(path):
                raise self._prefix_conflict(key, key) from None
            raise ObjectAlreadyExists(f"{key!r} already exists in {self.url}", key=key) from None
        except OSError as exc:
            raise self._os_error("put_if_absent", key, exc) from exc
        finally:
            _remove_quietly(temp)
        self._sync_directory(key, directory)
        return _info(key, written)

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return  # nothing there, or only a prefix of other keys: no object to delete
        except PermissionError as exc:
            if os.path.isdir(path):  # macOS reports unlink(dir) as EPERM
                return
            raise self._os_error("delete", key, exc) from exc
        except OSError as exc:
            raise self._os_error("delete", key, exc) from exc
        directory = os.path.dirname(path)
        self._sync_directory(key, directory)
        self._prune_empty_directories(directory)

    # --- reads ----------------------------------------------------------------

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        path = self._path(key)
        try:
            file = open(path, "rb")  # noqa: SIM115 - closed by the with below
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise self._not_found(key) from None
        except OSError as exc:
            raise self._os_error("get", key, exc) from exc
        with file:
            # Objects are never modified in place (writes replace the file), so
            # the size seen here matches the bytes we read from this handle.
            size = os.fstat(file.fileno()).st_size
            if byte_range is None:
                return file.read()
            try:
                start, stop = byte_range.resolve(size)
            except ValueError as exc:
                raise ObjectStoreError(f"{key!r}: {exc}", key=key, size=size) from None
            file.seek(start)
            return file.read(stop - start)

    def head(self, key: str) -> ObjectInfo:
        path = self._path(key)
        try:
            st = os.stat(path, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            raise self._not_found(key) from None
        except OSError as exc:
            raise self._os_error("head", key, exc) from exc
        if not stat.S_ISREG(st.st_mode):
            raise self._not_found(key)
        return _info(key, st)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        check_prefix(prefix)
        parent, _, name_prefix = prefix.rpartition("/")
        if parent:
            directory = os.path.join(self._root, *parent.split("/"))
            return self._walk(directory, parent + "/", name_prefix, start_after)
        return self._walk(self._root, "", name_prefix, start_after)

    def _walk(
        self, directory: str, key_prefix: str, name_prefix: str, start_after: str | None
    ) -> Iterator[ObjectInfo]:
        """Objects under ``directory`` in key order.

        Sorting a directory's entries by name, with ``/`` appended to
        subdirectories, gives exactly the order of the full keys: every key
        below ``d/`` starts with ``d/``, and no sibling name contains ``/``.
        """
        entries: list[tuple[str, str, bool]] = []
        try:
            with os.scandir(directory) as scan:
                for entry in scan:
                    name = entry.name
                    if not name.startswith(name_prefix) or name.startswith(_TEMP_PREFIX):
                        continue
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            entries.append((key_prefix + name + "/", entry.path, True))
                        elif entry.is_file(follow_symlinks=False):
                            entries.append((key_prefix + name, entry.path, False))
                    except OSError:
                        continue  # removed while we looked
        except (FileNotFoundError, NotADirectoryError):
            return  # no such prefix, or pruned by a concurrent delete
        entries.sort()
        for sort_key, path, is_directory in entries:
            if is_directory:
                if start_after is not None and _subtree_before(sort_key, start_after):
                    continue
                yield from self._walk(path, sort_key, "", start_after)
            elif start_after is None or sort_key > start_after:
                try:
                    st = os.stat(path, follow_symlinks=False)
                except (FileNotFoundError, NotADirectoryError):
                    continue  # deleted after we listed it
                yield _info(sort_key, st)

    # --- housekeeping ---------------------------------------------------------

    def purge_temp_files(self, older_than: float = 3600.0) -> int:
        """Remove temporary files a crashed writer left, if older than ``older_than`` seconds.

        Younger ones may belong to a write in progress.  Returns how many were removed.
        """
        cutoff = time.time() - older_than
        removed = 0
        for directory, _subdirectories, files in os.walk(self._root):
            for name in files:
                if not name.startswith(_TEMP_PREFIX):
                    continue
                path = os.path.join(directory, name)
                try:
                    if os.stat(path, follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(path)
                        removed += 1
                except FileNotFoundError:
                    continue
        return removed

    # --- helpers ----------------------------------------------------------------

    def _path(self, key: str) -> str:
        # check_key rejects '..', '.', empty segments, backslashes and absolute
        # keys, so the joined path cannot leave the root.
        return os.path.join(self._root, *check_key(key).split("/"))

    def _write_temp(
        self, key: str, directory: str, parts: Sequence[Buffer]
    ) -> tuple[str, os.stat_result]:
        """Write ``parts``, one after another, to a fresh, fsynced temporary file in ``directory``.

        Returns its path and its stat (what the object will have once renamed
        or linked: neither changes the inode, size or mtime).
        """
        for _attempt in range(_CREATE_ATTEMPTS):
            temp = os.path.join(directory, f"{_TEMP_PREFIX}{uuid.uuid4().hex}")
            try:
                with _DIRECTORY_LOCK:
                    self._make_directories(key, directory)
                    fd, direct = self._create(temp, sum(memoryview(p).nbytes for p in parts))
                break
            except FileNotFoundError:
                continue  # a concurrent delete pruned a directory: make it again
            except OSError as exc:
                raise self._os_error("write", key, exc) from exc
        else:
            raise ObjectStoreError(
                f"could not create a temporary file for {key!r} in {directory}: "
                "the directory kept disappearing",
                key=key,
            )
        try:
            try:
                if not (direct and self._write_direct(fd, parts)):
                    for part in parts:
                        view = memoryview(part).cast("B")
                        done = 0
                        while done < len(view):
                            done += os.write(fd, view[done:])
                os.fsync(fd)
                written = os.fstat(fd)
            finally:
                os.close(fd)
        except BaseException as exc:
            _remove_quietly(temp)
            if isinstance(exc, OSError):
                raise self._os_error("write", key, exc) from exc
            raise
        return temp, written

    def _create(self, temp: str, size: int) -> tuple[int, bool]:
        """Create ``temp`` for a write of ``size`` bytes; True if opened with ``O_DIRECT``."""
        if size >= DIRECT_MIN_BYTES and self._direct:
            fd = direct_io.open_direct(temp, _CREATE_FLAGS, 0o666)
            if fd is not None:
                return fd, True
            self._direct = False  # the filesystem refused O_DIRECT: stop asking
            # Linux creates the file before it checks O_DIRECT: the name is
            # ours (random), so remove what the refused open left.
            _remove_quietly(temp)
        return os.open(temp, _CREATE_FLAGS, 0o666), False

    def _write_direct(self, fd: int, parts: Sequence[Buffer]) -> bool:
        """Write all of ``parts`` to ``fd`` (opened ``O_DIRECT``); False if the filesystem refused."""
        try:
            size = direct_io.write_file(fd, parts)
        except direct_io.DirectUnsupported:
            self._direct = False
            # Nothing was written: clear O_DIRECT and write through the page cache.
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_DIRECT)
            return False
        os.ftruncate(fd, size)  # cut the zero padding of the last block
        return True

    def _make_directories(self, key: str, directory: str) -> None:
        """Create ``directory`` and any missing parents, fsyncing each new entry's parent."""
        if directory == self._root or os.path.isdir(directory):
            return
        parent = os.path.dirname(directory)
        self._make_directories(key, parent)
        try:
            os.mkdir(directory)
        except FileExistsError:
            if os.path.isdir(directory):
                return  # a concurrent writer made it
            if not os.path.lexists(directory):
                # Made by a concurrent writer, then pruned by a concurrent delete
                # before we looked: the caller makes it again.
                raise FileNotFoundError(directory) from None
            raise self._prefix_conflict(key, self._relative(directory)) from None
        except NotADirectoryError:
            raise self._prefix_conflict(key, self._relative(parent)) from None
        self._sync_directory(key, parent)

    def _prune_empty_directories(self, directory: str) -> None:
        # A directory holding a writer's temporary file is never empty, and in
        # this process no writer is between its mkdir and its create while we
        # hold the lock; writers in other processes recreate a directory that
        # vanishes under them (_write_temp).
        with _DIRECTORY_LOCK:
            while directory != self._root and directory.startswith(self._root + os.sep):
                try:
                    os.rmdir(directory)
                except OSError:
                    return  # not empty (or already gone): stop climbing
                directory = os.path.dirname(directory)

    def _sync_directory(self, key: str, directory: str) -> None:
        try:
            fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except FileNotFoundError:
            # Pruned by a concurrent delete, so whatever we wrote in it has
            # been deleted since: nothing is left to make durable.
            return
        except OSError as exc:
            raise self._os_error("fsync directory of", key, exc) from exc
        try:
            os.fsync(fd)
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOTSUP):  # fs without directory fsync
                raise self._os_error("fsync directory of", key, exc) from exc
        finally:
            os.close(fd)

    def _relative(self, path: str) -> str:
        return os.path.relpath(path, self._root).replace(os.sep, "/")

    def _not_found(self, key: str) -> ObjectNotFound:
        return ObjectNotFound(f"{key!r} not found in {self.url}", key=key)

    def _prefix_conflict(self, key: str, where: str) -> ObjectStoreError:
        return ObjectStoreError(
            f"cannot write {key!r} in {self.url}: {where!r} would have to be both an object "
            "and a prefix of other keys, which a directory store cannot hold",
            key=key,
        )

    def _os_error(self, operation: str, key: str, exc: OSError) -> ObjectStoreError:
        reason = exc.strerror or str(exc)
        return ObjectStoreError(f"{operation} {key!r} in {self.url}: {reason}", key=key)


def _info(key: str, st: os.stat_result) -> ObjectInfo:
    identity = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}".encode()
    etag = hashlib.blake2b(identity, digest_size=16).hexdigest()
    return ObjectInfo(key=key, size=st.st_size, etag=etag, last_modified=st.st_mtime_ns / 1e9)


def _subtree_before(directory_key: str, start_after: str) -> bool:
    """True if every key under ``directory_key`` (which ends in '/') is <= ``start_after``.

    Keys below the directory all start with ``directory_key``.  If
    ``start_after`` sorts after that prefix without starting with it, the two
    differ at a position inside the prefix, so it sorts after all of them.
    """
    return start_after > directory_key and not start_after.startswith(directory_key)


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _path_to_url(path: str) -> str:
    return Path(path).as_uri()
