"""`open_store` URL parsing, round trips of ``store.url``, and where boto3 may be imported."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kfs_core.storage import LocalObjectStore, S3ObjectStore, open_store

pytestmark = pytest.mark.unit

KFS_CORE = Path(__file__).resolve().parents[2] / "kfs_core"


@pytest.fixture(autouse=True)
def no_endpoint_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KFS_S3_ENDPOINT_URL", raising=False)


# --- local ----------------------------------------------------------------------


def test_file_url_opens_a_local_store(tmp_path: Path) -> None:
    store = open_store((tmp_path / "store").as_uri())
    assert isinstance(store, LocalObjectStore)
    assert store.root == str(tmp_path / "store")


def test_plain_paths_open_a_local_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absolute = open_store(str(tmp_path / "abs"))
    assert isinstance(absolute, LocalObjectStore)
    assert absolute.root == str(tmp_path / "abs")
    monkeypatch.chdir(tmp_path)
    relative = open_store("rel/store")
    assert isinstance(relative, LocalObjectStore)
    assert relative.root == str(tmp_path / "rel" / "store")


def test_local_url_round_trips_with_awkward_characters(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "a dir with spaces" / "100%" / "ünï#?")
    store.put("k", b"v")
    reopened = open_store(store.url)
    assert isinstance(reopened, LocalObjectStore)
    assert reopened.root == store.root
    assert reopened.get("k") == b"v"


def test_file_url_with_localhost(tmp_path: Path) -> None:
    store = open_store(f"file://localhost{tmp_path}/s")
    assert isinstance(store, LocalObjectStore)
    assert store.root == f"{tmp_path}/s"


def test_empty_options_are_ignored_and_others_rejected_for_local(tmp_path: Path) -> None:
    store = open_store(str(tmp_path), endpoint_url="", region_name=None)
    assert isinstance(store, LocalObjectStore)
    with pytest.raises(ValueError, match="do not apply to a local directory store"):
        open_store(str(tmp_path), endpoint_url="http://minio:9000")


# --- s3 ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "bucket", "prefix"),
    [
        ("s3://kfs-data", "kfs-data", ""),
        ("s3://kfs-data/", "kfs-data", ""),
        ("s3://kfs-data/prod", "kfs-data", "prod"),
        ("s3://kfs-data/prod/eu/", "kfs-data", "prod/eu"),
        ("S3://kfs-data/p", "kfs-data", "p"),
        ("s3://kfs-data/with%20space", "kfs-data", "with space"),
    ],
)
def test_s3_urls(url: str, bucket: str, prefix: str) -> None:
    store = open_store(url)
    assert isinstance(store, S3ObjectStore)
    assert (store.bucket, store.prefix, store.endpoint_url) == (bucket, prefix, None)


def test_s3_endpoint_from_option_query_or_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from_query = open_store(
        "s3://b1/p?endpoint_url=http%3A%2F%2Fminio%3A9000&region_name=eu-west-1"
    )
    assert isinstance(from_query, S3ObjectStore)
    assert from_query.endpoint_url == "http://minio:9000"
    assert from_query.region_name == "eu-west-1"

    from_option = open_store(
        "s3://b1/p?endpoint_url=http%3A%2F%2Fminio%3A9000", endpoint_url="http://other:1"
    )
    assert isinstance(from_option, S3ObjectStore)
    assert from_option.endpoint_url == "http://other:1"

    monkeypatch.setenv("KFS_S3_ENDPOINT_URL", "http://from-env:9000")
    from_env = open_store("s3://b1/p", endpoint_url="")  # empty setting: fall back to the env
    assert isinstance(from_env, S3ObjectStore)
    assert from_env.endpoint_url == "http://from-env:9000"


def test_s3_options_pass_through() -> None:
    store = open_store("s3://b1", max_attempts=9, base_delay=0.5)
    assert isinstance(store, S3ObjectStore)
    assert store.retry.max_attempts == 9
    assert store.retry.base_delay == 0.5


@pytest.mark.parametrize(
    "url",
    [
        "s3://kfs-data",
        "s3://kfs-data/prod/eu",
        "s3://kfs-data/odd%20prefix/ü",
        "s3://kfs-data/p?endpoint_url=http%3A%2F%2F127.0.0.1%3A9000",
        "s3://kfs-data/p?endpoint_url=http%3A%2F%2Fminio%3A9000&region_name=eu-west-1",
    ],
)
def test_s3_url_round_trips(url: str) -> None:
    store = open_store(url)
    again = open_store(store.url)
    assert isinstance(store, S3ObjectStore)
    assert isinstance(again, S3ObjectStore)
    assert again.url == store.url
    assert (again.bucket, again.prefix, again.endpoint_url, again.region_name) == (
        store.bucket,
        store.prefix,
        store.endpoint_url,
        store.region_name,
    )


def test_explicit_endpoint_is_part_of_the_url() -> None:
    store = S3ObjectStore("b1", prefix="p", endpoint_url="http://127.0.0.1:9000")
    assert store.url == "s3://b1/p?endpoint_url=http%3A%2F%2F127.0.0.1%3A9000"
    assert S3ObjectStore("b1").url == "s3://b1"


# --- bad URLs -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("gs://bucket/x", "unsupported store URL"),
        ("http://example.com/x", "unsupported store URL"),
        ("hdfs:///x", "unsupported store URL"),
        ("s3://", "names no bucket"),
        ("s3:///prefix", "names no bucket"),
        ("s3:bucket", "names no bucket"),
        ("s3://user@bucket/x", "not an S3 bucket name"),
        ("s3://bucket/a//b", "prefix"),
        ("s3://bucket/a/../b", "prefix"),
        ("s3://bucket/p?endpoint=http://x", "unknown query parameter"),
        ("s3://bucket/p#frag", "fragment"),
        ("file://remote-host/x", "not a local absolute path"),
        ("file:relative/x", "not a local absolute path"),
        ("file:///x?y=1", "no query"),
    ],
)
def test_bad_urls_raise_one_line_value_errors(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as raised:
        open_store(url)
    assert "\n" not in str(raised.value)


# --- boto3 stays in one module ---------------------------------------------------------


def test_importing_the_storage_package_does_not_import_boto3(tmp_path: Path) -> None:
    code = (
        "import sys, kfs_core.storage as s\n"
        "s.open_store(sys.argv[1]).put('k', b'v')\n"
        "assert 'boto3' not in sys.modules and 'botocore' not in sys.modules, 'boto3 imported'\n"
        "s.S3ObjectStore\n"
        "assert 'boto3' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code, tmp_path.as_uri()], check=True, timeout=120)


def test_only_the_s3_module_imports_boto3() -> None:
    importers = sorted(
        str(path.relative_to(KFS_CORE))
        for path in KFS_CORE.rglob("*.py")
        if re.search(r"^\s*(import|from)\s+(boto3|botocore)\b", path.read_text(), re.M)
    )
    assert importers == ["storage/s3.py"]


def test_s3_credentials_are_options_never_url_parameters(tmp_path: Path) -> None:
    store = open_store("s3://b1", aws_access_key_id="AKIA", aws_secret_access_key="secret")
    assert isinstance(store, S3ObjectStore)
    assert store._credentials == {"aws_access_key_id": "AKIA", "aws_secret_access_key": "secret"}
    assert "secret" not in store.url
    again = open_store(store.url)
    assert isinstance(again, S3ObjectStore) and again._credentials == {}
    with pytest.raises(ValueError, match="unknown query parameter"):
        open_store("s3://b1?aws_access_key_id=AKIA")
    with pytest.raises(ValueError, match="do not apply to a local directory store"):
        open_store(str(tmp_path), aws_access_key_id="AKIA")
