"""AlterShareGroupOffsets (Kafka api 91, version 0): set an empty share group's start offsets (KIP-932).

Served by the coordinator of the group's shard.  Read on the group (else GROUP_AUTHORIZATION_FAILED
at the top and on every partition) and on each topic (else TOPIC_AUTHORIZATION_FAILED on its
partitions), as Kafka checks it.  The group must have no member (NON_EMPTY_GROUP); each partition's
state is replaced by the new start offset with nothing in flight, written to its znode fenced by
the coordinator's election, and the leaders are told to read it again (``share_admin``).
"""

from __future__ import annotations

from spark_coord.coordinator.doors import share_admin
from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.security.acl import AclOperation
from spark_coord.wire.registry import ApiKey


def error_response(body: dict, code: int) -> dict:
    return share_admin.alter_error(body, code)


async def handle(door, ctx, conn, header, body) -> dict:
    code = authz.refused(door, ctx, conn, body.get("group_id"), AclOperation.READ)
    if code is not None:
        return error_response(body, code)
    role, _ = door.for_group(body.get("group_id"))
    return await share_admin.alter_offsets(role.coordinator, body, authz.topic_refusals(ctx, conn, AclOperation.READ))


API = GroupApi(ApiKey.ALTER_SHARE_GROUP_OFFSETS, "AlterShareGroupOffsets", handle, error_response)
