"""DescribeShareGroupOffsets (Kafka api 90, versions 0-1): where share groups stand (KIP-932).

Each group is answered by the coordinator of its shard (another group's shard answers
NOT_COORDINATOR for that group only): per partition the share-partition start offset read from
the group's share-partition znode, leader epoch -1, and from v1 the lag (``share_admin``: log end
- start offset - records already acknowledged or archived; the log ends come from the
partitions' leaders, off the event loop).  Topics null asks for every partition the group has
state for.  Describe on the group (else GROUP_AUTHORIZATION_FAILED for that group) and on each
topic: a named topic it may not describe answers TOPIC_AUTHORIZATION_FAILED per partition, and
with Topics null such topics are left out (Kafka's rules, as OffsetFetch).
"""

from __future__ import annotations

from spark_coord.coordinator.doors import share_admin
from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.security.acl import AclOperation
from spark_coord.wire.registry import ApiKey


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "groups": [share_admin.describe_error(g.get("group_id"), code)
                                              for g in body.get("groups") or []]}


async def handle(door, ctx, conn, header, body) -> dict:
    out = []
    topic_code = authz.topic_refusals(ctx, conn, AclOperation.DESCRIBE)
    for g in body.get("groups") or []:
        gid = g.get("group_id")
        role, code = door.for_group(gid)
        code = code or authz.group_refused(ctx, conn, AclOperation.DESCRIBE, gid)
        if code:
            out.append(share_admin.describe_error(gid, code))
            continue
        out.append(await share_admin.describe_offsets(role.coordinator, gid, g.get("topics"), door.log_ends,
                                                      topic_code))
    return {"throttle_time_ms": 0, "groups": out}


API = GroupApi(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, "DescribeShareGroupOffsets", handle, error_response)
