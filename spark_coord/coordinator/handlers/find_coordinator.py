"""FindCoordinator (Kafka api 10, versions 0-6 as the wire registry serves them).

Every broker answers each key with the coordinator holding the key's shard (the
group's ``__consumer_offsets`` partition in Kafka), at its endpoint of the listener
the request came in on (COORDINATOR_NOT_AVAILABLE while nobody holds the shard);
v4+ answer each key of a batch.  A group the principal may not Describe is refused
(GROUP_AUTHORIZATION_FAILED).

A transactional id (key type 1) is answered the same way: its transaction coordinator
is the holder of the shard the id hashes to, as a group id would (DESIGN, "Transactions
(KIP-98)"); an id the principal may not Describe is TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
A process that hands out no producer ids (a standalone coordinator) runs no transaction
coordinator: it answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) and a message saying
so, fatal in librdkafka and kafka-python, so ``init_transactions()`` fails within a round
trip instead of retrying until its timeout.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.coordinator.handlers.txn_common import txn_refused
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation
from spark_coord.wire.find_coordinator import KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION
from spark_coord.wire.registry import ApiKey

#: What a transactional client is told (FindCoordinator's error_message, v1+).
TRANSACTIONS_REFUSED = "this coordinator runs no transaction coordinator (spark-coord): use a broker"


def _refusal(key: str, code: int, message: str | None) -> dict:
    return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": message}


async def handle(door, ctx, conn, header, body) -> dict:
    keys = body.get("coordinator_keys") if header.api_version >= 4 else [body.get("key") or ""]
    key_type = body.get("key_type", KEY_TYPE_GROUP)
    results = []
    for key in keys or []:
        if key_type == KEY_TYPE_TRANSACTION and getattr(door, "txn_settings", None) is None:
            results.append(_refusal(key, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TRANSACTIONS_REFUSED))
        elif key_type == KEY_TYPE_TRANSACTION and txn_refused(ctx, conn, AclOperation.DESCRIBE, key):
            results.append(_refusal(key, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None))
        elif key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
            results.append(_refusal(key, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                    "only group coordinators exist here"))
        elif key_type == KEY_TYPE_GROUP and authz.group_refused(ctx, conn, AclOperation.DESCRIBE, key):
            results.append(_refusal(key, ErrorCode.GROUP_AUTHORIZATION_FAILED, None))
        elif (found := door.coordinator_endpoint(conn, key)) is None:
            results.append(_refusal(key, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                    "no coordinator holds the key's shard right now"))
        else:
            node, host, port = found
            results.append({"key": key, "node_id": node, "host": host, "port": port,
                            "error_code": ErrorCode.NONE, "error_message": None})
    first = results[0] if results else _refusal("", ErrorCode.INVALID_REQUEST, "no key")
    return {"throttle_time_ms": 0, "error_code": first["error_code"], "error_message": first["error_message"],
            "node_id": first["node_id"], "host": first["host"], "port": first["port"], "coordinators": results}


def error_response(body: dict, code: int) -> dict:
    keys = body.get("coordinator_keys") or [body.get("key") or ""]
    return {"throttle_time_ms": 0, "error_code": code, "error_message": None, "node_id": -1, "host": "",
            "port": -1, "coordinators": [_refusal(k, code, None) for k in keys]}


API = GroupApi(ApiKey.FIND_COORDINATOR, "FindCoordinator", handle, error_response)
