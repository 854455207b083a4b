"""IncrementalAlterConfigs (key 44): set or delete some of a group's configs (KIP-339).

Versions per the wire registry (0-1).  For a GROUP: SET (0) gives a key the
value, DELETE (1) takes it back to the broker's default; the resulting set is
validated as Kafka does (``broker.config_admin``; INVALID_CONFIG naming the key
and the reason, nothing written), stored in ZooKeeper (``/config/groups/<group>``,
then a ``/config/changes`` notification) and applied on every broker without a
restart.  APPEND (2) and SUBTRACT (3) are for list-typed keys, which groups have
none of: INVALID_CONFIG.  TOPIC and BROKER configs are read-only on this broker
for now: INVALID_REQUEST.  ``validate_only`` writes nothing.  Needs AlterConfigs
on the group (the topic, the cluster).
"""

from __future__ import annotations

from spark_coord.broker import config_admin
from spark_coord.broker.handlers.base import Handler
from spark_coord.wire.registry import ApiKey


async def handle(ctx, conn, header, body: dict) -> dict:
    return {"throttle_time_ms": 0, "responses": await config_admin.alter(ctx, conn, body, incremental=True)}


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "responses": config_admin.error_responses(body, code)}


HANDLER = Handler(ApiKey.INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigs", handle, error_response)
