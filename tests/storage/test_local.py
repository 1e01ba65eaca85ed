"""`LocalObjectStore`: the shared contract, plus what only a directory can get wrong."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest

from kfs_core.errors import ObjectAlreadyExists, ObjectNotFound, ObjectStoreError
from kfs_core.storage import ByteRange, LocalObjectStore, ObjectStore
from kfs_core.storage import local as local_module
from tests.storage.contract import ObjectStoreContract, keys_of

pytestmark = pytest.mark.unit

TEMP = ".kfs-tmp-"


class TestLocalStore(ObjectStoreContract):
    @pytest.fixture
    def store(self, local_store: LocalObjectStore) -> ObjectStore:
        return local_store


def files_under(root: str) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(directory, name), root)
        for directory, _dirs, names in os.walk(root)
        for name in names
    )


# --- keys cannot leave the root ------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["../outside", "a/../../outside", "/etc/passwd", "..\\outside", "a/b/../../../outside"],
)
def test_keys_escaping_the_root_are_rejected(tmp_path: Path, key: str) -> None:
    store = LocalObjectStore(tmp_path / "store")
    outside = tmp_path / "outside"
    outside.write_bytes(b"untouched")
    with pytest.raises(ValueError, match=r"absolute|'\.\.'|backslash"):
        store.put(key, b"overwritten")
    with pytest.raises(ValueError):
        store.get(key)
    with pytest.raises(ValueError):
        store.delete(key)
    assert outside.read_bytes() == b"untouched"
    assert files_under(store.root) == []


def test_root_is_created_and_must_be_a_directory(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "deep" / "store")
    assert os.path.isdir(store.root)
    assert store.url == (tmp_path / "deep" / "store").as_uri()
    (tmp_path / "a-file").write_bytes(b"")
    with pytest.raises(ObjectStoreError, match="not a directory"):
        LocalObjectStore(tmp_path / "a-file")


def test_relative_root_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = LocalObjectStore("relative/store")
    assert store.root == str(tmp_path / "relative" / "store")
    assert store.url.startswith("file:///")


def test_a_key_cannot_be_an_object_and_a_prefix(local_store: LocalObjectStore) -> None:
    local_store.put("a/b", b"object")
    with pytest.raises(ObjectStoreError, match="both an object and a prefix"):
        local_store.put("a/b/c", b"x")
    with pytest.raises(ObjectStoreError, match="both an object and a prefix"):
        local_store.put_if_absent("a/b/c", b"x")
    local_store.put("x/y/z", b"object")
    with pytest.raises(ObjectStoreError, match="both an object and a prefix"):
        local_store.put("x/y", b"x")
    with pytest.raises(ObjectStoreError, match="both an object and a prefix") as raised:
        local_store.put_if_absent("x/y", b"x")
    assert not isinstance(raised.value, ObjectAlreadyExists)
    assert files_under(local_store.root) == ["a/b", "x/y/z"]


# --- temporary files are never visible -----------------------------------------


def test_leftover_temp_files_are_invisible(local_store: LocalObjectStore) -> None:
    local_store.put("ns/t/0/segment.kfs", b"data")
    leftover = Path(local_store.root, "ns", "t", "0", f"{TEMP}deadbeef")
    leftover.write_bytes(b"half a segment")
    top_leftover = Path(local_store.root, f"{TEMP}cafe")
    top_leftover.write_bytes(b"junk")
    assert keys_of(local_store) == ["ns/t/0/segment.kfs"]
    assert keys_of(local_store, "ns/t/0/.kfs") == []
    with pytest.raises(ValueError, match="reserved"):
        local_store.get(f"ns/t/0/{TEMP}deadbeef")
    with pytest.raises(ValueError, match="reserved"):
        local_store.list(f"ns/{TEMP}x/")


def test_purge_temp_files_removes_only_old_ones(local_store: LocalObjectStore) -> None:
    local_store.put("a/b", b"x")
    old = Path(local_store.root, "a", f"{TEMP}old")
    young = Path(local_store.root, f"{TEMP}young")
    old.write_bytes(b"")
    young.write_bytes(b"")
    an_hour_ago = time.time() - 7200
    os.utime(old, (an_hour_ago, an_hour_ago))
    assert local_store.purge_temp_files(older_than=3600) == 1
    assert not old.exists()
    assert young.exists()
    assert local_store.get("a/b") == b"x"


@pytest.mark.parametrize("operation", ["put", "put_if_absent"])
def test_failed_write_leaves_no_temp_file(
    local_store: LocalObjectStore, monkeypatch: pytest.MonkeyPatch, operation: str
) -> None:
    local_store.put("ns/keep", b"kept")

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(ObjectStoreError, match="Input/output error"):
        getattr(local_store, operation)("ns/new", b"never stored")
    monkeypatch.undo()
    assert files_under(local_store.root) == ["ns/keep"]
    assert keys_of(local_store) == ["ns/keep"]
    with pytest.raises(ObjectNotFound):
        local_store.get("ns/new")


def test_lost_put_if_absent_leaves_no_temp_file(local_store: LocalObjectStore) -> None:
    local_store.put_if_absent("_log/1.json", b"winner")
    for _ in range(3):
        with pytest.raises(ObjectAlreadyExists):
            local_store.put_if_absent("_log/1.json", b"loser")
    assert files_under(local_store.root) == ["_log/1.json"]


def test_listing_during_writes_never_shows_temp_files(local_store: LocalObjectStore) -> None:
    done = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for i in range(200):
                local_store.put(f"d/k{i % 7}", os.urandom(2048))
                local_store.delete(f"d/k{(i + 3) % 7}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            done.set()

    writer = threading.Thread(target=write)
    writer.start()
    listings = 0
    while not done.is_set():
        for key in keys_of(local_store):
            assert TEMP not in key
        listings += 1
    writer.join()
    assert not errors
    assert listings > 0


# --- atomicity and durability ---------------------------------------------------


def test_readers_never_see_a_partial_object(local_store: LocalObjectStore) -> None:
    size = 2 * 1024 * 1024
    versions = 30
    local_store.put("hot/segment.kfs", bytes([0]) * size)
    writer_done = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for version in range(1, versions + 1):
                local_store.put("hot/segment.kfs", bytes([version]) * size)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            writer_done.set()

    seen: set[int] = set()
    writer = threading.Thread(target=write)
    writer.start()
    while not writer_done.is_set():
        data = local_store.get("hot/segment.kfs")
        assert len(data) == size
        assert data.count(data[0]) == size, "a reader saw two versions mixed"
        tail = local_store.get("hot/segment.kfs", ByteRange.last(4096))
        assert len(tail) == 4096 and tail.count(tail[0]) == 4096
        seen.add(data[0])
    writer.join()
    assert not errors
    assert local_store.get("hot/segment.kfs") == bytes([versions]) * size
    assert len(seen) >= 1


def test_put_fsyncs_the_file_and_its_directory(
    local_store: LocalObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    local_store.put("existing-dir-sibling", b"x")
    assert synced == ["file", "dir"]
    synced.clear()
    local_store.put_if_absent("new/dirs/key", b"x")
    # each new directory's parent (root, then new/), the file, the key's directory
    assert synced == ["dir", "dir", "file", "dir"]


def test_put_many_fsyncs_each_directory_once_after_its_files(
    local_store: LocalObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    local_store.put("a/seed", b"x")
    local_store.put("b/seed", b"x")
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            synced.append(
                next(
                    d
                    for d in ("a", "b")
                    if os.path.samestat(st, os.stat(os.path.join(local_store.root, d)))
                )
            )
        else:
            synced.append("file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    local_store.put_many(
        [("a/segment.kfs", [b"s" * 5000]), ("a/segment.index", [b"i"]), ("b/segment.kfs", [b"t"])]
    )
    # every file before any directory; a directory's fsync covers all its renames
    assert synced == ["file", "file", "file", "a", "b"]


def test_etag_changes_when_rewritten_with_same_bytes(local_store: LocalObjectStore) -> None:
    first = local_store.put("k", b"same")
    second = local_store.put("k", b"same")
    assert first.etag != second.etag
    assert local_store.head("k").etag == second.etag


def test_delete_prunes_empty_directories(local_store: LocalObjectStore) -> None:
    local_store.put("ns/t/0/a", b"x")
    local_store.put("ns/t/1/b", b"x")
    local_store.delete("ns/t/0/a")
    assert not os.path.exists(os.path.join(local_store.root, "ns", "t", "0"))
    assert os.path.isdir(os.path.join(local_store.root, "ns", "t", "1"))
    local_store.delete("ns/t/1/b")
    assert os.listdir(local_store.root) == []
    assert os.path.isdir(local_store.root)


def test_writes_survive_concurrent_pruning(
    local_store: LocalObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete pruning a directory while another thread writes into it.

    In one process the directory lock keeps every prune out of a writer's
    mkdir-to-create window, so not even one retry is needed (without the lock
    this fails within a few hundred writes).
    """
    monkeypatch.setattr(local_module, "_CREATE_ATTEMPTS", 1)
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:
        try:
            while not stop.is_set():
                local_store.put("p/q/churn", b"x")
                local_store.delete("p/q/churn")
        except BaseException as exc:  # reported below
            errors.append(exc)
            raise

    churner = threading.Thread(target=churn)
    churner.start()
    try:
        for i in range(300):
            local_store.put(f"p/q/k{i}", b"v")
            local_store.delete(f"p/q/k{i}")
        local_store.put_if_absent("p/q/final", b"v")
    finally:
        stop.set()
        churner.join()
    assert not errors
    assert local_store.get("p/q/final") == b"v"


def test_a_write_recreates_a_directory_another_process_pruned(
    local_store: LocalObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's delete can prune between our mkdir and our create: we make it again."""
    real_create = LocalObjectStore._create
    pruned: list[str] = []

    def create_after_a_prune(self: LocalObjectStore, temp: str, size: int) -> tuple[int, bool]:
        if len(pruned) < 3:  # the other process wins three times in a row
            directory = os.path.dirname(temp)
            os.rmdir(directory)
            os.rmdir(os.path.dirname(directory))
            pruned.append(directory)
        return real_create(self, temp, size)

    monkeypatch.setattr(LocalObjectStore, "_create", create_after_a_prune)
    local_store.put("p/q/k", b"v")
    assert len(pruned) == 3
    assert local_store.get("p/q/k") == b"v"


def test_a_write_gives_up_when_its_directory_keeps_disappearing(
    local_store: LocalObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def create_after_a_prune(self: LocalObjectStore, temp: str, size: int) -> tuple[int, bool]:
        os.rmdir(os.path.dirname(temp))
        raise FileNotFoundError(temp)

    monkeypatch.setattr(LocalObjectStore, "_create", create_after_a_prune)
    with pytest.raises(ObjectStoreError, match="kept disappearing"):
        local_store.put("p/q/k", b"v")


def test_objects_written_by_one_store_are_seen_by_another(tmp_path: Path) -> None:
    writer = LocalObjectStore(tmp_path / "s")
    reader = LocalObjectStore(tmp_path / "s")
    writer.put("a", b"1")
    assert reader.get("a") == b"1"
    reader.put_if_absent("b", b"2")
    with pytest.raises(ObjectAlreadyExists):
        writer.put_if_absent("b", b"3")
