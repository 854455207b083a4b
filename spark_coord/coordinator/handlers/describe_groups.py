"""DescribeGroups (Kafka api 15): groups with their members, whatever door they came in by.

Kafka members show their client id, host, subscription and assignment; our own
members and Spark queries show as ``coordkafka`` members with theirs.  A group the
principal may not Describe answers GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.security.acl import AclOperation
from spark_coord.wire.registry import ApiKey


def _refused(gid: str, code: int) -> dict:
    return {"error_code": code, "group_id": gid, "group_state": "", "protocol_type": "", "protocol_data": "",
            "members": []}


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "groups": [_refused(g, code) for g in body.get("groups") or []]}


async def handle(door, ctx, conn, header, body) -> dict:
    answer = {"throttle_time_ms": 0, "groups": []}
    for gid in body.get("groups") or []:
        role, code = door.for_group(gid)
        if role is None:
            answer["groups"].append(_refused(gid, code))
        else:
            answer["groups"].extend(role.admin.describe_groups(dict(body, groups=[gid]))["groups"])
    for g in answer["groups"]:
        refused = authz.group_refused(ctx, conn, AclOperation.DESCRIBE, g["group_id"])
        if refused:
            g.update(_refused(g["group_id"], refused))
    return answer


API = GroupApi(ApiKey.DESCRIBE_GROUPS, "DescribeGroups", handle, error_response)
