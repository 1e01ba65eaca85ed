"""Bad input on raw sockets: each gets its Kafka error code or a closed connection.

Afterwards the daemon is still up, a normal client on another connection
produces and consumes, and the data written before the abuse is intact
(invariant 6).  The daemon here runs with auto-create off, so unknown topics
stay unknown.
"""

from __future__ import annotations

import struct
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from kfs_core.records.batch import Record, encode_batch
from kfs_core.server.protocol import ErrorCode
from testkit.daemon import Daemon, DaemonFactory
from testkit.raw_client import RawClient
from tests.server.conftest import by_partition, consume_confluent, produce_confluent

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=r"(read_text|open_text) is deprecated", category=DeprecationWarning
    )
    from kafka.protocol.admin import CreateTopicsRequest
    from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
    from kafka.protocol.producer import ProduceRequest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOPIC = "sturdy"
SMALL = "small-messages"  # max.message.bytes=1000


@pytest.fixture(scope="module")
def strict_daemon(module_daemons: DaemonFactory) -> Iterator[Daemon]:
    daemon = module_daemons.start(name="strict", extra_args=["--no-auto-create-topics"])
    with RawClient(daemon.bootstrap) as client:
        create = CreateTopicsRequest(
            version=5,
            topics=[
                CreateTopicsRequest.CreatableTopic(
                    name=TOPIC, num_partitions=3, replication_factor=1, assignments=[], configs=[]
                ),
                CreateTopicsRequest.CreatableTopic(
                    name=SMALL,
                    num_partitions=1,
                    replication_factor=1,
                    assignments=[],
                    configs=[
                        CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(
                            name="max.message.bytes", value="1000"
                        )
                    ],
                ),
            ],
            timeout_ms=10_000,
            validate_only=False,
        )
        response = client.request(create)
        assert [t.error_code for t in response.topics] == [0, 0]
    yield daemon


@pytest.fixture(scope="module")
def before(strict_daemon: Daemon) -> list[tuple[int, int, bytes]]:
    """Data written before any abuse; checked again at the end."""
    return produce_confluent(strict_daemon.bootstrap, TOPIC, [b"before-%d" % i for i in range(30)])


def batch(values: list[bytes], codec: int = 0) -> bytearray:
    now = int(time.time() * 1000)
    records = [Record(i, now, None, value) for i, value in enumerate(values)]
    return bytearray(encode_batch(records, codec=codec))


def produce(client: RawClient, topic: str, partition: int, records: bytes, acks: int = -1) -> Any:
    request = ProduceRequest(
        version=9,
        transactional_id=None,
        acks=acks,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(
                        index=partition, records=bytes(records)
                    )
                ],
            )
        ],
    )
    response = client.request(request)
    [topic_response] = response.responses
    [partition_response] = topic_response.partition_responses
    return partition_response


def header(api_key: int, api_version: int, correlation_id: int = 7) -> bytes:
    client_id = b"kfs-raw"
    return struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id)) + client_id


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


# --- frames the protocol layer refuses: closed connections --------------------------------


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\x00\x00\x00\x10" + bytes(range(200, 216)), id="garbage"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: kfs\r\n\r\n", id="http"),
        pytest.param(struct.pack(">i", 100 * 1024 * 1024 + 1), id="over-100MiB"),
        pytest.param(struct.pack(">i", -5), id="negative-size"),
        pytest.param(framed(header(9999, 0)), id="unknown-api-key"),
        pytest.param(framed(header(3, 99)), id="unsupported-metadata-version"),
        pytest.param(framed(header(0, 9) + b"\x01\x02"), id="truncated-produce"),
        pytest.param(framed(b"\x00\x03"), id="short-header"),
    ],
)
def test_refused_frames_close_the_connection(
    strict_daemon: Daemon, before: list[tuple[int, int, bytes]], data: bytes
) -> None:
    with RawClient(strict_daemon.bootstrap) as client:
        client.send_raw(data)
        assert client.closed_by_server()
    assert strict_daemon.alive()


def test_unsupported_api_versions_version_gets_error_35(strict_daemon: Daemon) -> None:
    with RawClient(strict_daemon.bootstrap) as client:
        client.send_raw(framed(header(18, 99, correlation_id=42) + b"\x00"))
        payload = client.read_frame()
        assert payload is not None
        correlation_id, error_code = struct.unpack_from(">ih", payload)
        assert (correlation_id, error_code) == (42, ErrorCode.UNSUPPORTED_VERSION)
        # The connection stays usable: the client retries with a version we speak.
        response = client.request(ApiVersionsRequest(version=3))
        assert response.error_code == 0
        assert {k.api_key for k in response.api_keys} >= {0, 1, 2, 3, 18}


def test_a_producer_pinned_to_produce_v2_is_told_unsupported_version(
    strict_daemon: Daemon,
) -> None:
    """kafka-python pinned to Kafka 0.10.1 sends Produce v2: its send fails with a reason."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka
        import kafka.errors

    producer = kafka.KafkaProducer(
        bootstrap_servers=strict_daemon.bootstrap, api_version=(0, 10, 1), retries=0
    )
    try:
        future = producer.send(TOPIC, b"from an old client")
        with pytest.raises(kafka.errors.UnsupportedVersionError):
            future.get(timeout=30)
    finally:
        producer.close(timeout=10)
    assert strict_daemon.alive()


# --- requests that decode but are wrong: their Kafka error codes ------------------------


def test_corrupt_batches_get_corrupt_message(strict_daemon: Daemon) -> None:
    with RawClient(strict_daemon.bootstrap) as client:
        wrong_crc = batch([b"hello", b"world"])
        wrong_crc[-1] ^= 0xFF
        assert produce(client, TOPIC, 0, wrong_crc).error_code == ErrorCode.CORRUPT_MESSAGE

        magic_1 = batch([b"old format"])
        magic_1[16] = 1
        assert produce(client, TOPIC, 0, magic_1).error_code == ErrorCode.CORRUPT_MESSAGE

        truncated = batch([b"cut short"])[:-3]
        assert produce(client, TOPIC, 0, truncated).error_code == ErrorCode.CORRUPT_MESSAGE

        assert produce(client, TOPIC, 0, b"\x00" * 7).error_code == ErrorCode.CORRUPT_MESSAGE

        # The same connection still produces a good batch.
        good = produce(client, TOPIC, 0, batch([b"fine"]))
        assert good.error_code == 0 and good.base_offset >= 0


def test_oversize_batch_gets_message_too_large(strict_daemon: Daemon) -> None:
    with RawClient(strict_daemon.bootstrap) as client:
        answer = produce(client, SMALL, 0, batch([b"x" * 2000]))
        assert answer.error_code == ErrorCode.MESSAGE_TOO_LARGE
        assert produce(client, SMALL, 0, batch([b"y" * 100])).error_code == 0


def test_unknown_topics_partitions_and_bad_names(strict_daemon: Daemon) -> None:
    with RawClient(strict_daemon.bootstrap) as client:
        records = batch([b"nowhere"])
        unknown = produce(client, "no-such-topic", 0, records)
        assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert produce(client, TOPIC, 7, records).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert (
            produce(client, TOPIC, -1, records).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        bad_name = produce(client, "bad/name", 0, records)
        assert bad_name.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION

        metadata = client.request(
            MetadataRequest(
                version=12,
                topics=[
                    MetadataRequest.MetadataRequestTopic(name=name)
                    for name in ("no-such-topic", "bad/name", "." * 300, TOPIC)
                ],
                allow_auto_topic_creation=True,  # the daemon says no
            )
        )
        codes = {t.name: t.error_code for t in metadata.topics}
        assert codes == {
            "no-such-topic": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            "bad/name": ErrorCode.INVALID_TOPIC_EXCEPTION,
            "." * 300: ErrorCode.INVALID_TOPIC_EXCEPTION,
            TOPIC: 0,
        }


def test_invalid_acks_get_invalid_required_acks(strict_daemon: Daemon) -> None:
    with RawClient(strict_daemon.bootstrap) as client:
        answer = produce(client, TOPIC, 0, batch([b"acks=2"]), acks=2)
        assert answer.error_code == ErrorCode.INVALID_REQUIRED_ACKS


def test_failed_acks_0_produce_closes_the_connection(strict_daemon: Daemon) -> None:
    request = ProduceRequest(
        version=9,
        transactional_id=None,
        acks=0,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="no-such-topic",
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(
                        index=0, records=bytes(batch([b"lost"]))
                    )
                ],
            )
        ],
    )
    with RawClient(strict_daemon.bootstrap) as client:
        client.send(request)
        assert client.closed_by_server()


# --- and afterwards ---------------------------------------------------------------------


def test_daemon_survives_and_data_is_intact(
    strict_daemon: Daemon, before: list[tuple[int, int, bytes]]
) -> None:
    # Runs last in this module (pytest keeps file order).
    assert strict_daemon.alive()
    assert strict_daemon.http("/readyz")[0] == 200
    after = produce_confluent(strict_daemon.bootstrap, TOPIC, [b"after-%d" % i for i in range(30)])
    consumed = consume_confluent(strict_daemon.bootstrap, TOPIC, 3, 30 + 30 + 1)  # + "fine"
    values = {value for _, _, value in consumed}
    assert {value for _, _, value in before + after} <= values
    got = by_partition(consumed)
    for partition, rows in by_partition(before + after).items():
        assert set(rows) <= set(got[partition])
    status, text = strict_daemon.http("/metrics")
    assert status == 200
    assert 'kfs_refused_frames_total{kind="too_large"}' in text
    assert 'kfs_partition_errors_total{api="PRODUCE",error="CORRUPT_MESSAGE"}' in text
