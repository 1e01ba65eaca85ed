"""The one test suite every `ObjectStore` backend must pass.

`ObjectStoreContract` holds the tests; each backend's test module subclasses
it and overrides the ``store`` fixture (`TestLocalStore`, `TestS3Store`).
"""

from __future__ import annotations

import os
import pickle
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from kfs_core.errors import ObjectAlreadyExists, ObjectNotFound, ObjectStoreError
from kfs_core.storage import ByteRange, ObjectStore, open_store

DIGITS = b"0123456789"
SEGMENT = "ns/topic/0/segment-{:020d}.kfs"

INVALID_KEYS = [
    "",
    "/abs/key",
    "../escape",
    "a/../../escape",
    "a/./b",
    ".",
    "a//b",
    "a/",
    "a\\b",
    "..\\escape",
    "a/\0b",
    "a/.kfs-tmp-123",
    "x" * 256,
    "/".join(["abcdefghi"] * 103),  # 1029 bytes
]


def keys_of(store: ObjectStore, prefix: str = "", start_after: str | None = None) -> list[str]:
    return [info.key for info in store.list(prefix, start_after=start_after)]


class ObjectStoreContract:
    """put, put-if-absent, ranges, head, list, delete, errors and pickling, on any backend."""

    @pytest.fixture
    def store(self) -> ObjectStore:
        raise NotImplementedError("a backend's test class overrides the `store` fixture")

    # --- put and get ----------------------------------------------------------

    def test_put_get_round_trip(self, store: ObjectStore) -> None:
        info = store.put("ns/t/0/a.kfs", b"hello world")
        assert info.key == "ns/t/0/a.kfs"
        assert info.size == 11
        assert info.etag
        assert store.get("ns/t/0/a.kfs") == b"hello world"

    @pytest.mark.parametrize("sizes", [(0,), (5, 0, 7), (1 << 20, 3, (1 << 20) + 4097)])
    def test_put_parts_stores_their_concatenation(
        self, store: ObjectStore, sizes: tuple[int, ...]
    ) -> None:
        """A segment's header, batches and footer, written as one object (large ones direct)."""
        parts = [os.urandom(n) for n in sizes]
        backing = bytearray(b"".join(parts))
        views = [
            memoryview(backing)[sum(sizes[:i]) : sum(sizes[: i + 1])] for i in range(len(sizes))
        ]
        info = store.put_parts("ns/t/0/parts.kfs", [parts[0], *views[1:]])
        assert info.size == sum(sizes)
        assert store.head("ns/t/0/parts.kfs") == info
        assert store.get("ns/t/0/parts.kfs") == bytes(backing)

    def test_put_many_stores_each_object_in_order(self, store: ObjectStore) -> None:
        """A flush's segments and indexes in one call: each lands whole, under its key."""
        big = os.urandom((1 << 20) + 5)
        objects = [
            ("ns/t/0/segment-1.kfs", [big[:4096], memoryview(big)[4096:]]),
            ("ns/t/0/segment-1.index", [b"index one"]),
            ("ns/t/1/segment-2.kfs", [b"", b"small"]),
        ]
        infos = store.put_many(objects)
        assert [info.key for info in infos] == [key for key, _ in objects]
        assert [info.size for info in infos] == [len(big), 9, 5]
        assert [store.head(key) for key, _ in objects] == infos
        assert store.get("ns/t/0/segment-1.kfs") == big
        assert store.get("ns/t/0/segment-1.index") == b"index one"
        assert store.get("ns/t/1/segment-2.kfs") == b"small"
        assert store.put_many([]) == []

    def test_put_info_matches_head(self, store: ObjectStore) -> None:
        before = time.time()
        put = store.put("k", b"abc")
        head = store.head("k")
        assert head == put
        # Servers stamp whole seconds; allow for that and a little clock skew.
        assert before - 5 <= head.last_modified <= time.time() + 5

    def test_put_overwrites_and_changes_etag(self, store: ObjectStore) -> None:
        first = store.put("k", b"first version")
        second = store.put("k", b"v2")
        assert store.get("k") == b"v2"
        assert store.head("k").size == 2
        assert second.etag != first.etag

    def test_empty_object(self, store: ObjectStore) -> None:
        store.put("empty", b"")
        assert store.get("empty") == b""
        assert store.head("empty").size == 0
        assert store.get("empty", ByteRange.last(4)) == b""
        with pytest.raises(ObjectStoreError) as raised:
            store.get("empty", ByteRange(0))
        assert not isinstance(raised.value, ObjectNotFound)

    def test_large_object(self, store: ObjectStore) -> None:
        data = os.urandom(5 * 1024 * 1024 + 17)
        info = store.put("big/segment.kfs", data)
        assert info.size == len(data)
        assert store.get("big/segment.kfs") == data
        middle = ByteRange(3 * 1024 * 1024 + 5, 1024 * 1024)
        assert store.get("big/segment.kfs", middle) == data[middle.start : middle.start + 1048576]
        assert store.get("big/segment.kfs", ByteRange.last(16)) == data[-16:]

    def test_nested_keys(self, store: ObjectStore) -> None:
        keys = ["a/b/c/d/e/f", "a/b/c/x", "a/b/y", "a/z", "top"]
        for key in keys:
            store.put(key, key.encode())
        for key in keys:
            assert store.get(key) == key.encode()
        store.delete("a/b/c/d/e/f")
        assert keys_of(store) == sorted(keys[1:])
        store.put("a/b/c/d/e/f", b"again")
        assert store.get("a/b/c/d/e/f") == b"again"

    def test_non_ascii_key(self, store: ObjectStore) -> None:
        store.put("ns/tøpic-ü/0/s", b"x")
        assert store.get("ns/tøpic-ü/0/s") == b"x"
        assert keys_of(store, "ns/tø") == ["ns/tøpic-ü/0/s"]

    def test_concurrent_puts_of_different_keys(self, store: ObjectStore) -> None:
        def write(i: int) -> None:
            store.put(f"p/{i % 4}/k{i:03d}", str(i).encode())

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(write, range(64)))
        for i in range(64):
            assert store.get(f"p/{i % 4}/k{i:03d}") == str(i).encode()
        assert len(keys_of(store, "p/")) == 64

    # --- put_if_absent ------------------------------------------------------------

    def test_put_if_absent_wins_once(self, store: ObjectStore) -> None:
        info = store.put_if_absent("_log/00000000000000000001.json", b"first")
        assert info.size == 5
        assert store.head("_log/00000000000000000001.json").etag == info.etag
        with pytest.raises(ObjectAlreadyExists):
            store.put_if_absent("_log/00000000000000000001.json", b"second")
        assert store.get("_log/00000000000000000001.json") == b"first"

    def test_put_if_absent_after_put_and_after_delete(self, store: ObjectStore) -> None:
        store.put("k", b"plain put")
        with pytest.raises(ObjectAlreadyExists):
            store.put_if_absent("k", b"conditional")
        store.delete("k")
        store.put_if_absent("k", b"conditional")
        assert store.get("k") == b"conditional"

    @pytest.mark.parametrize("round_", range(3))
    def test_put_if_absent_race_has_one_winner(self, store: ObjectStore, round_: int) -> None:
        contenders = 12
        key = f"_log/race-{round_}.json"
        start = threading.Barrier(contenders)
        outcomes: dict[int, str] = {}

        def contend(i: int) -> None:
            start.wait(timeout=30)
            try:
                store.put_if_absent(key, f"writer {i}".encode())
            except ObjectAlreadyExists:
                outcomes[i] = "lost"
            else:
                outcomes[i] = "won"

        with ThreadPoolExecutor(contenders) as pool:
            for future in [pool.submit(contend, i) for i in range(contenders)]:
                future.result()
        winners = [i for i, outcome in outcomes.items() if outcome == "won"]
        assert len(outcomes) == contenders
        assert len(winners) == 1, outcomes
        assert store.get(key) == f"writer {winners[0]}".encode()

    # --- byte ranges -------------------------------------------------------------

    @pytest.mark.parametrize(
        ("byte_range", "expected"),
        [
            (ByteRange(0, 4), b"0123"),
            (ByteRange(3, 4), b"3456"),
            (ByteRange(9, 1), b"9"),
            (ByteRange(6), b"6789"),
            (ByteRange(0), DIGITS),
            (ByteRange.last(3), b"789"),
            (ByteRange.last(10), DIGITS),
            (ByteRange.last(100), DIGITS),  # longer than the object: all of it
            (ByteRange(8, 100), b"89"),  # runs past the end: cut short
        ],
        ids=lambda value: value.http_header() if isinstance(value, ByteRange) else None,
    )
    def test_byte_ranges(self, store: ObjectStore, byte_range: ByteRange, expected: bytes) -> None:
        store.put("digits", DIGITS)
        assert store.get("digits", byte_range) == expected

    @pytest.mark.parametrize("byte_range", [ByteRange(10), ByteRange(10, 1), ByteRange(50, 5)])
    def test_range_starting_past_the_end_fails(
        self, store: ObjectStore, byte_range: ByteRange
    ) -> None:
        store.put("digits", DIGITS)
        with pytest.raises(ObjectStoreError) as raised:
            store.get("digits", byte_range)
        assert not isinstance(raised.value, ObjectNotFound)

    # --- missing keys and delete ----------------------------------------------------

    def test_missing_key_raises_not_found(self, store: ObjectStore) -> None:
        with pytest.raises(ObjectNotFound):
            store.get("no/such/key")
        with pytest.raises(ObjectNotFound):
            store.get("no/such/key", ByteRange(0, 1))
        with pytest.raises(ObjectNotFound):
            store.head("no/such/key")
        assert not store.exists("no/such/key")

    def test_prefix_of_a_key_is_not_an_object(self, store: ObjectStore) -> None:
        store.put("dir/file", b"x")
        with pytest.raises(ObjectNotFound):
            store.get("dir")
        with pytest.raises(ObjectNotFound):
            store.head("dir")
        store.delete("dir")  # nothing there: a no-op
        assert store.get("dir/file") == b"x"

    def test_delete_is_idempotent(self, store: ObjectStore) -> None:
        store.put("a/b", b"x")
        assert store.exists("a/b")
        store.delete("a/b")
        store.delete("a/b")
        store.delete("never/written")
        assert not store.exists("a/b")
        with pytest.raises(ObjectNotFound):
            store.get("a/b")
        assert keys_of(store) == []

    # --- list -------------------------------------------------------------------

    def test_list_is_in_key_order(self, store: ObjectStore) -> None:
        # '-' (0x2d) < '/' (0x2f) < '0' (0x30): a directory walk that sorted
        # names without the '/' would put "a/..." before "a-c".
        keys = ["a/b", "a/c/d", "a-c", "a0", "b", "a/c-e", ".hidden", "Z", "a/c/d0"]
        for key in keys:
            store.put(key, key.encode())
        assert keys_of(store) == sorted(keys)

    def test_list_reports_size_and_etag(self, store: ObjectStore) -> None:
        store.put("x/one", b"1")
        store.put("x/three", b"333")
        infos = list(store.list("x/"))
        assert [(i.key, i.size) for i in infos] == [("x/one", 1), ("x/three", 3)]
        for info in infos:
            assert info == store.head(info.key)

    def test_list_by_prefix(self, store: ObjectStore) -> None:
        segments = [SEGMENT.format(base) for base in (0, 100, 2000, 10000)]
        others = [
            "ns/topic/0/segment-00000000000000000000.index",
            "ns/topic/0/_log/00000000000000000000.json",
            "ns/topic/1/segment-00000000000000000000.kfs",
            "ns/topical/0/x",
            "ns/other/0/x",
        ]
        for key in segments + others:
            store.put(key, b"x")
        everything = sorted(segments + others)
        assert keys_of(store) == everything
        # A prefix may stop anywhere, even in the middle of a segment of the key.
        assert keys_of(store, "ns/topic/0/segment-0000000000000000") == [
            "ns/topic/0/segment-00000000000000000000.index",
            SEGMENT.format(0),
            SEGMENT.format(100),
            SEGMENT.format(2000),
        ]
        for prefix in [
            "n",
            "ns/",
            "ns/topic",
            "ns/topic/",
            "ns/topic/0",
            "ns/topic/0/",
            "ns/topic/0/_log/",
            "ns/topic/0/segment-",
            "ns/topic/0/segment-00000000000000000000",
            SEGMENT.format(100),
            "ns/topic/0/segment-0000000000000000000.kfs",
            "ns/nothing/",
            "ns/nothing/deeper/",
            "zzz",
        ]:
            expected = [key for key in everything if key.startswith(prefix)]
            assert keys_of(store, prefix) == expected, prefix

    def test_list_start_after(self, store: ObjectStore) -> None:
        keys = ["a-c", "a/b", "a/c/d", "a/c/e", "a0", "b/x"]
        for key in keys:
            store.put(key, b"x")
        for start_after in [
            "",
            "a",
            "a-c",
            "a/",
            "a/b",
            "a/c",
            "a/c/",
            "a/c/d",
            "a/c/z",
            "a0",
            "b",
            "zz",
        ]:
            expected = [k for k in sorted(keys) if k > start_after]
            assert keys_of(store, start_after=start_after) == expected, start_after
        assert keys_of(store, "a/", start_after="a/b") == ["a/c/d", "a/c/e"]
        assert keys_of(store, "a/c/", start_after="a/b") == ["a/c/d", "a/c/e"]
        assert keys_of(store, "a/c/", start_after="a/c/d") == ["a/c/e"]

    def test_list_of_many_keys(self, store: ObjectStore) -> None:
        # More than one S3 page (1000 keys).
        keys = [SEGMENT.format(base * 10) for base in range(1005)]
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda key: store.put(key, b""), keys))
        assert keys_of(store, "ns/topic/0/") == keys
        assert keys_of(store, "ns/topic/0/", start_after=keys[999]) == keys[1000:]

    # --- key rules ----------------------------------------------------------------

    @pytest.mark.parametrize("key", INVALID_KEYS, ids=repr)
    def test_invalid_keys_are_rejected(self, store: ObjectStore, key: str) -> None:
        with pytest.raises(ValueError):
            store.put(key, b"x")
        with pytest.raises(ValueError):
            store.put_if_absent(key, b"x")
        with pytest.raises(ValueError):
            store.get(key)
        with pytest.raises(ValueError):
            store.head(key)
        with pytest.raises(ValueError):
            store.delete(key)

    @pytest.mark.parametrize("prefix", ["/abs", "../", "a/../", "a//", "a\\b"], ids=repr)
    def test_invalid_prefixes_are_rejected(self, store: ObjectStore, prefix: str) -> None:
        with pytest.raises(ValueError):
            store.list(prefix)

    # --- identity -------------------------------------------------------------------

    def test_pickled_store_sees_the_same_objects(self, store: ObjectStore) -> None:
        store.put("shared/one", b"1")
        copy = pickle.loads(pickle.dumps(store))
        assert type(copy) is type(store)
        assert copy.url == store.url
        assert copy.get("shared/one") == b"1"
        copy.put("shared/two", b"2")
        assert store.get("shared/two") == b"2"
        copy.close()

    def test_url_opens_an_equivalent_store(self, store: ObjectStore) -> None:
        store.put("via/url", b"v")
        reopened = open_store(store.url)
        assert type(reopened) is type(store)
        assert reopened.url == store.url
        assert reopened.get("via/url") == b"v"
        assert keys_of(reopened) == ["via/url"]
        reopened.close()
