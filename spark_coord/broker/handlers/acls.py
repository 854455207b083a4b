"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31): ACL administration for Kafka admin clients.

Listing needs Describe on the cluster, creating and deleting Alter on the cluster
(else CLUSTER_AUTHORIZATION_FAILED, for every creation or filter); without an
authorizer every answer is SECURITY_DISABLED, as Kafka's.  A creation Kafka would
refuse (unspecific resource type, ``*`` as a prefix, a Cluster resource not named
``kafka-cluster``, a principal that is not ``Type:name`` ...) answers INVALID_REQUEST
with the reason; the others are written to ZooKeeper (off the event loop) and take
effect on every broker through the change notifications.  Version 0 knows only
LITERAL patterns, which the codec's defaults give.
"""

from __future__ import annotations

import asyncio
import logging

from kazoo.exceptions import KazooException

from spark_coord.broker.handlers.base import Handler
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import (
    CLUSTER,
    AclBinding,
    AclOperation,
    binding_from_wire,
    filter_from_wire,
    validate_binding,
)
from spark_coord.wire.registry import ApiKey

log = logging.getLogger(__name__)

_DISABLED = "No authorizer is configured on the broker (authorizer.class.name)"


def _refusal(ctx, conn, operation: AclOperation) -> tuple[int, str] | None:
    if not ctx.authorizer.enabled:
        return ErrorCode.SECURITY_DISABLED, _DISABLED
    if not ctx.authorized(conn, operation, CLUSTER):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"{operation.camel} on the cluster is needed"
    return None


def _wire(b: AclBinding) -> dict:
    return {"resource_type": b.pattern.resource_type, "resource_name": b.pattern.name,
            "pattern_type": b.pattern.pattern_type, "principal": b.entry.principal, "host": b.entry.host,
            "operation": b.entry.operation, "permission_type": b.entry.permission}


# ------------------------------------------------------------------ DescribeAcls

async def describe(ctx, conn, header, body: dict) -> dict:
    refused = _refusal(ctx, conn, AclOperation.DESCRIBE)
    if refused:
        return describe_error(body, *refused)
    filt = filter_from_wire(body)
    if filt.invalid():
        return describe_error(body, ErrorCode.INVALID_REQUEST, filt.invalid())
    resources: dict[tuple, dict] = {}
    for b in ctx.authorizer.acls(filt):
        key = (b.pattern.resource_type, b.pattern.name, b.pattern.pattern_type)
        entry = resources.setdefault(key, {"resource_type": key[0], "resource_name": key[1], "pattern_type": key[2],
                                           "acls": []})
        entry["acls"].append({"principal": b.entry.principal, "host": b.entry.host, "operation": b.entry.operation,
                              "permission_type": b.entry.permission})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "resources": list(resources.values())}


def describe_error(body: dict, code: int, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "resources": []}


# ------------------------------------------------------------------ CreateAcls

async def create(ctx, conn, header, body: dict) -> dict:
    creations = body.get("creations") or []
    refused = _refusal(ctx, conn, AclOperation.ALTER)
    if refused:
        return create_error(body, *refused)
    results: list[dict] = []
    valid: list[AclBinding] = []
    for c in creations:
        b = binding_from_wire(c)
        why = validate_binding(b)
        results.append({"error_code": ErrorCode.INVALID_REQUEST if why else ErrorCode.NONE, "error_message": why})
        if not why:
            valid.append(b)
    if valid:
        try:
            await asyncio.get_running_loop().run_in_executor(None, ctx.authorizer.create, valid)
        except KazooException as e:  # ZooKeeper trouble: every creation of this request failed
            log.error("CreateAcls: writing to ZooKeeper failed: %r", e)
            for r in results:
                if r["error_code"] == ErrorCode.NONE:
                    r.update(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message="could not store the ACL")
        else:
            log.info("%r: %s created ACL(s) %s", conn, conn.auth.principal, ", ".join(map(str, valid)))
    return {"throttle_time_ms": 0, "results": results}


def create_error(body: dict, code: int, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, "results": [{"error_code": code, "error_message": message}
                                               for _ in body.get("creations") or []]}


# ------------------------------------------------------------------ DeleteAcls

async def delete(ctx, conn, header, body: dict) -> dict:
    refused = _refusal(ctx, conn, AclOperation.ALTER)
    if refused:
        return delete_error(body, *refused)
    filters = [filter_from_wire(f) for f in body.get("filters") or []]
    usable = [f for f in filters if not f.invalid()]
    try:
        matched = await asyncio.get_running_loop().run_in_executor(None, ctx.authorizer.delete, usable)
    except KazooException as e:  # ZooKeeper trouble: nothing is known to be deleted
        log.error("DeleteAcls: writing to ZooKeeper failed: %r", e)
        return delete_error(body, ErrorCode.UNKNOWN_SERVER_ERROR, "could not delete the ACLs")
    results, found = [], iter(matched)
    for f in filters:
        if f.invalid():
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": f.invalid(),
                            "matching_acls": []})
            continue
        removed = next(found)
        if removed:
            log.info("%r: %s deleted ACL(s) %s", conn, conn.auth.principal, ", ".join(map(str, removed)))
        results.append({"error_code": ErrorCode.NONE, "error_message": None,
                        "matching_acls": [{"error_code": ErrorCode.NONE, "error_message": None, **_wire(b)}
                                          for b in removed]})
    return {"throttle_time_ms": 0, "filter_results": results}


def delete_error(body: dict, code: int, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, "filter_results": [{"error_code": code, "error_message": message,
                                                       "matching_acls": []} for _ in body.get("filters") or []]}


DESCRIBE = Handler(ApiKey.DESCRIBE_ACLS, "DescribeAcls", describe, describe_error)
CREATE = Handler(ApiKey.CREATE_ACLS, "CreateAcls", create, create_error)
DELETE = Handler(ApiKey.DELETE_ACLS, "DeleteAcls", delete, delete_error)
