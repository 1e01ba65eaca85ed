"""CreateAcls, DescribeAcls and DeleteAcls over the namespace's ACL store.

Each request reads or rewrites the store's ACL document (`kfs_core.security.acls`)
on a thread, then refreshes this daemon's authorizer at once; other daemons
on the namespace pick the change up within `REFRESH_S`.  Without
``KFS_AUTHORIZER=acl`` the APIs answer SECURITY_DISABLED, as Kafka does
without an authorizer.  Invalid bindings and filters (an unknown resource
type, a PREFIXED ``*``, a principal without ``User:``) are INVALID_REQUEST
with the reason, per binding.

    CreateAcls, DescribeAcls, DeleteAcls   v1-v2 (v0 has no pattern types; v3 would make
                                           kafka-python infer a Kafka 3.3 broker)
"""

from __future__ import annotations

import asyncio
import logging
from enum import Enum
from typing import TYPE_CHECKING, TypeVar

from kfs_core.security.acls import (
    AclBinding,
    AclFilter,
    AclStore,
    Authorizer,
    InvalidAcl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from kfs_core.server.apis.access import cluster_rule
from kfs_core.server.apis.base import Api
from kfs_core.server.apis.error_bodies import Mirror, schema_error_body
from kfs_core.server.protocol.errors import ErrorCode
from kfs_core.server.protocol.messages import (
    ApiKey,
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
)
from kfs_core.server.protocol.responses import (
    CreateAclsResponse,
    DeleteAclsResponse,
    DescribeAclsResponse,
)

if TYPE_CHECKING:
    from kfs_core.server.apis.context import RequestContext
    from kfs_core.server.protocol import Request
    from kfs_core.server.protocol.bodies import (
        AclCreation,
        AclFilterFields,
        CreateAclsRequestBody,
        DeleteAclsRequestBody,
    )

log = logging.getLogger(__name__)

REFRESH_S = 2.0  # how often a daemon re-reads the ACLs other daemons may have changed


EnumT = TypeVar("EnumT", bound=Enum)


def _enum(kind: type[EnumT], value: int) -> EnumT:
    try:
        return kind(value)
    except ValueError:
        raise InvalidAcl(f"unknown {kind.__name__} {value}") from None


def _binding(c: AclCreation) -> AclBinding:
    return AclBinding(
        _enum(ResourceType, c.resource_type),
        c.resource_name or "",
        _enum(PatternType, c.resource_pattern_type),
        c.principal or "",
        c.host or "",
        _enum(Operation, c.operation),
        _enum(Permission, c.permission_type),
    ).validate()


def _filter(f: AclFilterFields) -> AclFilter:
    return AclFilter(
        _enum(ResourceType, f.resource_type_filter),
        f.resource_name_filter,
        _enum(PatternType, f.pattern_type_filter),
        f.principal_filter,
        f.host_filter,
        _enum(Operation, f.operation),
        _enum(Permission, f.permission_type),
    ).validate()


async def refresh(store: AclStore | None, authorizer: Authorizer | None) -> None:
    """Load the newest ACLs in ``store`` into ``authorizer`` (if they changed)."""
    if store is None or authorizer is None:
        return
    version, bindings = await asyncio.to_thread(store.load)
    if version != authorizer.version:
        authorizer.replace(bindings, version)
        log.info("ACLs version %d: %d binding(s)", version, len(bindings))


async def refresh_forever(store: AclStore, authorizer: Authorizer) -> None:
    """The background task every daemon with an authorizer runs."""
    while True:
        try:
            await refresh(store, authorizer)
        except Exception as exc:  # noqa: BLE001 - the store may be down; keep the old set
            log.warning("reading the ACLs failed (the last set stays in force): %s", exc)
        await asyncio.sleep(REFRESH_S)


async def _create(
    context: RequestContext, request: Request[CreateAclsRequestBody]
) -> CreateAclsResponse:
    store = context.acl_store
    if store is None:
        return _create_error(request, ErrorCode.SECURITY_DISABLED, "no authorizer", context.options)
    results: list[tuple[ErrorCode, str | None]] = []
    valid: list[AclBinding] = []
    for creation in request.body.creations or []:
        try:
            valid.append(_binding(creation))
            results.append((ErrorCode.NONE, None))
        except InvalidAcl as exc:
            results.append((ErrorCode.INVALID_REQUEST, str(exc)))
    if valid:
        await asyncio.to_thread(store.add, valid)
        await refresh(context.acl_store, context.authorizer)
    return CreateAclsResponse(
        version=request.api_version,
        throttle_time_ms=0,
        results=[
            CreateAclsResponse.AclCreationResult(error_code=int(code), error_message=message)
            for code, message in results
        ],
    )


_create_error = schema_error_body(CreateAclsResponse, {"results": Mirror("creations")})


async def _describe(
    context: RequestContext, request: Request[AclFilterFields]
) -> DescribeAclsResponse:
    store = context.acl_store
    if store is None:
        return _describe_error(
            request, ErrorCode.SECURITY_DISABLED, "no authorizer", context.options
        )
    try:
        acl_filter = _filter(request.body)
    except InvalidAcl as exc:
        return _describe_error(request, ErrorCode.INVALID_REQUEST, str(exc), context.options)
    bindings = await asyncio.to_thread(store.describe, acl_filter)
    grouped: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in bindings:
        grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    resource = DescribeAclsResponse.DescribeAclsResource
    return DescribeAclsResponse(
        version=request.api_version,
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        resources=[
            resource(
                resource_type=int(rtype),
                resource_name=name,
                pattern_type=int(ptype),
                acls=[
                    resource.AclDescription(
                        principal=b.principal,
                        host=b.host,
                        operation=int(b.operation),
                        permission_type=int(b.permission),
                    )
                    for b in members
                ],
            )
            for (rtype, name, ptype), members in grouped.items()
        ],
    )


_describe_error = schema_error_body(DescribeAclsResponse, {})


async def _delete(
    context: RequestContext, request: Request[DeleteAclsRequestBody]
) -> DeleteAclsResponse:
    store = context.acl_store
    if store is None:
        return _delete_error(request, ErrorCode.SECURITY_DISABLED, "no authorizer", context.options)
    filters: list[AclFilter | InvalidAcl] = []
    for spec in request.body.filters or []:
        try:
            filters.append(_filter(spec))
        except InvalidAcl as exc:
            filters.append(exc)
    valid = [f for f in filters if isinstance(f, AclFilter)]
    removed = await asyncio.to_thread(store.remove, valid) if valid else []
    await refresh(context.acl_store, context.authorizer)
    result = DeleteAclsResponse.DeleteAclsFilterResult
    out = []
    for f in filters:
        if isinstance(f, InvalidAcl):
            out.append(result(error_code=int(ErrorCode.INVALID_REQUEST), error_message=str(f),
                              matching_acls=[]))  # fmt: skip
            continue
        out.append(
            result(
                error_code=0,
                error_message=None,
                matching_acls=[
                    result.DeleteAclsMatchingAcl(
                        error_code=0,
                        error_message=None,
                        resource_type=int(b.resource_type),
                        resource_name=b.resource_name,
                        pattern_type=int(b.pattern_type),
                        principal=b.principal,
                        host=b.host,
                        operation=int(b.operation),
                        permission_type=int(b.permission),
                    )
                    for b in removed
                    if f.matches(b)
                ],
            )
        )
    return DeleteAclsResponse(version=request.api_version, throttle_time_ms=0, filter_results=out)


_delete_error = schema_error_body(DeleteAclsResponse, {"filter_results": Mirror("filters")})


APIS = (
    Api(ApiKey.DESCRIBE_ACLS, DescribeAclsRequest, DescribeAclsResponse, (1, 2), _describe,
        _describe_error, authorize=cluster_rule(Operation.DESCRIBE)),
    Api(ApiKey.CREATE_ACLS, CreateAclsRequest, CreateAclsResponse, (1, 2), _create, _create_error,
        authorize=cluster_rule(Operation.ALTER)),
    Api(ApiKey.DELETE_ACLS, DeleteAclsRequest, DeleteAclsResponse, (1, 2), _delete, _delete_error,
        authorize=cluster_rule(Operation.ALTER)),
)  # fmt: skip
