"""`S3ObjectStore` on a moto server: the shared contract, retries over a faulty proxy."""

from __future__ import annotations

import logging
import pickle
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from kfs_core.errors import (
    ObjectAlreadyExists,
    ObjectNotFound,
    ObjectStoreError,
    TransientStoreError,
)
from kfs_core.storage import ByteRange, ObjectStore
from kfs_core.storage.s3 import RetryPolicy, S3ObjectStore
from tests.storage.contract import ObjectStoreContract, keys_of
from tests.storage.faults import FaultInjectingProxy, fault_proxy

pytestmark = pytest.mark.integration


class TestS3Store(ObjectStoreContract):
    @pytest.fixture
    def store(self, s3_store: S3ObjectStore) -> ObjectStore:
        return s3_store


@pytest.fixture
def proxy(moto_server: str) -> Iterator[FaultInjectingProxy]:
    with fault_proxy(moto_server) as running:
        yield running


def store_behind(
    proxy: FaultInjectingProxy, bucket: str, *, max_attempts: int = 4, base_delay: float = 0.01
) -> S3ObjectStore:
    return S3ObjectStore(
        bucket,
        prefix=f"retry-{uuid.uuid4().hex[:12]}",
        endpoint_url=proxy.url,
        max_attempts=max_attempts,
        base_delay=base_delay,
        max_delay=0.2,
    )


OPERATIONS: dict[str, tuple[Callable[[S3ObjectStore], object], str]] = {
    "put": (lambda s: s.put("k", b"new"), "PUT"),
    "put_if_absent": (lambda s: s.put_if_absent("fresh", b"new"), "PUT"),
    "get": (lambda s: s.get("k"), "GET"),
    "get_range": (lambda s: s.get("k", ByteRange(1, 2)), "GET"),
    "head": (lambda s: s.head("k"), "HEAD"),
    "list": (keys_of, "GET"),
    "delete": (lambda s: s.delete("k"), "DELETE"),
}


# --- retries over a real failing HTTP path -------------------------------------


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_throttled_requests_are_retried(
    proxy: FaultInjectingProxy, s3_bucket: str, operation: str
) -> None:
    store = store_behind(proxy, s3_bucket, max_attempts=4)
    store.put("k", b"old")
    run, method = OPERATIONS[operation]
    proxy.fail_next(3, methods={method})
    run(store)
    assert proxy.count(method, "reject") == 3
    assert proxy.requests[-1].outcome == "forwarded"
    store.close()


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_throttling_beyond_the_last_attempt_raises_transient_error(
    proxy: FaultInjectingProxy, s3_bucket: str, operation: str
) -> None:
    store = store_behind(proxy, s3_bucket, max_attempts=3)
    store.put("k", b"old")
    run, method = OPERATIONS[operation]
    before = proxy.count()
    proxy.fail_next(100, methods={method})
    with pytest.raises(TransientStoreError) as raised:
        run(store)
    assert proxy.count() - before == 3  # exactly max_attempts requests, no hidden retries
    error = raised.value
    assert error.retriable
    assert error.fields["attempts"] == 3
    assert ("503" if method == "HEAD" else "SlowDown") in str(error)  # HEAD answers have no body
    assert "still failing after 3 attempts" in str(error)
    assert pickle.loads(pickle.dumps(error)).fields == error.fields
    store.close()


def test_backoff_grows_and_is_logged(
    proxy: FaultInjectingProxy, s3_bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = store_behind(proxy, s3_bucket, max_attempts=5, base_delay=0.04)
    store.put("k", b"v")
    proxy.fail_next(4)
    caplog.set_level(logging.WARNING, logger="kfs_core.storage.s3")
    started = time.monotonic()
    assert store.get("k") == b"v"
    elapsed = time.monotonic() - started
    # Each pause is at least half its cap: 0.02 + 0.04 + 0.08 + 0.1 (max_delay 0.2 / 2).
    assert elapsed >= 0.02 + 0.04 + 0.08 + 0.1
    retries = [r for r in caplog.records if "retrying in" in r.getMessage()]
    attempts = [re.search(r"attempt (\d) of 5", r.getMessage()) for r in retries]
    assert [int(m.group(1)) for m in attempts if m] == [1, 2, 3, 4]
    assert all("SlowDown" in r.getMessage() for r in retries)
    store.close()


def test_dropped_connections_are_retried(proxy: FaultInjectingProxy, s3_bucket: str) -> None:
    store = store_behind(proxy, s3_bucket)
    store.put("k", b"v")
    proxy.fail_next(2, mode="drop")
    assert store.get("k") == b"v"
    assert proxy.count(outcome="drop") == 2
    store.close()


def test_refused_connections_end_in_transient_error() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    store = S3ObjectStore(
        "kfs-test-bucket", endpoint_url=f"http://127.0.0.1:{port}", max_attempts=2, base_delay=0.01
    )
    with pytest.raises(TransientStoreError, match="after 2 attempts"):
        store.head("k")


def test_put_if_absent_recognises_its_own_write_after_a_lost_response(
    proxy: FaultInjectingProxy, s3_bucket: str
) -> None:
    """The first attempt is stored but its answer is lost; the retry sees 412."""
    store = store_behind(proxy, s3_bucket)
    proxy.fail_next(1, mode="lose_response", methods={"PUT"})
    info = store.put_if_absent("_log/1.json", b"our commit")
    assert info.size == len(b"our commit")
    assert store.get("_log/1.json") == b"our commit"
    assert proxy.count("PUT", "lose_response") == 1
    # Someone else's object is still reported as a lost race.
    proxy.fail_next(1, mode="lose_response", methods={"PUT"})
    store.put("_log/2.json", b"their commit")
    with pytest.raises(ObjectAlreadyExists):
        store.put_if_absent("_log/2.json", b"our commit")
    store.close()


def test_client_errors_are_not_retried(proxy: FaultInjectingProxy, s3_bucket: str) -> None:
    store = store_behind(proxy, s3_bucket)
    before = proxy.count()
    with pytest.raises(ObjectNotFound):
        store.get("missing")
    store.put("k", b"v")
    with pytest.raises(ObjectStoreError, match="range"):
        store.get("k", ByteRange(10))
    with pytest.raises(ObjectAlreadyExists):
        store.put_if_absent("k", b"w")
    assert proxy.count() - before == 4
    store.close()


def test_missing_bucket_is_a_clear_error(moto_server: str) -> None:
    store = S3ObjectStore("no-such-bucket-kfs", endpoint_url=moto_server)
    with pytest.raises(ObjectStoreError, match="bucket 'no-such-bucket-kfs' does not exist"):
        store.get("k")
    with pytest.raises(ObjectStoreError, match="does not exist"):
        keys_of(store)


def test_retry_policy_delays() -> None:
    policy = RetryPolicy(max_attempts=6, base_delay=0.1, max_delay=1.0)
    for attempt, cap in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (9, 1.0)]:
        for _ in range(50):
            assert cap / 2 <= policy.delay(attempt) <= cap
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


# --- configuration, pickling, threads ---------------------------------------------


def test_keys_are_listed_relative_to_the_prefix(moto_server: str, s3_bucket: str) -> None:
    prefix = f"rel-{uuid.uuid4().hex[:8]}"
    outer = S3ObjectStore(s3_bucket, prefix=prefix, endpoint_url=moto_server)
    inner = S3ObjectStore(s3_bucket, prefix=f"/{prefix}/inner/", endpoint_url=moto_server)
    sibling = S3ObjectStore(s3_bucket, prefix=f"{prefix}-sibling", endpoint_url=moto_server)
    inner.put("a/b", b"x")
    sibling.put("a/b", b"y")
    assert inner.prefix == f"{prefix}/inner"
    assert keys_of(inner) == ["a/b"]
    assert keys_of(outer) == ["inner/a/b"]
    assert outer.get("inner/a/b") == b"x"


def test_endpoint_comes_from_the_environment(
    moto_server: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KFS_S3_ENDPOINT_URL", moto_server)
    store = S3ObjectStore(s3_bucket, prefix=f"env-{uuid.uuid4().hex[:8]}")
    assert store.endpoint_url == moto_server
    store.put("k", b"v")
    monkeypatch.delenv("KFS_S3_ENDPOINT_URL")
    copy = pickle.loads(pickle.dumps(store))  # keeps the endpoint it was made with
    assert copy.get("k") == b"v"


def test_pickling_drops_the_client(s3_store: S3ObjectStore) -> None:
    s3_store.put("k", b"v")
    assert s3_store._client is not None
    state = s3_store.__getstate__()
    assert state["_client"] is None
    assert "_lock" not in state
    copy = pickle.loads(pickle.dumps(s3_store))
    assert copy._client is None
    assert copy.get("k") == b"v"
    assert copy.client is not s3_store.client


def test_client_is_created_once_across_threads(moto_server: str, s3_bucket: str) -> None:
    store = S3ObjectStore(s3_bucket, prefix="once", endpoint_url=moto_server)
    start = threading.Barrier(8)
    clients: list[object] = []

    def first_use() -> None:
        start.wait(timeout=30)
        clients.append(store.client)

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(clients) == 8
    assert all(client is clients[0] for client in clients)
    store.close()
    assert store._client is None


def test_invalid_configuration_is_rejected() -> None:
    with pytest.raises(ValueError, match="bucket"):
        S3ObjectStore("")
    with pytest.raises(ValueError, match="bucket"):
        S3ObjectStore("user@bucket")
    with pytest.raises(ValueError, match="prefix"):
        S3ObjectStore("bucket", prefix="a//b")
    with pytest.raises(ValueError, match="prefix"):
        S3ObjectStore("bucket", prefix="../up")
    with pytest.raises(ValueError, match="addressing_style"):
        S3ObjectStore("bucket", addressing_style="sideways")


def test_explicit_credentials_sign_requests_and_travel_with_a_pickled_copy(
    moto_server: str, s3_bucket: str
) -> None:
    store = S3ObjectStore(
        s3_bucket,
        prefix=f"creds-{uuid.uuid4().hex[:8]}",
        endpoint_url=moto_server,
        aws_access_key_id="AKIAEXPLICIT",
        aws_secret_access_key="explicit-secret",
        aws_session_token="explicit-token",
    )
    store.put("k", b"v")

    def signing(s: S3ObjectStore) -> tuple[str, str, str | None]:
        frozen = s.client._request_signer._credentials.get_frozen_credentials()
        return frozen.access_key, frozen.secret_key, frozen.token

    assert signing(store) == ("AKIAEXPLICIT", "explicit-secret", "explicit-token")
    assert "explicit" not in store.url and "explicit" not in repr(store)
    copy = pickle.loads(pickle.dumps(store))  # what a Spark executor gets
    assert copy.get("k") == b"v"
    assert signing(copy) == signing(store)
    store.close()
    copy.close()


def test_credentials_come_in_pairs() -> None:
    with pytest.raises(ValueError, match="go together"):
        S3ObjectStore("bucket", aws_access_key_id="AKIA")
    with pytest.raises(ValueError, match="go together"):
        S3ObjectStore("bucket", aws_secret_access_key="secret")
    with pytest.raises(ValueError, match="aws_session_token needs"):
        S3ObjectStore("bucket", aws_session_token="token")
