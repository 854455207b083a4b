"""DeleteRecords (key 21): move partitions' log start offset forward (Kafka's low watermark).

Versions served per the wire registry (0-2).  Per partition: an offset of -1 means the
high watermark (with one replica, the log end); an offset above it (or below -1) is
OFFSET_OUT_OF_RANGE; an offset at or below the current log start changes nothing.
The answer carries the partition's low watermark (its log start offset) after the
call.  The new start is durable before the answer (the partition's log start
checkpoint, read again at start), a Fetch below it answers OFFSET_OUT_OF_RANGE (so a
consumer follows its auto.offset.reset), ListOffsets for the earliest offset answers
it, and whole segments below it go at the next retention run.  Only the leader
answers (NOT_LEADER_OR_FOLLOWER elsewhere, UNKNOWN_TOPIC_OR_PARTITION for what does
not exist).  Delete on the topic is needed, else TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import logging

from spark_coord.broker.handlers.base import Handler, partitions_error_response
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation, Resource
from spark_coord.wire.delete_records import HIGH_WATERMARK
from spark_coord.wire.registry import ApiKey

log = logging.getLogger(__name__)

API_KEY = ApiKey.DELETE_RECORDS


def _partition(index, code: int, low_watermark: int = -1) -> dict:
    return {"partition_index": index, "low_watermark": low_watermark, "error_code": code}


async def _delete(ctx, topic: str, index: int, offset: int) -> dict:
    from spark_coord.log import LogClosed, OffsetOutOfRange

    code = ctx.leader_error(topic, index)
    if code:
        return _partition(index, code)
    plog = ctx.logs.get_or_create(topic, index)
    target = plog.log_end_offset if offset == HIGH_WATERMARK else offset
    try:
        start = await ctx.logs.run_io(plog.advance_log_start, target)
    except OffsetOutOfRange as e:
        log.info("DeleteRecords %s-%d before %d refused: %s", topic, index, target, e)
        return _partition(index, ErrorCode.OFFSET_OUT_OF_RANGE)
    except LogClosed:
        return _partition(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    except OSError as e:
        log.error("deleting records of %s-%d before %d failed: %s", topic, index, target, e)
        return _partition(index, ErrorCode.KAFKA_STORAGE_ERROR)
    return _partition(index, ErrorCode.NONE, start)


async def handle(ctx, conn, header, body: dict) -> dict:
    topics = []
    for t in body.get("topics") or []:
        name = t.get("name")
        allowed = ctx.authorized(conn, AclOperation.DELETE, Resource.topic(name or ""))
        parts = []
        for p in t.get("partitions") or []:
            index = p.get("partition_index", -1)
            if not allowed:
                parts.append(_partition(index, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            else:
                parts.append(await _delete(ctx, name, index, p.get("offset", HIGH_WATERMARK)))
        topics.append({"name": name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


def error_response(body: dict, code: int) -> dict:
    return partitions_error_response(body, code, _partition)


HANDLER = Handler(API_KEY, "DeleteRecords", handle, error_response)
