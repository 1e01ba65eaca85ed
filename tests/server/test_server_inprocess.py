"""The daemon in-process, where a test can break a handler on purpose; and its small helpers.

* A handler that raises answers UNKNOWN_SERVER_ERROR for that request, logs
  the traceback, and the connection carries on with the next request.
* A fetch cancelled (its client gone) while a read is under way leaves no
  unretrieved task failure behind (asyncio would log it as an ERROR).
* Pipelined produce requests on one connection are answered in request
  order, with offsets in request order.
* `parse_host_port`, `trim_to_batches`, `cluster_id_for` and the counters
  collector, as units; the error response of every served API and version
  decodes in kafka-python.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import random
import warnings
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from kfs_core.errors import UnknownTopicOrPartition
from kfs_core.records.batch import Record, encode_batch
from kfs_core.server import broker as broker_module
from kfs_core.server.apis import SUPPORTED_VERSIONS, fetch
from kfs_core.server.apis.context import BrokerOptions
from kfs_core.server.apis.fetch import trim_to_batches
from kfs_core.server.app import parse_host_port
from kfs_core.server.broker import cluster_id_for, error_response
from kfs_core.server.metrics import CountersCollector
from kfs_core.server.protocol import MESSAGES, ApiKey, ErrorCode, decode_request, encode_response
from testkit.raw_client import RawClient
from tests.server.conftest import ThreadedServer, produce_request
from tests.server.test_protocol import ALL_VERSIONS, client_frame, sample_message

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=r"(read_text|open_text) is deprecated", category=DeprecationWarning
    )
    from kafka.protocol.consumer import ListOffsetsRequest
    from kafka.protocol.metadata import ApiVersionsRequest


@pytest.mark.integration
def test_a_failing_handler_answers_unknown_server_error_and_the_connection_lives(
    inprocess: ThreadedServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(broker: Any, request: Any) -> Any:
        raise RuntimeError("a bug in the handler")

    registry = dict(broker_module.REGISTRY)
    registry[ApiKey.LIST_OFFSETS] = dataclasses.replace(
        registry[ApiKey.LIST_OFFSETS], handle=broken
    )
    monkeypatch.setattr(broker_module, "REGISTRY", registry)
    listed = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest(
        version=7,
        replica_id=-1,
        isolation_level=0,
        topics=[
            listed(
                name="anything",
                partitions=[
                    listed.ListOffsetsPartition(
                        partition_index=0, current_leader_epoch=-1, timestamp=-1
                    )
                ],
            )
        ],
    )
    with (
        caplog.at_level(logging.ERROR, logger="kfs_core.server.app"),
        RawClient(inprocess.bootstrap) as client,
    ):
        response = client.request(request)
        [partition] = response.topics[0].partitions
        assert partition.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
        # Same connection, next request: served normally.
        assert client.request(ApiVersionsRequest(version=3)).error_code == 0
        produced = client.request(produce_request("still-fine", [b"ok"]))
        assert produced.responses[0].partition_responses[0].error_code == 0
    assert any("a bug in the handler" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)


@pytest.mark.integration
def test_pipelined_produces_are_answered_in_order(inprocess: ThreadedServer) -> None:
    """50 produces sent before reading any answer: answers and offsets in request order."""
    requests = [produce_request("pipelined", [b"r%d" % i, b"s%d" % i]) for i in range(50)]
    with RawClient(inprocess.bootstrap) as client:
        for request in requests:
            client.send(request)
        answers = [client.read_response(request) for request in requests]
    offsets = [a.responses[0].partition_responses[0].base_offset for a in answers]
    assert offsets == list(range(0, 100, 2))


# --- units ----------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9092", ("127.0.0.1", 9092)),
        ("localhost", ("localhost", 9092)),
        (":19092", ("", 19092)),
        ("[::1]:9093", ("::1", 9093)),
        ("[::]", ("::", 9092)),
    ],
)
def test_parse_host_port(text: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(text, 9092) == expected


@pytest.mark.unit
@pytest.mark.parametrize("text", ["host:port", "::1:9092", "[::1]x", "h:70000"])
def test_parse_host_port_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_host_port(text, 9092)


@pytest.mark.unit
def test_trim_to_batches_keeps_whole_batches_only() -> None:
    batches = [encode_batch([Record(i, 0, None, b"v" * 100)], base_offset=i) for i in range(3)]
    data = b"".join(batches)
    size = len(batches[0])
    assert trim_to_batches(data, len(data)) == data
    assert bytes(trim_to_batches(data, 2 * size + 5)) == data[: 2 * size]
    assert bytes(trim_to_batches(data, size - 1)) == b""


@pytest.mark.unit
def test_cluster_id_is_stable_and_kafka_shaped() -> None:
    first = cluster_id_for("file:///a", "default")
    assert first == cluster_id_for("file:///a", "default") != cluster_id_for("file:///b", "default")
    assert len(first) == 22


@dataclass
class _Counters:
    requests: int = 3
    cache_hits: int = 3
    cache_misses: int = 1
    pool_used_bytes: int = 7
    fsync_seconds: float = 0.5


@pytest.mark.unit
def test_counters_collector_exports_counters_gauges_and_ratios() -> None:
    registry = CollectorRegistry()
    registry.register(
        CountersCollector(
            "kfs_x", _Counters, "test", gauges=["pool_used_bytes"], exclude=["fsync_seconds"]
        )
    )
    text = generate_latest(registry).decode()
    assert "kfs_x_requests_total 3.0" in text
    assert "# TYPE kfs_x_pool_used_bytes gauge" in text
    assert "kfs_x_cache_hit_ratio 0.75" in text
    assert "fsync" not in text


@pytest.mark.unit
@pytest.mark.parametrize(("key", "version"), ALL_VERSIONS)
@pytest.mark.parametrize("seed", range(2))
def test_error_responses_encode_for_every_served_version(
    key: ApiKey, version: int, seed: int
) -> None:
    """What a failing handler (or a group API) answers decodes in kafka-python, at every version."""
    rng = random.Random(f"error-{key}-{version}-{seed}")
    message = sample_message(MESSAGES[key].request, version, rng)
    request = decode_request(client_frame(message, correlation_id=seed)[4:], SUPPORTED_VERSIONS)
    options = BrokerOptions("localhost", 9092, cluster_id_for("file:///x", "default"))
    body = error_response(request, ErrorCode.UNKNOWN_SERVER_ERROR, options, "boom")
    frame = encode_response(request, body)
    if key == ApiKey.API_VERSIONS:
        return  # kafka-python reads any ApiVersions error as the v0 fallback body
    decoded = MESSAGES[key].response.decode(frame, version=version, header=True, framed=True)
    assert decoded.header.correlation_id == seed


def test_a_fetch_cancelled_mid_read_leaves_no_unretrieved_failure() -> None:
    """A client gone while a read of a just-deleted topic is under way: nothing logged as ERROR."""

    async def body() -> list[dict[str, Any]]:
        unhandled: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: unhandled.append(ctx))
        release = asyncio.Event()

        async def read(topic: str, *_: Any, **__: Any) -> Any:
            await release.wait()
            raise UnknownTopicOrPartition(f"unknown topic {topic!r}", topic=topic)

        context = SimpleNamespace(log=SimpleNamespace(read=read))
        target = fetch._FetchTarget("gone", 0, 0, 1 << 20)
        poll = asyncio.ensure_future(fetch._read_once(context, [target], 1 << 20, False, 12))  # type: ignore[arg-type]
        await asyncio.sleep(0)  # the read has started and waits
        poll.cancel()  # the connection closed
        with pytest.raises(asyncio.CancelledError):
            await poll
        release.set()  # the topic's read fails after nobody waits for it
        for _ in range(3):
            await asyncio.sleep(0)
        gc.collect()
        return unhandled

    assert asyncio.run(body()) == []
