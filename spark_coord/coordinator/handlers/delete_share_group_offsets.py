"""DeleteShareGroupOffsets (Kafka api 92, version 0): forget an empty share group's state of topics (KIP-932).

Served by the coordinator of the group's shard.  Delete on the group (else GROUP_AUTHORIZATION_FAILED,
as Kafka checks it, like OffsetDelete) and Read on each topic (else TOPIC_AUTHORIZATION_FAILED for
that topic).  The group must be a share group (GROUP_ID_NOT_FOUND) with no member (NON_EMPTY_GROUP);
the topics' share-partition znodes are deleted, fenced by the coordinator's election, and the
leaders told: the group's next consumers start those partitions at ``share.auto.offset.reset``.
"""

from __future__ import annotations

from spark_coord.coordinator.doors import share_admin
from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.security.acl import AclOperation
from spark_coord.wire.registry import ApiKey


def error_response(body: dict, code: int) -> dict:
    return share_admin.delete_error(code)


async def handle(door, ctx, conn, header, body) -> dict:
    code = authz.refused(door, ctx, conn, body.get("group_id"), AclOperation.DELETE)
    if code is not None:
        return error_response(body, code)
    role, _ = door.for_group(body.get("group_id"))
    return await share_admin.delete_offsets(role.coordinator, body, authz.topic_refusals(ctx, conn, AclOperation.READ))


API = GroupApi(ApiKey.DELETE_SHARE_GROUP_OFFSETS, "DeleteShareGroupOffsets", handle, error_response)
