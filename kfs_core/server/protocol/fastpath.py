"""Zero-copy Produce request decoding and Fetch response encoding.

The spec-generated classes copy every ``records`` field: the decoder slices
it out as new ``bytes`` and the encoder writes it into a pooled buffer that
is then copied out again.  On the two paths that carry record batches those
copies are the whole cost, so these two messages get hand-written codecs that
build and read exactly the same objects and bytes as the generated ones
(the tests compare them byte for byte at every version):

* `decode_produce_request` returns each partition's ``records`` as a
  ``memoryview`` into the request frame, never copied;
* `encode_fetch_response` returns the response frame as a list of buffers in
  which every non-trivial ``records`` value appears as it was given, for a
  scatter/gather write (``writelines``), so batches read from a segment go to
  the socket without passing through Python byte strings.

ProduceRequest, versions 3-12 (9+ flexible: compact strings, arrays and
bytes, and a tagged-field section closing every struct):

    transactional_id  nullable string
    acks              int16
    timeout_ms        int32
    topic_data        array of
      name              string
      partition_data    array of
        index             int32
        records           nullable records

FetchResponse, versions 4-12 (12 flexible):

    throttle_time_ms        int32
    error_code              int16   (7+)
    session_id              int32   (7+)
    responses               array of
      topic                   string
      partitions              array of
        partition_index         int32
        error_code              int16
        high_watermark          int64
        last_stable_offset      int64
        log_start_offset        int64   (5+)
        diverging_epoch,
        current_leader,
        snapshot_id             tagged  (12+; not written here, see below)
        aborted_transactions    nullable array of (producer_id int64, first_offset int64)
        preferred_read_replica  int32   (11+)
        records                 nullable records

A Fetch response whose partitions set one of the tagged structs returns
``None`` from `encode_fetch_response`; the caller then uses the generated
encoder, which writes them.
"""

from __future__ import annotations

import struct
from typing import Any

from kfs_core.server.protocol.messages import ProduceRequest
from kfs_core.server.protocol.wire import (
    I32,
    read_array_length,
    read_bytes,
    read_string,
    skip_tagged_fields,
    write_array_length,
    write_bytes_length,
    write_string,
)

__all__ = [
    "FETCH_FAST_VERSIONS",
    "INLINE_RECORDS_BYTES",
    "PRODUCE_FAST_VERSIONS",
    "decode_produce_request",
    "encode_fetch_response",
]

PRODUCE_FAST_VERSIONS = range(3, 13)  # v13 names topics by id
PRODUCE_FIRST_FLEXIBLE = 9
FETCH_FAST_VERSIONS = range(4, 13)  # v13 names topics by id
FETCH_FIRST_FLEXIBLE = 12

# Records shorter than this are copied inline rather than given their own
# buffer: a scatter/gather entry costs more than a small memcpy.
INLINE_RECORDS_BYTES = 4096

_ACKS_TIMEOUT = struct.Struct(">hi")  # acks, timeout_ms
_THROTTLE = I32  # throttle_time_ms (v4-v6)
_THROTTLE_ERROR_SESSION = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id (v7+)
# partition_index, error_code, high_watermark, last_stable_offset (+ log_start_offset, v5+)
_PARTITION_V4 = struct.Struct(">ihqq")
_PARTITION_V5 = struct.Struct(">ihqqq")
_ABORTED = struct.Struct(">qq")  # producer_id, first_offset

_TopicProduceData = ProduceRequest.TopicProduceData
_PartitionProduceData = _TopicProduceData.PartitionProduceData


def decode_produce_request(buf: memoryview, pos: int, version: int) -> tuple[Any, int]:
    """Decode a ProduceRequest body at ``buf[pos:]``; return ``(request, end)``.

    Builds the same `ProduceRequest` objects as the generated decoder, except
    that ``records`` are slices of ``buf``.  Raises one of
    `kfs_core.server.protocol.wire.READ_ERRORS` on malformed input, including a null
    ``topic_data`` or ``partition_data`` (non-nullable in the spec).
    """
    if version not in PRODUCE_FAST_VERSIONS:
        raise ValueError(f"ProduceRequest v{version} has no fast decoder")
    compact = version >= PRODUCE_FIRST_FLEXIBLE
    transactional_id, pos = read_string(buf, pos, compact, nullable=True)
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, pos)
    pos += _ACKS_TIMEOUT.size
    topic_count, pos = read_array_length(buf, pos, compact)
    if topic_count < 0:
        raise ValueError("ProduceRequest topic_data is null")
    topics = []
    for _ in range(topic_count):
        name, pos = read_string(buf, pos, compact, nullable=False)
        partition_count, pos = read_array_length(buf, pos, compact)
        if partition_count < 0:
            raise ValueError(f"ProduceRequest partition_data of topic {name!r} is null")
        partitions = []
        for _ in range(partition_count):
            (index,) = I32.unpack_from(buf, pos)
            records, pos = read_bytes(buf, pos + I32.size, compact)
            if compact:
                pos = skip_tagged_fields(buf, pos)
            partitions.append(_PartitionProduceData(version=version, index=index, records=records))
        if compact:
            pos = skip_tagged_fields(buf, pos)
        topics.append(_TopicProduceData(version=version, name=name, partition_data=partitions))
    if compact:
        pos = skip_tagged_fields(buf, pos)
    request = ProduceRequest(
        version=version,
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=topics,
    )
    return request, pos


def _as_bytes_view(records: Any) -> memoryview:
    view = records if isinstance(records, memoryview) else memoryview(records)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def encode_fetch_response(
    body: Any, version: int, header: bytes
) -> list[bytes | bytearray | memoryview] | None:
    """Encode a size-prefixed FetchResponse frame as a list of buffers.

    ``header`` is the encoded response header.  Joining the buffers gives
    exactly what the generated encoder writes.  Returns ``None`` when this
    path does not apply: a version outside `FETCH_FAST_VERSIONS`, or a
    partition that sets a tagged field.  Raises `struct.error`,
    `AttributeError` or `TypeError` for values the schema does not allow.
    """
    if version not in FETCH_FAST_VERSIONS:
        return None
    compact = version >= FETCH_FIRST_FLEXIBLE
    partition_struct = _PARTITION_V5 if version >= 5 else _PARTITION_V4
    parts: list[bytes | bytearray | memoryview] = []
    out = bytearray(I32.size)  # the size prefix, filled in at the end
    out += header
    if version >= 7:
        out += _THROTTLE_ERROR_SESSION.pack(body.throttle_time_ms, body.error_code, body.session_id)
    else:
        out += _THROTTLE.pack(body.throttle_time_ms)
    topics = body.responses
    write_array_length(out, None if topics is None else len(topics), compact)
    for topic in topics or ():
        write_string(out, topic.topic, compact)
        partitions = topic.partitions
        write_array_length(out, None if partitions is None else len(partitions), compact)
        for partition in partitions or ():
            if compact and (
                partition.diverging_epoch is not None
                or partition.current_leader is not None
                or partition.snapshot_id is not None
            ):
                return None
            if version >= 5:
                out += partition_struct.pack(
                    partition.partition_index,
                    partition.error_code,
                    partition.high_watermark,
                    partition.last_stable_offset,
                    partition.log_start_offset,
                )
            else:
                out += partition_struct.pack(
                    partition.partition_index,
                    partition.error_code,
                    partition.high_watermark,
                    partition.last_stable_offset,
                )
            aborted = partition.aborted_transactions
            write_array_length(out, None if aborted is None else len(aborted), compact)
            for txn in aborted or ():
                out += _ABORTED.pack(txn.producer_id, txn.first_offset)
                if compact:
                    out.append(0)  # the AbortedTransaction's empty tagged fields
            if version >= 11:
                out += I32.pack(partition.preferred_read_replica)
            records = partition.records
            if records is None:
                write_bytes_length(out, None, compact)
            else:
                view = _as_bytes_view(records)
                write_bytes_length(out, view.nbytes, compact)
                if view.nbytes < INLINE_RECORDS_BYTES:
                    out += view
                else:
                    parts.append(out)
                    parts.append(view)
                    out = bytearray()
            if compact:
                out.append(0)  # the partition's tagged fields: none set
        if compact:
            out.append(0)  # the topic's empty tagged fields
    if compact:
        out.append(0)  # the response's tagged fields (node_endpoints is v16+)
    parts.append(out)
    payload_size = sum(len(part) for part in parts) - I32.size
    first = parts[0]
    assert isinstance(first, bytearray)
    I32.pack_into(first, 0, payload_size)
    return parts
