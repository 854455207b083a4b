"""ConsumerGroupDescribe (Kafka api 69, versions 0-1): groups as Kafka 4's admin clients see them.

Every group is described, whatever door its members came in by: Kafka 4's consumers
(member type 1), classic Kafka consumers (0) and our own members and Spark queries
(-1).  A group the principal may not Describe answers GROUP_AUTHORIZATION_FAILED, an
unknown one GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.security.acl import AclOperation
from spark_coord.wire.registry import ApiKey


def _refused(gid: str, code: int) -> dict:
    return {"error_code": code, "error_message": None, "group_id": gid, "group_state": "", "members": []}


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "groups": [_refused(g, code) for g in body.get("group_ids") or []]}


async def handle(door, ctx, conn, header, body) -> dict:
    answer = {"throttle_time_ms": 0, "groups": []}
    for gid in body.get("group_ids") or []:
        role, code = door.for_group(gid)
        answer["groups"].append(_refused(gid, code) if role is None else role.consumer.describe([gid])["groups"][0])
    for i, g in enumerate(answer["groups"]):
        refused = authz.group_refused(ctx, conn, AclOperation.DESCRIBE, g["group_id"])
        if refused:
            answer["groups"][i] = _refused(g["group_id"], refused)
    return answer


API = GroupApi(ApiKey.CONSUMER_GROUP_DESCRIBE, "ConsumerGroupDescribe", handle, error_response)
