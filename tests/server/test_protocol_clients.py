"""Real Kafka clients against a stub broker built on the protocol layer.

The stub is the smallest broker the codec allows: one asyncio server, one
in-memory partition log, and a handler per API the clients call.  It is not
the daemon; it exists so that librdkafka (confluent-kafka) and kafka-python
negotiate versions with `SUPPORTED_VERSIONS`, send their real frames through
`read_frame` / `decode_request`, and parse what `encode_response_parts`
writes - over TCP, in their own I/O code.
"""

from __future__ import annotations

import asyncio
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from types import MappingProxyType
from typing import Any

import pytest

from kfs_core.records.batch import assign_offsets_into, iter_batch_headers
from kfs_core.server.apis import SUPPORTED_VERSIONS
from kfs_core.server.protocol import (
    ApiKey,
    ErrorCode,
    FrameError,
    Request,
    RequestError,
    UnsupportedVersion,
    VersionTable,
    api_versions_body,
    decode_request,
    encode_response_parts,
    error_response_frame,
    read_frame,
)
from kfs_core.server.protocol.messages import (
    FetchResponse,
    FindCoordinatorResponse,
    ListOffsetsResponse,
    MetadataResponse,
    ProduceResponse,
)

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=r"(read_text|open_text) is deprecated", category=DeprecationWarning
    )
    import confluent_kafka
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import TopicPartition as KafkaPythonTopicPartition

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOPIC = "kfs-interop"
NODE_ID = 0


class StubBroker:
    """One broker, one topic with one partition, kept in memory."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, bytes]] = []  # (next offset after it, batch with offsets)
        self.next_offset = 0
        self.seen: list[tuple[str | None, str, int]] = []  # (client id, API, version)
        self.refused: list[RequestError | FrameError] = []
        self.unhandled: list[Request] = []
        self.versions: VersionTable = SUPPORTED_VERSIONS  # what it serves
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stub-broker", daemon=True)
        self._handlers: dict[ApiKey, Callable[[Request], Any]] = {
            ApiKey.API_VERSIONS: lambda request: api_versions_body(
                request.api_version, self.versions
            ),
            ApiKey.METADATA: self._metadata,
            ApiKey.PRODUCE: self._produce,
            ApiKey.FETCH: self._fetch,
            ApiKey.LIST_OFFSETS: self._list_offsets,
            ApiKey.FIND_COORDINATOR: self._find_coordinator,
            ApiKey.INIT_PRODUCER_ID: lambda request: request.response(
                throttle_time_ms=0, error_code=0, producer_id=4242, producer_epoch=0
            ),
        }

    # --- lifecycle ---------------------------------------------------------

    def __enter__(self) -> StubBroker:
        self._thread.start()
        assert self._started.wait(10)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self) -> None:
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._started.set()
        async with server:
            await self._stop.wait()
        connections = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in connections:
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def versions_used(self, client_id: str) -> dict[str, int]:
        """The highest version of each API this client sent."""
        used: dict[str, int] = {}
        for seen_client, api, version in self.seen:
            if seen_client == client_id:
                used[api] = max(version, used.get(api, -1))
        return used

    # --- the connection loop: what the daemon's will look like ---------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    payload = await read_frame(reader)
                except FrameError as error:
                    self.refused.append(error)
                    return
                if payload is None:
                    return
                try:
                    request = decode_request(payload, self.versions)
                except RequestError as error:
                    self.refused.append(error)
                    self.seen.append((error.client_id, "refused", error.api_version or -1))
                    answer = error_response_frame(error, self.versions)
                    if answer is None:
                        return
                    writer.write(answer)
                    continue
                self.seen.append((request.client_id, request.api_key.name, request.api_version))
                if request.api_key not in self._handlers:
                    self.unhandled.append(request)
                    return
                body = await self._respond(request)
                if request.expects_response:
                    writer.writelines(encode_response_parts(request, body))
                    await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _respond(self, request: Request) -> Any:
        if request.api_key == ApiKey.FETCH and request.body.max_wait_ms > 0:
            # Long-poll a little when there is nothing new, as a broker does.
            deadline = time.monotonic() + min(request.body.max_wait_ms, 200) / 1000
            offset = request.body.topics[0].partitions[0].fetch_offset if request.body.topics else 0
            while offset >= self.next_offset and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        return self._handlers[request.api_key](request)

    # --- handlers ----------------------------------------------------------

    def _metadata(self, request: Request) -> Any:
        topic = MetadataResponse.MetadataResponseTopic
        partition = topic.MetadataResponsePartition
        names = [t.name for t in request.body.topics] if request.body.topics else [TOPIC]
        return request.response(
            throttle_time_ms=0,
            brokers=[
                MetadataResponse.MetadataResponseBroker(
                    node_id=NODE_ID, host="127.0.0.1", port=self.port, rack=None
                )
            ],
            cluster_id="kfs-stub",
            controller_id=NODE_ID,
            topics=[
                topic(
                    error_code=0 if name == TOPIC else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    name=name,
                    is_internal=False,
                    partitions=[
                        partition(
                            error_code=0,
                            partition_index=0,
                            leader_id=NODE_ID,
                            leader_epoch=0,
                            replica_nodes=[NODE_ID],
                            isr_nodes=[NODE_ID],
                            offline_replicas=[],
                        )
                    ]
                    if name == TOPIC
                    else [],
                )
                for name in names
            ],
        )

    def _produce(self, request: Request) -> Any:
        answer = ProduceResponse.TopicProduceResponse
        responses = []
        for topic_data in request.body.topic_data:
            partitions = []
            for partition in topic_data.partition_data:
                if topic_data.name != TOPIC or partition.index != 0:
                    error, base = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1
                else:
                    records = bytearray(partition.records)  # the frame goes away; keep a copy
                    list(iter_batch_headers(records, verify_crc=True))
                    base = self.next_offset
                    self.next_offset = assign_offsets_into(records, base)
                    self.batches.append((self.next_offset, bytes(records)))
                    error = ErrorCode.NONE
                partitions.append(
                    answer.PartitionProduceResponse(
                        index=partition.index,
                        error_code=error,
                        base_offset=base,
                        log_append_time_ms=-1,
                        log_start_offset=0,
                    )
                )
            responses.append(answer(name=topic_data.name, partition_responses=partitions))
        return request.response(responses=responses, throttle_time_ms=0)

    def _fetch(self, request: Request) -> Any:
        answer = FetchResponse.FetchableTopicResponse
        responses = []
        for topic in request.body.topics:
            partitions = []
            for partition in topic.partitions:
                records = b"".join(
                    batch for end, batch in self.batches if end > partition.fetch_offset
                )
                partitions.append(
                    answer.PartitionData(
                        partition_index=partition.partition,
                        error_code=0,
                        high_watermark=self.next_offset,
                        last_stable_offset=self.next_offset,
                        log_start_offset=0,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=records,
                    )
                )
            responses.append(answer(topic=topic.topic, partitions=partitions))
        return request.response(throttle_time_ms=0, error_code=0, session_id=0, responses=responses)

    def _list_offsets(self, request: Request) -> Any:
        answer = ListOffsetsResponse.ListOffsetsTopicResponse
        return request.response(
            throttle_time_ms=0,
            topics=[
                answer(
                    name=topic.name,
                    partitions=[
                        answer.ListOffsetsPartitionResponse(
                            partition_index=p.partition_index,
                            error_code=0,
                            timestamp=-1,
                            offset=0 if p.timestamp == -2 else self.next_offset,
                            leader_epoch=0,
                        )
                        for p in topic.partitions
                    ],
                )
                for topic in request.body.topics
            ],
        )

    def _find_coordinator(self, request: Request) -> Any:
        coordinator = FindCoordinatorResponse.Coordinator
        return request.response(
            throttle_time_ms=0,
            error_code=0,
            error_message=None,
            node_id=NODE_ID,
            host="127.0.0.1",
            port=self.port,
            coordinators=[
                coordinator(
                    key=key, node_id=NODE_ID, host="127.0.0.1", port=self.port, error_code=0
                )
                for key in request.body.coordinator_keys or []
            ],
        )


@pytest.fixture
def broker() -> Iterator[StubBroker]:
    with StubBroker() as stub:
        yield stub


def produce_with_librdkafka(broker: StubBroker, values: list[bytes]) -> list[int]:
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": "librdkafka-producer",
            "compression.type": "lz4",
            "linger.ms": 5,
        }
    )
    delivered: list[tuple[Any, Any]] = []
    for i, value in enumerate(values):
        producer.produce(
            TOPIC,
            value=value,
            key=b"k%d" % i,
            partition=0,
            on_delivery=lambda err, msg: delivered.append((err, msg)),
        )
    assert producer.flush(30) == 0
    assert [err for err, _ in delivered] == [None] * len(values)
    return [msg.offset() for _, msg in delivered]


def consume_with_librdkafka(broker: StubBroker, count: int) -> list[tuple[int, bytes]]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": "librdkafka-consumer",
            "group.id": "kfs-stub",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.value()))
        return got
    finally:
        consumer.close()


def test_librdkafka_produces_and_consumes(broker: StubBroker) -> None:
    values = [b"value-%d" % i * (i + 1) for i in range(50)] + [b"x" * 200_000]
    offsets = produce_with_librdkafka(broker, values)
    assert offsets == list(range(len(values)))

    got = consume_with_librdkafka(broker, len(values))
    assert got == list(enumerate(values))

    assert not broker.refused and not broker.unhandled
    # librdkafka 2.16 asks for its highest versions; we cap them.
    producer = broker.versions_used("librdkafka-producer")
    assert producer["API_VERSIONS"] == 3
    assert (producer["METADATA"], producer["PRODUCE"]) == (12, 9)
    assert broker.versions_used("librdkafka-consumer")["FETCH"] == 12


def test_kafka_python_produces_and_consumes(broker: StubBroker) -> None:
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, client_id="kafka-python-producer", linger_ms=5
    )
    try:
        futures = [producer.send(TOPIC, value=b"kp-%d" % i, partition=0) for i in range(20)]
        producer.flush(30)
        offsets = [future.get(timeout=30).offset for future in futures]
    finally:
        producer.close(timeout=10)
    assert offsets == list(range(20))

    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        client_id="kafka-python-consumer",
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
    )
    try:
        partition = KafkaPythonTopicPartition(TOPIC, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [(record.offset, record.value) for record in records]
    finally:
        consumer.close()
    assert got == [(i, b"kp-%d" % i) for i in range(20)]

    assert not broker.refused and not broker.unhandled
    used = broker.versions_used("kafka-python-producer")
    assert used["API_VERSIONS"] == 4
    assert (used["METADATA"], used["PRODUCE"], used["INIT_PRODUCER_ID"]) == (12, 9, 4)
    used = broker.versions_used("kafka-python-consumer")
    assert (used["FETCH"], used["LIST_OFFSETS"]) == (12, 7)


def test_clients_recover_from_the_api_versions_fallback(
    broker: StubBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that serves ApiVersions v0-v2 only: both clients retry and carry on.

    kafka-python reads the v0 error body and retries with our maximum, v2.
    librdkafka parses the error body as the version it sent, fails to, and
    retries with v0 - exactly what it does against a real Kafka broker.
    """
    table = dict(SUPPORTED_VERSIONS)
    table[ApiKey.API_VERSIONS] = (0, 2)
    monkeypatch.setattr(broker, "versions", MappingProxyType(table))

    assert produce_with_librdkafka(broker, [b"after-fallback"]) == [0]
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, client_id="kafka-python-producer")
    try:
        assert producer.send(TOPIC, b"kp", partition=0).get(timeout=30).offset == 1
    finally:
        producer.close(timeout=10)

    for client, first, retry in (("librdkafka-producer", 3, 0), ("kafka-python-producer", 4, 2)):
        api_versions = [
            (api, version)
            for seen_client, api, version in broker.seen
            if seen_client == client and api in ("refused", "API_VERSIONS")
        ]
        assert api_versions[:2] == [("refused", first), ("API_VERSIONS", retry)], client
        assert all(isinstance(error, UnsupportedVersion) for error in broker.refused)
