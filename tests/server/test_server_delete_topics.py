"""DeleteTopics takes effect at once, and the purge frees the name seconds later.

In process, with raw requests: right after a successful DeleteTopics,
Produce, Fetch, ListOffsets and Metadata answer UNKNOWN_TOPIC_OR_PARTITION -- no 5 s topic-cache window.  The daemon then
purges the topic (`kfs_core.catalog.purge`): its objects go, and CreateTopics
of the name, which answered TOPIC_ALREADY_EXISTS with Kafka's "marked for
deletion" until then, makes a new, empty topic.
"""

from __future__ import annotations

import contextlib
import time
import uuid
import warnings

import pytest

from kfs_core.catalog.partition import PartitionCatalog
from kfs_core.catalog.topics import TopicRegistry
from kfs_core.server.protocol import ErrorCode
from kfs_core.storage import open_store
from testkit.raw_client import RawClient
from tests.server.conftest import ThreadedServer, produce_request
from tests.server.test_server_ops import creatable, fetch_request

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=r"(read_text|open_text) is deprecated", category=DeprecationWarning
    )
    from kafka.protocol.admin import CreateTopicsRequest, DeleteTopicsRequest
    from kafka.protocol.consumer import ListOffsetsRequest
    from kafka.protocol.metadata import MetadataRequest
    from kafka.record.memory_records import MemoryRecords

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

UNKNOWN = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def produce_code(client: RawClient, topic: str) -> tuple[int, int]:
    answer = client.request(produce_request(topic, [b"v"])).responses[0].partition_responses[0]
    return int(answer.error_code), int(answer.base_offset)


def list_offsets_code(client: RawClient, topic: str) -> int:
    listed = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest(
        version=7,
        replica_id=-1,
        isolation_level=0,
        topics=[
            listed(
                name=topic,
                partitions=[
                    listed.ListOffsetsPartition(
                        partition_index=0, current_leader_epoch=-1, timestamp=-1
                    )
                ],
            )
        ],
    )
    return int(client.request(request).topics[0].partitions[0].error_code)


def metadata_code(client: RawClient, topic: str) -> int:
    request = MetadataRequest(
        version=12,
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
        allow_auto_topic_creation=False,
    )
    return int(client.request(request).topics[0].error_code)


def create(client: RawClient, topic: str) -> tuple[int, str | None]:
    request = CreateTopicsRequest(version=5, topics=[creatable(topic)], timeout_ms=10_000)
    [result] = client.request(request).topics
    return int(result.error_code), result.error_message


def create_once_purged(client: RawClient, topic: str, timeout_s: float = 30.0) -> None:
    """CreateTopics until the purge has freed the name (TOPIC_ALREADY_EXISTS until then)."""
    deadline = time.monotonic() + timeout_s
    while True:
        code, message = create(client, topic)
        if code == 0:
            return
        assert code == ErrorCode.TOPIC_ALREADY_EXISTS, (code, message)
        assert message is not None and "marked for deletion" in message
        assert time.monotonic() < deadline, f"{topic!r} was not purged in {timeout_s} s"
        time.sleep(0.05)


def segment_objects(server: ThreadedServer, topic: str) -> list[str]:
    settings = server.server.settings
    with contextlib.closing(open_store(settings.store_url)) as store:
        return [
            info.key
            for info in store.list(f"{settings.namespace}/{topic}/")
            if "/_log/" not in info.key
        ]


def test_a_deleted_topic_is_unknown_at_once_and_purged_soon_after(
    inprocess: ThreadedServer,
) -> None:
    topic = "doomed"
    with RawClient(inprocess.bootstrap) as client:
        for offset in range(3):
            assert produce_code(client, topic) == (0, offset)  # auto-created
        assert list_offsets_code(client, topic) == 0

        deleted = client.request(
            DeleteTopicsRequest(version=4, topic_names=[topic], timeout_ms=10_000)
        )
        assert deleted.responses[0].error_code == 0

        # At once: no request may still see the topic.
        assert produce_code(client, topic) == (UNKNOWN, -1)
        fetched = client.request(fetch_request(topic, [(0, 0)]))
        assert fetched.responses[0].partitions[0].error_code == UNKNOWN
        assert list_offsets_code(client, topic) == UNKNOWN
        assert metadata_code(client, topic) == UNKNOWN

        create_once_purged(client, topic)
        assert segment_objects(inprocess, topic) == []  # the old topic's data is gone
        # A new, empty topic; its log starts above every offset of the old one.
        assert produce_code(client, topic) == (0, 3)
        fetched = client.request(fetch_request(topic, [(0, 0)])).responses[0].partitions[0]
        assert fetched.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        fetched = client.request(fetch_request(topic, [(0, 3)])).responses[0].partitions[0]
        assert (fetched.error_code, fetched.log_start_offset, fetched.high_watermark) == (0, 3, 4)
        assert offsets_of(fetched.records) == [3]


def offsets_of(records: bytes) -> list[int]:
    batches = MemoryRecords(records)
    found = []
    while (batch := batches.next_batch()) is not None:
        found.extend(record.offset for record in batch)
    return found


def test_a_flushed_topic_is_purged_and_created_again_empty(inprocess: ThreadedServer) -> None:
    """The deleted topic's segments are in the store: the purge deletes them."""
    topic = "flushed-doomed"
    with RawClient(inprocess.bootstrap) as client:
        assert create(client, topic) == (0, None)
        for offset in range(5):
            assert produce_code(client, topic) == (0, offset)
        settings = inprocess.server.settings
        with contextlib.closing(open_store(settings.store_url)) as store:
            catalog = PartitionCatalog(store, settings.namespace, topic, 0)
            deadline = time.monotonic() + 30
            while catalog.refresh().high_watermark < 5:  # the flush commits within its interval
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert segment_objects(inprocess, topic) != []

        client.request(DeleteTopicsRequest(version=4, topic_names=[topic], timeout_ms=10_000))
        create_once_purged(client, topic)
        assert segment_objects(inprocess, topic) == []
        assert produce_code(client, topic) == (0, 5)
        with contextlib.closing(open_store(settings.store_url)) as store:
            registry = TopicRegistry(store, settings.namespace)
            assert registry.deleted_topics() == []
            state = PartitionCatalog(store, settings.namespace, topic, 0).refresh()
        assert state.log_start_offset == 5
        assert all(s.base_offset >= 5 for s in state.segments)


def test_topics_named_by_id_are_described_and_deleted(inprocess: ThreadedServer) -> None:
    """Metadata v10+ and DeleteTopics v6 may name a topic by id alone.

    As the Java AdminClient's ``TopicCollection.ofTopicIds`` does, with the name "".
    """
    topic = "by-id"
    with RawClient(inprocess.bootstrap) as client:
        assert create(client, topic)[0] == 0
        named = client.request(
            MetadataRequest(
                version=12,
                topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                allow_auto_topic_creation=False,
            )
        )
        topic_id = named.topics[0].topic_id
        assert topic_id.int != 0
        for name in (None, ""):
            by_id = client.request(
                MetadataRequest(
                    version=12,
                    topics=[MetadataRequest.MetadataRequestTopic(name=name, topic_id=topic_id)],
                    allow_auto_topic_creation=False,
                )
            ).topics[0]
            assert (by_id.error_code, by_id.name, by_id.topic_id) == (0, topic, topic_id)
            assert len(by_id.partitions) == 1
        stranger = uuid.uuid4()
        unknown = client.request(
            MetadataRequest(
                version=12,
                topics=[MetadataRequest.MetadataRequestTopic(name=None, topic_id=stranger)],
                allow_auto_topic_creation=False,
            )
        ).topics[0]
        assert (unknown.error_code, unknown.topic_id) == (ErrorCode.UNKNOWN_TOPIC_ID, stranger)

        state = DeleteTopicsRequest.DeleteTopicState
        deleted = client.request(
            DeleteTopicsRequest(
                version=6,
                topics=[state(name=None, topic_id=topic_id), state(name=None, topic_id=stranger)],
                timeout_ms=10_000,
            )
        ).responses
        assert [(r.name, r.topic_id, r.error_code) for r in deleted] == [
            (topic, topic_id, 0),
            (None, stranger, ErrorCode.UNKNOWN_TOPIC_ID),
        ]
        assert metadata_code(client, topic) == UNKNOWN
