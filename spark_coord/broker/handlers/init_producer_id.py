"""InitProducerId (key 22): a producer id and epoch for an idempotent or a transactional producer.

Versions served per the wire registry (0-4).  As Kafka does for a producer with
no transactional id, every request gets a fresh id from the broker's current
block (``broker.producer_state``), whatever producer id and epoch a v3+ request
carries: ids are cheap, and a new id starts a clean sequence.  Trouble with the
producer id block in ZooKeeper answers COORDINATOR_NOT_AVAILABLE (ZooKeeper
unreachable: the client retries) or UNKNOWN_SERVER_ERROR (unusable znode content,
logged).  Authorization (Kafka 3's rule, KIP-679): IdempotentWrite on the cluster,
or Write on some topic; else CLUSTER_AUTHORIZATION_FAILED.

With a transactional id (KIP-98) the request is the transaction coordinator's:
Write on the transactional id or TRANSACTIONAL_ID_AUTHORIZATION_FAILED; an empty id
INVALID_REQUEST; a broker not holding the id's shard NOT_COORDINATOR (or
COORDINATOR_LOAD_IN_PROGRESS while it loads).  The coordinator
(``coordinator.txn.coordinator``) hands a new id a producer id from this broker's
block at epoch 0, bumps the epoch of a known one (fencing its older producer), aborts
an open transaction first (CONCURRENT_TRANSACTIONS until its markers are written),
and takes a new producer id once the epoch is exhausted; a timeout above
``transaction.max.timeout.ms`` is INVALID_TRANSACTION_TIMEOUT.  v3+ may name the
producer id and epoch it resumes (KIP-360): another producer's is PRODUCER_FENCED,
told v0-3 clients as INVALID_PRODUCER_EPOCH (Kafka's KafkaApis).  A process without
a transaction coordinator answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED, fatal in
every client.
"""

from __future__ import annotations

import logging

from kazoo.exceptions import KazooException

from spark_coord.broker import producer_state
from spark_coord.broker.handlers.base import Handler
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import CLUSTER, AclOperation, Resource, ResourceType
from spark_coord.wire.registry import ApiKey

log = logging.getLogger(__name__)

API_KEY = ApiKey.INIT_PRODUCER_ID


def _answer(code: int, producer_id: int = -1, epoch: int = -1) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": producer_id, "producer_epoch": epoch}


async def _transactional(ctx, conn, header, body: dict, tid: str) -> dict:
    """InitProducerId with a transactional id, answered by the id's transaction coordinator."""
    if not tid:
        return _answer(ErrorCode.INVALID_REQUEST)
    if getattr(ctx.authorizer, "enabled", False) and \
            not ctx.authorized(conn, AclOperation.WRITE, Resource(ResourceType.TRANSACTIONAL_ID, tid)):
        return _answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    service = getattr(ctx, "transactions", None)
    if service is None:
        log.info("%r: refused InitProducerId for transactional id %r: no transaction coordinator here", conn, tid)
        return _answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    coordinator, code = service.for_transaction(tid)
    if coordinator is None:
        return _answer(code)
    pid, epoch = body.get("producer_id", -1), body.get("producer_epoch", -1)
    expected = (pid, epoch) if header.api_version >= 3 and pid >= 0 else None
    try:
        code, producer_id, producer_epoch = await coordinator.init_producer_id(
            tid, body.get("transaction_timeout_ms", -1), expected)
    except (producer_state.ProducerIdBlockError, KazooException) as e:
        return _allocation_failed(e)
    if code == ErrorCode.PRODUCER_FENCED and header.api_version < 4:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    log.debug("%r: transactional id %r: %s, producer id %d, epoch %d", conn, tid, ErrorCode.name_of(code),
              producer_id, producer_epoch)
    return _answer(code, producer_id, producer_epoch) if code == ErrorCode.NONE else _answer(code)


def _allocation_failed(e: Exception) -> dict:
    """The answer when no producer id could be allocated: unusable block content in ZooKeeper is a
    server error (logged), ZooKeeper out of reach is COORDINATOR_NOT_AVAILABLE (the client retries)."""
    if isinstance(e, producer_state.ProducerIdBlockError):
        log.error("cannot allocate a producer id: %s", e)
        return _answer(ErrorCode.UNKNOWN_SERVER_ERROR)
    log.warning("cannot allocate a producer id: ZooKeeper: %r", e)
    return _answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)


async def handle(ctx, conn, header, body: dict) -> dict:
    if body.get("transactional_id") is not None:
        return await _transactional(ctx, conn, header, body, body["transactional_id"])
    if not (ctx.authorized(conn, AclOperation.IDEMPOTENT_WRITE, CLUSTER)
            or any(ctx.authorized(conn, AclOperation.WRITE, Resource.topic(t)) for t in ctx.view.topics)):
        return _answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    try:
        producer_id = await ctx.producers.ids.next_id()
    except (producer_state.ProducerIdBlockError, KazooException) as e:
        return _allocation_failed(e)
    log.debug("%r: producer id %d, epoch 0", conn, producer_id)
    return _answer(ErrorCode.NONE, producer_id, 0)


def error_response(body: dict, code: int) -> dict:
    return _answer(code)


HANDLER = Handler(API_KEY, "InitProducerId", handle, error_response)
