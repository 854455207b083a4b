"""DescribeTransactions (Kafka api 65, v0): the state of transactional ids, from their coordinator.

Each id is answered by the coordinator holding its shard (here: NOT_COORDINATOR for an id of a shard
held elsewhere, COORDINATOR_LOAD_IN_PROGRESS while its shard loads; admin clients ask the id's
coordinator, found with FindCoordinator).  It is also how a partition leader checks a transactional
Produce with the id's coordinator (``broker.txn_verify``, where Kafka's leader sends AddPartitionsToTxn
v4 verify-only, a ClusterAction request): an id the principal may not Describe is
TRANSACTIONAL_ID_AUTHORIZATION_FAILED unless the principal has ClusterAction on the cluster (the
brokers' own principal), an id with no state TRANSACTIONAL_ID_NOT_FOUND.  The partitions
listed are those of the open transaction, or of the one whose markers are being written.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.coordinator.handlers.txn_common import coordinator_for, txn_refused
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import CLUSTER, AclOperation
from spark_coord.wire.registry import ApiKey

#: Kafka's TRANSACTIONAL_ID_NOT_FOUND (KIP-664), for an id its coordinator has no state of.
TRANSACTIONAL_ID_NOT_FOUND = 105


def _state(tid, code: int) -> dict:
    return {"error_code": code, "transactional_id": tid if isinstance(tid, str) else "", "transaction_state": "",
            "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1, "producer_epoch": -1,
            "topics": []}


def describe_one(door, ctx, conn, tid) -> dict:
    if not isinstance(tid, str):
        return _state(tid, ErrorCode.INVALID_REQUEST)
    if txn_refused(ctx, conn, AclOperation.DESCRIBE, tid) and \
            not ctx.authorized(conn, AclOperation.CLUSTER_ACTION, CLUSTER):
        return _state(tid, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    coordinator, code = coordinator_for(door, tid)
    if coordinator is None:
        return _state(tid, code)
    meta = coordinator.describe(tid)
    if meta is None:
        return _state(tid, TRANSACTIONAL_ID_NOT_FOUND)
    return {"error_code": ErrorCode.NONE, "transactional_id": tid, "transaction_state": meta.state.value,
            "transaction_timeout_ms": meta.timeout_ms, "transaction_start_time_ms": meta.start_ms,
            "producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in meta.topics().items()]}


async def handle(door, ctx, conn, header, body) -> dict:
    return {"throttle_time_ms": 0,
            "transaction_states": [describe_one(door, ctx, conn, t) for t in body.get("transactional_ids") or []]}


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "transaction_states": [_state(t, code) for t in body.get("transactional_ids") or []]}


API = GroupApi(ApiKey.DESCRIBE_TRANSACTIONS, "DescribeTransactions", handle, error_response)
