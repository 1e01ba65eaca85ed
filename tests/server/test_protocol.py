"""The server-side protocol layer: version table, golden frames, round trips, bad input.

* Golden bytes for ApiVersions v0 and v3 (flexible) requests and responses,
  and for the v0 fallback answer to an unsupported ApiVersions version.
* Every supported (API, version): a request with every field populated from
  its JSON spec, encoded by kafka-python's generated classes, decodes with
  `decode_request`; a response we encode decodes with kafka-python, equal
  field by field.
* The hand-written Produce/Fetch fast paths give the same objects and bytes
  as the generated codecs, without copying records.
* Garbage, truncated, oversize and trailing-byte frames raise the typed errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import random
import re
import struct
import uuid
import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kfs_core.server import protocol
from kfs_core.server.apis import SUPPORTED_VERSIONS, api_versions_body
from kfs_core.server.protocol import (
    MAX_REQUEST_BYTES,
    MESSAGES,
    ApiKey,
    ErrorCode,
    FrameTooLarge,
    InvalidResponse,
    MalformedRequest,
    Request,
    RequestError,
    TruncatedFrame,
    UnknownApiKey,
    UnsupportedVersion,
    check_frame_size,
    decode_request,
    encode_response,
    encode_response_parts,
    error_response_frame,
    read_frame,
)
from kfs_core.server.protocol.fastpath import (
    FETCH_FAST_VERSIONS,
    INLINE_RECORDS_BYTES,
    PRODUCE_FAST_VERSIONS,
    encode_fetch_response,
)
from kfs_core.server.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchResponse,
    MetadataRequest,
    ProduceRequest,
    ProduceResponse,
)

# kafka-python's error table, for the error-code cross-check.  Importing
# kafka-python can warn that importlib.resources.read_text is deprecated;
# allow exactly that, only here.
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=r"(read_text|open_text) is deprecated", category=DeprecationWarning
    )
    import kafka.errors as kafka_errors

pytestmark = pytest.mark.unit

I16 = struct.Struct(">h").pack
I32 = struct.Struct(">i").pack

ALL_VERSIONS = [
    pytest.param(key, version, id=f"{key.name}-v{version}")
    for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())
    for version in range(low, high + 1)
]


def client_frame(
    message: Any, correlation_id: int = 1, client_id: str | None = "kfs-test"
) -> bytes:
    """A request frame (size prefix included) as kafka-python's client encodes it."""
    message.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(message.encode(header=True, framed=True))


def request_for(key: ApiKey, version: int, correlation_id: int = 1) -> Request:
    """A decoded-request stand-in, for encoding responses."""
    return Request(key, version, correlation_id, "kfs-test", None)


# --- the version table -----------------------------------------------------


def test_table_serves_the_apis_the_daemon_needs() -> None:
    assert set(SUPPORTED_VERSIONS) >= {
        0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18, 19, 20, 22, 23, 24, 25, 26, 28, 32,
    }  # fmt: skip
    assert dict(SUPPORTED_VERSIONS) == {
        int(entry[:4], 16): (int(entry[5:9], 16), int(entry[10:14], 16)) for entry in GOLDEN_TABLE
    }  # every served API has its golden row
    assert set(SUPPORTED_VERSIONS) == set(MESSAGES)


@pytest.mark.parametrize("key", sorted(SUPPORTED_VERSIONS), ids=lambda k: ApiKey(k).name)
def test_table_stays_inside_each_spec(key: int) -> None:
    low, high = SUPPORTED_VERSIONS[key]
    pair = MESSAGES[ApiKey(key)]
    assert pair.request.API_KEY == pair.response.API_KEY == key
    for message in pair:
        spec_low, spec_high = message.valid_versions
        assert spec_low <= low <= high <= spec_high, message.name


def test_no_supported_version_names_topics_by_id_only() -> None:
    """Topic ids (KIP-516) are out of scope: every served request can name its topics.

    (Metadata v10+ and CreateTopics v7 carry ids beside the names; a handler
    answers an id-only Metadata topic with UNKNOWN_TOPIC_ID.)
    """
    for key, (low, high) in SUPPORTED_VERSIONS.items():
        request_json = MESSAGES[ApiKey(key)].request.json
        for struct_fields in _walk_structs(request_json["fields"]):
            names = {field["name"]: field for field in struct_fields}
            if "TopicId" not in names:
                continue
            name_field = names.get("Name") or names.get("Topic") or names.get("TopicName")
            assert name_field is not None, key
            for version in range(low, high + 1):
                if _in_versions(names["TopicId"]["versions"], version):
                    assert _in_versions(name_field["versions"], version), (key, version)


# --- golden frames ---------------------------------------------------------

# ApiVersions entries in the order the response lists them (ascending key):
# int16 api_key, int16 min_version, int16 max_version.
GOLDEN_TABLE = [
    "0000 0003 0009",  # Produce          v3-v9
    "0001 0004 000c",  # Fetch            v4-v12
    "0002 0001 0007",  # ListOffsets      v1-v7
    "0003 0000 000c",  # Metadata         v0-v12
    "0008 0002 0009",  # OffsetCommit     v2-v9
    "0009 0001 0009",  # OffsetFetch      v1-v9
    "000a 0000 0004",  # FindCoordinator  v0-v4
    "000b 0000 0007",  # JoinGroup        v0-v7
    "000c 0000 0004",  # Heartbeat        v0-v4
    "000d 0000 0005",  # LeaveGroup       v0-v5
    "000e 0000 0005",  # SyncGroup        v0-v5
    "000f 0000 0006",  # DescribeGroups   v0-v6
    "0010 0000 0005",  # ListGroups       v0-v5
    "0011 0000 0001",  # SaslHandshake    v0-v1
    "0012 0000 0004",  # ApiVersions      v0-v4
    "0013 0002 0007",  # CreateTopics     v2-v7
    "0014 0001 0006",  # DeleteTopics     v1-v6
    "0015 0000 0002",  # DeleteRecords    v0-v2
    "0016 0000 0004",  # InitProducerId   v0-v4
    "0017 0002 0004",  # OffsetForLeaderEpoch v2-v4
    "0018 0000 0003",  # AddPartitionsToTxn v0-v3
    "0019 0000 0003",  # AddOffsetsToTxn  v0-v3
    "001a 0000 0003",  # EndTxn           v0-v3
    "001b 0001 0002",  # WriteTxnMarkers  v1-v2
    "001c 0000 0003",  # TxnOffsetCommit  v0-v3
    "001d 0001 0002",  # DescribeAcls     v1-v2
    "001e 0001 0002",  # CreateAcls       v1-v2
    "001f 0001 0002",  # DeleteAcls       v1-v2
    "0020 0001 0004",  # DescribeConfigs  v1-v4
    "0021 0000 0002",  # AlterConfigs     v0-v2
    "0023 0001 0004",  # DescribeLogDirs  v1-v4
    "0024 0000 0002",  # SaslAuthenticate v0-v2
    "0025 0000 0003",  # CreatePartitions v0-v3
    "002a 0000 0002",  # DeleteGroups     v0-v2
    "002c 0000 0001",  # IncrementalAlterConfigs v0-v1
    "002f 0000 0000",  # OffsetDelete     v0
    "0030 0000 0001",  # DescribeClientQuotas v0-1
    "0032 0000 0000",  # DescribeUserScramCredentials v0
    "0033 0000 0000",  # AlterUserScramCredentials    v0
    "003c 0000 0002",  # DescribeCluster  v0-v2
    "003d 0000 0000",  # DescribeProducers v0
    "0041 0000 0000",  # DescribeTransactions v0
    "0042 0000 0002",  # ListTransactions v0-v2
]

GOLDEN_API_VERSIONS_V0_REQUEST = bytes.fromhex(
    "00000012"  # size: 18 bytes follow
    "0012"  # request header v1: api_key 18 (ApiVersions)
    "0000"  # api_version 0
    "00000001"  # correlation_id 1
    "0008" + b"kfs-test".hex()  # client_id: int16 length 8 + UTF-8
    # body v0: no fields
)

N_APIS = len(GOLDEN_TABLE)

GOLDEN_API_VERSIONS_V0_RESPONSE = bytes.fromhex(
    f"{4 + 2 + 4 + N_APIS * 6:08x}"  # size: header, error code, count, 6 bytes per API
    "00000001"  # response header v0: correlation_id 1
    "0000"  # error_code NONE
    f"{N_APIS:08x}" + "".join(GOLDEN_TABLE).replace(" ", "")  # api_keys: int32 count
)

GOLDEN_API_VERSIONS_V3_REQUEST = bytes.fromhex(
    "00000021"  # size: 33 bytes follow
    "0012"  # request header v2: api_key 18 (ApiVersions)
    "0003"  # api_version 3
    "00000002"  # correlation_id 2
    "0008" + b"kfs-test".hex() +  # client_id: still int16 length, never compact
    "00"  # header tagged fields: none
    "09" + b"kfs-test".hex() +  # client_software_name: compact, uvarint 8 + 1
    "04" + b"1.0".hex() +  # client_software_version: compact, uvarint 3 + 1
    "00"  # body tagged fields: none
)  # fmt: skip

GOLDEN_API_VERSIONS_V3_RESPONSE = bytes.fromhex(
    f"{4 + 2 + 1 + N_APIS * 7 + 4 + 1:08x}"  # size: ... 7 bytes per API, throttle, tags
    "00000002"  # response header v0, even for flexible ApiVersions: correlation_id 2
    "0000"  # error_code NONE
    f"{N_APIS + 1:02x}"  # api_keys: compact array, uvarint count + 1 (one byte below 127)
    + "".join(entry.replace(" ", "") + "00" for entry in GOLDEN_TABLE)  # each + empty tags
    + "00000000"  # throttle_time_ms 0
    "00"  # tagged fields: no supported/finalized features
)

GOLDEN_API_VERSIONS_V5_REQUEST = bytes.fromhex(
    "00000021"  # size: 33 bytes follow
    "0012"  # request header v2 (v3+ is flexible): api_key 18
    "0005"  # api_version 5, newer than we serve
    "00000005"  # correlation_id 5
    "0008" + b"kfs-test".hex() +  # client_id
    "00"  # header tagged fields
    "09" + b"kfs-test".hex() +  # a body we must not even try to read
    "04" + b"1.0".hex() +
    "00"
)  # fmt: skip

GOLDEN_API_VERSIONS_FALLBACK_RESPONSE = bytes.fromhex(
    f"{4 + 2 + 4 + N_APIS * 6:08x}"  # size: a v0 body whatever version was asked for
    "00000005"  # response header v0: correlation_id 5
    "0023"  # error_code 35 UNSUPPORTED_VERSION
    f"{N_APIS:08x}"  # api_keys: int32 count, so the client can pick a version
    + "".join(GOLDEN_TABLE).replace(" ", "")
)


def test_golden_api_versions_v0() -> None:
    assert client_frame(ApiVersionsRequest(version=0)) == GOLDEN_API_VERSIONS_V0_REQUEST
    request = decode_request(GOLDEN_API_VERSIONS_V0_REQUEST[4:], SUPPORTED_VERSIONS)
    assert (request.api_key, request.api_version) == (ApiKey.API_VERSIONS, 0)
    assert (request.correlation_id, request.client_id) == (1, "kfs-test")
    assert not request.flexible
    response = encode_response(request, api_versions_body(0))
    assert response == GOLDEN_API_VERSIONS_V0_RESPONSE


def test_golden_api_versions_v3() -> None:
    message = ApiVersionsRequest(
        version=3, client_software_name="kfs-test", client_software_version="1.0"
    )
    assert client_frame(message, correlation_id=2) == GOLDEN_API_VERSIONS_V3_REQUEST
    request = decode_request(GOLDEN_API_VERSIONS_V3_REQUEST[4:], SUPPORTED_VERSIONS)
    assert (request.api_key, request.api_version, request.correlation_id) == (18, 3, 2)
    assert request.flexible
    assert request.body.client_software_name == "kfs-test"
    assert request.body.client_software_version == "1.0"
    response = encode_response(request, api_versions_body(3))
    assert response == GOLDEN_API_VERSIONS_V3_RESPONSE


def test_unsupported_api_versions_gets_the_v0_fallback() -> None:
    with pytest.raises(UnsupportedVersion) as caught:
        decode_request(GOLDEN_API_VERSIONS_V5_REQUEST[4:], SUPPORTED_VERSIONS)
    error = caught.value
    assert (error.api_key, error.api_version, error.correlation_id) == (18, 5, 5)
    assert error.client_id == "kfs-test"
    assert error.error_code == ErrorCode.UNSUPPORTED_VERSION == 35
    assert error_response_frame(error, SUPPORTED_VERSIONS) == GOLDEN_API_VERSIONS_FALLBACK_RESPONSE
    # kafka-python reads it the way its connection does: error, then the table.
    decoded = ApiVersionsResponse.decode(
        GOLDEN_API_VERSIONS_FALLBACK_RESPONSE, version=3, header=True, framed=True
    )
    assert decoded.error_code == 35
    assert {(a.api_key, a.min_version, a.max_version) for a in decoded.api_keys} == {
        (key, low, high) for key, (low, high) in SUPPORTED_VERSIONS.items()
    }


def test_other_unsupported_versions_close_the_connection() -> None:
    metadata_v99 = struct.pack(">hhih", 3, 99, 5, 3) + b"kfs\x00"  # no tagged fields
    with pytest.raises(UnsupportedVersion) as caught:
        decode_request(metadata_v99, SUPPORTED_VERSIONS)
    assert (caught.value.api_key, caught.value.api_version) == (3, 99)
    assert error_response_frame(caught.value, SUPPORTED_VERSIONS) is None


def legacy_produce_frame(version: int, acks: int) -> bytes:
    topic = ProduceRequest.TopicProduceData
    partition = topic.PartitionProduceData
    request = ProduceRequest(
        version=version,
        acks=acks,
        timeout_ms=1000,
        topic_data=[
            topic(
                name="orders",
                partition_data=[
                    partition(index=0, records=b"\x00" * 30),
                    partition(index=2, records=None),
                ],
            ),
            topic(name="b", partition_data=[partition(index=1, records=b"x")]),
        ],
    )
    return client_frame(request)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_v0_to_v2_get_unsupported_version_for_each_partition(version: int) -> None:
    """Kafka 3.x served them; KFS answers UNSUPPORTED_VERSION instead of closing silently."""
    with pytest.raises(UnsupportedVersion) as caught:
        decode_request(legacy_produce_frame(version, acks=1)[4:], SUPPORTED_VERSIONS)
    answer = error_response_frame(caught.value, SUPPORTED_VERSIONS)
    assert answer is not None
    size, correlation_id, topic_count = struct.unpack_from(">iii", answer)
    assert size == len(answer) - 4 and topic_count == 2
    pos, seen = 12, []
    for _ in range(topic_count):
        (length,) = struct.unpack_from(">h", answer, pos)
        name = answer[pos + 2 : pos + 2 + length].decode()
        pos += 2 + length
        (partitions,) = struct.unpack_from(">i", answer, pos)
        pos += 4
        for _ in range(partitions):
            index, code, offset = struct.unpack_from(">ihq", answer, pos)
            pos += 14 + (8 if version >= 2 else 0)  # log_append_time_ms from v2
            seen.append((name, index, code, offset))
    pos += 4 if version >= 1 else 0  # throttle_time_ms from v1
    assert pos == len(answer)
    assert seen == [("orders", 0, 35, -1), ("orders", 2, 35, -1), ("b", 1, 35, -1)]
    assert correlation_id == caught.value.correlation_id


def test_produce_v0_to_v2_with_acks_0_or_unreadable_close_the_connection() -> None:
    with pytest.raises(UnsupportedVersion) as silent:
        decode_request(legacy_produce_frame(1, acks=0)[4:], SUPPORTED_VERSIONS)
    assert error_response_frame(silent.value, SUPPORTED_VERSIONS) is None  # no answer expected
    with pytest.raises(UnsupportedVersion) as cut:
        decode_request(legacy_produce_frame(1, acks=1)[4:-3], SUPPORTED_VERSIONS)
    assert error_response_frame(cut.value, SUPPORTED_VERSIONS) is None


# --- every supported version, against kafka-python's generated classes ------


@pytest.mark.parametrize(("key", "version"), ALL_VERSIONS)
@pytest.mark.parametrize("seed", range(3))
def test_request_round_trip(key: ApiKey, version: int, seed: int) -> None:
    request_class = MESSAGES[key].request
    rng = random.Random(f"request-{key}-{version}-{seed}")
    message = sample_message(request_class, version, rng)
    frame = client_frame(message, correlation_id=seed, client_id=rng.choice([None, "", "kfs-ü"]))

    request = decode_request(frame[4:], SUPPORTED_VERSIONS)

    assert (request.api_key, request.api_version) == (key, version)
    assert (request.correlation_id, request.client_id) == (seed, message.header.client_id)
    assert request.flexible == request_class.flexible_version_q(version)
    theirs = request_class.decode(frame[4:], version=version, header=True)
    assert request.body.to_dict(json=False) == theirs.to_dict(json=False)
    assert request.body.to_dict(json=False) == message.to_dict(json=False)


@pytest.mark.parametrize(("key", "version"), ALL_VERSIONS)
@pytest.mark.parametrize("seed", range(3))
def test_response_round_trip(key: ApiKey, version: int, seed: int) -> None:
    response_class = MESSAGES[key].response
    rng = random.Random(f"response-{key}-{version}-{seed}")
    body = sample_message(response_class, version, rng)
    if key == ApiKey.API_VERSIONS:
        body.error_code = 0  # kafka-python reads any error as a v0 (fallback) body

    frame = encode_response(request_for(key, version, correlation_id=seed + 7), body)

    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    theirs = response_class.decode(frame, version=version, header=True, framed=True)
    assert theirs.header.correlation_id == seed + 7
    assert theirs.to_dict(json=False) == body.to_dict(json=False)


def test_request_response_builds_the_matching_class() -> None:
    frame = client_frame(MetadataRequest(version=12, topics=None))
    request = decode_request(frame[4:], SUPPORTED_VERSIONS)
    body = request.response(throttle_time_ms=0, brokers=[], cluster_id="kfs", topics=[])
    assert isinstance(body, MESSAGES[ApiKey.METADATA].response)
    assert body.version == 12
    with pytest.raises(ValueError, match="Unrecognized fields"):
        request.response(no_such_field=1)


def test_produce_with_acks_zero_expects_no_response() -> None:
    for acks, expected in ((0, False), (1, True), (-1, True)):
        frame = client_frame(ProduceRequest(version=9, acks=acks, timeout_ms=1, topic_data=[]))
        assert decode_request(frame[4:], SUPPORTED_VERSIONS).expects_response is expected


# --- fast paths --------------------------------------------------------------

record_bytes = st.one_of(
    st.none(),
    st.binary(max_size=64),
    st.integers(INLINE_RECORDS_BYTES - 1, INLINE_RECORDS_BYTES + 300).map(lambda n: bytes(n % 7 for _ in range(n))),
)  # fmt: skip


@st.composite
def produce_requests(draw: st.DrawFn) -> Any:
    version = draw(st.integers(*SUPPORTED_VERSIONS[ApiKey.PRODUCE]))
    topic = ProduceRequest.TopicProduceData
    partition = topic.PartitionProduceData
    return ProduceRequest(
        version=version,
        transactional_id=draw(st.one_of(st.none(), st.text(max_size=8))),
        acks=draw(st.sampled_from([-1, 0, 1])),
        timeout_ms=draw(st.integers(0, 2**31 - 1)),
        topic_data=[
            topic(
                name=name,
                partition_data=[
                    partition(index=index, records=records)
                    for index, records in draw(
                        st.lists(st.tuples(st.integers(0, 2**31 - 1), record_bytes), max_size=3)
                    )
                ],
            )
            for name in draw(st.lists(st.text(min_size=1, max_size=12), max_size=3))
        ],
    )


@settings(max_examples=150, deadline=None)
@given(produce_requests())
def test_produce_fast_path_matches_the_generated_decoder(message: Any) -> None:
    payload = client_frame(message)[4:]
    request = decode_request(payload, SUPPORTED_VERSIONS)
    theirs = ProduceRequest.decode(payload, version=message.version, header=True)
    assert request.body.to_dict(json=False) == theirs.to_dict(json=False)
    for topic in request.body.topic_data:
        for partition in topic.partition_data:
            if partition.records is not None:
                assert isinstance(partition.records, memoryview)
                assert partition.records.obj is payload  # a view into the frame, no copy


def test_produce_records_are_views_of_a_bytes_frame() -> None:
    records = bytes(range(256)) * 4096  # 1 MiB
    topic = ProduceRequest.TopicProduceData
    message = ProduceRequest(
        version=9,
        acks=-1,
        timeout_ms=1000,
        topic_data=[topic(name="t", partition_data=[topic.PartitionProduceData(index=0, records=records)])],
    )  # fmt: skip
    payload = client_frame(message)[4:]
    partition = decode_request(payload, SUPPORTED_VERSIONS).body.topic_data[0].partition_data[0]
    assert partition.records.obj is payload
    assert partition.records == records


@st.composite
def fetch_responses(draw: st.DrawFn) -> Any:
    version = draw(st.integers(*SUPPORTED_VERSIONS[ApiKey.FETCH]))
    topic = FetchResponse.FetchableTopicResponse
    partition = topic.PartitionData
    int64 = st.integers(-(2**63), 2**63 - 1)
    aborted = st.one_of(
        st.none(),
        st.lists(
            st.builds(partition.AbortedTransaction, producer_id=int64, first_offset=int64),
            max_size=2,
        ),
    )
    partitions = st.builds(
        partition,
        partition_index=st.integers(0, 2**31 - 1),
        error_code=st.sampled_from([0, 1, 3, 6]),
        high_watermark=int64,
        last_stable_offset=int64,
        log_start_offset=int64,
        aborted_transactions=aborted,
        preferred_read_replica=st.integers(-1, 5),
        records=record_bytes,
    )
    topics = st.builds(
        topic, topic=st.text(max_size=10), partitions=st.lists(partitions, max_size=3)
    )
    return FetchResponse(
        version=version,
        throttle_time_ms=draw(st.integers(0, 2**31 - 1)),
        error_code=draw(st.sampled_from([0, 70])),
        session_id=draw(st.integers(0, 2**31 - 1)),
        responses=draw(st.lists(topics, max_size=3)),
    )


@settings(max_examples=150, deadline=None)
@given(fetch_responses(), st.integers(0, 2**31 - 1))
def test_fetch_fast_path_matches_the_generated_encoder(body: Any, correlation_id: int) -> None:
    version = body.version
    request = request_for(ApiKey.FETCH, version, correlation_id)
    header = I32(correlation_id) + (b"\x00" if version >= 12 else b"")
    parts = encode_fetch_response(body, version, header)
    assert parts is not None
    body.with_header(correlation_id=correlation_id)
    theirs = bytes(body.encode(header=True, framed=True))
    assert b"".join(parts) == theirs
    assert encode_response(request, body) == theirs


def test_fetch_fast_path_passes_large_records_through() -> None:
    records = bytearray(b"\x01" * (1 << 20))
    topic = FetchResponse.FetchableTopicResponse
    body = FetchResponse(
        version=12,
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[topic(topic="t", partitions=[topic.PartitionData(partition_index=0, records=records)])],
    )  # fmt: skip
    parts = encode_response_parts(request_for(ApiKey.FETCH, 12), body)
    views = [part for part in parts if isinstance(part, memoryview)]
    assert len(views) == 1 and views[0].obj is records
    assert sum(len(part) for part in parts) < len(records) + 200


def test_fetch_with_tagged_fields_falls_back_to_the_generated_encoder() -> None:
    topic = FetchResponse.FetchableTopicResponse
    partition = topic.PartitionData(
        partition_index=0,
        records=b"x" * 10_000,
        current_leader=topic.PartitionData.LeaderIdAndEpoch(leader_id=1, leader_epoch=4),
    )
    body = FetchResponse(version=12, responses=[topic(topic="t", partitions=[partition])])
    assert encode_fetch_response(body, 12, I32(1) + b"\x00") is None
    frame = encode_response(request_for(ApiKey.FETCH, 12), body)
    theirs = FetchResponse.decode(frame, version=12, header=True, framed=True)
    assert theirs.responses[0].partitions[0].current_leader.leader_epoch == 4


def test_fast_paths_cover_every_served_version() -> None:
    low, high = SUPPORTED_VERSIONS[ApiKey.FETCH]
    assert set(range(low, high + 1)) <= set(FETCH_FAST_VERSIONS)
    low, high = SUPPORTED_VERSIONS[ApiKey.PRODUCE]
    assert set(range(low, high + 1)) <= set(PRODUCE_FAST_VERSIONS)


# --- malformed input -------------------------------------------------------


def produce_frame(version: int) -> bytes:
    topic = ProduceRequest.TopicProduceData
    message = ProduceRequest(
        version=version,
        transactional_id="tx",
        acks=-1,
        timeout_ms=500,
        topic_data=[topic(name="t", partition_data=[topic.PartitionProduceData(index=2, records=b"batch")])],
    )  # fmt: skip
    return client_frame(message)


SAMPLE_FRAMES = {
    "produce-v3": produce_frame(3),
    "produce-v9": produce_frame(9),
    "metadata-v1": client_frame(MetadataRequest(version=1, topics=[MetadataRequest.MetadataRequestTopic(name="t")])),
    "metadata-v12": client_frame(MetadataRequest(version=12, topics=[MetadataRequest.MetadataRequestTopic(name="t")])),
    "api-versions-v3": GOLDEN_API_VERSIONS_V3_REQUEST,
}  # fmt: skip


@pytest.mark.parametrize("name", SAMPLE_FRAMES)
def test_every_truncation_is_malformed(name: str) -> None:
    payload = SAMPLE_FRAMES[name][4:]
    correlation_id = decode_request(payload, SUPPORTED_VERSIONS).correlation_id  # whole: fine
    for cut in range(len(payload)):
        with pytest.raises(MalformedRequest) as caught:
            decode_request(payload[:cut], SUPPORTED_VERSIONS)
        if cut >= 8:
            assert caught.value.correlation_id == correlation_id


@pytest.mark.parametrize("name", SAMPLE_FRAMES)
def test_trailing_bytes_after_a_complete_body_are_ignored_as_kafka_does(name: str) -> None:
    whole = decode_request(SAMPLE_FRAMES[name][4:], SUPPORTED_VERSIONS)
    padded = decode_request(SAMPLE_FRAMES[name][4:] + b"\x00\x01\x00\x00", SUPPORTED_VERSIONS)
    assert (padded.api_key, padded.api_version, padded.correlation_id) == (
        whole.api_key,
        whole.api_version,
        whole.correlation_id,
    )
    assert padded.body == whole.body


def test_librdkafkas_all_topics_metadata_v12_decodes() -> None:
    # confluent-kafka 2.16's AdminClient.list_topics(), as captured on the wire.
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    request = decode_request(frame, SUPPORTED_VERSIONS)
    assert (request.api_key, request.api_version, request.client_id) == (3, 12, "rdkafka")
    assert request.body.topics is None


def test_unknown_api_key_is_reported_with_its_header() -> None:
    frame = I16(57) + I16(1) + I32(42) + I16(3) + b"cli" + b"\x00\x05bytes"  # UpdateFeatures
    with pytest.raises(UnknownApiKey) as caught:
        decode_request(frame, SUPPORTED_VERSIONS)
    error = caught.value
    assert (error.api_key, error.api_version, error.correlation_id, error.client_id) == (
        57,
        1,
        42,
        "cli",
    )
    assert error_response_frame(error, SUPPORTED_VERSIONS) is None
    with pytest.raises(UnknownApiKey):
        decode_request(I16(-1) + I16(0) + I32(1), SUPPORTED_VERSIONS)


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\x00\x03\x00", id="short-header"),
        pytest.param(I16(3) + I16(1) + I32(9) + I16(10) + b"abc", id="client-id-past-end"),
        pytest.param(I16(3) + I16(1) + I32(9) + I16(-2), id="client-id-length-minus-2"),
        pytest.param(I16(3) + I16(1) + I32(9) + I16(2) + b"\xff\xfe" + I32(-1), id="client-id-not-utf8"),
        pytest.param(I16(3) + I16(9) + I32(9) + I16(-1) + b"\x05\x00", id="header-tag-past-end"),
        pytest.param(I16(0) + I16(3) + I32(9) + I16(-1) + I16(-1) + I16(1) + I32(100) + I32(-1), id="produce-null-topic-data"),
        pytest.param(I16(0) + I16(3) + I32(9) + I16(-1) + I16(-1) + I16(1) + I32(100) + I32(1) + I16(1) + b"t" + I32(1) + I32(0) + I32(-7), id="produce-records-length-minus-7"),
        pytest.param(I16(0) + I16(3) + I32(9) + I16(-1) + I16(-1) + I16(1) + I32(100) + I32(1) + I16(1) + b"t" + I32(1) + I32(0) + I32(50) + b"short", id="produce-records-past-end"),
        pytest.param(I16(0) + I16(9) + I32(9) + I16(-1) + b"\x00" + b"\x00" + I16(1) + I32(100) + b"\xff\xff\xff\xff\xff\xff", id="produce-varint-too-long"),
        # Null where Kafka's spec does not allow it (found by the live fuzzer: handlers met None).
        pytest.param(I16(2) + I16(1) + I32(9) + I16(-1) + I32(-1) + I32(-1), id="list-offsets-null-topics"),
        pytest.param(I16(2) + I16(1) + I32(9) + I16(-1) + I32(-1) + I32(1) + I16(-1) + I32(0), id="list-offsets-null-topic-name"),
        pytest.param(I16(2) + I16(1) + I32(9) + I16(-1) + I32(-1) + I32(1) + I16(1) + b"t" + I32(-1), id="list-offsets-null-partitions"),
        pytest.param(I16(16) + I16(4) + I32(9) + I16(-1) + b"\x00" + b"\x00" + b"\x00", id="list-groups-null-states-filter"),
    ],
)  # fmt: skip
def test_malformed_frames(payload: bytes) -> None:
    with pytest.raises(MalformedRequest):
        decode_request(payload, SUPPORTED_VERSIONS)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=120))
def test_garbage_never_escapes_the_typed_errors(payload: bytes) -> None:
    with contextlib.suppress(RequestError):
        decode_request(payload, SUPPORTED_VERSIONS)


SERVED = [(key, version) for key, (low, high) in SUPPORTED_VERSIONS.items() for version in range(low, high + 1)]  # fmt: skip


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(SERVED), st.binary(max_size=80))
def test_garbage_bodies_behind_valid_headers_are_malformed(
    served: tuple[int, int], body: bytes
) -> None:
    key, version = served
    header = I16(key) + I16(version) + I32(77) + I16(1) + b"c"
    if protocol.is_flexible(key, version):
        header += b"\x00"
    try:
        request = decode_request(header + body, SUPPORTED_VERSIONS)
    except MalformedRequest as error:
        assert (error.api_key, error.api_version, error.correlation_id) == (key, version, 77)
    else:
        assert request.correlation_id == 77


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(SAMPLE_FRAMES)), st.data())
def test_bit_flips_never_escape_the_typed_errors(name: str, data: st.DataObject) -> None:
    payload = bytearray(SAMPLE_FRAMES[name][4:])
    position = data.draw(st.integers(0, len(payload) - 1))
    payload[position] ^= data.draw(st.integers(1, 255))
    with contextlib.suppress(RequestError):
        decode_request(bytes(payload), SUPPORTED_VERSIONS)


def test_bad_response_bodies_raise_invalid_response() -> None:
    request = request_for(ApiKey.PRODUCE, 9)
    with pytest.raises(InvalidResponse, match="ProduceResponse"):
        encode_response(request, MetadataRequest(version=1, topics=[]))
    topic = ProduceResponse.TopicProduceResponse
    too_big = ProduceResponse(
        responses=[topic(name="t", partition_responses=[topic.PartitionProduceResponse(index=0, error_code=70_000)])]
    )  # fmt: skip
    with pytest.raises(InvalidResponse) as caught:
        encode_response(request, too_big)
    assert caught.value.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    fetch = FetchResponse(version=12, responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=[object()])])  # fmt: skip
    with pytest.raises(InvalidResponse):
        encode_response(request_for(ApiKey.FETCH, 12), fetch)


# --- framing -----------------------------------------------------------------


def test_check_frame_size() -> None:
    assert check_frame_size(I32(0)) == 0
    assert check_frame_size(I32(MAX_REQUEST_BYTES)) == MAX_REQUEST_BYTES == 104_857_600
    for size in (MAX_REQUEST_BYTES + 1, -1, -(2**31)):
        with pytest.raises(FrameTooLarge) as caught:
            check_frame_size(I32(size))
        assert (caught.value.size, caught.value.limit) == (size, MAX_REQUEST_BYTES)
    with pytest.raises(FrameTooLarge):
        check_frame_size(I32(11), limit=10)
    with pytest.raises(TruncatedFrame):
        check_frame_size(b"\x00\x00")


def read_all_frames(data: bytes, limit: int = MAX_REQUEST_BYTES) -> list[bytes | None]:
    async def run() -> list[bytes | None]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        frames: list[bytes | None] = []
        while True:
            frame = await read_frame(reader, limit)
            frames.append(frame)
            if frame is None:
                return frames

    return asyncio.run(run())


def test_read_frame_splits_a_stream() -> None:
    first, second = GOLDEN_API_VERSIONS_V0_REQUEST, GOLDEN_API_VERSIONS_V3_REQUEST
    frames = read_all_frames(first + second)
    assert frames == [first[4:], second[4:], None]
    assert [decode_request(f, SUPPORTED_VERSIONS).api_version for f in frames if f is not None] == [
        0,
        3,
    ]


@pytest.mark.parametrize(
    ("data", "error"),
    [
        pytest.param(b"\x00\x00", TruncatedFrame, id="eof-in-size-prefix"),
        pytest.param(I32(10) + b"abc", TruncatedFrame, id="eof-in-frame"),
        pytest.param(I32(MAX_REQUEST_BYTES + 1), FrameTooLarge, id="oversize"),
        pytest.param(I32(-5), FrameTooLarge, id="negative"),
    ],
)
def test_read_frame_errors(data: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        read_all_frames(data)


def test_read_frame_refuses_oversize_before_reading_it() -> None:
    # Only the prefix arrives: the error must not wait for 2 GiB that never come.
    with pytest.raises(FrameTooLarge):
        read_all_frames(I32(2**31 - 1) + b"x" * 10, limit=1024)


# --- errors and codes ------------------------------------------------------


def test_errors_pickle_with_their_fields() -> None:
    errors = [
        UnsupportedVersion("x", api_key=18, api_version=9, correlation_id=3, client_id="c"),
        UnknownApiKey("y", api_key=999, api_version=0, correlation_id=1),
        MalformedRequest("z"),
        FrameTooLarge("big", size=2**30, limit=100),
        InvalidResponse("bug"),
    ]
    for error in errors:
        clone = pickle.loads(pickle.dumps(error))
        assert type(clone) is type(error)
        assert clone.fields == error.fields and str(clone) == str(error)
    assert errors[0].correlation_id == 3 and errors[3].size == 2**30


# kafka-python still uses a few pre-KIP names for the same codes.
KAFKA_PYTHON_NAMES = {
    "NONE": "NO_ERROR",
    "UNKNOWN_SERVER_ERROR": "UNKNOWN",
    "NOT_LEADER_OR_FOLLOWER": "NOT_LEADER_FOR_PARTITION",
    "MESSAGE_TOO_LARGE": "MESSAGE_SIZE_TOO_LARGE",
    "INVALID_TOPIC_EXCEPTION": "INVALID_TOPIC",
    "INVALID_REPLICA_ASSIGNMENT": "INVALID_REPLICATION_ASSIGNMENT",
}


def test_error_codes_agree_with_kafka_python() -> None:
    for code in ErrorCode:
        theirs = kafka_errors.for_code(int(code))
        assert theirs.errno == code.value, code
        assert theirs.message == KAFKA_PYTHON_NAMES.get(code.name, code.name), code


def test_error_codes_the_daemon_relies_on() -> None:
    expected = {
        "NONE": 0, "OFFSET_OUT_OF_RANGE": 1, "CORRUPT_MESSAGE": 2, "UNKNOWN_TOPIC_OR_PARTITION": 3,
        "INVALID_FETCH_SIZE": 4, "LEADER_NOT_AVAILABLE": 5, "NOT_LEADER_OR_FOLLOWER": 6,
        "REQUEST_TIMED_OUT": 7, "MESSAGE_TOO_LARGE": 10, "COORDINATOR_NOT_AVAILABLE": 15,
        "NOT_COORDINATOR": 16, "INVALID_TOPIC_EXCEPTION": 17, "RECORD_LIST_TOO_LARGE": 18,
        "NOT_ENOUGH_REPLICAS": 19, "INVALID_REQUIRED_ACKS": 21, "UNSUPPORTED_VERSION": 35,
        "TOPIC_ALREADY_EXISTS": 36, "INVALID_PARTITIONS": 37, "INVALID_REPLICATION_FACTOR": 38,
        "INVALID_CONFIG": 40, "INVALID_REQUEST": 42, "UNSUPPORTED_FOR_MESSAGE_FORMAT": 43,
        "POLICY_VIOLATION": 44, "UNKNOWN_SERVER_ERROR": -1, "INVALID_RECORD": 87,
        "THROTTLING_QUOTA_EXCEEDED": 89, "UNKNOWN_TOPIC_ID": 100,
    }  # fmt: skip
    assert {name: ErrorCode[name].value for name in expected} == expected


# --- sample messages from the JSON specs -----------------------------------


def _in_versions(spec: str | None, version: int) -> bool:
    """Whether ``version`` is in a spec range: "3+", "0-12", "5", "none"."""
    if spec is None or spec.strip() in ("", "none"):
        return False
    spec = spec.strip()
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    low, _, high = spec.partition("-")
    return int(low) <= version <= int(high or low)


def _walk_structs(fields: list[dict[str, Any]]) -> Any:
    """Every field list in a spec: the message's own, then each nested struct's."""
    yield fields
    for field in fields:
        if "fields" in field:
            yield from _walk_structs(field["fields"])


_INT_BITS = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}


def _sample_scalar(type_name: str, rng: random.Random) -> Any:
    if type_name in _INT_BITS:
        bits = _INT_BITS[type_name]
        return rng.choice([0, -1, rng.randint(-(1 << bits), (1 << bits) - 1)])
    if type_name == "uint16":
        return rng.randint(0, 0xFFFF)
    if type_name == "float64":
        return rng.random() * 1e6
    if type_name == "bool":
        return rng.random() < 0.5
    if type_name == "uuid":
        return uuid.UUID(int=rng.getrandbits(128) | 1)  # the zero uuid reads back as None
    if type_name == "string":
        return rng.choice(["", "t", "topic-ü", "x" * 200])
    if type_name in ("bytes", "records"):
        return rng.randbytes(rng.choice([0, 1, 61, 300]))
    if type_name == "bitfield":  # kafka-python's reading of authorized-operations ints
        return set(rng.sample(range(31), rng.randint(0, 3)))
    raise AssertionError(f"no sample for spec type {type_name}")


def _sample_struct(
    owner: Any, fields: list[dict[str, Any]], version: int, rng: random.Random
) -> Any:
    values: dict[str, Any] = {}
    for field in fields:
        if not _in_versions(field.get("versions"), version):
            continue
        if _in_versions(field.get("taggedVersions"), version) and rng.random() < 0.3:
            continue  # tagged fields: sometimes absent
        name = re.sub(r"(?<!^)(?=[A-Z])", "_", field["name"]).lower()
        if _in_versions(field.get("nullableVersions"), version) and rng.random() < 0.25:
            values[name] = None
            continue
        type_name = field["type"]
        if type_name.startswith("[]"):
            inner = type_name[2:]
            count = rng.randint(0, 2)
            if "fields" in field:
                element = getattr(owner, inner)
                values[name] = [
                    _sample_struct(element, field["fields"], version, rng) for _ in range(count)
                ]
            else:
                values[name] = [_sample_scalar(inner, rng) for _ in range(count)]
        elif "fields" in field:
            values[name] = _sample_struct(getattr(owner, type_name), field["fields"], version, rng)
        else:
            values[name] = _sample_scalar(type_name, rng)
    return owner(version=version, **values)


def sample_message(message_class: Any, version: int, rng: random.Random) -> Any:
    """A message of ``version`` with every field its JSON spec defines there set to a sample value."""
    return _sample_struct(message_class, message_class.json["fields"], version, rng)
