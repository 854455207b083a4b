"""DescribeProducers (key 61): the idempotent producers a partition's leader keeps state for.

Versions served per the wire registry (0).  Per partition: the producers of the
leader's sequence table (``broker.producer_state``: rebuilt at start from the last
segment, at most ``MAX_PRODUCERS_PER_PARTITION``) with epoch, last sequence and the
max timestamp of their last batch, and from the log's transactions (``log.txn``) the coordinator
epoch of the producer's last marker and the first offset of its open transaction (-1 for none).
NOT_LEADER_OR_FOLLOWER elsewhere, UNKNOWN_TOPIC_OR_PARTITION for what does not exist.  Read on the topic is needed
(Kafka's rule), else TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from spark_coord.broker.handlers.base import Handler, partitions_error_response
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation, Resource
from spark_coord.wire.registry import ApiKey

API_KEY = ApiKey.DESCRIBE_PRODUCERS


def _partition(index, code: int, message: str | None = None, producers: list[dict] | None = None) -> dict:
    return {"partition_index": index, "error_code": code, "error_message": message,
            "active_producers": producers or []}


def _describe(ctx, topic: str, index: int) -> dict:
    code = ctx.leader_error(topic, index)
    if code:
        return _partition(index, code)
    plog = ctx.logs.get_or_create(topic, index)
    state = ctx.producers.sequences.partition(topic, index, plog)
    producers = []
    for pid, epoch, seq, ts in state.active():
        _, coordinator_epoch, txn_start = plog.transaction_info(pid)
        producers.append({"producer_id": pid, "producer_epoch": epoch, "last_sequence": seq, "last_timestamp": ts,
                          "coordinator_epoch": coordinator_epoch, "current_txn_start_offset": txn_start})
    return _partition(index, ErrorCode.NONE, None, producers)


async def handle(ctx, conn, header, body: dict) -> dict:
    topics = []
    for t in body.get("topics") or []:
        name = t.get("name")
        allowed = ctx.authorized(conn, AclOperation.READ, Resource.topic(name or ""))
        topics.append({"name": name, "partitions": [
            _describe(ctx, name, index) if allowed else
            _partition(index, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "not authorized to read this topic")
            for index in t.get("partition_indexes") or []]})
    return {"throttle_time_ms": 0, "topics": topics}


def error_response(body: dict, code: int) -> dict:
    return partitions_error_response(body, code, _partition, lambda t: list(t.get("partition_indexes") or []))


HANDLER = Handler(API_KEY, "DescribeProducers", handle, error_response)
