"""Fetch (key 1): record batches straight from the segment files, with long poll.

Versions served per the wire registry (4-12; v13+ name topics by id): v4 adds
isolation_level, last_stable_offset and aborted_transactions, v5
log_start_offset, v7 fetch sessions (we never create one: session_id 0, so
clients keep sending full fetches), v11 rack_id and preferred_read_replica, v12
is flexible.  Per partition: NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
OFFSET_OUT_OF_RANGE outside [log_start, log_end].  partition_max_bytes and the
response max_bytes are honoured, except that the first non-empty partition
always gets at least one whole batch (KIP-74).  If fewer than min_bytes are
available the request waits up to max_wait_ms for an append to any requested
partition (no polling: Produce wakes it).  A topic the principal may not Read
answers TOPIC_AUTHORIZATION_FAILED for each of its partitions.
"""

from __future__ import annotations

import asyncio
import logging

from spark_coord.broker.handlers import Handler
from spark_coord.errors import ErrorCode
from spark_coord.wire.registry import ApiKey
from spark_coord.security.acl import AclOperation, Resource

log = logging.getLogger(__name__)

API_KEY = ApiKey.FETCH


def _partition(index: int, code: int, hw: int = -1, log_start: int = -1, records=None) -> dict:
    return {"partition_index": index, "error_code": code, "high_watermark": hw, "last_stable_offset": hw,
            "log_start_offset": log_start, "aborted_transactions": None, "preferred_read_replica": -1,
            "records": records}


def _read_all(ctx, body: dict, denied: set[str]) -> tuple[list[dict], int, bool]:
    """One pass over the requested partitions: (responses, bytes found, any error)."""
    from spark_coord.log import OffsetOutOfRange

    budget = body.get("max_bytes", 0x7FFFFFFF)
    if budget <= 0:
        budget = 0x7FFFFFFF
    total = 0
    error = False
    responses = []
    for t in body.get("topics") or []:
        topic = t.get("topic")
        parts = []
        for p in t.get("partitions") or []:
            index = p.get("partition", -1)
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED if topic in denied else ctx.leader_error(topic, index)
            if code:
                parts.append(_partition(index, code))
                error = True
                continue
            plog = ctx.logs.get_or_create(topic, index)
            offset = p.get("fetch_offset", 0)
            limit = min(max(p.get("partition_max_bytes", 0), 0), budget - total)
            region = None
            try:
                if limit > 0 or total == 0:
                    region = plog.read(offset, max(limit, 1))
            except OffsetOutOfRange:
                parts.append(_partition(index, ErrorCode.OFFSET_OUT_OF_RANGE, plog.log_end_offset,
                                        plog.log_start_offset))
                error = True
                continue
            if region is not None and region.length > limit and total > 0:
                region = None  # only the first non-empty partition may exceed the limits (KIP-74)
            size = region.length if region is not None else 0
            total += size
            parts.append(_partition(index, ErrorCode.NONE, plog.log_end_offset, plog.log_start_offset,
                                    region if size else b""))
        responses.append({"topic": topic, "partitions": parts})
    return responses, total, error


async def handle(ctx, conn, header, body: dict) -> dict:
    if body.get("session_id", 0) != 0:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.FETCH_SESSION_ID_NOT_FOUND, "session_id": 0,
                "responses": []}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(body.get("max_wait_ms", 0), 0) / 1000
    min_bytes = max(body.get("min_bytes", 0), 0)
    denied = {t.get("topic") for t in body.get("topics") or []
              if not ctx.authorized(conn, AclOperation.READ, Resource.topic(t.get("topic") or ""))}
    tps = [(t.get("topic"), p.get("partition", -1)) for t in body.get("topics") or [] for p in t.get("partitions") or []]
    while True:
        responses, total, error = _read_all(ctx, body, denied)
        remaining = deadline - loop.time()
        if error or total >= min_bytes or remaining <= 0 or not tps or conn.closed:
            if total:
                ctx.metrics.fetched(responses)
            return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0, "responses": responses}
        await ctx.appends.wait_any(tps, remaining)


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "session_id": 0, "responses": [
        {"topic": t.get("topic"), "partitions": [_partition(p.get("partition", -1), code)
                                                 for p in t.get("partitions") or []]}
        for t in body.get("topics") or []]}


HANDLER = Handler(API_KEY, "Fetch", handle, error_response)
