"""The fault proxy the store-fault campaign stands on: each fault does what it says to boto3."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import boto3
import botocore.config
import botocore.exceptions
import pytest

from soak.fault_proxy import FaultProxy

pytestmark = pytest.mark.integration


@pytest.fixture
def proxy(moto_server: str) -> Iterator[FaultProxy]:
    with FaultProxy(moto_server, seed=3) as p:
        yield p


def _client(proxy: FaultProxy, retries: int = 0) -> object:
    config = botocore.config.Config(
        retries={"total_max_attempts": retries + 1, "mode": "standard"}, read_timeout=10
    )
    return boto3.client("s3", endpoint_url=proxy.url, region_name="us-east-1", config=config)


def test_forwarded_requests_reach_the_store(proxy: FaultProxy, s3_bucket: str) -> None:
    s3 = _client(proxy)
    key = f"proxy/{uuid.uuid4().hex}"
    s3.put_object(Bucket=s3_bucket, Key=key, Body=b"x" * 5000)
    assert s3.get_object(Bucket=s3_bucket, Key=key)["Body"].read() == b"x" * 5000
    assert s3.head_object(Bucket=s3_bucket, Key=key)["ContentLength"] == 5000
    assert proxy.counts["forwarded"] == 3


def test_each_fault_fails_requests_its_way(proxy: FaultProxy, s3_bucket: str) -> None:
    s3 = _client(proxy)
    key = f"proxy/{uuid.uuid4().hex}"
    proxy.set(error_rate=1.0)
    with pytest.raises(botocore.exceptions.ClientError) as info:
        s3.put_object(Bucket=s3_bucket, Key=key, Body=b"x")
    assert info.value.response["Error"]["Code"] in ("InternalError", "SlowDown")
    proxy.set(reset_rate=1.0)
    with pytest.raises(botocore.exceptions.BotoCoreError):
        s3.put_object(Bucket=s3_bucket, Key=key, Body=b"y" * 100_000)
    s3.list_objects_v2(Bucket=s3_bucket, Prefix="proxy/")  # no body: not reset
    proxy.set(outage=True)
    with pytest.raises(botocore.exceptions.BotoCoreError):
        s3.list_objects_v2(Bucket=s3_bucket, Prefix="proxy/")
    proxy.set(delay_s=0.5)
    started = time.monotonic()
    s3.put_object(Bucket=s3_bucket, Key=key, Body=b"z")
    assert time.monotonic() - started >= 0.5
    proxy.set()
    assert s3.get_object(Bucket=s3_bucket, Key=key)["Body"].read() == b"z"
    assert {k: proxy.counts[k] for k in ("error", "reset", "outage")} == {
        "error": 1, "reset": 1, "outage": 1,
    }  # fmt: skip
