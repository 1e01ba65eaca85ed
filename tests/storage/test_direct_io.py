"""`kfs_core.storage.direct_io`: O_DIRECT appends and whole-file writes land byte for byte.

The files are real (the test's tmp directory, ext4 or tmpfs here, both take
``O_DIRECT``).  What is checked is what a reader sees afterwards: the bytes
written, in place, and zeros after them -- the WAL's zero-filled invariant.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import os
import random
from pathlib import Path

import pytest

from kfs_core.storage import direct_io
from kfs_core.storage.direct_io import (
    BLOCK,
    DirectAppender,
    DirectUnsupported,
    StagingPool,
    open_direct,
    read_tail,
    write_file,
)
from kfs_core.storage.local import DIRECT_MIN_BYTES, LocalObjectStore

pytestmark = pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="needs O_DIRECT")


def zero_file(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.truncate(size)


def direct_fd(path: Path) -> int:
    fd = open_direct(str(path), os.O_RDWR)
    if fd is None:
        pytest.skip(f"{path.parent} takes no O_DIRECT")
    return fd


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_appends_of_any_size_land_in_place_and_leave_zeros_after_them(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    print(f"seed {seed}")
    size = 64 * BLOCK
    path = tmp_path / "wal"
    zero_file(path, size)
    fd = direct_fd(path)
    appender = DirectAppender(staging=4 * BLOCK)  # small, so appends cross it
    try:
        appender.start(fd, 0)
        expected = bytearray()
        while True:
            # Several buffers per append (a frame is header, batch, footer).
            parts = [
                rng.randbytes(rng.choice([1, 7, 100, BLOCK - 1, BLOCK, 5000, 17000]))
                for _ in range(rng.randint(1, 4))
            ]
            if len(expected) + sum(map(len, parts)) > size:
                break
            assert appender.append(parts) == sum(map(len, parts))
            expected += b"".join(parts)
            assert appender.end == len(expected)
            data = path.read_bytes()
            assert len(data) == size  # padding never grows the file
            assert data[: len(expected)] == expected
            assert data[len(expected) :].count(0) == size - len(expected)
    finally:
        appender.close()
        os.close(fd)


def test_an_appender_resumes_a_file_mid_block_without_changing_what_it_holds(
    tmp_path: Path,
) -> None:
    path = tmp_path / "wal"
    zero_file(path, 8 * BLOCK)
    first = os.urandom(BLOCK + 123)
    with open(path, "r+b") as f:  # written earlier, through the page cache
        f.write(first)
    fd = direct_fd(path)
    appender = DirectAppender(staging=2 * BLOCK)
    try:
        tail = read_tail(str(path), len(first))
        assert tail == first[BLOCK:]
        appender.start(fd, len(first), tail)
        more = os.urandom(3 * BLOCK + 5)
        appender.append([more])
        assert path.read_bytes()[: len(first) + len(more)] == first + more
    finally:
        appender.close()
        os.close(fd)
    with pytest.raises(ValueError, match="tail"):
        DirectAppender().start(fd, 10, b"")


@pytest.mark.parametrize("length", [1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 17, 9 * BLOCK])
def test_a_whole_file_write_is_cut_to_its_length(tmp_path: Path, length: int) -> None:
    path = tmp_path / "segment"
    data = os.urandom(length)
    fd = open_direct(str(path), os.O_RDWR | os.O_CREAT)
    assert fd is not None
    # Parts of every size, as a segment's header, batches and footer come.
    cuts = sorted({0, length, *(min(length, c) for c in (7, BLOCK, BLOCK + 3, 2 * BLOCK + 1))})
    parts = [memoryview(data)[a:b] for a, b in itertools.pairwise(cuts)]
    try:
        assert write_file(fd, parts, StagingPool(size=2 * BLOCK)) == length
        os.ftruncate(fd, length)
    finally:
        os.close(fd)
    assert path.read_bytes() == data


def test_the_staging_pool_reuses_buffers_and_keeps_a_few() -> None:
    pool = StagingPool(size=BLOCK, keep=1)
    a, b = pool.take(), pool.take()
    pool.give(a)
    pool.give(b)  # beyond keep: closed
    assert b.closed and not a.closed
    assert pool.take() is a
    with pytest.raises(ValueError, match="multiple"):
        StagingPool(size=100)


def test_a_filesystem_refusing_direct_writes_gets_them_through_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some filesystems open with O_DIRECT and then refuse the write (EINVAL): nothing is lost."""
    real_pwrite = os.pwrite

    def refuse_direct(fd: int, data: object, offset: int) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, data, offset)  # type: ignore[arg-type]

    monkeypatch.setattr(direct_io.os, "pwrite", refuse_direct)
    store = LocalObjectStore(tmp_path / "store")
    big = os.urandom(DIRECT_MIN_BYTES + 5)
    store.put("ns/t/0/segment-1.kfs", big)
    assert store.get("ns/t/0/segment-1.kfs") == big
    assert store._direct is False  # it stopped asking
    store.put("ns/t/0/segment-2.kfs", big)
    assert store.get("ns/t/0/segment-2.kfs") == big

    path = tmp_path / "wal"
    zero_file(path, 4 * BLOCK)
    fd = direct_fd(path)
    appender = DirectAppender(staging=BLOCK)
    try:
        appender.start(fd, 0)
        with pytest.raises(DirectUnsupported):
            appender.append([b"x" * 10])
        assert path.read_bytes().count(0) == 4 * BLOCK  # nothing was written
    finally:
        appender.close()
        os.close(fd)


def test_large_objects_of_the_local_store_are_written_direct_and_read_back(
    tmp_path: Path,
) -> None:
    store = LocalObjectStore(tmp_path / "store")
    for length in (DIRECT_MIN_BYTES, DIRECT_MIN_BYTES + 1, 5 * DIRECT_MIN_BYTES + 4095):
        data = os.urandom(length)
        info = store.put(f"ns/t/0/segment-{length}.kfs", data)
        assert info.size == length
        assert store.get(f"ns/t/0/segment-{length}.kfs") == data
        assert store.put_if_absent(f"ns/t/0/copy-{length}.kfs", data).size == length
        assert store.get(f"ns/t/0/copy-{length}.kfs") == data
    assert store._direct  # this filesystem took them


def test_a_filesystem_refusing_direct_opens_gets_large_objects_through_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Linux does on such filesystems: the file is created, then the O_DIRECT open fails."""
    real_open = os.open

    def refuse_direct(path: str, flags: int, mode: int = 0o777, **kwargs: object) -> int:
        if flags & os.O_DIRECT:
            os.close(real_open(path, flags & ~os.O_DIRECT, mode))
            raise OSError(errno.EINVAL, "Invalid argument", path)
        return real_open(path, flags, mode, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(direct_io.os, "open", refuse_direct)
    store = LocalObjectStore(tmp_path / "store")
    big = os.urandom(DIRECT_MIN_BYTES)
    store.put("ns/t/0/segment-1.kfs", big)
    monkeypatch.undo()
    assert store.get("ns/t/0/segment-1.kfs") == big
    assert store._direct is False
    assert [p.name for p in (tmp_path / "store/ns/t/0").iterdir()] == ["segment-1.kfs"]
