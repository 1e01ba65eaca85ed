"""The broker: one handler per Kafka API, over the topic registry and the partition log.

`Broker` turns a decoded `Request` into a response body.  It is a single
node (id 0) that leads every partition with ISR ``[0]``; replication factor 1
is the only one there is, because durability comes from the WAL and the
object store, not from replicas.

What each API does here:

- ApiVersions: the protocol table.
- Metadata: every topic (null list; an empty list at v0), or the named ones,
  auto-creating those a client may create; INVALID_TOPIC_EXCEPTION and
  UNKNOWN_TOPIC_OR_PARTITION per topic.
- Produce: acks 0, 1 and -1 (all are durable per the WAL mode before the
  answer; acks=0 gets no answer), per-partition error codes from the log's
  typed errors, INVALID_REQUIRED_ACKS for any other acks value.
- Fetch: long poll until ``min_bytes`` are available or ``max_wait_ms``
  passes, woken by `AppendNotifier` when a produce lands - no polling;
  ``max_bytes`` overall and per partition, whole batches only, at least one
  batch for the first partition with data (KIP-74).  Read-committed is
  answered like read-uncommitted with LSO = HW: there are no transactions.
  No fetch sessions (KIP-227): every response says session 0, which clients
  read as "send full requests".
- ListOffsets: earliest (-2), latest (-1) and by timestamp; the max-timestamp
  spec (-3, KIP-734) gets INVALID_REQUEST.
- CreateTopics / DeleteTopics / DescribeConfigs: the `TopicRegistry`, with
  Kafka's error codes and messages; replication factor 1 (or -1) only.  A
  deleted topic is gone for Produce, Fetch and Metadata as soon as
  DeleteTopics answers (`LogManager.forget_topic`); creating its name again
  answers TOPIC_ALREADY_EXISTS ("marked for deletion") until retention has
  removed its data and purged it from the registry, as Kafka does while a
  deletion is in progress.
- InitProducerId: a fresh producer id, so idempotent producers (kafka-python's
  default) work; sequence numbers are accepted, not deduplicated.
- Consumer-group APIs: COORDINATOR_NOT_AVAILABLE (groups are a later step);
  consumers that assign partitions themselves need none of them.

Ordering: `Broker.begin` runs in request order on a connection and returns a
future of the response body.  Produce does its topic lookups and opens its
partitions there, then starts one `LogManager.append_many` for all its
partitions, which assigns offsets without waiting: appends of pipelined
requests reach the log in request order while their WAL fsyncs overlap
(group commit).  The request frame is handed over with it (``owned``):
offsets are assigned in the frame and the log keeps views of it, no copies.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import itertools
import logging
import struct
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kfs_core.catalog.config import (
    CONFIG_KEYS,
    DEFAULT_CONFIGS,
    TopicConfig,
    validate_configs,
    validate_topic_name,
)
from kfs_core.catalog.topics import MAX_PARTITIONS, TopicDescription, TopicRegistry
from kfs_core.errors import (
    CorruptRecordBatch,
    InvalidConfig,
    InvalidPartitions,
    InvalidTopicName,
    KfsError,
    ObjectStoreError,
    TopicAlreadyExists,
    UnknownTopic,
    UnknownTopicOrPartition,
    UnsupportedCodec,
    WalError,
)
from kfs_core.log.manager import AppendResult, LogManager
from kfs_core.log.manager import TopicInfo as LogTopicInfo
from kfs_core.server.metrics import ServerMetrics
from kfs_core.server.protocol import (
    MAX_REQUEST_BYTES,
    ApiKey,
    ErrorCode,
    Request,
    api_versions_body,
)
from kfs_core.server.protocol_messages import (
    CreateTopicsResponse,
    DeleteTopicsResponse,
    DescribeConfigsResponse,
    FetchResponse,
    FindCoordinatorResponse,
    ListOffsetsResponse,
    MetadataResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    ProduceResponse,
)

__all__ = [
    "AppendNotifier",
    "Broker",
    "BrokerOptions",
    "TopicDirectory",
    "cluster_id_for",
    "error_code_for",
    "error_response",
    "topic_uuid",
    "trim_to_batches",
]

log = logging.getLogger(__name__)

Buffer = bytes | bytearray | memoryview

NODE_ID: Final = 0
LEADER_EPOCH: Final = 0
EARLIEST_TIMESTAMP: Final = -2  # ListOffsets: the log start offset (-1 is the high watermark)
READ_COMMITTED: Final = 1
VALID_ACKS: Final = (0, 1, -1)

# DescribeConfigs config sources (``DescribeConfigsResponse.ConfigSource``).
SOURCE_DYNAMIC_TOPIC: Final = 1
SOURCE_STATIC_BROKER: Final = 4
SOURCE_DEFAULT: Final = 5
# DescribeConfigs resource types and config types (``ConfigResource.Type``,
# ``ConfigEntry.ConfigType``).
RESOURCE_TOPIC: Final = 2
RESOURCE_BROKER: Final = 4
_CONFIG_TYPE_BOOLEAN, _CONFIG_TYPE_STRING, _CONFIG_TYPE_INT = 1, 2, 3
_CONFIG_TYPE_LONG, _CONFIG_TYPE_DOUBLE, _CONFIG_TYPE_LIST = 5, 6, 7
_TOPIC_CONFIG_TYPES: Final = {
    "retention.ms": _CONFIG_TYPE_LONG,
    "retention.bytes": _CONFIG_TYPE_LONG,
    "cleanup.policy": _CONFIG_TYPE_LIST,
    "compression.type": _CONFIG_TYPE_STRING,
    "segment.bytes": _CONFIG_TYPE_INT,
    "max.message.bytes": _CONFIG_TYPE_INT,
    "delete.retention.ms": _CONFIG_TYPE_LONG,
    "min.compaction.lag.ms": _CONFIG_TYPE_LONG,
    "min.cleanable.dirty.ratio": _CONFIG_TYPE_DOUBLE,
    "message.timestamp.type": _CONFIG_TYPE_STRING,
}

# base offset (int64) then batch length (int32): enough to walk batches.
_BATCH_PREFIX = struct.Struct(">qi")
_MAX_EPOCH: Final = 32767


# --- errors ----------------------------------------------------------------------


def error_code_for(exc: BaseException) -> ErrorCode:
    """The Kafka error code that stands for ``exc`` in a response."""
    code = getattr(exc, "kafka_error_code", None)
    if code is not None:
        with contextlib.suppress(ValueError, TypeError):
            return ErrorCode(int(code))
    error_code = getattr(exc, "error_code", None)
    if isinstance(error_code, ErrorCode):
        return error_code
    for kind, mapped in _ERROR_CODES:
        if isinstance(exc, kind):
            return mapped
    return ErrorCode.UNKNOWN_SERVER_ERROR


_ERROR_CODES: Final[tuple[tuple[type[BaseException], ErrorCode], ...]] = (
    (UnknownTopic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (InvalidTopicName, ErrorCode.INVALID_TOPIC_EXCEPTION),
    (TopicAlreadyExists, ErrorCode.TOPIC_ALREADY_EXISTS),
    (InvalidPartitions, ErrorCode.INVALID_PARTITIONS),
    (InvalidConfig, ErrorCode.INVALID_CONFIG),
    (CorruptRecordBatch, ErrorCode.CORRUPT_MESSAGE),
    (UnsupportedCodec, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    (WalError, ErrorCode.KAFKA_STORAGE_ERROR),
    (ObjectStoreError, ErrorCode.KAFKA_STORAGE_ERROR),
    (TimeoutError, ErrorCode.REQUEST_TIMED_OUT),
)


_OPERATOR_ERRORS: Final = frozenset({ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.REQUEST_TIMED_OUT})


def _log_failure(what: str, exc: BaseException, code: ErrorCode) -> None:
    """How a failed partition or topic is logged.

    Unexpected errors get their traceback; storage trouble and timeouts are
    warnings; what a client got wrong (a corrupt batch, an unknown topic) is
    debug only - the metrics count it, and a broken client must not flood
    the log.
    """
    if code == ErrorCode.UNKNOWN_SERVER_ERROR:
        log.error("%s failed unexpectedly", what, exc_info=exc)
    elif code in _OPERATOR_ERRORS or not isinstance(exc, KfsError | TimeoutError):
        log.warning("%s: %s (%s)", what, exc, code.name)
    else:
        log.debug("%s: %s (%s)", what, exc, code.name)


# --- topics ------------------------------------------------------------------------


class TopicDirectory:
    """Topic lookups for the handlers: the log manager's cached view, the registry for admin.

    Lookups and auto-creation go through `LogManager.topic`, so the broker
    and the log share one cache.  Names are checked here first, because the
    log reports an illegal name as an unknown topic and Kafka answers
    INVALID_TOPIC_EXCEPTION.  Listing, describing and deleting read and
    write the registry directly (in a worker thread): admin requests want the
    registry's current truth, not a cache.
    """

    def __init__(self, partition_log: LogManager) -> None:
        self._log = partition_log
        self._registry: TopicRegistry = partition_log.registry

    async def lookup(self, name: str) -> LogTopicInfo | None:
        """The topic, or None if it does not exist; `InvalidTopicName` for an illegal name."""
        validate_topic_name(name)
        try:
            return await self._log.topic(name)
        except UnknownTopicOrPartition:
            return None

    async def lookup_or_create(self, name: str, partitions: int) -> LogTopicInfo:
        """The topic, created with ``partitions`` and default configs if it does not exist."""
        validate_topic_name(name)
        try:
            return await self._log.topic(name)
        except UnknownTopicOrPartition:
            pass
        info = await self._log.topic(name, auto_create=True, partitions=partitions)
        log.info("auto-created topic %r with %d partition(s)", name, info.partitions)
        return info

    async def all(self) -> list[LogTopicInfo]:
        """Every live topic in the registry."""
        names = await asyncio.to_thread(self._registry.list_topics)
        found = await asyncio.gather(*(self.lookup(n) for n in names), return_exceptions=True)
        return [info for info in found if isinstance(info, LogTopicInfo)]

    async def create(
        self, name: str, partitions: int, configs: Mapping[str, str], *, validate_only: bool
    ) -> tuple[LogTopicInfo, dict[str, str]]:
        """Create a topic (or only check that it could be); the info and its config overrides."""
        validate_topic_name(name)
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidPartitions(
                f"number of partitions must be from 1 to {MAX_PARTITIONS}, got {partitions}"
            )
        overrides = validate_configs(configs)
        if validate_only:
            if await asyncio.to_thread(self._registry.exists, name):
                raise TopicAlreadyExists(f"topic {name!r} already exists", topic=name)
            config = TopicConfig.from_configs(overrides)
            return LogTopicInfo(name, uuid.uuid4().hex, partitions, config), overrides
        return await self._log.create_topic(name, partitions, overrides), overrides

    async def describe(self, name: str) -> TopicDescription:
        validate_topic_name(name)
        try:
            return await asyncio.to_thread(self._registry.describe, name)
        except UnknownTopic:
            raise UnknownTopicOrPartition(f"unknown topic {name!r}", topic=name) from None

    async def delete(self, name: str) -> None:
        """Mark the topic deleted in the registry, then drop it from the log at once.

        Produce, Fetch and Metadata answer UNKNOWN_TOPIC_OR_PARTITION from the
        moment this returns; the topic's unflushed batches are discarded.
        """
        validate_topic_name(name)
        try:
            await asyncio.to_thread(self._registry.delete_topic, name)
        except UnknownTopic:
            raise UnknownTopicOrPartition(f"unknown topic {name!r}", topic=name) from None
        await self._log.forget_topic(name)


def topic_uuid(topic_id: str) -> uuid.UUID:
    """The registry's topic id (32 hex digits) as the UUID Kafka puts on the wire."""
    try:
        return uuid.UUID(hex=topic_id)
    except ValueError:
        return uuid.uuid5(uuid.NAMESPACE_URL, f"kfs-topic:{topic_id}")


# --- fetch wake-ups ------------------------------------------------------------


class AppendNotifier:
    """Wakes long-polling fetches when a partition they wait on gets new data.

    A fetch registers one `asyncio.Event` under each partition it reads
    *before* it reads them, so an append that lands between the read and the
    wait still wakes it.
    """

    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], set[asyncio.Event]] = {}
        self._stopping = False

    @property
    def stopping(self) -> bool:
        return self._stopping

    @contextlib.contextmanager
    def watch(self, keys: Iterable[tuple[str, int]]) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        if self._stopping:
            event.set()
        registered = list(dict.fromkeys(keys))
        for key in registered:
            self._waiters.setdefault(key, set()).add(event)
        try:
            yield event
        finally:
            for key in registered:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(event)
                    if not waiters:
                        del self._waiters[key]

    def notify(self, topic: str, partition: int) -> None:
        for event in self._waiters.get((topic, partition), ()):
            event.set()

    def notify_topic(self, topic: str) -> None:
        for (name, _), events in self._waiters.items():
            if name == topic:
                for event in events:
                    event.set()

    def stop(self) -> None:
        """Shutdown: wake every waiter now and every later one at once."""
        self._stopping = True
        for events in self._waiters.values():
            for event in events:
                event.set()


def trim_to_batches(records: Buffer, limit: int) -> Buffer:
    """The longest prefix of whole record batches in ``records`` that fits in ``limit`` bytes."""
    view = memoryview(records)
    end = 0
    total = len(view)
    while end + _BATCH_PREFIX.size <= total:
        _, length = _BATCH_PREFIX.unpack_from(view, end)
        batch_end = end + _BATCH_PREFIX.size + length
        if length < 0 or batch_end > total or batch_end > limit:
            break
        end = batch_end
    return records if end == total else view[:end]


# --- the broker ----------------------------------------------------------------


def cluster_id_for(store_url: str, namespace: str) -> str:
    """A stable Kafka-style cluster id (22 characters of URL-safe base64) for this log."""
    digest = hashlib.sha256(f"{store_url}\0{namespace}".encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


@dataclass
class BrokerOptions:
    """What the broker tells clients about itself and how it treats unknown topics."""

    advertised_host: str
    advertised_port: int
    cluster_id: str
    auto_create_topics: bool = True
    default_partitions: int = 1
    broker_configs: Mapping[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Awaitable[Any]]
# Each topic of a produce request, and each of its partitions with an error
# decided up front or (an int) the position of its append in `append_many`.
_ProducePlan = list[tuple[str, list[tuple[int, ErrorCode | int]]]]


@dataclass(frozen=True, slots=True)
class _FetchTarget:
    topic: str
    partition: int
    offset: int
    max_bytes: int


class Broker:
    """Serves Kafka requests from the partition log (`LogManager`) and the topic registry."""

    def __init__(
        self, options: BrokerOptions, partition_log: LogManager, metrics: ServerMetrics
    ) -> None:
        self.options = options
        self.log = partition_log
        self.topics = TopicDirectory(partition_log)
        self.metrics = metrics
        self.notifier = AppendNotifier()
        # Producer ids: distinct across restarts unless more than 4096 are
        # handed out per millisecond the daemon has been up.
        self._producer_ids = itertools.count((time.time_ns() // 1_000_000) << 12)
        self._handlers: dict[ApiKey, Handler] = {
            ApiKey.API_VERSIONS: self._api_versions,
            ApiKey.METADATA: self._metadata,
            ApiKey.FETCH: self._fetch,
            ApiKey.LIST_OFFSETS: self._list_offsets,
            ApiKey.CREATE_TOPICS: self._create_topics,
            ApiKey.DELETE_TOPICS: self._delete_topics,
            ApiKey.DESCRIBE_CONFIGS: self._describe_configs,
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
            ApiKey.FIND_COORDINATOR: self._no_coordinator,
            ApiKey.OFFSET_COMMIT: self._no_coordinator,
            ApiKey.OFFSET_FETCH: self._no_coordinator,
            ApiKey.JOIN_GROUP: self._no_coordinator,
            ApiKey.HEARTBEAT: self._no_coordinator,
            ApiKey.LEAVE_GROUP: self._no_coordinator,
            ApiKey.SYNC_GROUP: self._no_coordinator,
        }

    def stop(self) -> None:
        """Shutdown has begun: long polls answer now."""
        self.notifier.stop()

    async def begin(self, request: Request) -> asyncio.Future[Any]:
        """Start serving ``request``; the future gives its response body.

        Called in request order on a connection.  Exceptions, here or in the
        future, are the caller's to answer with `error_response`.
        """
        if request.api_key == ApiKey.PRODUCE:
            return await self._begin_produce(request)
        return asyncio.ensure_future(self._handlers[request.api_key](request))

    def _count_error(self, api: ApiKey, code: int) -> None:
        if code != ErrorCode.NONE:
            try:
                name = ErrorCode(code).name
            except ValueError:
                name = str(code)
            self.metrics.partition_errors.labels(api.name, name).inc()

    # --- ApiVersions, InitProducerId, groups ------------------------------------

    async def _api_versions(self, request: Request) -> Any:
        return api_versions_body(request.api_version)

    async def _init_producer_id(self, request: Request) -> Any:
        body = request.body
        if body.transactional_id is not None:
            # Transactions need a transaction coordinator, which KFS does not have.
            return request.response(
                throttle_time_ms=0,
                error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                producer_id=-1,
                producer_epoch=-1,
            )
        producer_id = getattr(body, "producer_id", -1)
        epoch = getattr(body, "producer_epoch", -1)
        if producer_id >= 0 and 0 <= epoch < _MAX_EPOCH:
            # KIP-360: an idempotent producer bumps its epoch to reset its sequences.
            return request.response(
                throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=epoch + 1
            )
        return request.response(
            throttle_time_ms=0, error_code=0, producer_id=next(self._producer_ids), producer_epoch=0
        )

    async def _no_coordinator(self, request: Request) -> Any:
        return error_response(
            request,
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            self.options,
            "KFS has no group coordinator yet; assign partitions instead",
        )

    # --- Metadata -----------------------------------------------------------------

    async def _metadata(self, request: Request) -> Any:
        body = request.body
        requested = body.topics
        everything = requested is None or (request.api_version == 0 and not requested)
        allow_create = self.options.auto_create_topics and bool(
            getattr(body, "allow_auto_topic_creation", True)
        )
        if everything:
            topics = [_topic_metadata(info) for info in await self.topics.all()]
        else:
            topics = [await self._one_topic_metadata(entry, allow_create) for entry in requested]
        for topic in topics:
            self._count_error(ApiKey.METADATA, topic.error_code)
        return request.response(
            throttle_time_ms=0,
            brokers=[_broker_entry(self.options)],
            cluster_id=self.options.cluster_id,
            controller_id=NODE_ID,
            topics=topics,
        )

    async def _one_topic_metadata(self, entry: Any, allow_create: bool) -> Any:
        name = entry.name
        topic = MetadataResponse.MetadataResponseTopic
        if name is None:  # named by id only (v10+): KFS does not look topics up by id
            return topic(
                error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                name=None,
                topic_id=getattr(entry, "topic_id", None),
                is_internal=False,
                partitions=[],
            )
        info: LogTopicInfo | None
        try:
            if allow_create:
                info = await self.topics.lookup_or_create(name, self.options.default_partitions)
            else:
                info = await self.topics.lookup(name)
        except Exception as exc:
            code = error_code_for(exc)
            _log_failure(f"metadata of topic {name!r}", exc, code)
            return topic(error_code=code, name=name, is_internal=False, partitions=[])
        if info is None:
            return topic(
                error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                name=name,
                is_internal=False,
                partitions=[],
            )
        return _topic_metadata(info)

    # --- Produce ----------------------------------------------------------------------

    async def _begin_produce(self, request: Request) -> asyncio.Future[Any]:
        """Resolve the topics (auto-creating) and open the partitions, then start the appends.

        Everything that may wait happens here, before the next request on the
        connection is read; the appends themselves then start in request
        order and assign their offsets without waiting (unless the memory
        pool is full, and then its waiters are served in order too).
        """
        body = request.body
        timeout_s = max(body.timeout_ms, 0) / 1000
        acks_ok = body.acks in VALID_ACKS
        plan: _ProducePlan = []
        appends: list[tuple[str, int, Buffer]] = []
        for topic_data in body.topic_data:
            name = topic_data.name
            outcomes: list[tuple[int, ErrorCode | int]] = []
            plan.append((name, outcomes))
            topic_error = ErrorCode.NONE if acks_ok else ErrorCode.INVALID_REQUIRED_ACKS
            if topic_error == ErrorCode.NONE:
                try:
                    if self.options.auto_create_topics:
                        await self.topics.lookup_or_create(name, self.options.default_partitions)
                    elif await self.topics.lookup(name) is None:
                        topic_error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                except Exception as exc:
                    topic_error = error_code_for(exc)
                    _log_failure(f"produce to topic {name!r}", exc, topic_error)
            for partition_data in topic_data.partition_data:
                index, records = partition_data.index, partition_data.records
                if topic_error != ErrorCode.NONE:
                    outcomes.append((index, topic_error))
                elif records is None:
                    outcomes.append((index, ErrorCode.CORRUPT_MESSAGE))
                else:
                    self.metrics.produce_bytes.inc(len(records))
                    outcomes.append((index, len(appends)))  # its place among the appends
                    appends.append((name, index, records))
        if appends:
            await self.log.open_partitions(((n, i) for n, i, _ in appends), timeout_s)
        return asyncio.ensure_future(self._finish_produce(request, plan, appends, timeout_s))

    async def _finish_produce(
        self,
        request: Request,
        plan: _ProducePlan,
        appends: list[tuple[str, int, Buffer]],
        timeout_s: float,
    ) -> Any:
        results: list[AppendResult | Exception] = []
        if appends:
            # The request frame is ours: offsets are assigned in it, no copy.
            results = await self.log.append_many(appends, timeout_s=timeout_s, owned=True)
        answer = ProduceResponse.TopicProduceResponse
        partition_answer = answer.PartitionProduceResponse
        responses = []
        for name, outcomes in plan:
            partitions = []
            for index, outcome in outcomes:
                base_offset, append_time, start_offset, message = -1, -1, -1, None
                if isinstance(outcome, ErrorCode):
                    code = outcome
                else:
                    result = results[outcome]
                    if isinstance(result, Exception):
                        code = error_code_for(result)
                        message = _message(result)
                        _log_failure(f"produce to {name}-{index}", result, code)
                    else:
                        code = ErrorCode.NONE
                        base_offset = result.base_offset
                        append_time = result.log_append_time
                        start_offset = result.log_start_offset
                        self.notifier.notify(name, index)
                self._count_error(ApiKey.PRODUCE, code)
                partitions.append(
                    partition_answer(
                        index=index,
                        error_code=code,
                        base_offset=base_offset,
                        log_append_time_ms=append_time,
                        log_start_offset=start_offset,
                        record_errors=[],
                        error_message=message,
                    )
                )
            responses.append(answer(name=name, partition_responses=partitions))
        return request.response(responses=responses, throttle_time_ms=0)

    # --- Fetch ---------------------------------------------------------------------------

    async def _fetch(self, request: Request) -> Any:
        body = request.body
        if getattr(body, "session_id", 0) != 0 or getattr(body, "session_epoch", -1) > 0:
            # We never hand out a session id, so nobody can hold one of ours.
            return request.response(
                throttle_time_ms=0,
                error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                session_id=0,
                responses=[],
            )
        read_committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
        max_bytes = body.max_bytes if body.max_bytes > 0 else MAX_REQUEST_BYTES
        targets = [
            _FetchTarget(
                topic.topic,
                p.partition,
                p.fetch_offset,
                max(1, min(p.partition_max_bytes, max_bytes)),
            )
            for topic in body.topics
            for p in topic.partitions
        ]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(body.max_wait_ms, 0) / 1000
        keys = [(t.topic, t.partition) for t in targets]
        with self.notifier.watch(keys) as woken:
            while True:
                # Cleared before reading: an append during the read wakes the wait below.
                woken.clear()
                answers, total, failed = await self._read_once(targets, max_bytes, read_committed)
                remaining = deadline - loop.time()
                enough = total >= body.min_bytes or failed or not targets
                if enough or remaining <= 0 or self.notifier.stopping:
                    break
                self.metrics.fetch_waiting.inc()
                try:
                    await asyncio.wait_for(woken.wait(), remaining)
                except TimeoutError:
                    break  # nothing new since the last read: answer with it
                finally:
                    self.metrics.fetch_waiting.dec()
        self.metrics.fetch_bytes.inc(total)
        by_topic: dict[str, list[Any]] = {}
        for target, partition_answer in zip(targets, answers, strict=True):
            by_topic.setdefault(target.topic, []).append(partition_answer)
            self._count_error(ApiKey.FETCH, partition_answer.error_code)
        topic_answer = FetchResponse.FetchableTopicResponse
        return request.response(
            throttle_time_ms=0,
            error_code=0,
            session_id=0,
            responses=[
                topic_answer(topic=name, partitions=partitions)
                for name, partitions in by_topic.items()
            ],
        )

    async def _read_once(
        self, targets: Sequence[_FetchTarget], max_bytes: int, read_committed: bool
    ) -> tuple[list[Any], int, bool]:
        """Read every partition in parallel, then apply the byte budget in request order.

        Returns the partition answers, the record bytes they carry, and
        whether any partition failed (a failure ends the long poll).
        """
        reads = [
            asyncio.ensure_future(self.log.read(t.topic, t.partition, t.offset, t.max_bytes))
            for t in targets
        ]
        if reads:
            await asyncio.wait(reads)
        answers: list[Any] = []
        total = 0
        failed = False
        data = FetchResponse.FetchableTopicResponse.PartitionData
        for target, read in zip(targets, reads, strict=True):
            code, high_watermark, log_start = ErrorCode.NONE, -1, -1
            records: Buffer = b""
            try:
                result = read.result()
            except Exception as exc:
                code = error_code_for(exc)
                failed = True
                _log_failure(f"fetch {target.topic}-{target.partition}@{target.offset}", exc, code)
            else:
                high_watermark, log_start = result.high_watermark, result.log_start_offset
                records = result.records
                if total and records:  # KIP-74: only the first partition with data may overshoot
                    records = trim_to_batches(records, max_bytes - total)
                total += len(records)
            answers.append(
                data(
                    partition_index=target.partition,
                    error_code=code,
                    high_watermark=high_watermark,
                    # No transactions: everything below the high watermark is stable.
                    last_stable_offset=high_watermark,
                    log_start_offset=log_start,
                    aborted_transactions=[] if read_committed else None,
                    preferred_read_replica=-1,
                    records=records,
                )
            )
        return answers, total, failed

    # --- ListOffsets ---------------------------------------------------------------------

    async def _list_offsets(self, request: Request) -> Any:
        answer = ListOffsetsResponse.ListOffsetsTopicResponse
        partition_answer = answer.ListOffsetsPartitionResponse
        topics = []
        for topic in request.body.topics:
            partitions = []
            for p in topic.partitions:
                code, offset, timestamp = ErrorCode.NONE, -1, -1
                try:
                    if p.timestamp < EARLIEST_TIMESTAMP:
                        # -3 (max timestamp, KIP-734) and the tiered-storage specs.
                        raise _Refused(
                            ErrorCode.INVALID_REQUEST,
                            f"ListOffsets timestamp {p.timestamp} is not supported",
                        )
                    found = await self.log.list_offsets(topic.name, p.partition_index, p.timestamp)
                    offset, timestamp = found.offset, found.timestamp
                except Exception as exc:
                    code = error_code_for(exc)
                    _log_failure(f"list offsets of {topic.name}-{p.partition_index}", exc, code)
                self._count_error(ApiKey.LIST_OFFSETS, code)
                partitions.append(
                    partition_answer(
                        partition_index=p.partition_index,
                        error_code=code,
                        timestamp=timestamp,
                        offset=offset,
                        leader_epoch=LEADER_EPOCH if code == ErrorCode.NONE else -1,
                    )
                )
            topics.append(answer(name=topic.name, partitions=partitions))
        return request.response(throttle_time_ms=0, topics=topics)

    # --- CreateTopics, DeleteTopics --------------------------------------------------

    async def _create_topics(self, request: Request) -> Any:
        body = request.body
        validate_only = bool(getattr(body, "validate_only", False))
        result = CreateTopicsResponse.CreatableTopicResult
        names = [t.name for t in body.topics]
        results = []
        for topic in body.topics:
            name = topic.name
            try:
                if names.count(name) > 1:
                    raise _Refused(ErrorCode.INVALID_REQUEST, f"topic {name!r} is listed twice")
                partitions = self._requested_partitions(topic)
                info, overrides = await self.topics.create(
                    name, partitions, _requested_configs(topic), validate_only=validate_only
                )
            except Exception as exc:
                code = error_code_for(exc)
                _log_failure(f"create topic {name!r}", exc, code)
                self._count_error(ApiKey.CREATE_TOPICS, code)
                results.append(result(name=name, error_code=code, error_message=_message(exc)))
                continue
            if not validate_only:
                log.info("created topic %r with %d partition(s)", name, info.partitions)
            effective = {**DEFAULT_CONFIGS, **overrides}
            results.append(
                result(
                    name=name,
                    topic_id=topic_uuid(info.topic_id),
                    error_code=0,
                    error_message=None,
                    topic_config_error_code=0,
                    num_partitions=info.partitions,
                    replication_factor=1,
                    configs=[
                        result.CreatableTopicConfigs(
                            name=key,
                            value=value,
                            read_only=False,
                            config_source=SOURCE_DYNAMIC_TOPIC
                            if key in overrides
                            else SOURCE_DEFAULT,
                            is_sensitive=False,
                        )
                        for key, value in sorted(effective.items())
                    ],
                )
            )
        return request.response(throttle_time_ms=0, topics=results)

    def _requested_partitions(self, topic: Any) -> int:
        """The partition count a CreatableTopic asks for, on a one-broker cluster."""
        if topic.assignments:
            if topic.num_partitions != -1 or topic.replication_factor != -1:
                raise _Refused(
                    ErrorCode.INVALID_REQUEST,
                    "with replica assignments, num_partitions and replication_factor must be -1",
                )
            replicas = {tuple(a.broker_ids) for a in topic.assignments}
            indexes = sorted(a.partition_index for a in topic.assignments)
            if replicas != {(NODE_ID,)} or indexes != list(range(len(indexes))):
                raise _Refused(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"assign every partition to broker {NODE_ID} alone, partitions 0..n-1",
                )
            return len(indexes)
        if topic.replication_factor not in (-1, 1):
            raise _Refused(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                "replication factor must be 1 (or -1 for the default) on this one-broker "
                f"cluster, got {topic.replication_factor}",
            )
        if topic.num_partitions == -1:
            return self.options.default_partitions
        if topic.num_partitions < 1:
            raise InvalidPartitions(
                f"number of partitions must be at least 1, got {topic.num_partitions}"
            )
        return int(topic.num_partitions)

    async def _delete_topics(self, request: Request) -> Any:
        result = DeleteTopicsResponse.DeletableTopicResult
        results = []
        for name in request.body.topic_names:
            code, message = ErrorCode.NONE, None
            try:
                await self.topics.delete(name)
            except Exception as exc:
                code, message = error_code_for(exc), _message(exc)
                _log_failure(f"delete topic {name!r}", exc, code)
            else:
                log.info("deleted topic %r (retention removes its data)", name)
                self.notifier.notify_topic(name)
            self._count_error(ApiKey.DELETE_TOPICS, code)
            results.append(result(name=name, error_code=code, error_message=message))
        return request.response(throttle_time_ms=0, responses=results)

    # --- DescribeConfigs -------------------------------------------------------------

    async def _describe_configs(self, request: Request) -> Any:
        body = request.body
        synonyms = bool(getattr(body, "include_synonyms", False))
        documentation = bool(getattr(body, "include_documentation", False))
        result = DescribeConfigsResponse.DescribeConfigsResult
        results = []
        for resource in body.resources:
            keys = resource.configuration_keys
            try:
                configs = await self._configs_of(resource.resource_type, resource.resource_name)
            except Exception as exc:
                code = error_code_for(exc)
                _log_failure(f"describe configs of {resource.resource_name!r}", exc, code)
                self._count_error(ApiKey.DESCRIBE_CONFIGS, code)
                results.append(
                    result(
                        error_code=code,
                        error_message=_message(exc),
                        resource_type=resource.resource_type,
                        resource_name=resource.resource_name,
                        configs=[],
                    )
                )
                continue
            results.append(
                result(
                    error_code=0,
                    error_message=None,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                    configs=[
                        _config_entry(entry, synonyms=synonyms, documentation=documentation)
                        for entry in configs
                        if keys is None or entry.name in keys
                    ],
                )
            )
        return request.response(throttle_time_ms=0, results=results)

    async def _configs_of(self, resource_type: int, name: str) -> list[_ConfigEntry]:
        if resource_type == RESOURCE_TOPIC:
            description = await self.topics.describe(name)
            return [
                _ConfigEntry(
                    name=key,
                    value=value,
                    default=DEFAULT_CONFIGS[key],
                    source=SOURCE_DEFAULT if description.is_default(key) else SOURCE_DYNAMIC_TOPIC,
                    read_only=False,
                    config_type=_TOPIC_CONFIG_TYPES.get(key, _CONFIG_TYPE_STRING),
                    documentation=f"Allowed: {CONFIG_KEYS[key].allowed}.",
                )
                for key, value in sorted(description.effective_configs.items())
            ]
        if resource_type == RESOURCE_BROKER:
            if name not in ("", str(NODE_ID)):
                raise _Refused(
                    ErrorCode.INVALID_REQUEST, f"broker {name!r} is not this one ({NODE_ID})"
                )
            return [
                _ConfigEntry(
                    name=key,
                    value=value,
                    default=value,
                    source=SOURCE_STATIC_BROKER,
                    read_only=True,
                    config_type=_CONFIG_TYPE_BOOLEAN
                    if value in ("true", "false")
                    else _CONFIG_TYPE_STRING,
                    documentation=None,
                )
                for key, value in sorted(self.options.broker_configs.items())
            ]
        raise _Refused(
            ErrorCode.INVALID_REQUEST,
            f"resource type {resource_type} is not supported (topic: 2, broker: 4)",
        )


def _broker_entry(options: BrokerOptions) -> Any:
    return MetadataResponse.MetadataResponseBroker(
        node_id=NODE_ID, host=options.advertised_host, port=options.advertised_port, rack=None
    )


def _topic_metadata(info: LogTopicInfo) -> Any:
    topic = MetadataResponse.MetadataResponseTopic
    partition = topic.MetadataResponsePartition
    return topic(
        error_code=0,
        name=info.name,
        topic_id=topic_uuid(info.topic_id),
        is_internal=False,
        partitions=[
            partition(
                error_code=0,
                partition_index=index,
                leader_id=NODE_ID,
                leader_epoch=LEADER_EPOCH,
                replica_nodes=[NODE_ID],
                isr_nodes=[NODE_ID],
                offline_replicas=[],
            )
            for index in range(info.partitions)
        ],
    )


def _requested_configs(topic: Any) -> dict[str, str]:
    configs: dict[str, str] = {}
    for config in topic.configs:
        if config.value is None:
            raise InvalidConfig(
                f"null value not supported for topic config {config.name!r}", key=config.name
            )
        configs[config.name] = config.value
    return configs


@dataclass(frozen=True, slots=True)
class _ConfigEntry:
    name: str
    value: str
    default: str
    source: int
    read_only: bool
    config_type: int
    documentation: str | None


def _config_entry(entry: _ConfigEntry, *, synonyms: bool, documentation: bool) -> Any:
    resource = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult
    synonym = resource.DescribeConfigsSynonym
    chain = []
    if synonyms:
        chain.append(synonym(name=entry.name, value=entry.value, source=entry.source))
        if entry.source == SOURCE_DYNAMIC_TOPIC:
            chain.append(synonym(name=entry.name, value=entry.default, source=SOURCE_DEFAULT))
    return resource(
        name=entry.name,
        value=entry.value,
        read_only=entry.read_only,
        config_source=entry.source,
        is_sensitive=False,
        synonyms=chain,
        config_type=entry.config_type,
        documentation=entry.documentation if documentation else None,
    )


class _Refused(KfsError):
    """A request the broker refuses with a specific Kafka error code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message, kafka_error_code=int(code))


def _message(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


# --- error responses ------------------------------------------------------------------


def error_response(
    request: Request, code: ErrorCode, options: BrokerOptions, message: str | None = None
) -> Any:
    """A response to ``request`` carrying ``code`` everywhere it can hold one.

    What the daemon answers when a handler raised (UNKNOWN_SERVER_ERROR) and
    what the group APIs answer (COORDINATOR_NOT_AVAILABLE).
    """
    body = request.body
    key = request.api_key
    version = request.api_version
    code_value = int(code)
    if key == ApiKey.API_VERSIONS:
        return api_versions_body(version, code)
    if key == ApiKey.PRODUCE:
        answer = ProduceResponse.TopicProduceResponse
        return request.response(
            throttle_time_ms=0,
            responses=[
                answer(
                    name=t.name,
                    partition_responses=[
                        answer.PartitionProduceResponse(
                            index=p.index,
                            error_code=code_value,
                            base_offset=-1,
                            error_message=message,
                        )
                        for p in t.partition_data
                    ],
                )
                for t in body.topic_data
            ],
        )
    if key == ApiKey.FETCH:
        data = FetchResponse.FetchableTopicResponse
        return request.response(
            throttle_time_ms=0,
            error_code=code_value if version >= 7 else 0,
            session_id=0,
            responses=[
                data(
                    topic=t.topic,
                    partitions=[
                        data.PartitionData(
                            partition_index=p.partition,
                            error_code=code_value,
                            high_watermark=-1,
                            last_stable_offset=-1,
                            log_start_offset=-1,
                            aborted_transactions=None,
                            preferred_read_replica=-1,
                            records=b"",
                        )
                        for p in t.partitions
                    ],
                )
                for t in body.topics
            ],
        )
    if key == ApiKey.LIST_OFFSETS:
        listed = ListOffsetsResponse.ListOffsetsTopicResponse
        return request.response(
            throttle_time_ms=0,
            topics=[
                listed(
                    name=t.name,
                    partitions=[
                        listed.ListOffsetsPartitionResponse(
                            partition_index=p.partition_index,
                            error_code=code_value,
                            timestamp=-1,
                            offset=-1,
                        )
                        for p in t.partitions
                    ],
                )
                for t in body.topics
            ],
        )
    if key == ApiKey.METADATA:
        topic = MetadataResponse.MetadataResponseTopic
        return request.response(
            throttle_time_ms=0,
            brokers=[
                MetadataResponse.MetadataResponseBroker(
                    node_id=NODE_ID,
                    host=options.advertised_host,
                    port=options.advertised_port,
                    rack=None,
                )
            ],
            cluster_id=options.cluster_id,
            controller_id=NODE_ID,
            topics=[
                topic(error_code=code_value, name=t.name, is_internal=False, partitions=[])
                for t in body.topics or ()
            ],
        )
    if key == ApiKey.CREATE_TOPICS:
        created = CreateTopicsResponse.CreatableTopicResult
        return request.response(
            throttle_time_ms=0,
            topics=[
                created(name=t.name, error_code=code_value, error_message=message)
                for t in body.topics
            ],
        )
    if key == ApiKey.DELETE_TOPICS:
        deleted = DeleteTopicsResponse.DeletableTopicResult
        return request.response(
            throttle_time_ms=0,
            responses=[
                deleted(name=name, error_code=code_value, error_message=message)
                for name in body.topic_names
            ],
        )
    if key == ApiKey.DESCRIBE_CONFIGS:
        described = DescribeConfigsResponse.DescribeConfigsResult
        return request.response(
            throttle_time_ms=0,
            results=[
                described(
                    error_code=code_value,
                    error_message=message,
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                    configs=[],
                )
                for r in body.resources
            ],
        )
    if key == ApiKey.INIT_PRODUCER_ID:
        return request.response(
            throttle_time_ms=0, error_code=code_value, producer_id=-1, producer_epoch=-1
        )
    if key == ApiKey.FIND_COORDINATOR:
        if version >= 4:
            coordinator = FindCoordinatorResponse.Coordinator
            return request.response(
                throttle_time_ms=0,
                coordinators=[
                    coordinator(
                        key=k,
                        node_id=-1,
                        host="",
                        port=-1,
                        error_code=code_value,
                        error_message=message,
                    )
                    for k in body.coordinator_keys
                ],
            )
        return request.response(
            throttle_time_ms=0,
            error_code=code_value,
            error_message=message,
            node_id=-1,
            host="",
            port=-1,
        )
    if key == ApiKey.OFFSET_COMMIT:
        committed = OffsetCommitResponse.OffsetCommitResponseTopic
        return request.response(
            throttle_time_ms=0,
            topics=[
                committed(
                    name=t.name,
                    partitions=[
                        committed.OffsetCommitResponsePartition(
                            partition_index=p.partition_index, error_code=code_value
                        )
                        for p in t.partitions
                    ],
                )
                for t in body.topics
            ],
        )
    if key == ApiKey.OFFSET_FETCH:
        return _offset_fetch_error(request, code_value)
    if key in (ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP):
        return request.response(throttle_time_ms=0, error_code=code_value)
    raise ValueError(f"no error response for {key.name}")  # pragma: no cover - table is closed


def _offset_fetch_error(request: Request, code: int) -> Any:
    body = request.body
    if request.api_version >= 8:
        group = OffsetFetchResponse.OffsetFetchResponseGroup
        return request.response(
            throttle_time_ms=0,
            groups=[group(group_id=g.group_id, topics=[], error_code=code) for g in body.groups],
        )
    fetched = OffsetFetchResponse.OffsetFetchResponseTopic
    return request.response(
        throttle_time_ms=0,
        error_code=code,
        topics=[
            fetched(
                name=t.name,
                partitions=[
                    fetched.OffsetFetchResponsePartition(
                        partition_index=index, committed_offset=-1, metadata="", error_code=code
                    )
                    for index in t.partition_indexes
                ],
            )
            for t in body.topics or ()
        ],
    )
