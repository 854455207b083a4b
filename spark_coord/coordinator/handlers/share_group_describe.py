"""ShareGroupDescribe (Kafka api 77, version 1): share groups as Kafka 4's admin clients see them.

Each group is answered by the coordinator of its shard: a share group with its state, epochs
and members (each member's subscription and assignment, topics by id and name); a group id that
is not a share group here GROUP_ID_NOT_FOUND; a group the principal may not Describe
GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation
from spark_coord.wire.registry import ApiKey

#: Kafka's name of the share groups' only assignor.
ASSIGNOR = "simple"


def _refused(gid, code: int, message: str | None = None) -> dict:
    return {"error_code": code, "error_message": message, "group_id": gid if isinstance(gid, str) else "",
            "group_state": "", "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
            "authorized_operations": -2147483648}


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "groups": [_refused(g, code) for g in body.get("group_ids") or []]}


def describe(role, gid: str) -> dict:
    group = role.share.describe(gid)
    if group is None:
        return _refused(gid, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
    ids = role.coordinator.topic_ids
    members = []
    for m in sorted(group.members.values(), key=lambda m: m.member_id):
        members.append({
            "member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.epoch, "client_id": m.client_id,
            "client_host": m.client_host, "subscribed_topic_names": list(m.subscribed),
            "assignment": {"topic_partitions": [
                {"topic_id": ids[t], "topic_name": t, "partitions": sorted(ps)}
                for t, ps in sorted(m.assignment.items()) if t in ids]}})
    return {"error_code": 0, "error_message": None, "group_id": gid, "group_state": group.state,
            "group_epoch": group.epoch, "assignment_epoch": group.epoch, "assignor_name": ASSIGNOR,
            "members": members, "authorized_operations": -2147483648}


async def handle(door, ctx, conn, header, body) -> dict:
    answer = {"throttle_time_ms": 0, "groups": []}
    for gid in body.get("group_ids") or []:
        refused = authz.group_refused(ctx, conn, AclOperation.DESCRIBE, gid)
        if refused:
            answer["groups"].append(_refused(gid, refused))
            continue
        role, code = door.for_group(gid)
        answer["groups"].append(_refused(gid, code) if role is None else describe(role, gid))
    return answer


API = GroupApi(ApiKey.SHARE_GROUP_DESCRIBE, "ShareGroupDescribe", handle, error_response)
