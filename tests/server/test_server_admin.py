"""The topic and cluster admin APIs with real clients over real sockets.

* CreatePartitions: confluent-kafka and kafka-python; Metadata and Produce
  see the new partitions at once; fewer/equal counts, unknown topics and
  bad replica assignments get Kafka's error codes;
* IncrementalAlterConfigs (SET, DELETE, APPEND, SUBTRACT) and AlterConfigs
  ("these overrides and no others"), validated against the topic config
  names; DescribeConfigs shows the change at once, and the flush stores
  batches with an altered ``compression.type``;
* DeleteRecords: the log start moves forwards through the catalog (it
  survives a restart), consumers start there, fetches below it and deletes
  above the high watermark get OFFSET_OUT_OF_RANGE;
* DescribeCluster (kafka-python sends it; librdkafka reads Metadata) and
  DescribeLogDirs (kafka-python);
* ``kfs topics add-partitions`` / ``alter`` reach a running daemon.

Both stores where a test takes ``daemon``; the error cases run on the local one.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from kfs_core.catalog.partition import PartitionCatalog
from kfs_core.server.protocol import ErrorCode
from kfs_core.storage import open_store
from testkit.daemon import Daemon, DaemonFactory
from testkit.raw_client import RawClient
from testkit.waiting import wait_for
from tests.server.conftest import (
    KafkaPythonTopicPartition,
    confluent_kafka,
    kafka,
    produce_confluent,
)

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=r"(read_text|open_text) is deprecated", category=DeprecationWarning
    )
    import kafka.errors as kafka_errors
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        NewPartitions,
        NewTopic,
        OffsetSpec,
        ResourceType,
    )
    from kafka.admin import ConfigResource as KafkaPythonConfigResource
    from kafka.admin import ConfigResourceType
    from kafka.protocol.admin import (
        CreatePartitionsRequest,
        DeleteRecordsRequest,
        DescribeClusterRequest,
        IncrementalAlterConfigsRequest,
    )
    from kafka.protocol.consumer import FetchRequest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def admin(daemon: Daemon) -> Iterator[AdminClient]:
    client = AdminClient({"bootstrap.servers": daemon.bootstrap})
    yield client
    del client
    gc.collect()


@pytest.fixture(scope="module")
def local_admin(local_daemon: Daemon) -> Iterator[AdminClient]:
    client = AdminClient({"bootstrap.servers": local_daemon.bootstrap})
    yield client
    del client
    gc.collect()


@pytest.fixture
def kafka_python_admin(daemon: Daemon) -> Iterator[Any]:
    client = kafka.KafkaAdminClient(bootstrap_servers=daemon.bootstrap, request_timeout_ms=30_000)
    yield client
    client.close()


def kafka_error(future: Any) -> Any:
    """The KafkaError a failed admin future carries (None when it succeeded)."""
    try:
        future.result(timeout=30)
    except confluent_kafka.KafkaException as exc:
        return exc.args[0]
    return None


def create(admin: AdminClient, name: str, partitions: int = 1, **configs: str) -> None:
    config = {key.replace("_", "."): value for key, value in configs.items()}
    admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(30)


def partition_count(admin: AdminClient, name: str) -> int:
    return len(admin.list_topics(name, timeout=30).topics[name].partitions)


def topic_configs(admin: AdminClient, name: str) -> dict[str, Any]:
    resource = ConfigResource(ResourceType.TOPIC, name)
    entries: dict[str, Any] = admin.describe_configs([resource])[resource].result(30)
    return entries


def incremental(admin: AdminClient, name: str, *entries: tuple[str, str | None, Any]) -> Any:
    resource = ConfigResource(
        ResourceType.TOPIC,
        name,
        incremental_configs=[
            ConfigEntry(key, value, incremental_operation=op) for key, value, op in entries
        ],
    )
    return kafka_error(admin.incremental_alter_configs([resource])[resource])


def earliest(admin: AdminClient, topic: str, partition: int) -> int:
    tp = confluent_kafka.TopicPartition(topic, partition)
    offset: int = admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(30).offset
    return offset


# --- CreatePartitions -------------------------------------------------------------------


def test_create_partitions_is_seen_by_metadata_and_produce_at_once(
    daemon: Daemon, admin: AdminClient
) -> None:
    create(admin, "adm-grow", 1)
    assert kafka_error(admin.create_partitions([NewPartitions("adm-grow", 4)])["adm-grow"]) is None
    assert partition_count(admin, "adm-grow") == 4
    # The producer learns the count from Metadata and writes to every partition now.
    delivered = produce_confluent(
        daemon.bootstrap, "adm-grow", [b"a", b"b", b"c", b"d"], partitions=4
    )
    assert sorted(p for p, _, _ in delivered) == [0, 1, 2, 3]


def test_create_partitions_errors(local_daemon: Daemon, local_admin: AdminClient) -> None:
    create(local_admin, "adm-fixed", 3)

    def code(*new: NewPartitions, **options: Any) -> Any:
        error = kafka_error(local_admin.create_partitions(list(new), **options)[new[0].topic])
        return None if error is None else error.code()

    assert code(NewPartitions("adm-fixed", 2)) == ErrorCode.INVALID_PARTITIONS
    assert code(NewPartitions("adm-fixed", 3)) == ErrorCode.INVALID_PARTITIONS
    assert code(NewPartitions("adm-never-created", 5)) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert (
        code(NewPartitions("adm-fixed", 5, replica_assignment=[[7], [7]]))
        == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    )
    assert code(NewPartitions("adm-fixed", 5), validate_only=True) is None
    assert partition_count(local_admin, "adm-fixed") == 3  # none of the above changed it
    assert code(NewPartitions("adm-fixed", 5, replica_assignment=[[0], [0]])) is None
    assert partition_count(local_admin, "adm-fixed") == 5

    topic = CreatePartitionsRequest.CreatePartitionsTopic
    with RawClient(local_daemon.bootstrap) as client:
        response = client.request(
            CreatePartitionsRequest(
                version=3,
                topics=[
                    topic(name="adm-fixed", count=6, assignments=None),
                    topic(name="adm-fixed", count=7, assignments=None),
                    topic(name="bad name!", count=2, assignments=None),
                ],
                timeout_ms=10_000,
                validate_only=False,
            )
        )
    codes = [(r.name, r.error_code) for r in response.results]
    assert codes == [
        ("adm-fixed", ErrorCode.INVALID_REQUEST),
        ("adm-fixed", ErrorCode.INVALID_REQUEST),
        ("bad name!", ErrorCode.INVALID_TOPIC_EXCEPTION),
    ]


def test_kafka_python_create_partitions(daemon: Daemon, kafka_python_admin: Any) -> None:
    kafka_python_admin.create_topics([kafka.admin.NewTopic("adm-kp-grow", 2, 1)])
    kafka_python_admin.create_partitions({"adm-kp-grow": 5})
    described = kafka_python_admin.describe_topics(["adm-kp-grow"])
    assert len(described[0]["partitions"]) == 5
    with pytest.raises(kafka_errors.InvalidPartitionsError):
        kafka_python_admin.create_partitions({"adm-kp-grow": 4})


# --- IncrementalAlterConfigs and AlterConfigs --------------------------------------------


def test_incremental_alter_configs(daemon: Daemon, admin: AdminClient) -> None:
    create(admin, "adm-alter", 1, retention_bytes="1000")
    assert (
        incremental(
            admin,
            "adm-alter",
            ("retention.ms", "60000", AlterConfigOpType.SET),
            ("cleanup.policy", "compact", AlterConfigOpType.APPEND),
        )
        is None
    )
    configs = topic_configs(admin, "adm-alter")
    assert configs["retention.ms"].value == "60000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["retention.bytes"].value == "1000"  # untouched: incremental

    assert (
        incremental(
            admin,
            "adm-alter",
            ("retention.ms", None, AlterConfigOpType.DELETE),
            ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT),
        )
        is None
    )
    configs = topic_configs(admin, "adm-alter")
    assert configs["retention.ms"].value == "604800000"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].value == "compact"


def test_every_kafka_topic_config_is_accepted_shown_and_validated(
    local_daemon: Daemon, local_admin: AdminClient
) -> None:
    """Kafka's own names (and Kafka 3.x's removed ones) pass; the unused say they change nothing."""
    create(
        local_admin,
        "adm-kafka-names",
        1,
        **{
            "flush.ms": "1000",
            "flush.messages": "10",
            "segment.ms": "3600000",
            "max.compaction.lag.ms": "86400000",
            "file.delete.delay.ms": "0",
            "message.format.version": "2.8-IV1",
            "unclean.leader.election.enable": "true",
            "min.insync.replicas": "2",
        },
    )
    configs = topic_configs(local_admin, "adm-kafka-names")
    assert configs["flush.ms"].value == "1000"
    assert configs["flush.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["message.format.version"].value == "2.8-IV1"
    assert configs["segment.jitter.ms"].value == "0"  # a default, shown
    assert configs["segment.jitter.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert "preallocate" in configs and "remote.storage.enable" in configs
    # Kafka's validation: flush.messages >= 1, booleans true/false, min lag <= max lag.
    for entries in (
        (("flush.messages", "0", AlterConfigOpType.SET),),
        (("preallocate", "yes", AlterConfigOpType.SET),),
        (("min.compaction.lag.ms", "90000000", AlterConfigOpType.SET),),
    ):
        error = incremental(local_admin, "adm-kafka-names", *entries)
        assert error is not None and error.code() == ErrorCode.INVALID_CONFIG, entries
    assert (
        incremental(local_admin, "adm-kafka-names", ("flush.ms", "5", AlterConfigOpType.SET))
        is None
    )
    assert topic_configs(local_admin, "adm-kafka-names")["flush.ms"].value == "5"


def test_incremental_alter_configs_errors(local_daemon: Daemon, local_admin: AdminClient) -> None:
    create(local_admin, "adm-alter-bad", 1, retention_ms="5000")
    cases = {
        "unknown name": (("no.such.config", "1", AlterConfigOpType.SET),),
        "bad value": (("retention.ms", "soon", AlterConfigOpType.SET),),
        "out of range": (("min.cleanable.dirty.ratio", "1.5", AlterConfigOpType.SET),),
        "append to a non-list": (("retention.ms", "1", AlterConfigOpType.APPEND),),
        "delete an unknown name": (("no.such.config", None, AlterConfigOpType.DELETE),),
        "subtract to nothing": (("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT),),
        # one good change beside a bad one: neither applies
        "good with bad": (
            ("retention.bytes", "1", AlterConfigOpType.SET),
            ("cleanup.policy", "sometimes", AlterConfigOpType.SET),
        ),
    }
    for what, entries in cases.items():
        error = incremental(local_admin, "adm-alter-bad", *entries)
        assert error is not None and error.code() == ErrorCode.INVALID_CONFIG, what
    configs = topic_configs(local_admin, "adm-alter-bad")
    assert (configs["retention.ms"].value, configs["retention.bytes"].value) == ("5000", "-1")

    missing = incremental(
        local_admin, "adm-never-created", ("retention.ms", "1", AlterConfigOpType.SET)
    )
    assert missing.code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    broker = ConfigResource(
        ResourceType.BROKER,
        "0",
        incremental_configs=[
            ConfigEntry("broker.id", "1", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    error = kafka_error(local_admin.incremental_alter_configs([broker])[broker])
    assert error.code() == ErrorCode.INVALID_REQUEST

    # What clients check locally, sent raw: a name listed twice, a null SET.
    config = IncrementalAlterConfigsRequest.AlterConfigsResource.AlterableConfig
    resource = IncrementalAlterConfigsRequest.AlterConfigsResource
    with RawClient(local_daemon.bootstrap) as client:
        response = client.request(
            IncrementalAlterConfigsRequest(
                version=1,
                resources=[
                    resource(
                        resource_type=2,
                        resource_name="adm-alter-bad",
                        configs=[
                            config(name="retention.ms", config_operation=0, value="1"),
                            config(name="retention.ms", config_operation=0, value="2"),
                        ],
                    ),
                    resource(
                        resource_type=2,
                        resource_name="adm-alter-bad",
                        configs=[config(name="retention.ms", config_operation=0, value=None)],
                    ),
                    resource(
                        resource_type=2,
                        resource_name="adm-alter-bad",
                        configs=[config(name="retention.ms", config_operation=9, value="1")],
                    ),
                ],
                validate_only=False,
            )
        )
    assert [r.error_code for r in response.responses] == [ErrorCode.INVALID_REQUEST] * 3


def test_alter_configs_replaces_every_override(
    local_daemon: Daemon, local_admin: AdminClient
) -> None:
    create(local_admin, "adm-replace", 1, retention_ms="5000", cleanup_policy="compact")
    resource = ConfigResource(
        ResourceType.TOPIC, "adm-replace", set_config={"retention.bytes": "42"}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # alter_configs is deprecated
        futures = local_admin.alter_configs([resource])
    assert kafka_error(futures[resource]) is None
    configs = topic_configs(local_admin, "adm-replace")
    assert configs["retention.bytes"].value == "42"
    assert configs["retention.ms"].value == "604800000"  # dropped: not listed
    assert configs["cleanup.policy"].value == "delete"

    bad = ConfigResource(ResourceType.TOPIC, "adm-replace", set_config={"retention.ms": "-5"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        error = kafka_error(local_admin.alter_configs([bad])[bad])
    assert error.code() == ErrorCode.INVALID_CONFIG
    assert topic_configs(local_admin, "adm-replace")["retention.bytes"].value == "42"

    checked = ConfigResource(ResourceType.TOPIC, "adm-replace", set_config={"retention.bytes": "7"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert (
            kafka_error(local_admin.alter_configs([checked], validate_only=True)[checked]) is None
        )
    assert topic_configs(local_admin, "adm-replace")["retention.bytes"].value == "42"


def test_kafka_python_alter_configs(daemon: Daemon, kafka_python_admin: Any) -> None:
    kafka_python_admin.create_topics([kafka.admin.NewTopic("adm-kp-alter", 1, 1)])
    result = kafka_python_admin.alter_configs(
        [
            KafkaPythonConfigResource(
                ConfigResourceType.TOPIC, "adm-kp-alter", {"retention.ms": "777"}
            )
        ]
    )
    assert result == {"topic": {"adm-kp-alter": "OK"}}
    described = kafka_python_admin.describe_configs(
        [KafkaPythonConfigResource(ConfigResourceType.TOPIC, "adm-kp-alter")]
    )
    assert "777" in str(described)
    refused = kafka_python_admin.alter_configs(
        [
            KafkaPythonConfigResource(
                ConfigResourceType.TOPIC, "adm-kp-alter", {"retention.ms": "x"}
            )
        ],
        raise_on_unknown=False,
    )
    assert "InvalidConfig" in refused["topic"]["adm-kp-alter"]


def test_altered_compression_type_is_used_by_the_flush(
    local_daemon: Daemon, local_admin: AdminClient
) -> None:
    create(local_admin, "adm-codec", 1)
    assert (
        incremental(local_admin, "adm-codec", ("compression.type", "zstd", AlterConfigOpType.SET))
        is None
    )
    produce_confluent(local_daemon.bootstrap, "adm-codec", [b"x" * 100] * 20, partitions=1)
    catalog = PartitionCatalog(open_store(local_daemon.store_url), "test", "adm-codec", 0)

    def segments() -> list[Any]:
        return list(catalog.refresh().segments)

    flushed = wait_for(segments, timeout=30, what="a flushed segment of adm-codec")
    assert {s.codec for s in flushed} == {4}  # zstd, re-encoded from uncompressed batches


# --- DeleteRecords -----------------------------------------------------------------------


def test_delete_records_moves_the_log_start(daemon: Daemon, admin: AdminClient) -> None:
    create(admin, "adm-trim", 2)
    values = [b"v%d" % i for i in range(20)]
    produce_confluent(daemon.bootstrap, "adm-trim", values, partitions=2)  # 10 per partition

    tp = confluent_kafka.TopicPartition("adm-trim", 0, 4)
    deleted = admin.delete_records([tp])[tp].result(30)
    assert deleted.low_watermark == 4
    assert earliest(admin, "adm-trim", 0) == 4
    assert earliest(admin, "adm-trim", 1) == 0  # the other partition is untouched

    # Below the new start again: nothing changes, the answer is the start.
    again = confluent_kafka.TopicPartition("adm-trim", 0, 2)
    assert admin.delete_records([again])[again].result(30).low_watermark == 4

    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": daemon.bootstrap, "group.id": "adm-trim", "enable.auto.commit": False}
    )
    try:
        consumer.assign(
            [confluent_kafka.TopicPartition("adm-trim", 0, confluent_kafka.OFFSET_BEGINNING)]
        )
        got: list[tuple[int, bytes]] = []

        def consumed() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append((msg.offset(), msg.value()))
            return len(got) >= 6

        wait_for(consumed, timeout=60, interval=0, what="records after the new log start")
    finally:
        consumer.close()
    assert [offset for offset, _ in got] == [4, 5, 6, 7, 8, 9]
    assert [value for _, value in got] == [b"v%d" % i for i in range(8, 20, 2)]

    # -1 means the high watermark: everything goes.
    everything = confluent_kafka.TopicPartition("adm-trim", 1, -1)
    assert admin.delete_records([everything])[everything].result(30).low_watermark == 10
    assert earliest(admin, "adm-trim", 1) == 10


def test_delete_records_errors(local_daemon: Daemon, local_admin: AdminClient) -> None:
    create(local_admin, "adm-trim-bad", 1)
    produce_confluent(local_daemon.bootstrap, "adm-trim-bad", [b"a", b"b", b"c"], partitions=1)

    def code(topic: str, partition: int, offset: int) -> Any:
        tp = confluent_kafka.TopicPartition(topic, partition, offset)
        error = kafka_error(local_admin.delete_records([tp])[tp])
        return None if error is None else error.code()

    assert code("adm-trim-bad", 0, 4) == ErrorCode.OFFSET_OUT_OF_RANGE  # above the high watermark
    assert code("adm-trim-bad", 0, 2) is None
    # librdkafka checks partitions against Metadata itself; raw requests reach the broker.
    topic = DeleteRecordsRequest.DeleteRecordsTopic
    part = topic.DeleteRecordsPartition
    with RawClient(local_daemon.bootstrap) as client:
        response = client.request(
            DeleteRecordsRequest(
                version=2,
                topics=[
                    topic(
                        name="adm-trim-bad",
                        partitions=[
                            part(partition_index=0, offset=-7),
                            part(partition_index=5, offset=1),
                        ],
                    ),
                    topic(name="adm-never-created", partitions=[part(partition_index=0, offset=1)]),
                ],
                timeout_ms=10_000,
            )
        )
        results = {
            (t.name, p.partition_index): (p.error_code, p.low_watermark)
            for t in response.topics
            for p in t.partitions
        }
        assert results == {
            ("adm-trim-bad", 0): (ErrorCode.OFFSET_OUT_OF_RANGE, -1),
            ("adm-trim-bad", 5): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
            ("adm-never-created", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        }

        # A fetch below the new log start is out of range (and, as in Kafka, carries
        # no offsets); one at the start succeeds and reports it.
        below, at_start = (fetch(client, "adm-trim-bad", 0, offset) for offset in (1, 2))
    assert below.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert (at_start.error_code, at_start.log_start_offset, at_start.high_watermark) == (0, 2, 3)


def fetch(client: RawClient, topic: str, partition: int, offset: int) -> Any:
    """One partition's Fetch v11 response."""
    fetch_partition = FetchRequest.FetchTopic.FetchPartition
    response = client.request(
        FetchRequest(
            version=11,
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[
                FetchRequest.FetchTopic(
                    topic=topic,
                    partitions=[
                        fetch_partition(
                            partition=partition,
                            current_leader_epoch=-1,
                            fetch_offset=offset,
                            log_start_offset=-1,
                            partition_max_bytes=1 << 20,
                        )
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
        )
    )
    return response.responses[0].partitions[0]


def test_delete_records_survives_a_restart(daemons: DaemonFactory) -> None:
    daemon = daemons.start()
    produce_confluent(
        daemon.bootstrap, "adm-trim-restart", [b"%d" % i for i in range(8)], partitions=1
    )
    client = kafka.KafkaAdminClient(bootstrap_servers=daemon.bootstrap)
    try:
        tp = KafkaPythonTopicPartition("adm-trim-restart", 0)
        result = client.delete_records({tp: 5})
        assert result[tp]["low_watermark"] == 5
        with pytest.raises(kafka_errors.OffsetOutOfRangeError):
            client.delete_records({tp: 9})
    finally:
        client.close()
    daemon.kill()  # kill -9: the log start lives in the catalog, not in memory
    daemon.start()
    admin = AdminClient({"bootstrap.servers": daemon.bootstrap})
    try:
        assert earliest(admin, "adm-trim-restart", 0) == 5
    finally:
        del admin
        gc.collect()


def test_kfs_topics_add_partitions_reaches_a_running_daemon(
    local_daemon: Daemon, local_admin: AdminClient
) -> None:
    env = {**local_daemon.env, "KFS_STORE_URL": local_daemon.store_url, "KFS_NAMESPACE": "test"}
    create(local_admin, "adm-cli-grow", 1)
    for args in (
        ["add-partitions", "adm-cli-grow", "--partitions", "3"],
        ["alter", "adm-cli-grow", "--config", "retention.ms=4321"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "kfs_core.cli", "topics", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    # The daemon re-reads a topic every topic refresh (5 s).
    wait_for(
        lambda: partition_count(local_admin, "adm-cli-grow") == 3,
        timeout=30,
        interval=0.2,
        what="three partitions in Metadata",
    )
    assert topic_configs(local_admin, "adm-cli-grow")["retention.ms"].value == "4321"


# --- DescribeCluster and DescribeLogDirs ---------------------------------------------------


def test_describe_client_quotas_lists_none(local_daemon: Daemon) -> None:
    """kafka-configs --describe --entity-type users asks it: no quotas, valid filters or not."""
    from kfs_core.server.protocol.messages import DescribeClientQuotasRequest

    component = DescribeClientQuotasRequest.ComponentData

    def ask(*components: Any) -> Any:
        with RawClient(local_daemon.bootstrap) as client:
            return client.request(
                DescribeClientQuotasRequest(version=1, components=list(components), strict=False)
            )

    exact = ask(component(entity_type="user", match_type=0, match="alice"))
    assert (exact.error_code, exact.entries) == (0, [])
    assert ask(component(entity_type="client-id", match_type=2, match=None)).error_code == 0
    for bad in (
        component(entity_type="tenant", match_type=2, match=None),
        component(entity_type="user", match_type=0, match=None),
        component(entity_type="user", match_type=7, match=None),
    ):
        refused = ask(bad)
        assert refused.error_code == ErrorCode.INVALID_REQUEST and refused.error_message


def test_describe_cluster(daemon: Daemon, admin: AdminClient, kafka_python_admin: Any) -> None:
    described = admin.describe_cluster().result(30)  # librdkafka: from Metadata
    assert [(n.id, n.port) for n in described.nodes] == [(0, daemon.kafka_port)]
    cluster = kafka_python_admin.describe_cluster()  # kafka-python: DescribeCluster v2
    assert cluster["cluster_id"] == described.cluster_id
    assert cluster["controller_id"] == 0
    assert [(b["broker_id"], b["port"], b["is_fenced"]) for b in cluster["brokers"]] == [
        (0, daemon.kafka_port, False)
    ]
    with RawClient(daemon.bootstrap) as client:
        controllers = client.request(
            DescribeClusterRequest(
                version=1, include_cluster_authorized_operations=False, endpoint_type=2
            )
        )
    assert controllers.error_code == ErrorCode.MISMATCHED_ENDPOINT_TYPE


def test_describe_log_dirs(daemon: Daemon, admin: AdminClient, kafka_python_admin: Any) -> None:
    create(admin, "adm-dirs", 2)
    produce_confluent(daemon.bootstrap, "adm-dirs", [b"y" * 1000] * 10, partitions=2)

    def sizes() -> dict[int, int] | None:
        answer = kafka_python_admin.describe_log_dirs({"adm-dirs": [0, 1, 7], "adm-nowhere": [0]})
        [broker] = answer
        [log_dir] = broker["log_dirs"]
        assert log_dir["error_code"] == 0
        assert log_dir["log_dir"].endswith("/test")
        [topic] = log_dir["topics"]  # the unknown topic and partition 7 are left out
        found = {p["partition_index"]: p["partition_size"] for p in topic["partitions"]}
        return found if all(size >= 5000 for size in found.values()) else None

    assert set(wait_for(sizes, timeout=30, what="log dir sizes")) == {0, 1}
    everything = kafka_python_admin.describe_log_dirs()
    names = {t["name"] for t in everything[0]["log_dirs"][0]["topics"]}
    assert "adm-dirs" in names
