"""The coordinator's DescribeGroups (coordinator api 1005, versions 0-1): ``spark-coord groups``.

Every group (or the ones asked for) the principal may Describe, with its members,
what each holds, committed offsets and owners.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.errors import ErrorCode
from spark_coord.wire import coordinator as api


async def handle(door, ctx, conn, header, body) -> dict:
    wanted = body.get("group_ids")
    if not wanted:
        roles = door.active_roles()
        if not roles:
            return {"error_code": ErrorCode.NOT_COORDINATOR, "groups": []}
        wanted = [g["group_id"] for r in roles for g in r.coordinator.describe_groups()]
    groups = []
    for gid in authz.describable_groups(ctx, conn, wanted):
        role, _ = door.for_group(gid)
        d = role.coordinator.describe_group(gid) if role is not None else None
        if d is None:
            continue
        owners = {(o["topic"], o["partition"]): o["owner"] for o in d["owners"]}
        offsets = {(o["topic"], o["partition"]): o["offset"] for o in d["offsets"]}
        groups.append({
            "group_id": gid, "state": d["state"], "generation_id": d["generation_id"],
            "members": [{"consumer_id": m["consumer_id"], "host": m["peer"], "protocol": m["protocol"],
                         "assigned": [{"topic": t, "partition": p}
                                      for tps in m["assignment"].values() for t, p in tps]}
                        for m in d["members"]],
            "offsets": [{"topic": t, "partition": p, "committed_offset": offsets.get((t, p), -1),
                         "owner": owners.get((t, p))} for (t, p) in sorted(set(owners) | set(offsets))],
        })
    return {"error_code": ErrorCode.NONE, "groups": groups}


API = GroupApi(api.DESCRIBE_GROUPS, "CoordinatorDescribeGroups", handle, lambda body, code: {"error_code": code})
