"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, and topic configs.

Through the `TopicRegistry`, with Kafka's error codes and messages.  Any
replication factor of at least 1 (-1: the default, 1) is accepted and kept in
the registry for Metadata to report; durability comes from the WAL and the
object store, not from replicas, so the factor changes nothing else.  DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs speak Kafka's topic config names (`CONFIG_KEYS`):
an unknown name or a bad value is INVALID_CONFIG for its resource, and a
change is served by the log as soon as it is answered (`TopicDirectory`).
Broker configs: the daemon's settings (from ``kfs serve`` flags), read-only,
and Kafka's dynamic broker configs (`kfs_core.server.apis.broker_configs`).  Broker
loggers (resource type 8) are this daemon's log levels, described and
changed live with IncrementalAlterConfigs (`kfs_core.server.loggers`).
CreatePartitions only grows a topic (INVALID_PARTITIONS otherwise); Metadata
and Produce see the new partitions at once.  A deleted topic is gone for Produce,
Fetch and Metadata as soon as DeleteTopics answers (`LogManager.forget_topic`);
its data is removed in the background (`kfs_core.catalog.purge`), seconds
later, and until then creating its name again answers TOPIC_ALREADY_EXISTS
("marked for deletion"), as Kafka does while a deletion is in progress.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Final

from kfs_core.catalog.config import CONFIG_KEYS, DEFAULT_CONFIGS, ConfigKey
from kfs_core.catalog.topics import MAX_PARTITIONS
from kfs_core.errors import InvalidConfig, InvalidPartitions
from kfs_core.security.acls import Operation, ResourceType
from kfs_core.server import loggers
from kfs_core.server.apis.access import (
    TOPIC_DENIED,
    Checker,
    Plan,
    Rule,
    name_of,
    split,
    topics_rule,
)
from kfs_core.server.apis.base import (
    Api,
    Refused,
    error_code_for,
    log_failure,
    message_of,
)
from kfs_core.server.apis.broker_configs import (
    alter_broker_configs,
    apply_increments,
    broker_entries,
)
from kfs_core.server.apis.error_bodies import Mirror, schema_error_body
from kfs_core.server.directory import topic_uuid
from kfs_core.server.protocol.errors import ErrorCode
from kfs_core.server.protocol.messages import (
    AlterConfigsRequest,
    ApiKey,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from kfs_core.server.protocol.responses import (
    AlterConfigsResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    DescribeConfigsResponse,
    IncrementalAlterConfigsResponse,
)

if TYPE_CHECKING:
    from kfs_core.server.apis.context import RequestContext
    from kfs_core.server.protocol import Request
    from kfs_core.server.protocol.bodies import (
        AlterConfigsRequestBody,
        CreatableTopic,
        CreatePartitionsRequestBody,
        CreateTopicsRequestBody,
        DeleteTopicsRequestBody,
        DescribeConfigsRequestBody,
        PartitionsAssignment,
        ResponseBody,
        TopicConfig,
    )

__all__ = [
    "ALTER_CONFIGS",
    "APIS",
    "CREATE_PARTITIONS",
    "CREATE_TOPICS",
    "DELETE_TOPICS",
    "DESCRIBE_CONFIGS",
    "INCREMENTAL_ALTER_CONFIGS",
]

log = logging.getLogger(__name__)

# DescribeConfigs config sources (``DescribeConfigsResponse.ConfigSource``).
SOURCE_DYNAMIC_TOPIC: Final = 1
SOURCE_STATIC_BROKER: Final = 4
SOURCE_DEFAULT: Final = 5
SOURCE_DYNAMIC_BROKER_LOGGER: Final = 6
# DescribeConfigs resource types and config types (``ConfigResource.Type``,
# ``ConfigEntry.ConfigType``).
RESOURCE_TOPIC: Final = 2
RESOURCE_BROKER: Final = 4
RESOURCE_BROKER_LOGGER: Final = 8
_CONFIG_TYPE_BOOLEAN, _CONFIG_TYPE_STRING, _CONFIG_TYPE_INT = 1, 2, 3
_CONFIG_TYPE_LONG, _CONFIG_TYPE_DOUBLE, _CONFIG_TYPE_LIST = 5, 6, 7
# IncrementalAlterConfigs operations (``AlterConfigOp.OpType``).
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
_CONFIG_TYPES: Final = {
    "boolean": _CONFIG_TYPE_BOOLEAN,
    "string": _CONFIG_TYPE_STRING,
    "int": _CONFIG_TYPE_INT,
    "long": _CONFIG_TYPE_LONG,
    "double": _CONFIG_TYPE_DOUBLE,
    "list": _CONFIG_TYPE_LIST,
}


async def _create_topics(
    context: RequestContext, request: Request[CreateTopicsRequestBody]
) -> CreateTopicsResponse:
    body = request.body
    validate_only = bool(getattr(body, "validate_only", False))
    result = CreateTopicsResponse.CreatableTopicResult
    names = [t.name for t in body.topics]
    results = []
    for topic in body.topics:
        name = topic.name
        try:
            if names.count(name) > 1:
                raise Refused(ErrorCode.INVALID_REQUEST, f"topic {name!r} is listed twice")
            partitions, factor = _requested_layout(context, topic)
            info, overrides = await context.topics.create(
                name,
                partitions,
                _requested_configs(topic),
                validate_only=validate_only,
                replication_factor=factor,
            )
        except Exception as exc:  # noqa: BLE001 - any failure is this topic's error code
            code = error_code_for(exc)
            log_failure(f"create topic {name!r}", exc, code)
            context.count_error(ApiKey.CREATE_TOPICS, code)
            results.append(result(name=name, error_code=code, error_message=message_of(exc)))
            continue
        if not validate_only:
            log.info("created topic %r with %d partition(s)", name, info.partitions)
            context.open_unheld(name, info.partitions)
        effective = {**DEFAULT_CONFIGS, **overrides}
        results.append(
            result(
                name=name,
                topic_id=topic_uuid(info.topic_id),
                error_code=0,
                error_message=None,
                topic_config_error_code=0,
                num_partitions=info.partitions,
                replication_factor=factor,
                configs=[
                    result.CreatableTopicConfigs(
                        name=key,
                        value=value,
                        read_only=False,
                        config_source=SOURCE_DYNAMIC_TOPIC if key in overrides else SOURCE_DEFAULT,
                        is_sensitive=False,
                    )
                    for key, value in sorted(effective.items())
                ],
            )
        )
    return CreateTopicsResponse(version=request.api_version, throttle_time_ms=0, topics=results)


DEFAULT_REPLICATION_FACTOR: Final = 1


def _requested_layout(context: RequestContext, topic: CreatableTopic) -> tuple[int, int]:
    """The partition count and replication factor a CreatableTopic asks for.

    Manual replica assignments must name partitions 0..n-1, each with the
    same number of replicas, which becomes the factor.  Their node ids are
    not checked against the live daemons: leaders follow the cluster's
    assignment and durability comes from the object store, so the ids only
    say how many replicas Metadata reports.
    """
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise Refused(
                ErrorCode.INVALID_REQUEST,
                "with replica assignments, num_partitions and replication_factor must be -1",
            )
        counts = {len(a.broker_ids) for a in topic.assignments}
        indexes = sorted(a.partition_index for a in topic.assignments)
        if len(counts) != 1 or 0 in counts or indexes != list(range(len(indexes))):
            raise Refused(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "assign partitions 0..n-1 the same number (at least 1) of brokers each",
            )
        return len(indexes), counts.pop()
    factor = topic.replication_factor
    if factor == -1:
        factor = DEFAULT_REPLICATION_FACTOR
    elif factor < 1:
        raise Refused(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor must be at least 1 (or -1 for the default), got {factor}",
        )
    return _requested_partitions(context, topic), factor


def _requested_partitions(context: RequestContext, topic: CreatableTopic) -> int:
    """The partition count a CreatableTopic without replica assignments asks for."""
    if topic.num_partitions == -1:
        return context.options.default_partitions
    if topic.num_partitions < 1:
        raise InvalidPartitions(
            f"number of partitions must be at least 1, got {topic.num_partitions}"
        )
    return int(topic.num_partitions)


async def _delete_topics(
    context: RequestContext, request: Request[DeleteTopicsRequestBody]
) -> DeleteTopicsResponse:
    result = DeleteTopicsResponse.DeletableTopicResult
    results = []
    for entry in _deletions(request.body):
        name, topic_id = entry.name, entry.topic_id
        code, message = ErrorCode.NONE, None
        try:
            if not name:  # v6+: named by id; authorized once the name is known
                found = None if topic_id.int == 0 else await context.topics.by_id(topic_id)
                if found is None:
                    raise Refused(ErrorCode.UNKNOWN_TOPIC_ID, f"no topic has the id {topic_id}")
                name = found.name
                if not context.may_on_topic(Operation.DELETE, name):
                    raise Refused(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"DELETE on {name!r}")
            await context.topics.delete(name)
        except Exception as exc:  # noqa: BLE001 - any failure is this topic's error code
            code, message = error_code_for(exc), message_of(exc)
            log_failure(f"delete topic {name or topic_id}", exc, code)
        else:
            log.info("deleted topic %r (its data is being purged)", name)
            context.notifier.notify_topic(name)
            await _forget_committed_offsets(context, name)
        context.count_error(ApiKey.DELETE_TOPICS, code)
        results.append(result(name=name, topic_id=topic_id, error_code=code, error_message=message))
    return DeleteTopicsResponse(version=request.api_version, throttle_time_ms=0, responses=results)


_NO_TOPIC_ID: Final = uuid.UUID(int=0)


def _deletions(body: Any) -> list[Any]:
    """The topics a DeleteTopics names, each with ``name`` and ``topic_id`` (v6+ may give either)."""
    if getattr(body, "topics", None):
        return list(body.topics)
    return [SimpleNamespace(name=name, topic_id=_NO_TOPIC_ID) for name in body.topic_names or []]


async def _forget_committed_offsets(context: RequestContext, name: str) -> None:
    """Groups' committed offsets of a deleted topic go with it (the retention sweep retries)."""
    try:
        dropped = await context.groups.forget_topic(name)
    except Exception as exc:  # noqa: BLE001 - best effort; the retention sweep retries
        log.warning("dropping committed offsets of deleted topic %r failed: %s", name, exc)
    else:
        if dropped:
            log.info("dropped %d committed offset(s) of deleted topic %r", dropped, name)


async def _describe_configs(
    context: RequestContext, request: Request[DescribeConfigsRequestBody]
) -> DescribeConfigsResponse:
    body = request.body
    synonyms = bool(getattr(body, "include_synonyms", False))
    documentation = bool(getattr(body, "include_documentation", False))
    result = DescribeConfigsResponse.DescribeConfigsResult
    results = []
    for resource in body.resources:
        keys = resource.configuration_keys
        try:
            configs = await _configs_of(context, resource.resource_type, resource.resource_name)
        except Exception as exc:  # noqa: BLE001 - any failure is this resource's error code
            code = error_code_for(exc)
            log_failure(f"describe configs of {resource.resource_name!r}", exc, code)
            context.count_error(ApiKey.DESCRIBE_CONFIGS, code)
            results.append(
                result(
                    error_code=code,
                    error_message=message_of(exc),
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
    return DescribeConfigsResponse(version=request.api_version, throttle_time_ms=0, results=results)


def _documentation(key: ConfigKey) -> str:
    if key.effect:
        return f"Allowed: {key.allowed}. No effect on KFS: {key.effect}."
    return f"Allowed: {key.allowed}."


async def _configs_of(context: RequestContext, resource_type: int, name: str) -> list[_ConfigEntry]:
    if resource_type == RESOURCE_TOPIC:
        description = await context.topics.describe(name)
        return [
            _ConfigEntry(
                name=key,
                value=value,
                default=DEFAULT_CONFIGS[key],
                source=SOURCE_DEFAULT if description.is_default(key) else SOURCE_DYNAMIC_TOPIC,
                read_only=False,
                config_type=_CONFIG_TYPES[CONFIG_KEYS[key].kind],
                documentation=_documentation(CONFIG_KEYS[key]),
            )
            for key, value in sorted(description.effective_configs.items())
        ]
    if resource_type == RESOURCE_BROKER_LOGGER:
        _check_this_broker(context, name)
        return [
            _ConfigEntry(
                name=logger,
                value=level,
                default=level,
                source=SOURCE_DYNAMIC_BROKER_LOGGER,
                read_only=False,
                config_type=_CONFIG_TYPE_STRING,
                documentation=None,
            )
            for logger, level in loggers.levels().items()
        ]
    if resource_type == RESOURCE_BROKER:
        return [
            _ConfigEntry(
                name=entry.name,
                value=entry.value,
                default=entry.synonyms[-1][1],
                source=entry.source,
                read_only=entry.read_only,
                config_type=entry.config_type,
                documentation=None,
                sensitive=entry.sensitive,
                chain=entry.synonyms,
            )
            for entry in await broker_entries(context, name)
        ]
    raise Refused(
        ErrorCode.INVALID_REQUEST,
        f"resource type {resource_type} is not supported (topic: 2, broker: 4, broker logger: 8)",
    )


def _check_this_broker(context: RequestContext, name: str) -> None:
    node_id = context.cluster.node_id
    if name not in ("", str(node_id)):
        raise Refused(ErrorCode.INVALID_REQUEST, f"broker {name!r} is not this one ({node_id})")


def _requested_configs(topic: CreatableTopic) -> dict[str, str]:
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
    value: str | None
    default: str | None
    source: int
    read_only: bool
    config_type: int
    documentation: str | None
    sensitive: bool = False
    # The synonyms ``(name, value, source)`` when the entry has its own (broker configs).
    chain: tuple[tuple[str, str | None, int], ...] | None = None


_ConfigResult = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult


def _config_entry(entry: _ConfigEntry, *, synonyms: bool, documentation: bool) -> _ConfigResult:
    resource = _ConfigResult
    synonym = resource.DescribeConfigsSynonym
    chain = []
    if synonyms and entry.chain is not None:
        chain = [synonym(name=n, value=v, source=source) for n, v, source in entry.chain]
    elif synonyms:
        chain.append(synonym(name=entry.name, value=entry.value, source=entry.source))
        if entry.source == SOURCE_DYNAMIC_TOPIC:
            chain.append(synonym(name=entry.name, value=entry.default, source=SOURCE_DEFAULT))
    return resource(
        name=entry.name,
        value=entry.value,
        read_only=entry.read_only,
        config_source=entry.source,
        is_sensitive=entry.sensitive,
        synonyms=chain,
        config_type=entry.config_type,
        documentation=entry.documentation if documentation else None,
    )


async def _create_partitions(
    context: RequestContext, request: Request[CreatePartitionsRequestBody]
) -> CreatePartitionsResponse:
    body = request.body
    validate_only = bool(body.validate_only)
    result = CreatePartitionsResponse.CreatePartitionsTopicResult
    names = [t.name for t in body.topics]
    results = []
    for topic in body.topics:
        name = topic.name
        code, message = ErrorCode.NONE, None
        try:
            if names.count(name) > 1:
                raise Refused(ErrorCode.INVALID_REQUEST, f"topic {name!r} is listed twice")
            before = (await context.topics.describe(name)).partitions
            _check_growth(name, before, topic.count)
            if topic.assignments is not None:
                _check_new_assignments(context, topic.assignments, topic.count - before)
            if not validate_only:
                await context.topics.create_partitions(name, topic.count)
        except Exception as exc:  # noqa: BLE001 - any failure is this topic's error code
            code, message = error_code_for(exc), message_of(exc)
            log_failure(f"add partitions to topic {name!r}", exc, code)
        else:
            if not validate_only:
                log.info("topic %r: %d partition(s), was %d", name, topic.count, before)
        context.count_error(ApiKey.CREATE_PARTITIONS, code)
        results.append(result(name=name, error_code=code, error_message=message))
    return CreatePartitionsResponse(
        version=request.api_version, throttle_time_ms=0, results=results
    )


def _check_growth(name: str, current: int, total: int) -> None:
    if not current < total <= MAX_PARTITIONS:
        raise InvalidPartitions(
            f"topic {name!r} has {current} partition(s); the new count must be larger "
            f"(and at most {MAX_PARTITIONS}), got {total}",
            topic=name,
            partitions=total,
        )


def _check_new_assignments(
    context: RequestContext, assignments: Sequence[PartitionsAssignment], added: int
) -> None:
    """Assignments name the brokers of each new partition: at least one, each a live node."""
    live = {node.node_id for node in context.cluster.live_nodes()}
    if len(assignments) != added or any(
        not a.broker_ids or not set(a.broker_ids) <= live for a in assignments
    ):
        raise Refused(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"assign each of the {added} new partition(s) to live brokers {sorted(live)}",
        )


ConfigEdit = Callable[[Mapping[str, str]], Mapping[str, str]]


async def _alter_configs(
    context: RequestContext, request: Request[AlterConfigsRequestBody]
) -> ResponseBody:
    """AlterConfigs: the listed configs become the topic's only overrides, as in Kafka."""
    return await _alter(context, request, ApiKey.ALTER_CONFIGS, _replacement)


async def _incremental_alter_configs(
    context: RequestContext, request: Request[AlterConfigsRequestBody]
) -> ResponseBody:
    """IncrementalAlterConfigs: SET, DELETE (to the default), APPEND / SUBTRACT on lists."""
    return await _alter(context, request, ApiKey.INCREMENTAL_ALTER_CONFIGS, _increments)


# Both responses name their entry type AlterConfigsResourceResponse.
_ALTER_RESULTS: Final = {
    ApiKey.ALTER_CONFIGS: AlterConfigsResponse.AlterConfigsResourceResponse,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (
        IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
    ),
}


async def _alter(
    context: RequestContext,
    request: Request[AlterConfigsRequestBody],
    key: ApiKey,
    edit_for: Callable[[Sequence[Any]], ConfigEdit],
) -> ResponseBody:
    # Two APIs share this, with response classes of their own: built untyped.
    body = request.body
    validate_only = bool(body.validate_only)
    result = _ALTER_RESULTS[key]
    results = []
    for resource in body.resources:
        name = resource.resource_name
        code, message = ErrorCode.NONE, None
        try:
            names = [c.name for c in resource.configs]
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise Refused(
                    ErrorCode.INVALID_REQUEST, f"config(s) listed twice: {', '.join(duplicates)}"
                )
            if resource.resource_type == RESOURCE_BROKER_LOGGER:
                _check_this_broker(context, name)
                _alter_loggers(key, resource.configs, validate_only=validate_only)
            elif resource.resource_type == RESOURCE_BROKER:
                configs = await alter_broker_configs(
                    context,
                    name,
                    resource.configs,
                    incremental=key == ApiKey.INCREMENTAL_ALTER_CONFIGS,
                    validate_only=validate_only,
                )
                if not validate_only:
                    log.info("broker %r: dynamic configs now %s", name or "default", configs)
            else:
                _check_alterable(resource.resource_type, name)
                configs = await context.topics.edit_configs(
                    name, edit_for(resource.configs), validate_only=validate_only
                )
                if not validate_only:
                    log.info("topic %r: config overrides now %s", name, configs)
        except Exception as exc:  # noqa: BLE001 - any failure is this resource's error code
            code, message = error_code_for(exc), message_of(exc)
            log_failure(f"alter configs of {name!r}", exc, code)
        context.count_error(key, code)
        results.append(
            result(
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=name,
            )
        )
    return request.response(throttle_time_ms=0, responses=results)


def _alter_loggers(key: ApiKey, configs: Sequence[Any], *, validate_only: bool) -> None:
    """SET or DELETE log levels (`kfs_core.server.loggers`), all checked before any applies."""
    if key != ApiKey.INCREMENTAL_ALTER_CONFIGS:
        raise Refused(
            ErrorCode.INVALID_REQUEST,
            "AlterConfigs does not change broker loggers: use IncrementalAlterConfigs",
        )
    changes = []
    for config in configs:
        if config.config_operation == OP_SET:
            loggers.check_level(config.name, _value(config))
        elif config.config_operation == OP_DELETE:
            if config.name == loggers.ROOT:
                raise InvalidConfig("the root logger's level cannot be removed", key=config.name)
            loggers.check_level(config.name, "INFO")  # the logger must exist
        else:
            raise Refused(
                ErrorCode.INVALID_REQUEST,
                f"{config.name}: only SET and DELETE apply to a logger's level",
            )
        changes.append((config.name, config.config_operation, config.value))
    if validate_only:
        return
    for name, operation, value in changes:
        if operation == OP_SET:
            loggers.set_level(name, value)
        else:
            loggers.reset_level(name)
        log.info("logger %r: level %s", name, value if operation == OP_SET else "of its parent")


def _check_alterable(resource_type: int, name: str) -> None:
    if resource_type != RESOURCE_TOPIC:
        raise Refused(
            ErrorCode.INVALID_REQUEST,
            f"resource type {resource_type} is not supported (topic: {RESOURCE_TOPIC})",
        )


def _value(config: TopicConfig) -> str:
    if config.value is None:
        raise Refused(ErrorCode.INVALID_REQUEST, f"null value not supported for {config.name!r}")
    return str(config.value)


def _replacement(configs: Sequence[TopicConfig]) -> ConfigEdit:
    wanted = {c.name: _value(c) for c in configs}
    return lambda current: wanted


def _increments(configs: Sequence[Any]) -> ConfigEdit:
    operations = []
    for config in configs:
        if config.config_operation not in (OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT):
            raise Refused(
                ErrorCode.INVALID_REQUEST,
                f"{config.name}: unknown operation {config.config_operation} "
                "(0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT)",
            )
        if config.name not in CONFIG_KEYS:
            # Checked here too: DELETE of an unknown name is an error, not a no-op.
            raise InvalidConfig(
                f"unknown topic config {config.name!r}; known: {', '.join(sorted(CONFIG_KEYS))}",
                key=config.name,
            )
        is_list = CONFIG_KEYS[config.name].kind == "list"
        if config.config_operation in (OP_APPEND, OP_SUBTRACT) and not is_list:
            raise InvalidConfig(
                f"{config.name} is not a list: only SET and DELETE apply to it",
                key=config.name,
            )
        value = "" if config.config_operation == OP_DELETE else _value(config)
        operations.append((config.name, config.config_operation, value))

    return lambda current: apply_increments(current, operations, DEFAULT_CONFIGS.__getitem__)


_create_topics_error = schema_error_body(
    CreateTopicsResponse,
    {"topics": Mirror("topics", {"name": "name"}, {"topic_config_error_code": 0})},
)


_delete_topics_error = schema_error_body(
    DeleteTopicsResponse,
    {"responses": Mirror(_deletions, {"name": "name", "topic_id": "topic_id"})},
)


_describe_configs_error = schema_error_body(
    DescribeConfigsResponse,
    {
        "results": Mirror(
            "resources",
            {"resource_type": "resource_type", "resource_name": "resource_name"},
            {"configs": []},
        )
    },
)


_create_partitions_error = schema_error_body(
    CreatePartitionsResponse, {"results": Mirror("topics", {"name": "name"})}
)


_ALTER_CONFIGS_ERROR: Final = {
    "responses": Mirror(
        "resources", {"resource_type": "resource_type", "resource_name": "resource_name"}
    )
}
_alter_configs_error = schema_error_body(AlterConfigsResponse, _ALTER_CONFIGS_ERROR)
_incremental_alter_configs_error = schema_error_body(
    IncrementalAlterConfigsResponse, _ALTER_CONFIGS_ERROR
)


# kafka-python sends 7 (topic ids in the response, which KFS can mint),
# librdkafka <= 4.
# --- authorization -------------------------------------------------------------------


def _authorize_create_topics(may: Checker, request: Request[Any]) -> Plan | None:
    """CREATE on the cluster, else CREATE on each topic."""
    if may.cluster(Operation.CREATE):
        return None
    return split(request, "topics", lambda t: may(Operation.CREATE, ResourceType.TOPIC, t.name),
                 TOPIC_DENIED, "topics")  # fmt: skip


def _authorize_delete_topics(may: Checker, request: Request[Any]) -> Plan | None:
    """DELETE on each topic (v6+ may name topics by id: a list of structs)."""
    attr = "topic_names" if request.api_version < 6 else "topics"
    # A topic named only by id is authorized by the handler, once its name is known.
    return split(request, attr,
                 lambda t: (attr == "topics" and not t.name)
                 or may(Operation.DELETE, ResourceType.TOPIC, name_of(t)),
                 TOPIC_DENIED, "responses")  # fmt: skip


_CONFIG_RESOURCES: Final = {
    RESOURCE_TOPIC: ResourceType.TOPIC,
    RESOURCE_BROKER: ResourceType.CLUSTER,
    RESOURCE_BROKER_LOGGER: ResourceType.CLUSTER,
}


def _configs_rule(op: Operation, response_field: str) -> Rule:
    """``op`` (DESCRIBE_CONFIGS, ALTER_CONFIGS) on each resource: a topic or the cluster.

    Brokers and broker loggers are the cluster's, as in Kafka.
    """

    def rule(may: Checker, request: Request[Any]) -> Plan | None:
        def allowed(resource: Any) -> bool:
            rtype = _CONFIG_RESOURCES.get(resource.resource_type)
            if rtype is ResourceType.CLUSTER:
                return may.cluster(op)
            return rtype is None or may(op, rtype, resource.resource_name)

        return split(request, "resources", allowed, TOPIC_DENIED, response_field)

    return rule


CREATE_TOPICS: Final[Api[CreateTopicsRequestBody, CreateTopicsResponse]] = Api(
    ApiKey.CREATE_TOPICS,
    CreateTopicsRequest,
    CreateTopicsResponse,
    (2, 7),
    _create_topics,
    _create_topics_error,
    authorize=_authorize_create_topics,
)
# v6 may delete by topic id; at <= 5 topics are named.
DELETE_TOPICS: Final[Api[DeleteTopicsRequestBody, DeleteTopicsResponse]] = Api(
    ApiKey.DELETE_TOPICS,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    (1, 6),
    _delete_topics,
    _delete_topics_error,
    authorize=_authorize_delete_topics,
)
DESCRIBE_CONFIGS: Final[Api[DescribeConfigsRequestBody, DescribeConfigsResponse]] = Api(
    ApiKey.DESCRIBE_CONFIGS,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    (1, 4),
    _describe_configs,
    _describe_configs_error,
    authorize=_configs_rule(Operation.DESCRIBE_CONFIGS, "results"),
)

# librdkafka sends <= 2, kafka-python 3 (the same fields as 2).
CREATE_PARTITIONS: Final[Api[CreatePartitionsRequestBody, CreatePartitionsResponse]] = Api(
    ApiKey.CREATE_PARTITIONS,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    (0, 3),
    _create_partitions,
    _create_partitions_error,
    authorize=topics_rule("topics", Operation.ALTER, "results"),
)
# librdkafka and kafka-python send 2 (flexible); 0 and 1 have the same fields.
ALTER_CONFIGS: Final[Api[AlterConfigsRequestBody, ResponseBody]] = Api(
    ApiKey.ALTER_CONFIGS,
    AlterConfigsRequest,
    AlterConfigsResponse,
    (0, 2),
    _alter_configs,
    _alter_configs_error,
    authorize=_configs_rule(Operation.ALTER_CONFIGS, "responses"),
)
# librdkafka and kafka-python send 1 (flexible), every version there is.
INCREMENTAL_ALTER_CONFIGS: Final[Api[AlterConfigsRequestBody, ResponseBody]] = Api(
    ApiKey.INCREMENTAL_ALTER_CONFIGS,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    (0, 1),
    _incremental_alter_configs,
    _incremental_alter_configs_error,
    authorize=_configs_rule(Operation.ALTER_CONFIGS, "responses"),
)

APIS: Final = (
    CREATE_TOPICS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    CREATE_PARTITIONS,
    ALTER_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
)
