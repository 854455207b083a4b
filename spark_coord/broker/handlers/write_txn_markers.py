"""WriteTxnMarkers (key 27): write a transaction coordinator's COMMIT or ABORT markers (KIP-98).

Versions served per the wire registry (0-1).  For each marker (producer id and epoch, result,
coordinator epoch, partitions by topic) and each partition: not led here -> NOT_LEADER_OR_FOLLOWER,
unknown -> UNKNOWN_TOPIC_OR_PARTITION; a coordinator epoch older than the last marker this partition
took for that producer -> TRANSACTION_COORDINATOR_FENCED (a deposed coordinator's late marker changes
nothing); a producer epoch older than the producer's here -> INVALID_PRODUCER_EPOCH.  Otherwise the
marker (a control batch, Kafka's ``EndTransactionMarker``) is appended and closes the producer's open
transaction on the partition, which moves its last stable offset; an ABORT puts the transaction in the
segment's aborted-transaction index (``log.txn``).  A marker for a producer with no open transaction
there is appended all the same, as Kafka does, and changes no transaction (so a coordinator sending its
markers again after a failover applies none twice).  The answer waits for the fsync the flush policy asks.

Kafka's group offsets topic, ``__consumer_offsets``, is no log here: its partition ``n`` stands for
coordinator shard ``n``, and a marker for it (a transaction with offsets of that shard's groups,
AddOffsetsToTxn) is handed to the shard's group coordinator on this broker (``ctx.group_marker``,
``GroupOffsets.end_transaction``): COMMIT moves the producer's pending offsets of those groups into
their offsets, ABORT drops them, nothing pending is a no-op; a broker not holding the shard answers
NOT_LEADER_OR_FOLLOWER (the transaction coordinator asks the shard's holder again).

It is an inter-broker request: ClusterAction on the cluster is needed, else every partition answers
CLUSTER_AUTHORIZATION_FAILED (Kafka's rule).
"""

from __future__ import annotations

import asyncio
import logging

from spark_coord.broker.handlers.base import Handler
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import CLUSTER, AclOperation
from spark_coord.wire.registry import ApiKey

log = logging.getLogger(__name__)

API_KEY = ApiKey.WRITE_TXN_MARKERS
#: Kafka's group offsets topic: its partitions are the coordinator shards here (no log).
GROUP_OFFSETS_TOPIC = "__consumer_offsets"
ABORT, COMMIT = 0, 1


def _marker_result(marker: dict, code: int) -> dict:
    return {"producer_id": marker.get("producer_id", -1), "topics": [
        {"name": t.get("name"), "partitions": [{"partition_index": p, "error_code": code}
                                               for p in t.get("partition_indexes") or []]}
        for t in marker.get("topics") or []]}


def _write_one(ctx, marker: dict, topic: str, partition: int) -> tuple[int, object]:
    """(error code, the log when an fsync must complete first) of one marker on one partition."""
    from spark_coord.log import LogClosed

    code = ctx.leader_error(topic, partition)
    if code:
        return code, None
    pid, epoch = marker.get("producer_id", -1), marker.get("producer_epoch", -1)
    coordinator_epoch = marker.get("coordinator_epoch", -1)
    if pid < 0 or epoch < 0:
        return ErrorCode.INVALID_REQUEST, None
    plog = ctx.logs.get_or_create(topic, partition)
    txn_epoch, last_coordinator_epoch, _ = plog.transaction_info(pid)
    if coordinator_epoch < last_coordinator_epoch:
        log.info("%s-%d: marker of producer %d from coordinator epoch %d, older than %d: fenced", topic, partition,
                 pid, coordinator_epoch, last_coordinator_epoch)
        return ErrorCode.TRANSACTION_COORDINATOR_FENCED, None
    producers = ctx.producers.sequences.partition(topic, partition, plog)
    verdict = producers.check_marker(pid, epoch)
    if verdict.code == ErrorCode.NONE and epoch < txn_epoch:
        verdict = verdict._replace(code=ErrorCode.INVALID_PRODUCER_EPOCH,
                                   message=f"producer {pid}: marker epoch {epoch} is older than {txn_epoch}")
    if verdict.code != ErrorCode.NONE:
        log.info("%s-%d: %s", topic, partition, verdict.message)
        return verdict.code, None
    result = COMMIT if marker.get("transaction_result") else ABORT
    try:
        offset, flush_now = plog.append_marker(pid, epoch, result, coordinator_epoch)
    except LogClosed:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
    except OSError as e:
        log.error("%s-%d: marker append failed: %s", topic, partition, e)
        return ErrorCode.KAFKA_STORAGE_ERROR, None
    producers.record_marker(pid, epoch)
    ctx.appends.notify((topic, partition))
    log.debug("%s-%d: %s marker of producer %d at offset %d", topic, partition,
              "COMMIT" if result == COMMIT else "ABORT", pid, offset)
    return ErrorCode.NONE, plog if flush_now else None


async def _group_marker(ctx, marker: dict, shard: int) -> int:
    """The marker of ``__consumer_offsets`` partition ``shard``: to the shard's group coordinator here."""
    pid, epoch = marker.get("producer_id", -1), marker.get("producer_epoch", -1)
    if pid < 0 or epoch < 0:
        return ErrorCode.INVALID_REQUEST
    handler = getattr(ctx, "group_marker", None)
    if handler is None or not isinstance(shard, int):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    try:
        return await handler(shard, pid, epoch, bool(marker.get("transaction_result")))
    except Exception:
        log.exception("marker of producer %d for the groups of shard %d failed", pid, shard)
        return ErrorCode.UNKNOWN_SERVER_ERROR


async def handle(ctx, conn, header, body: dict) -> dict:
    markers = body.get("markers") or []
    if not ctx.authorized(conn, AclOperation.CLUSTER_ACTION, CLUSTER):
        return error_response(body, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    results = []
    to_flush: list[tuple[dict, object]] = []
    for marker in markers:
        topics = []
        for t in marker.get("topics") or []:
            name = t.get("name")
            parts = []
            for index in t.get("partition_indexes") or []:
                if name == GROUP_OFFSETS_TOPIC:
                    parts.append({"partition_index": index, "error_code": await _group_marker(ctx, marker, index)})
                    continue
                code, plog = _write_one(ctx, marker, name, index)
                answer = {"partition_index": index, "error_code": code}
                parts.append(answer)
                if plog is not None:
                    to_flush.append((answer, plog))
            topics.append({"name": name, "partitions": parts})
        results.append({"producer_id": marker.get("producer_id", -1), "topics": topics})
    if to_flush:
        outcomes = await asyncio.gather(*(ctx.logs.run_io(plog.flush) for _, plog in to_flush),
                                        return_exceptions=True)
        for (answer, _), outcome in zip(to_flush, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                log.error("marker flush failed: %s", outcome)
                answer["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
    return {"markers": results}


def error_response(body: dict, code: int) -> dict:
    return {"markers": [_marker_result(m, code) for m in body.get("markers") or []]}


HANDLER = Handler(API_KEY, "WriteTxnMarkers", handle, error_response)
