"""Cross-checks against kafka-python's client code, which nobody here wrote.

Requests are built the way kafka-python's producer, consumer and cluster
metadata build them, framed by its connection parser (`KafkaProtocol`), read
with our `read_frame` and decoded with `decode_request`.  Our responses go
back through the same parser, which matches correlation ids, picks the
response class from the request it sent, and decodes; the results are then
fed to kafka-python's own consumers of them (version negotiation, cluster
metadata, record parsing).
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest

from kfs_core.records.batch import decode_batch
from kfs_core.server.apis import SUPPORTED_VERSIONS, api_versions_body
from kfs_core.server.protocol import (
    MESSAGES,
    ApiKey,
    ErrorCode,
    Request,
    UnsupportedVersion,
    decode_request,
    encode_response,
    encode_response_parts,
    error_response_frame,
    read_frame,
)
from kfs_core.server.protocol.messages import (
    ApiVersionsRequest,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)

# Client-side kafka-python modules.  Importing them can warn that
# importlib.resources.read_text is deprecated; allow exactly that, only here.
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=r"(read_text|open_text) is deprecated", category=DeprecationWarning
    )
    from kafka.cluster import ClusterMetadata
    from kafka.protocol.broker_version_data import BrokerVersionData
    from kafka.protocol.parser import KafkaProtocol
    from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder
    from kafka.structs import TopicPartition

pytestmark = pytest.mark.unit

CLIENT_ID = "kafka-python-3.0.12"

# The highest version kafka-python 3.0.12 drives per API: its max_version=
# arguments (producer/sender.py, consumer/fetcher.py, coordinator/*.py), or
# the class maximum where it passes none.
KAFKA_PYTHON_CAPS = {
    ApiKey.PRODUCE: 9,
    ApiKey.FETCH: 12,
    ApiKey.JOIN_GROUP: 7,
    ApiKey.SYNC_GROUP: 5,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.OFFSET_FETCH: 8,
}


def negotiated() -> BrokerVersionData:
    return BrokerVersionData(api_versions=dict(SUPPORTED_VERSIONS))


def exchange(parser: KafkaProtocol, message: Any, respond: Any) -> tuple[Request, Any]:
    """One request/response through kafka-python's parser and our codec.

    ``respond(request)`` builds our response body; returns our decoded
    request and the response as kafka-python's parser decoded it.
    """
    correlation_id = parser.send_request(message)
    wire = parser.send_bytes()

    async def read() -> bytes | None:
        reader = asyncio.StreamReader()
        reader.feed_data(wire)
        reader.feed_eof()
        payload = await read_frame(reader)
        assert await read_frame(reader) is None  # exactly one frame on the wire
        return payload

    payload = asyncio.run(read())
    assert payload is not None
    request = decode_request(payload, SUPPORTED_VERSIONS)
    assert (request.correlation_id, request.client_id) == (correlation_id, CLIENT_ID)
    assert request.api_version == message.API_VERSION
    response_frame = encode_response(request, respond(request))
    # Byte by byte, as a socket may deliver it.
    responses = []
    for i in range(len(response_frame)):
        responses += parser.receive_bytes(response_frame[i : i + 1])
    [(received_id, response)] = responses
    assert received_id == correlation_id
    return request, response


@pytest.fixture
def parser() -> KafkaProtocol:
    return KafkaProtocol(client_id=CLIENT_ID)


# --- negotiation -------------------------------------------------------------


def test_kafka_python_sees_a_kafka_3_0_broker() -> None:
    # kafka-python gates features on the broker version it infers from our table.
    assert negotiated().broker_version == (3, 0)


def test_kafka_python_negotiates_its_highest_versions() -> None:
    versions = negotiated()
    chosen = {}
    for key in SUPPORTED_VERSIONS:
        request_class = MESSAGES[ApiKey(key)].request
        cap = KAFKA_PYTHON_CAPS.get(ApiKey(key), request_class.max_version)
        chosen[ApiKey(key)] = versions.api_version(request_class, max_version=cap)
    assert chosen == {
        ApiKey.PRODUCE: 9,
        ApiKey.FETCH: 12,
        ApiKey.LIST_OFFSETS: 7,
        ApiKey.METADATA: 12,
        ApiKey.OFFSET_FOR_LEADER_EPOCH: 4,
        ApiKey.OFFSET_COMMIT: 8,
        ApiKey.OFFSET_FETCH: 8,
        ApiKey.FIND_COORDINATOR: 4,
        ApiKey.JOIN_GROUP: 7,
        ApiKey.HEARTBEAT: 4,
        ApiKey.LEAVE_GROUP: 5,
        ApiKey.SYNC_GROUP: 5,
        ApiKey.API_VERSIONS: 4,
        ApiKey.CREATE_TOPICS: 7,
        ApiKey.DELETE_TOPICS: 6,
        ApiKey.INIT_PRODUCER_ID: 4,
        ApiKey.ADD_PARTITIONS_TO_TXN: 3,
        ApiKey.ADD_OFFSETS_TO_TXN: 3,
        ApiKey.END_TXN: 3,
        ApiKey.WRITE_TXN_MARKERS: 2,
        ApiKey.TXN_OFFSET_COMMIT: 3,
        ApiKey.DESCRIBE_CONFIGS: 4,
        ApiKey.DESCRIBE_GROUPS: 6,
        ApiKey.LIST_GROUPS: 5,
        ApiKey.DELETE_GROUPS: 2,
        ApiKey.OFFSET_DELETE: 0,
        ApiKey.DESCRIBE_CLIENT_QUOTAS: 1,
        ApiKey.DELETE_RECORDS: 2,
        ApiKey.ALTER_CONFIGS: 2,
        ApiKey.DESCRIBE_LOG_DIRS: 4,
        ApiKey.CREATE_PARTITIONS: 3,
        ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
        ApiKey.DESCRIBE_CLUSTER: 2,
        ApiKey.DESCRIBE_PRODUCERS: 0,
        ApiKey.DESCRIBE_TRANSACTIONS: 0,
        ApiKey.LIST_TRANSACTIONS: 2,
        ApiKey.SASL_HANDSHAKE: 1,
        ApiKey.SASL_AUTHENTICATE: 2,
        ApiKey.DESCRIBE_ACLS: 2,
        ApiKey.CREATE_ACLS: 2,
        ApiKey.DELETE_ACLS: 2,
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: 0,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0,
    }


def test_api_versions_handshake(parser: KafkaProtocol) -> None:
    # What KafkaConnection._get_api_versions sends first.
    message = ApiVersionsRequest(
        version=ApiVersionsRequest.max_version,
        client_software_name="kafka-python",
        client_software_version="3.0.12",
    )
    request, response = exchange(parser, message, lambda r: api_versions_body(r.api_version))
    assert request.body.client_software_name == "kafka-python"
    assert response.error_code == 0
    table = {a.api_key: (a.min_version, a.max_version) for a in response.api_keys}
    assert table == dict(SUPPORTED_VERSIONS)
    assert BrokerVersionData(api_versions=table).broker_version == (3, 0)


def test_api_versions_fallback_through_the_client_parser(parser: KafkaProtocol) -> None:
    """An ApiVersions version we do not serve: the v0 fallback decodes as the client expects."""
    message = ApiVersionsRequest(version=4, client_software_name="x", client_software_version="1")
    parser.send_request(message)
    wire = bytearray(parser.send_bytes())
    wire[6:8] = b"\x00\x07"  # api_version 7: a client newer than kafka-python
    with pytest.raises(UnsupportedVersion) as caught:
        decode_request(bytes(wire[4:]), SUPPORTED_VERSIONS)
    frame = error_response_frame(caught.value, SUPPORTED_VERSIONS)
    assert frame is not None
    [(_, response)] = parser.receive_bytes(frame)
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    api_versions = {a.api_key: a.max_version for a in response.api_keys}
    assert api_versions[ApiKey.API_VERSIONS] == SUPPORTED_VERSIONS[ApiKey.API_VERSIONS][1]


# --- metadata ----------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 4, 7, 9, 10, 12])
def test_metadata_feeds_kafka_python_cluster_metadata(parser: KafkaProtocol, version: int) -> None:
    cluster = ClusterMetadata(bootstrap_servers="localhost:9092")
    cluster.add_topic("orders")
    message = cluster.metadata_request()
    message.API_VERSION = version

    def respond(request: Request) -> Any:
        topics = request.body.topics or []
        assert [t.name for t in topics] == ["orders"]
        broker = MetadataResponse.MetadataResponseBroker
        topic = MetadataResponse.MetadataResponseTopic
        partition = topic.MetadataResponsePartition
        return request.response(
            throttle_time_ms=0,
            brokers=[broker(node_id=1, host="kfs.local", port=9092, rack=None)],
            cluster_id="kfs-cluster",
            controller_id=1,
            topics=[
                topic(
                    error_code=0,
                    name="orders",
                    is_internal=False,
                    partitions=[
                        partition(
                            error_code=0,
                            partition_index=index,
                            leader_id=1,
                            leader_epoch=0,
                            replica_nodes=[1],
                            isr_nodes=[1],
                            offline_replicas=[],
                        )
                        for index in range(3)
                    ],
                )
            ],
        )

    _, response = exchange(parser, message, respond)
    cluster.update_metadata(response)
    assert cluster.topics() == {"orders"}
    assert cluster.partitions_for_topic("orders") == {0, 1, 2}
    assert cluster.leader_for_partition(TopicPartition("orders", 2)) == 1
    broker = cluster.broker_metadata(1)
    assert (broker.host, broker.port) == ("kfs.local", 9092)


# --- produce -----------------------------------------------------------------


def kafka_python_batch(values: list[bytes], compression: int = 0) -> bytes:
    """A RecordBatch v2 exactly as kafka-python's RecordAccumulator closes one."""
    builder = MemoryRecordsBuilder(magic=2, compression_type=compression, batch_size=1 << 22)
    for i, value in enumerate(values):
        builder.append(timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=value)
    builder.close()
    return bytes(builder.buffer())


@pytest.mark.parametrize("version", [3, 5, 7, 9])
@pytest.mark.parametrize("compression", [0, 1])
def test_produce_as_the_sender_builds_it(
    parser: KafkaProtocol, version: int, compression: int
) -> None:
    values = [b"v" * 100, b"", b"\x00\xff" * 3000]
    batch = kafka_python_batch(values, compression)
    # Sender._produce_request: one TopicProduceData per topic, records = batch buffer.
    topic = ProduceRequest.TopicProduceData
    message = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[topic(name="orders", partition_data=[topic.PartitionProduceData(index=1, records=batch)])],
        min_version=0,
        max_version=9,
    )  # fmt: skip
    message.API_VERSION = version

    def respond(request: Request) -> Any:
        [topic_data] = request.body.topic_data
        [partition] = topic_data.partition_data
        assert (topic_data.name, partition.index) == ("orders", 1)
        assert partition.records == batch
        decoded = decode_batch(bytes(partition.records))
        assert [r.value for r in decoded.records] == values
        answer = ProduceResponse.TopicProduceResponse
        return request.response(
            responses=[
                answer(
                    name="orders",
                    partition_responses=[
                        answer.PartitionProduceResponse(
                            index=1,
                            error_code=0,
                            base_offset=41,
                            log_append_time_ms=-1,
                            log_start_offset=0,
                        )
                    ],
                )
            ],
            throttle_time_ms=0,
        )

    request, response = exchange(parser, message, respond)
    assert request.expects_response
    [topic_response] = response.responses
    [partition_response] = topic_response.partition_responses
    assert (topic_response.name, partition_response.index) == ("orders", 1)
    assert (partition_response.error_code, partition_response.base_offset) == (0, 41)


def test_produce_with_acks_zero_has_no_response(parser: KafkaProtocol) -> None:
    message = ProduceRequest(version=9, acks=0, timeout_ms=1000, topic_data=[])
    parser.send_request(message)
    assert not parser.in_flight_requests  # kafka-python will not wait for one...
    request = decode_request(bytes(parser.send_bytes())[4:], SUPPORTED_VERSIONS)
    assert not request.expects_response  # ...and we will not send one


# --- fetch -------------------------------------------------------------------


@pytest.mark.parametrize("version", [4, 5, 7, 11, 12])
def test_fetch_records_reach_kafka_python(parser: KafkaProtocol, version: int) -> None:
    batches = [kafka_python_batch([b"a" * 3000, b"b" * 3000]), kafka_python_batch([b"c"])]
    records = b"".join(batches)
    # Fetcher._create_fetch_requests, one partition.
    fetch_topic = FetchRequest.FetchTopic
    message = FetchRequest(
        version=version,
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52_428_800,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            fetch_topic(
                topic="orders",
                partitions=[
                    fetch_topic.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        log_start_offset=-1,
                        partition_max_bytes=1_048_576,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )

    def respond(request: Request) -> Any:
        [topic] = request.body.topics
        assert topic.topic == "orders" and topic.partitions[0].fetch_offset == 0
        answer = FetchResponse.FetchableTopicResponse
        body = request.response(
            throttle_time_ms=0,
            error_code=0,
            session_id=0,
            responses=[
                answer(
                    topic="orders",
                    partitions=[
                        answer.PartitionData(
                            partition_index=0,
                            error_code=0,
                            high_watermark=3,
                            last_stable_offset=3,
                            log_start_offset=0,
                            aborted_transactions=None,
                            preferred_read_replica=-1,
                            records=records,
                        )
                    ],
                )
            ],
        )
        parts = encode_response_parts(request, body)
        assert any(isinstance(part, memoryview) and part.obj is records for part in parts)
        return body

    _, response = exchange(parser, message, respond)
    [partition] = response.responses[0].partitions
    assert partition.high_watermark == 3
    fetched = MemoryRecords(partition.records)
    values = []
    while fetched.has_next():
        batch = fetched.next_batch()
        values += [record.value for record in batch]
    assert values == [b"a" * 3000, b"b" * 3000, b"c"]


@pytest.mark.parametrize("version", range(1, 8))
def test_list_offsets_as_the_fetcher_builds_it(parser: KafkaProtocol, version: int) -> None:
    partition = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
    message = ListOffsetsRequest(
        isolation_level=1,
        topics=[("orders", [partition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])],
    )
    message.API_VERSION = version

    def respond(request: Request) -> Any:
        [topic] = request.body.topics
        assert topic.name == "orders" and topic.partitions[0].timestamp == -1
        answer = ListOffsetsResponse.ListOffsetsTopicResponse
        return request.response(
            throttle_time_ms=0,
            topics=[
                answer(
                    name="orders",
                    partitions=[
                        answer.ListOffsetsPartitionResponse(
                            partition_index=0, error_code=0, timestamp=-1, offset=42, leader_epoch=0
                        )
                    ],
                )
            ],
        )

    _, response = exchange(parser, message, respond)
    assert response.topics[0].partitions[0].offset == 42
