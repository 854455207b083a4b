"""AddOffsetsToTxn (Kafka api 25, v0-4): a transactional producer adds a group's offsets to its transaction.

Answered by the transaction coordinator of the id (the holder of the id's shard; elsewhere
NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS while the shard loads), as Kafka's KafkaApis and
``TransactionCoordinator`` answer it: Write on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then Read on the group (else GROUP_AUTHORIZATION_FAILED); then
the group joins the transaction as a partition would (Kafka adds the group's ``__consumer_offsets``
partition; the group id is kept in the transaction's znode here), with AddPartitionsToTxn's codes: the
transaction becomes Ongoing, written to ZooKeeper before the answer (nothing written when the group is
in already); an unknown producer id INVALID_PRODUCER_ID_MAPPING, another epoch PRODUCER_FENCED (v0-1:
INVALID_PRODUCER_EPOCH), a transaction being completed CONCURRENT_TRANSACTIONS; an empty or missing
transactional id INVALID_REQUEST.  The group's offsets themselves come with TxnOffsetCommit, at the
group's coordinator.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.coordinator.handlers.txn_common import coordinator_for, fenced_for, txn_refused
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation
from spark_coord.wire.registry import ApiKey


async def handle(door, ctx, conn, header, body) -> dict:
    tid = body.get("transactional_id")
    group_id = body.get("group_id")
    if isinstance(tid, str) and tid and txn_refused(ctx, conn, AclOperation.WRITE, tid):
        return error_response(body, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if refused := authz.group_refused(ctx, conn, AclOperation.READ, group_id):
        return error_response(body, refused)
    txn, code = coordinator_for(door, tid)
    if txn is not None:
        if not isinstance(group_id, str):
            code = ErrorCode.INVALID_REQUEST
        else:
            code = await txn.add_group(tid, body.get("producer_id", -1), body.get("producer_epoch", -1), group_id)
    return error_response(body, fenced_for(header.api_version, 2, code))


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code}


API = GroupApi(ApiKey.ADD_OFFSETS_TO_TXN, "AddOffsetsToTxn", handle, error_response)
