"""ListGroups (Kafka api 16): the groups of every shard this process holds, filtered by state (v4+) and type (v5+).

Admin clients ask every broker and merge the answers: a broker that coordinates no
group lists none (an error would fail the whole listing).  Only groups the principal
may Describe are listed.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.wire.registry import ApiKey


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "groups": []}


async def handle(door, ctx, conn, header, body) -> dict:
    answer = {"throttle_time_ms": 0, "error_code": 0, "groups": []}
    for role in door.active_roles():
        one = role.admin.list_groups(body)
        if one.get("error_code"):
            continue
        answer["groups"].extend(one["groups"])
    visible = set(authz.describable_groups(ctx, conn, [g["group_id"] for g in answer["groups"]]))
    answer["groups"] = [g for g in answer["groups"] if g["group_id"] in visible]
    return answer


API = GroupApi(ApiKey.LIST_GROUPS, "ListGroups", handle, error_response)
