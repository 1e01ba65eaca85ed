"""`S3ObjectStore`: an `ObjectStore` on an S3 bucket (AWS, MinIO, moto), and `RetryPolicy`.

This is the only module in KFS that imports boto3 or botocore.

Keys are stored under ``{prefix}/`` in the bucket and reported relative to it.
`put_if_absent` is a conditional PutObject (``If-None-Match: *``); ranged reads
send the `ByteRange` as an HTTP ``Range`` header.

Retries are ours, not botocore's: botocore's own retries are switched off so
that one policy, `RetryPolicy`, decides how many requests an operation makes
(stacked policies multiply: 5 of ours times 3 of botocore's is 15 requests).
Throttling (SlowDown, 429, RequestTimeout), 5xx answers and connection errors
are retried with exponential backoff and jitter; after the last attempt the
operation raises `TransientStoreError`.  Anything else (404, 403, 412, 416 ...)
is answered at once.

A retried `put_if_absent` is ambiguous: the earlier attempt may have written
the object and only its answer was lost, so the retry sees 412.  In that case
the store reads the object back and reports success if it holds exactly our
bytes, so a commit is never reported lost when it was in fact made.

The boto3 client is created once, lazily, under a lock (clients are
thread-safe, sessions are not).  Pickling drops the client and the copy builds
its own on first use, so stores can be shipped to Spark executors.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    HTTPClientError,
    IncompleteReadError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from kfs_core.errors import (
    ObjectAlreadyExists,
    ObjectNotFound,
    ObjectStoreError,
    TransientStoreError,
)
from kfs_core.storage.base import ByteRange, ObjectInfo, ObjectStore, check_key, check_prefix

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Environment variable naming the S3 endpoint when none is given (MinIO, moto ...).
ENDPOINT_ENV = "KFS_S3_ENDPOINT_URL"

# Error codes S3 and S3-compatible servers use for throttling and passing trouble.
TRANSIENT_ERROR_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequests",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "InternalError",
        "ServiceUnavailable",
    }
)
# Network failures: refused or reset connections, timeouts, bodies cut short.
TRANSIENT_EXCEPTIONS: tuple[type[Exception], ...] = (
    BotoConnectionError,
    HTTPClientError,
    IncompleteReadError,
)
# Answers to a conditional PutObject meaning "someone else's object is there".
_CONDITION_LOST_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})

_BUCKET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,254}$")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently an operation is retried.

    Attempt ``n`` (from 1) that fails transiently is followed by a pause of
    ``cap / 2 + uniform(0, cap / 2)`` seconds, ``cap = min(max_delay,
    base_delay * 2 ** (n - 1))``: exponential, with jitter so that many
    throttled clients do not retry in lockstep, and never shorter than half
    the cap, so the backoff really grows.
    """

    max_attempts: int = 5
    base_delay: float = 0.05
    max_delay: float = 5.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("retry delays must not be negative")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        cap = min(self.max_delay, self.base_delay * 2.0 ** (attempt - 1))
        return cap / 2 + random.uniform(0, cap / 2)


#: Connections kept open to the endpoint.  A takeover of several partitions at
#: once reads 16 objects at a time for each; a request beyond the pool makes a
#: new connection and urllib3 warns as it drops it.
MAX_POOL_CONNECTIONS = 96


class S3ObjectStore(ObjectStore):
    """An `ObjectStore` on ``s3://bucket/prefix``.

    ``endpoint_url`` defaults to ``$KFS_S3_ENDPOINT_URL`` (read once, here, so
    a pickled copy talks to the same endpoint); with a custom endpoint the
    client uses path-style addressing unless ``addressing_style`` says
    otherwise.  Credentials are ``aws_access_key_id`` and
    ``aws_secret_access_key`` (with ``aws_session_token`` for temporary ones)
    when given, else the standard AWS chain; given ones are this store's alone
    (nothing is read from or written to ``os.environ`` for them), travel with a
    pickled copy to Spark executors, and appear in neither `url` nor `repr`.
    ``client`` injects a ready boto3 S3 client; a pickled copy builds its own
    from the other settings instead.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        max_attempts: int = 5,
        base_delay: float = 0.05,
        max_delay: float = 5.0,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
        max_pool_connections: int = MAX_POOL_CONNECTIONS,
        addressing_style: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        client: Any = None,
    ) -> None:
        if not _BUCKET_NAME.match(bucket):
            raise ValueError(f"not an S3 bucket name: {bucket!r}")
        prefix = prefix.strip("/")
        if prefix:
            try:
                check_key(prefix)
            except ValueError as exc:
                raise ValueError(f"S3 store prefix: {exc}") from None
        if addressing_style not in (None, "auto", "path", "virtual"):
            raise ValueError(
                f"addressing_style must be auto, path or virtual: {addressing_style!r}"
            )
        if bool(aws_access_key_id) != bool(aws_secret_access_key):
            raise ValueError("aws_access_key_id and aws_secret_access_key go together")
        if aws_session_token and not aws_access_key_id:
            raise ValueError("aws_session_token needs aws_access_key_id and aws_secret_access_key")
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint_url = endpoint_url or os.environ.get(ENDPOINT_ENV) or None
        self.region_name = region_name or None
        self.retry = RetryPolicy(max_attempts, base_delay, max_delay)
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._max_pool_connections = max_pool_connections
        self._addressing_style = addressing_style or ("path" if self.endpoint_url else "auto")
        self._key_prefix = f"{prefix}/" if prefix else ""
        # Keyword arguments of boto3's Session; empty: the standard AWS chain.
        self._credentials: dict[str, str] = {
            name: value
            for name, value in (
                ("aws_access_key_id", aws_access_key_id),
                ("aws_secret_access_key", aws_secret_access_key),
                ("aws_session_token", aws_session_token),
            )
            if value
        }
        self._client: Any = client
        self._lock = threading.Lock()
        self.url = self._build_url()
        self._where = self.url.partition("?")[0]  # for messages: the URL without the endpoint

    def _build_url(self) -> str:
        url = f"s3://{self.bucket}"
        if self.prefix:
            url += "/" + urllib.parse.quote(self.prefix, safe="/")
        query = {
            name: value
            for name, value in (
                ("endpoint_url", self.endpoint_url),
                ("region_name", self.region_name),
            )
            if value
        }
        return f"{url}?{urllib.parse.urlencode(query)}" if query else url

    def __repr__(self) -> str:
        return f"S3ObjectStore({self.url!r})"

    # --- pickling and the client ----------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        """The boto3 S3 client, created on first use."""
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._make_client()
                client = self._client
        return client

    def _make_client(self) -> Any:
        config = Config(
            connect_timeout=self._connect_timeout,
            read_timeout=self._read_timeout,
            max_pool_connections=self._max_pool_connections,
            retries={"total_max_attempts": 1, "mode": "standard"},  # RetryPolicy retries
            s3={"addressing_style": self._addressing_style},
        )
        return boto3.session.Session(**self._credentials).client(
            "s3", endpoint_url=self.endpoint_url, region_name=self.region_name, config=config
        )

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # --- operations -----------------------------------------------------------

    def put(self, key: str, data: bytes) -> ObjectInfo:
        name = self._name(key)
        try:
            response = self._call(
                "put",
                key,
                lambda: self.client.put_object(Bucket=self.bucket, Key=name, Body=data),
            )
        except ClientError as exc:
            raise self._error("put", key, exc) from exc
        return ObjectInfo(key, len(data), _etag(response), _response_time(response))

    def put_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        name = self._name(key)
        attempts = 0

        def attempt() -> Any:
            nonlocal attempts
            attempts += 1
            return self.client.put_object(Bucket=self.bucket, Key=name, Body=data, IfNoneMatch="*")

        try:
            response = self._call("put_if_absent", key, attempt)
        except ClientError as exc:
            if _code(exc) not in _CONDITION_LOST_CODES and _status(exc) not in (409, 412):
                raise self._error("put_if_absent", key, exc) from exc
            if attempts > 1 and self._holds(key, data):
                log.info("put_if_absent %s: an earlier attempt had written it", key)
                return self.head(key)
            raise ObjectAlreadyExists(f"{key!r} already exists in {self._where}", key=key) from None
        return ObjectInfo(key, len(data), _etag(response), _response_time(response))

    def _holds(self, key: str, data: bytes) -> bool:
        try:
            return self.get(key) == data
        except ObjectNotFound:
            return False

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        request: dict[str, Any] = {"Bucket": self.bucket, "Key": self._name(key)}
        if byte_range is not None:
            request["Range"] = byte_range.http_header()

        def fetch() -> tuple[bytes, int]:
            response = self.client.get_object(**request)
            with contextlib.closing(response["Body"]) as body:
                data: bytes = body.read()
            return data, int(response["ResponseMetadata"]["HTTPStatusCode"])

        try:
            data, status = self._call("get", key, fetch)
        except ClientError as exc:
            raise self._error("get", key, exc) from exc
        if byte_range is not None and status == 200:
            # The server sent the whole object (S3 does for a suffix range of an
            # empty object; some servers ignore Range): cut the range out here.
            try:
                start, stop = byte_range.resolve(len(data))
            except ValueError as exc:
                raise ObjectStoreError(f"{key!r}: {exc}", key=key, size=len(data)) from None
            data = data[start:stop]
        return data

    def head(self, key: str) -> ObjectInfo:
        name = self._name(key)
        try:
            response = self._call(
                "head", key, lambda: self.client.head_object(Bucket=self.bucket, Key=name)
            )
        except ClientError as exc:
            raise self._error("head", key, exc) from exc
        return ObjectInfo(
            key,
            int(response["ContentLength"]),
            _etag(response),
            response["LastModified"].timestamp(),
        )

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        check_prefix(prefix)
        request: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self._key_prefix + prefix}
        if start_after is not None:
            request["StartAfter"] = self._key_prefix + start_after
        return self._list_pages(prefix, request)

    def _list_pages(self, prefix: str, request: dict[str, Any]) -> Iterator[ObjectInfo]:
        # Pages are fetched one request at a time (not through boto3's
        # paginator) so that each page request is retried on its own.
        strip = len(self._key_prefix)
        while True:
            try:
                page = self._call("list", prefix, functools.partial(self._list_page, dict(request)))
            except ClientError as exc:
                raise self._error("list", prefix, exc) from exc
            for item in page.get("Contents", ()):
                yield ObjectInfo(
                    item["Key"][strip:],
                    int(item["Size"]),
                    _unquote(item.get("ETag", "")),
                    item["LastModified"].timestamp(),
                )
            if not page.get("IsTruncated"):
                return
            request["ContinuationToken"] = page["NextContinuationToken"]

    def _list_page(self, request: dict[str, Any]) -> dict[str, Any]:
        page: dict[str, Any] = self.client.list_objects_v2(**request)
        return page

    def delete(self, key: str) -> None:
        name = self._name(key)
        try:
            self._call(
                "delete", key, lambda: self.client.delete_object(Bucket=self.bucket, Key=name)
            )
        except ClientError as exc:
            if _code(exc) in ("NoSuchKey", "404"):
                return  # some S3-compatible servers answer 404; S3 itself says 204
            raise self._error("delete", key, exc) from exc

    # --- retries and errors -----------------------------------------------------

    def _call(self, operation: str, key: str, request: Callable[[], T]) -> T:
        """Run ``request``, retrying transient failures under `RetryPolicy`.

        Non-transient `ClientError`s propagate unchanged for the caller to
        translate; transient ones that outlast the policy become
        `TransientStoreError`.
        """
        policy = self.retry
        for attempt in range(1, policy.max_attempts + 1):
            try:
                return request()
            except ClientError as exc:
                if not is_transient(exc):
                    raise
                failure: Exception = exc
            except TRANSIENT_EXCEPTIONS as exc:
                failure = exc
            if attempt == policy.max_attempts:
                break
            pause = policy.delay(attempt)
            log.warning(
                "S3 %s of %r in %s failed (%s), attempt %d of %d; retrying in %.3fs",
                operation,
                key,
                self._where,
                _describe(failure),
                attempt,
                policy.max_attempts,
                pause,
            )
            time.sleep(pause)
        raise TransientStoreError(
            f"S3 {operation} of {key!r} in {self._where} still failing after "
            f"{policy.max_attempts} attempts: {_describe(failure)}",
            operation=operation,
            key=key,
            attempts=policy.max_attempts,
        ) from failure

    def _error(self, operation: str, key: str, exc: ClientError) -> ObjectStoreError:
        code, status = _code(exc), _status(exc)
        if code == "NoSuchBucket":
            return ObjectStoreError(
                f"S3 {operation} of {key!r}: bucket {self.bucket!r} does not exist", key=key
            )
        if code in ("NoSuchKey", "404", "NotFound") or status == 404:
            return ObjectNotFound(f"{key!r} not found in {self._where}", key=key)
        if code == "InvalidRange" or status == 416:
            return ObjectStoreError(
                f"S3 {operation} of {key!r}: range starts at or past the end of the object",
                key=key,
            )
        return ObjectStoreError(
            f"S3 {operation} of {key!r} in {self._where}: {_describe(exc)}", key=key
        )

    def _name(self, key: str) -> str:
        return self._key_prefix + check_key(key)


def is_transient(exc: ClientError) -> bool:
    """True for throttling and server-side trouble that a retry may cure."""
    status = _status(exc)
    return (
        _code(exc) in TRANSIENT_ERROR_CODES
        or status == 429
        or (status is not None and status >= 500 and status != 501)
    )


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: ClientError) -> int | None:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


def _describe(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        message = exc.response.get("Error", {}).get("Message", "")
        return f"{_code(exc) or 'error'} (HTTP {_status(exc)}){': ' + message if message else ''}"
    return f"{type(exc).__name__}: {exc}"


def _unquote(etag: str) -> str:
    return etag.strip('"')


def _etag(response: dict[str, Any]) -> str:
    return _unquote(str(response.get("ETag", "")))


def _response_time(response: dict[str, Any]) -> float:
    """When the server stored the object, from Last-Modified or Date; else now."""
    headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    for name in ("last-modified", "date"):
        value = headers.get(name)
        if value:
            with contextlib.suppress(TypeError, ValueError):
                return parsedate_to_datetime(value).timestamp()
    return time.time()
