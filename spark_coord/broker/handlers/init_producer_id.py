"""InitProducerId (key 22): a new producer id, epoch 0, for an idempotent producer.

Versions served per the wire registry (0-4).  As Kafka does for a producer with
no transactional id, every request gets a fresh id from the broker's current
block (``broker.producer_state``), whatever producer id and epoch a v3+ request
carries: ids are cheap, and a new id starts a clean sequence.

Transactions are not supported: a non-null transactional_id is answered with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53), Kafka's answer when a producer may
not use a transactional id.  It is fatal in every client (the producer fails at
once with a clear error instead of retrying forever, which a retriable code
such as COORDINATOR_NOT_AVAILABLE would cause).  Trouble with the producer id
block in ZooKeeper answers COORDINATOR_NOT_AVAILABLE (ZooKeeper unreachable:
the client retries) or UNKNOWN_SERVER_ERROR (unusable znode content, logged).
Authorization (Kafka 3's rule, KIP-679): IdempotentWrite on the cluster, or Write
on some topic; else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import logging

from kazoo.exceptions import KazooException

from spark_coord.broker import producer_state
from spark_coord.broker.handlers.base import Handler
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import CLUSTER, AclOperation, Resource
from spark_coord.wire.registry import ApiKey

log = logging.getLogger(__name__)

API_KEY = ApiKey.INIT_PRODUCER_ID


def _answer(code: int, producer_id: int = -1, epoch: int = -1) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": producer_id, "producer_epoch": epoch}


async def handle(ctx, conn, header, body: dict) -> dict:
    if body.get("transactional_id") is not None:
        log.info("%r: refused InitProducerId for transactional id %r: transactions are not supported",
                 conn, body["transactional_id"])
        return _answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not (ctx.authorized(conn, AclOperation.IDEMPOTENT_WRITE, CLUSTER)
            or any(ctx.authorized(conn, AclOperation.WRITE, Resource.topic(t)) for t in ctx.view.topics)):
        return _answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    try:
        producer_id = await ctx.producers.ids.next_id()
    except producer_state.ProducerIdBlockError as e:
        log.error("cannot allocate a producer id: %s", e)
        return _answer(ErrorCode.UNKNOWN_SERVER_ERROR)
    except KazooException as e:
        log.warning("cannot allocate a producer id: ZooKeeper: %r", e)
        return _answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    log.debug("%r: producer id %d, epoch 0", conn, producer_id)
    return _answer(ErrorCode.NONE, producer_id, 0)


def error_response(body: dict, code: int) -> dict:
    return _answer(code)


HANDLER = Handler(API_KEY, "InitProducerId", handle, error_response)
