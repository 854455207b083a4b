"""EndTxn (Kafka api 26, v0-4): a transactional producer commits or aborts its transaction.

Answered by the transaction coordinator of the id (elsewhere NOT_COORDINATOR, or
COORDINATOR_LOAD_IN_PROGRESS while the shard loads) once PrepareCommit / PrepareAbort is written to
ZooKeeper, as Kafka answers once its Prepare record is replicated; the markers then go to every
partition's leader and Complete is written after them.  Kafka's codes: Write on the transactional id
or TRANSACTIONAL_ID_AUTHORIZATION_FAILED; an unknown producer id INVALID_PRODUCER_ID_MAPPING; another
epoch PRODUCER_FENCED (v0-1: INVALID_PRODUCER_EPOCH); no transaction open, or the other outcome of one
being completed, INVALID_TXN_STATE; a retry of the outcome being completed CONCURRENT_TRANSACTIONS,
of one completed NONE.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.coordinator.handlers.txn_common import coordinator_for, fenced_for, txn_refused
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation
from spark_coord.wire.registry import ApiKey


async def handle(door, ctx, conn, header, body) -> dict:
    tid = body.get("transactional_id")
    if isinstance(tid, str) and tid and txn_refused(ctx, conn, AclOperation.WRITE, tid):
        return error_response(body, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    txn, code = coordinator_for(door, tid)
    if txn is not None:
        code = await txn.end_txn(tid, body.get("producer_id", -1), body.get("producer_epoch", -1),
                                 bool(body.get("committed")))
    return error_response(body, fenced_for(header.api_version, 2, code))


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code}


API = GroupApi(ApiKey.END_TXN, "EndTxn", handle, error_response)
