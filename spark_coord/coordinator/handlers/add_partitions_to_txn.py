"""AddPartitionsToTxn (Kafka api 24, v0-3): a transactional producer adds partitions to its transaction.

Answered by the transaction coordinator of the id (the holder of the id's shard; elsewhere
NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS while the shard loads), every partition with the same
code, as Kafka's: the transaction becomes Ongoing with the partitions added (written to ZooKeeper
before the answer; nothing written when they are all in already).  Checked first, as Kafka's
KafkaApis does: Write on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for all),
then per partition Write on its topic (TOPIC_AUTHORIZATION_FAILED) and that it exists
(UNKNOWN_TOPIC_OR_PARTITION); one partition refused leaves the others OPERATION_NOT_ATTEMPTED.  An
unknown producer id is INVALID_PRODUCER_ID_MAPPING, another epoch PRODUCER_FENCED (v0-1:
INVALID_PRODUCER_EPOCH), a transaction being completed CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.coordinator.handlers.txn_common import coordinator_for, fenced_for, txn_refused
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation, Resource
from spark_coord.wire.registry import ApiKey


def _answer(topics: list[dict], code_of) -> dict:
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
        {"name": t.get("name"), "results_by_partition": [
            {"partition_index": p, "partition_error_code": code_of(t.get("name"), p)}
            for p in t.get("partitions") or []]}
        for t in topics]}


async def handle(door, ctx, conn, header, body) -> dict:
    topics = body.get("v3_and_below_topics") or []
    tid = body.get("v3_and_below_transactional_id")
    if isinstance(tid, str) and tid and txn_refused(ctx, conn, AclOperation.WRITE, tid):
        return _answer(topics, lambda t, p: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    refused: dict[tuple[str, int], int] = {}
    for t in topics:
        name = t.get("name")
        for p in t.get("partitions") or []:
            if ctx.authorizer.enabled and not ctx.authorized(conn, AclOperation.WRITE, Resource.topic(name)):
                refused[(name, p)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif ctx.view.leader(name, p) is None:
                refused[(name, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if refused:
        return _answer(topics, lambda t, p: refused.get((t, p), ErrorCode.OPERATION_NOT_ATTEMPTED))
    txn, code = coordinator_for(door, tid)
    if txn is not None:
        partitions = {(t.get("name"), p) for t in topics for p in t.get("partitions") or []}
        code = await txn.add_partitions(tid, body.get("v3_and_below_producer_id", -1),
                                        body.get("v3_and_below_producer_epoch", -1), partitions)
    code = fenced_for(header.api_version, 2, code)
    return _answer(topics, lambda t, p: code)


def error_response(body: dict, code: int) -> dict:
    return _answer(body.get("v3_and_below_topics") or [], lambda t, p: code)


API = GroupApi(ApiKey.ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn", handle, error_response)
