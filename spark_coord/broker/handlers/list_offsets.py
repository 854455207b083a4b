"""ListOffsets (key 2): offsets by time: earliest (-2), latest (-1), the largest
timestamp (-3), or the first offset whose batch has a timestamp >= t.

Versions served per the wire registry (0-7): v0 answers a list (old_style_offsets, at most
max_num_offsets entries), v1+ one (timestamp, offset) pair; v2 adds isolation_level and
throttle_time_ms, v4 leader epochs, v6 is flexible, v7 allows -3 (KIP-734: the offset and timestamp
of the first record with the partition's largest timestamp, ``PartitionLog.max_timestamp``). Lookups
by a timestamp t >= 0 answer the first record at or after t, as Kafka does (the log's
``offset_for_timestamp``: the first batch recent enough is found from the headers, and that batch is
decoded). Nothing found -> offset -1 (v1+) or [] (v0); another negative timestamp ->
INVALID_REQUEST. With isolation_level=1 (read_committed, v2+) latest is the last stable offset (the
first offset of the oldest open transaction, else the high watermark). Earliest and latest are
answered from memory; the lookups that read segments run on the log's I/O threads, off the event
loop. A topic the principal may not Describe answers TOPIC_AUTHORIZATION_FAILED."""

from __future__ import annotations

from spark_coord.broker.handlers.base import Handler, partitions_error_response
from spark_coord.common import EARLIEST, LATEST, MAX_TIMESTAMP
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation, Resource
from spark_coord.wire.registry import ApiKey

API_KEY = ApiKey.LIST_OFFSETS


def _partition(index: int, code: int, offset: int = -1, timestamp: int = -1, old: list[int] | None = None) -> dict:
    return {"partition_index": index, "error_code": code, "old_style_offsets": old or [], "timestamp": timestamp,
            "offset": offset, "leader_epoch": 0 if code == ErrorCode.NONE else -1}


def _scan(plog, ts: int) -> tuple[int, int]:
    """(offset, timestamp) for -3 or a timestamp >= 0, read from the segments (blocking)."""
    found = plog.max_timestamp() if ts == MAX_TIMESTAMP else plog.offset_for_timestamp(ts)
    return (found[0], found[1]) if found else (-1, -1)


async def _lookup(ctx, plog, ts: int, isolation_level: int = 0) -> tuple[int, int]:
    """(offset, timestamp) for the requested timestamp; offset -1 when there is none."""
    if ts == EARLIEST:
        return plog.log_start_offset, -1
    if ts == LATEST:
        return (plog.last_stable_offset if isolation_level == 1 else plog.log_end_offset), -1
    if ts < 0 and ts != MAX_TIMESTAMP:
        raise ValueError(f"timestamp {ts}")
    return await ctx.logs.run_io(_scan, plog, ts)


async def handle(ctx, conn, header, body: dict) -> dict:
    topics = []
    for t in body.get("topics") or []:
        name = t.get("name")
        parts = []
        allowed = ctx.authorized(conn, AclOperation.DESCRIBE, Resource.topic(name or ""))
        for p in t.get("partitions") or []:
            index = p.get("partition_index", -1)
            code = ctx.leader_error(name, index) if allowed else ErrorCode.TOPIC_AUTHORIZATION_FAILED
            if code:
                parts.append(_partition(index, code))
                continue
            plog = ctx.logs.get_or_create(name, index)
            try:
                offset, ts = await _lookup(ctx, plog, p.get("timestamp", LATEST), body.get("isolation_level", 0))
            except ValueError:
                parts.append(_partition(index, ErrorCode.INVALID_REQUEST))
                continue
            old = [offset] if offset >= 0 and p.get("max_num_offsets", 1) > 0 else []
            parts.append(_partition(index, ErrorCode.NONE, offset, ts, old))
        topics.append({"name": name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


def error_response(body: dict, code: int) -> dict:
    return partitions_error_response(body, code, _partition)


HANDLER = Handler(API_KEY, "ListOffsets", handle, error_response)
