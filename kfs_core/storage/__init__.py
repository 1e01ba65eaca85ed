"""Object stores: the `ObjectStore` interface, its backends, and `open_store` for URLs.

- `base`  — `ObjectStore`, `ByteRange`, `ObjectInfo` and the key rules.
- `local` — `LocalObjectStore`, a directory (the embedded default, ``file://``).
- `s3`    — `S3ObjectStore` (``s3://bucket/prefix``), the only boto3 user.  It
  is imported on first use, so importing this package does not load boto3.

Every store's ``url`` opens an equivalent store again: ``open_store(store.url)``.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import TYPE_CHECKING, Any

from kfs_core.storage.base import ByteRange, ObjectInfo, ObjectStore, check_key, check_prefix
from kfs_core.storage.local import LocalObjectStore

if TYPE_CHECKING:
    from kfs_core.storage.s3 import S3ObjectStore

__all__ = [
    "ByteRange",
    "LocalObjectStore",
    "ObjectInfo",
    "ObjectStore",
    "S3ObjectStore",
    "check_key",
    "check_prefix",
    "open_store",
]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_S3_URL_OPTIONS = ("endpoint_url", "region_name")
_USAGE = "use file:///absolute/path, a directory path or s3://bucket/prefix"


def __getattr__(name: str) -> Any:
    if name == "S3ObjectStore":
        from kfs_core.storage.s3 import S3ObjectStore

        return S3ObjectStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_store(url: str, **options: Any) -> ObjectStore:
    """The store a URL names.

    - ``file:///abs/path`` or a plain path (absolute or relative to the
      working directory) → `LocalObjectStore`.
    - ``s3://bucket[/prefix][?endpoint_url=…&region_name=…]`` →
      `S3ObjectStore`; ``options`` are its keyword arguments and win over the
      query, and the endpoint falls back to ``$KFS_S3_ENDPOINT_URL``.
      Credentials (``aws_access_key_id``, ``aws_secret_access_key``,
      ``aws_session_token``) are options only, never part of a URL.

    Options that are None or empty are ignored, so callers may pass their
    settings through whatever the scheme; others that do not apply to the
    scheme raise ValueError, as does any other URL.
    """
    if not isinstance(url, str) or not url.strip():
        raise ValueError(f"store URL is empty: {_USAGE}")
    options = {name: value for name, value in options.items() if value is not None and value != ""}
    match = _SCHEME.match(url)
    scheme = match.group(1).lower() if match else ""
    if scheme == "s3":
        return _open_s3(url, options)
    if scheme == "file":
        path = _file_url_path(url)
    elif "://" in url or (match and len(scheme) > 1):
        raise ValueError(f"unsupported store URL {url!r}: {_USAGE}")
    else:
        path = url  # a plain path (a one-letter "scheme" would be a Windows drive)
    if options:
        raise ValueError(f"options {sorted(options)} do not apply to a local directory store")
    return LocalObjectStore(path)


def _file_url_path(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
        raise ValueError(f"store URL {url!r} is not a local absolute path: {_USAGE}")
    if parts.query or parts.fragment:
        raise ValueError(f"store URL {url!r}: file URLs take no query or fragment")
    return urllib.parse.unquote(parts.path)


def _open_s3(url: str, options: dict[str, Any]) -> ObjectStore:
    parts = urllib.parse.urlsplit(url)
    if not url.lower().startswith("s3://") or not parts.netloc:
        raise ValueError(f"store URL {url!r} names no bucket: use s3://bucket/prefix")
    if parts.fragment:
        raise ValueError(f"store URL {url!r}: S3 URLs take no fragment")
    try:
        query = urllib.parse.parse_qs(parts.query, keep_blank_values=False, strict_parsing=False)
    except ValueError as exc:
        raise ValueError(f"store URL {url!r}: bad query: {exc}") from None
    unknown = sorted(set(query) - set(_S3_URL_OPTIONS))
    if unknown:
        raise ValueError(
            f"store URL {url!r}: unknown query parameter(s) {unknown}; "
            f"allowed: {', '.join(_S3_URL_OPTIONS)}"
        )
    settings: dict[str, Any] = {name: values[-1] for name, values in query.items()}
    settings.update(options)
    from kfs_core.storage.s3 import S3ObjectStore

    return S3ObjectStore(parts.netloc, urllib.parse.unquote(parts.path), **settings)
