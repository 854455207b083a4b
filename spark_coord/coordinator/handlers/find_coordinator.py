"""FindCoordinator (Kafka api 10, versions 0-6 as the wire registry serves them).

Every broker answers each key with the coordinator holding the key's shard (the
group's ``__consumer_offsets`` partition in Kafka), at its endpoint of the listener
the request came in on (COORDINATOR_NOT_AVAILABLE while nobody holds the shard);
v4+ answer each key of a batch.  Only group keys exist here; a group the principal
may not Describe is refused.

Transactions are not supported: a transaction key is answered at once with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) and a message saying so.  That code is
fatal in librdkafka and kafka-python, so ``init_transactions()`` fails within a
round trip; COORDINATOR_NOT_AVAILABLE (retriable) made clients retry until their
timeout.  InitProducerId refuses a transactional id the same way.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation
from spark_coord.wire.find_coordinator import KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION
from spark_coord.wire.registry import ApiKey

#: What a transactional client is told (FindCoordinator's error_message, v1+).
TRANSACTIONS_REFUSED = "transactions are not supported by this broker (spark-coord): use an idempotent producer"


def _refusal(key: str, code: int, message: str | None) -> dict:
    return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": message}


async def handle(door, ctx, conn, header, body) -> dict:
    keys = body.get("coordinator_keys") if header.api_version >= 4 else [body.get("key") or ""]
    key_type = body.get("key_type", KEY_TYPE_GROUP)
    results = []
    for key in keys or []:
        if key_type == KEY_TYPE_TRANSACTION:
            results.append(_refusal(key, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TRANSACTIONS_REFUSED))
        elif key_type != KEY_TYPE_GROUP:
            results.append(_refusal(key, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                    "only group coordinators exist here"))
        elif authz.group_refused(ctx, conn, AclOperation.DESCRIBE, key):
            results.append(_refusal(key, ErrorCode.GROUP_AUTHORIZATION_FAILED, None))
        elif (found := door.coordinator_endpoint(conn, key)) is None:
            results.append(_refusal(key, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                    "no coordinator holds the group's shard right now"))
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
