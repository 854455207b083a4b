"""ListTransactions (Kafka api 66, v0-1): the transactional ids of the shards this process holds.

Admin clients ask every broker and merge the answers (as ListGroups).  Filters as Kafka's: by state
name (a name that is no state is listed back in ``unknown_state_filters`` and matches nothing), by
producer id, and (v1) by how long the open transaction has run (``duration_filter`` ms; -1: any).
Only the ids the principal may Describe are listed.  COORDINATOR_LOAD_IN_PROGRESS while a shard
held here is still loading.
"""

from __future__ import annotations

import time

from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.coordinator.handlers.txn_common import txn_refused
from spark_coord.coordinator.txn.state import TxnState
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation
from spark_coord.wire.registry import ApiKey


async def handle(door, ctx, conn, header, body) -> dict:
    names = [s for s in body.get("state_filters") or [] if isinstance(s, str)]
    states = {TxnState.parse(s) for s in names} - {None}
    unknown = [s for s in names if TxnState.parse(s) is None]
    pids = set(body.get("producer_id_filters") or [])
    duration = body.get("duration_filter", -1)
    now = int(time.time() * 1000)
    out = []
    roles = [r for r in getattr(door, "shards", {}).values() if getattr(r, "txn", None) is not None]
    if any(r.txn_not_serving() == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS for r in roles):
        return error_response(body, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    for role in roles:
        if role.txn_not_serving() is not None:
            continue
        for meta in role.txn.listing():
            if names and meta.state not in states:
                continue
            if pids and meta.producer_id not in pids:
                continue
            if duration is not None and duration >= 0 and (meta.start_ms < 0 or now - meta.start_ms < duration):
                continue
            if txn_refused(ctx, conn, AclOperation.DESCRIBE, meta.transactional_id):
                continue
            out.append({"transactional_id": meta.transactional_id, "producer_id": meta.producer_id,
                        "transaction_state": meta.state.value})
    out.sort(key=lambda s: s["transactional_id"])
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "unknown_state_filters": unknown,
            "transaction_states": out}


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "unknown_state_filters": [], "transaction_states": []}


API = GroupApi(ApiKey.LIST_TRANSACTIONS, "ListTransactions", handle, error_response)
