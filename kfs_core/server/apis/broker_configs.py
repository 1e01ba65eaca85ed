"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs of BROKER resources.

The resource is this daemon's node id (its own configs) or ``""`` (the
cluster's defaults); another node id is refused as Kafka refuses it, since
an admin client sends a broker's request to that broker.  What a broker
shows is, for each name, the first of: its own dynamic config
(DYNAMIC_BROKER_CONFIG), the cluster's dynamic default
(DYNAMIC_DEFAULT_BROKER_CONFIG), the daemon's setting (STATIC_BROKER_CONFIG),
each listed as a synonym in that order, as Kafka lists them.  Storing and
validating the dynamic configs is `kfs_core.cluster.broker_configs`'s; they
change nothing in what KFS does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kfs_core.cluster.broker_configs import (
    DEFAULT_RESOURCE,
    BrokerConfigStore,
    check_changes,
    is_read_only,
    is_sensitive,
    key_of,
)
from kfs_core.server.apis.base import Refused
from kfs_core.server.apis.context import RequestContext
from kfs_core.server.protocol.errors import ErrorCode

__all__ = ["BrokerEntry", "alter_broker_configs", "apply_increments", "broker_entries"]

SOURCE_DYNAMIC_BROKER: Final = 2
SOURCE_DYNAMIC_DEFAULT_BROKER: Final = 3
SOURCE_STATIC_BROKER: Final = 4
SOURCE_DEFAULT: Final = 5
# ``ConfigEntry.ConfigType`` by the kinds `DynamicKey` names.
_TYPES: Final = {
    "boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7,
    "class": 8, "password": 9,
}  # fmt: skip
_UNKNOWN_TYPE: Final = 0
_STRING_TYPE: Final = 2
_BOOLEAN_TYPE: Final = 1
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


@dataclass(frozen=True)
class BrokerEntry:
    """One config as DescribeConfigs shows it, with its synonyms ``(name, value, source)``."""

    name: str
    value: str | None
    source: int
    read_only: bool
    sensitive: bool
    config_type: int
    synonyms: tuple[tuple[str, str | None, int], ...]


def _resource(context: RequestContext, name: str) -> str:
    """The store's resource for a BROKER resource name; Kafka's refusals for another broker."""
    if name == "":
        return DEFAULT_RESOURCE
    node_id = context.cluster.node_id
    try:
        asked = int(name)
    except ValueError:
        raise Refused(
            ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}"
        ) from None
    if asked != node_id:
        raise Refused(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {node_id} or empty string, but received {name}",
        )
    return str(node_id)


def _store(context: RequestContext) -> BrokerConfigStore:
    return BrokerConfigStore(context.log.store, context.log.namespace)


def _type_of(name: str, value: str | None) -> int:
    key = key_of(name)
    if key is not None:
        return _TYPES[key.kind]
    if value in ("true", "false"):
        return _BOOLEAN_TYPE
    return _STRING_TYPE


async def broker_entries(context: RequestContext, name: str) -> list[BrokerEntry]:
    """What DescribeConfigs shows of BROKER resource ``name``."""
    resource = _resource(context, name)
    store = _store(context)
    defaults = await asyncio.to_thread(store.read, DEFAULT_RESOURCE)
    if resource == DEFAULT_RESOURCE:
        layers: list[tuple[int, Mapping[str, str]]] = [(SOURCE_DYNAMIC_DEFAULT_BROKER, defaults)]
    else:
        own = await asyncio.to_thread(store.read, resource)
        layers = [
            (SOURCE_DYNAMIC_BROKER, own),
            (SOURCE_DYNAMIC_DEFAULT_BROKER, defaults),
            (SOURCE_STATIC_BROKER, context.options.broker_configs),
        ]
    names = sorted({n for _, configs in layers for n in configs})
    static = context.options.broker_configs
    entries = []
    for config in names:
        sensitive = is_sensitive(config) and config not in static
        chain = tuple(
            (config, None if sensitive else configs[config], source)
            for source, configs in layers
            if config in configs
        )
        key = key_of(config)
        if key is not None and key.default is not None and resource != DEFAULT_RESOURCE:
            chain += ((config, None if sensitive else key.default, SOURCE_DEFAULT),)
        entries.append(
            BrokerEntry(
                name=config,
                value=chain[0][1],
                source=chain[0][2],
                read_only=key is None or is_read_only(config, static),
                sensitive=sensitive,
                config_type=_type_of(config, chain[0][1])
                if key is not None or config in static
                else _UNKNOWN_TYPE,
                synonyms=chain,
            )
        )
    return entries


Edit = Callable[[Mapping[str, str]], Mapping[str, str]]


def _edit_for(api: str, configs: Sequence[Any]) -> Edit:
    """The change an AlterConfigs (``replace``) or IncrementalAlterConfigs makes to a resource."""
    for config in configs:
        if config.value is None and getattr(config, "config_operation", OP_SET) != OP_DELETE:
            raise Refused(
                ErrorCode.INVALID_REQUEST, f"Null value not supported for : {config.name}"
            )
    if api == "replace":
        wanted = {c.name: str(c.value) for c in configs}
        return lambda current: wanted
    operations = []
    for config in configs:
        operation = config.config_operation
        if operation not in (OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT):
            raise Refused(
                ErrorCode.INVALID_REQUEST,
                f"{config.name}: unknown operation {operation} "
                "(0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT)",
            )
        key = key_of(config.name)
        if operation in (OP_APPEND, OP_SUBTRACT) and (key is None or key.kind != "list"):
            word = "append" if operation == OP_APPEND else "subtraction"
            raise Refused(
                ErrorCode.INVALID_CONFIG,
                f"Config value {word} is not allowed for config key: {config.name}",
            )
        operations.append((config.name, operation, config.value or ""))

    def default_of(name: str) -> str:
        key = key_of(name)
        return (key.default if key is not None else None) or ""

    return lambda current: apply_increments(current, operations, default_of)


def apply_increments(
    current: Mapping[str, str],
    operations: Sequence[tuple[str, int, str]],
    default_of: Callable[[str], str],
) -> dict[str, str]:
    """IncrementalAlterConfigs' ``(name, operation, value)`` applied to ``current``.

    SET and DELETE (back to the default); APPEND and SUBTRACT on a list,
    which starts from ``default_of(name)`` when it is not set.
    """
    configs = dict(current)
    for name, operation, value in operations:
        if operation == OP_SET:
            configs[name] = value
        elif operation == OP_DELETE:
            configs.pop(name, None)
        else:
            items = _list_items(configs.get(name, default_of(name)))
            given = _list_items(value)
            if operation == OP_APPEND:
                items += [item for item in given if item not in items]
            else:
                items = [item for item in items if item not in given]
            configs[name] = ",".join(items)
    return configs


def _list_items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


async def alter_broker_configs(
    context: RequestContext,
    name: str,
    configs: Sequence[Any],
    *,
    incremental: bool,
    validate_only: bool,
) -> dict[str, str]:
    """Change BROKER resource ``name``'s dynamic configs; the configs it then holds.

    Every check runs first, against the resource's whole new set; with
    ``validate_only`` nothing is written.
    """
    resource = _resource(context, name)
    edit = _edit_for("incremental" if incremental else "replace", configs)
    # The daemon's settings Kafka cannot change at run time are read-only here too.
    static = {n for n in context.options.broker_configs if key_of(n) is None}

    def checked(current: Mapping[str, str]) -> Mapping[str, str]:
        new = edit(current)
        try:
            check_changes(new, per_broker=resource != DEFAULT_RESOURCE, static_names=static)
        except ValueError as exc:
            raise Refused(ErrorCode.INVALID_REQUEST, str(exc)) from None
        return new

    store = _store(context)
    if validate_only:
        current = await asyncio.to_thread(store.read, resource)
        return dict(checked(current))
    return await asyncio.to_thread(store.update, resource, checked)
