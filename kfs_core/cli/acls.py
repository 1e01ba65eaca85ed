"""`kfs acls add|list|remove`: Kafka ACLs, with kafka-acls.sh's flags, kept in the store.

    kfs acls add --allow-principal User:alice --operation Write --topic orders
    kfs acls add --deny-principal User:bob --operation All --topic pay --resource-pattern-type prefixed
    kfs acls add --allow-principal User:app --operation Read --group app-
                 --resource-pattern-type prefixed
    kfs acls list [--topic orders] [--principal User:alice]
    kfs acls remove --allow-principal User:alice --operation Write --topic orders

Like the other store-side commands it writes the namespace's ACL document
(``KFS_STORE_URL`` / ``KFS_NAMESPACE``), which every daemon running
``KFS_AUTHORIZER=acl`` applies within seconds; CreateAcls / DescribeAcls /
DeleteAcls (kafka-acls.sh, AdminClient) do the same through a daemon.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from kfs_core.cli.common import CliError, cli_settings, cli_store, operator_errors
from kfs_core.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    AclStore,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

__all__ = ["acls"]

_OPERATIONS = sorted(o.name.title().replace("_", "") for o in Operation if o > Operation.ANY)


def _operation(name: str) -> Operation:
    for op in Operation:
        if op.name.replace("_", "").lower() == name.replace("_", "").replace("-", "").lower():
            return op
    raise CliError(f"unknown operation {name!r}: {', '.join(_OPERATIONS)}")


F = TypeVar("F", bound=Callable[..., Any])


def _resource_options(command: F) -> F:
    for option in reversed(
        [
            click.option("--topic", help="a topic ('*': every topic)"),
            click.option("--group", help="a consumer group ('*': every group)"),
            click.option("--cluster", is_flag=True, help="the cluster"),
            click.option("--transactional-id", help="a transactional id"),
            click.option(
                "--resource-pattern-type",
                type=click.Choice(["literal", "prefixed"], case_sensitive=False),
                default=None,
                help="match the name literally (default) or as a prefix",
            ),
        ]
    ):
        command = option(command)
    return command


def _resources(
    topic: str | None, group: str | None, cluster: bool, transactional_id: str | None
) -> list[tuple[ResourceType, str]]:
    out = []
    if topic:
        out.append((ResourceType.TOPIC, topic))
    if group:
        out.append((ResourceType.GROUP, group))
    if cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    if transactional_id:
        out.append((ResourceType.TRANSACTIONAL_ID, transactional_id))
    return out


def _principals(allow: tuple[str, ...], deny: tuple[str, ...]) -> list[tuple[str, Permission]]:
    return [(p, Permission.ALLOW) for p in allow] + [(p, Permission.DENY) for p in deny]


def _store(ctx: click.Context) -> AclStore:
    return AclStore(cli_store(ctx), cli_settings(ctx).namespace)


@click.group()
def acls() -> None:
    """Kafka ACLs (applied by daemons running KFS_AUTHORIZER=acl)."""


@acls.command("add")
@click.option("--allow-principal", multiple=True, help="User:<name> to allow ('User:*': anyone)")
@click.option("--deny-principal", multiple=True, help="User:<name> to deny")
@click.option("--allow-host", "host", default="*", show_default=True, help="the client host")
@click.option("--operation", "operations", multiple=True, required=True,
              help=f"one of {', '.join(_OPERATIONS)}")  # fmt: skip
@_resource_options
@click.pass_context
def acls_add(
    ctx: click.Context,
    allow_principal: tuple[str, ...],
    deny_principal: tuple[str, ...],
    host: str,
    operations: tuple[str, ...],
    topic: str | None,
    group: str | None,
    cluster: bool,
    transactional_id: str | None,
    resource_pattern_type: str | None,
) -> None:
    """Add ACLs: each principal x operation x resource."""
    resources = _resources(topic, group, cluster, transactional_id)
    principals = _principals(allow_principal, deny_principal)
    if not resources or not principals:
        raise CliError("name a resource (--topic, --group, --cluster, --transactional-id) and a "
                       "principal (--allow-principal, --deny-principal)")  # fmt: skip
    pattern = PatternType[(resource_pattern_type or "literal").upper()]
    with operator_errors():
        bindings = [
            AclBinding(rtype, name, pattern, principal, host, _operation(op), permission).validate()
            for rtype, name in resources
            for principal, permission in principals
            for op in operations
        ]
        added = _store(ctx).add(bindings)
    for binding in added:
        click.echo(f"added {_describe(binding)}")


@acls.command("list")
@click.option("--principal", default=None, help="only this principal's ACLs")
@_resource_options
@click.pass_context
def acls_list(
    ctx: click.Context,
    principal: str | None,
    topic: str | None,
    group: str | None,
    cluster: bool,
    transactional_id: str | None,
    resource_pattern_type: str | None,
) -> None:
    """List ACLs; with a resource, the ACLs that apply to it (literal, '*' and prefixes)."""
    resources = _resources(topic, group, cluster, transactional_id)
    filters = [
        AclFilter(rtype, name, PatternType.MATCH, principal) for rtype, name in resources
    ] or [AclFilter(principal=principal)]
    with operator_errors():
        store = _store(ctx)
        found = {b: None for f in filters for b in store.describe(f)}
    for binding in found:
        click.echo(_describe(binding))


@acls.command("remove")
@click.option("--allow-principal", multiple=True)
@click.option("--deny-principal", multiple=True)
@click.option("--allow-host", "host", default=None, help="only ACLs for this host")
@click.option("--operation", "operations", multiple=True, help="only these operations")
@_resource_options
@click.pass_context
def acls_remove(
    ctx: click.Context,
    allow_principal: tuple[str, ...],
    deny_principal: tuple[str, ...],
    host: str | None,
    operations: tuple[str, ...],
    topic: str | None,
    group: str | None,
    cluster: bool,
    transactional_id: str | None,
    resource_pattern_type: str | None,
) -> None:
    """Remove the ACLs the flags describe (a resource is required)."""
    resources = _resources(topic, group, cluster, transactional_id)
    if not resources:
        raise CliError("name the resource whose ACLs to remove")
    pattern = PatternType[(resource_pattern_type or "literal").upper()]
    principals: list[tuple[str | None, Permission]] = list(
        _principals(allow_principal, deny_principal)
    ) or [(None, Permission.ANY)]
    ops = [_operation(op) for op in operations] or [Operation.ANY]
    filters = [
        AclFilter(rtype, name, pattern, principal, host, op, permission)
        for rtype, name in resources
        for principal, permission in principals
        for op in ops
    ]
    with operator_errors():
        removed = _store(ctx).remove(filters)
    if not removed:
        raise CliError("no ACL matched")
    for binding in removed:
        click.echo(f"removed {_describe(binding)}")


def _describe(b: AclBinding) -> str:
    return (
        f"{b.permission.name} {b.principal} from {b.host}: {b.operation.name} on "
        f"{b.resource_type.name} {b.resource_name!r} ({b.pattern_type.name})"
    )
