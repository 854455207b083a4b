"""TxnOffsetCommit (Kafka api 28, v0-4): a transactional producer commits a group's offsets in its transaction.

Answered by the group's coordinator (the holder of the group's shard; elsewhere NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS while it loads), after AddOffsetsToTxn made the group part of the
transaction at the transaction's coordinator.  Checked first, as Kafka's KafkaApis does: Write on the
transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition), Read on the group
(GROUP_AUTHORIZATION_FAILED), then per topic Read (TOPIC_AUTHORIZATION_FAILED) and that the partition
exists (UNKNOWN_TOPIC_OR_PARTITION); the other partitions are taken.  The offsets are held pending for
the producer id (``group_offsets.GroupOffsets.txn_offset_commit``: the member checks, the producer
epoch, ZooKeeper) until the transaction's marker commits or drops them.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.coordinator.handlers.txn_common import txn_refused
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation
from spark_coord.wire.registry import ApiKey


def error_response(body: dict, code: int) -> dict:
    """``code`` for every partition of the request."""
    return {"throttle_time_ms": 0, "topics": [
        {"name": t.get("name"), "partitions": [{"partition_index": p.get("partition_index"), "error_code": code}
                                               for p in t.get("partitions") or []]}
        for t in body.get("topics") or []]}


async def handle(door, ctx, conn, header, body) -> dict:
    tid = body.get("transactional_id")
    group_id = body.get("group_id")
    if isinstance(tid, str) and tid and txn_refused(ctx, conn, AclOperation.WRITE, tid):
        return error_response(body, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if refused := authz.group_refused(ctx, conn, AclOperation.READ, group_id):
        return error_response(body, refused)
    role, code = door.for_group(group_id)
    if code is not None:
        return error_response(body, code)
    return await role.offsets.txn_offset_commit(body, header.api_version,
                                                authz.topic_refusals(ctx, conn, AclOperation.READ))


API = GroupApi(ApiKey.TXN_OFFSET_COMMIT, "TxnOffsetCommit", handle, error_response)
