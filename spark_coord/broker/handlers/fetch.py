"""Fetch (key 1): record batches straight from the segment files, with long poll.

Versions served per the wire registry (4-17): v4 adds isolation_level, last_stable_offset and
aborted_transactions, v5 log_start_offset, v7 fetch sessions (we never create one: session_id 0, so
clients keep sending full fetches), v11 rack_id and preferred_read_replica, v12 is flexible, v13
names topics by id instead of by name (KIP-516), v14 and v15 change nothing a consumer sends (v15
moves the follower's replica id into a tagged ReplicaState), v16 adds NodeEndpoints (KIP-951: with
NOT_LEADER_OR_FOLLOWER the partition's CurrentLeader and that broker's endpoint on the client's
listener, so the client need not ask Metadata first), v17 a follower's directory id. From v13 a
topic is resolved by id on every pass of a long poll: an id that names no topic -- unknown, the zero
uuid, a topic deleted (and perhaps created again under its name, which gives it a new id) -- answers
UNKNOWN_TOPIC_ID for each of its partitions. Per partition: NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE outside [log_start, log_end]. partition_max_bytes
and the response max_bytes are honoured, except that the first non-empty partition always gets at
least one whole batch (KIP-74). If fewer than min_bytes are available the request waits up to
max_wait_ms for an append to any requested partition (no polling: Produce and WriteTxnMarkers wake
it). Every answer carries the partition's last stable offset (KIP-98: the first offset of its oldest
open transaction, else the high watermark); with isolation_level=1 (read_committed) only batches
below it are returned, with the aborted transactions (producer id, first offset) that overlap them.
A topic the principal may not Read answers TOPIC_AUTHORIZATION_FAILED for each of its partitions."""

from __future__ import annotations

import asyncio
import logging

from spark_coord.broker.handlers.base import Handler
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation, Resource
from spark_coord.wire.registry import ApiKey
from spark_coord.zk.model import ZERO_TOPIC_ID

log = logging.getLogger(__name__)

API_KEY = ApiKey.FETCH

#: First version naming topics by id (KIP-516); first with NodeEndpoints (KIP-951).
FIRST_BY_ID = 13
FIRST_NODE_ENDPOINTS = 16


def _partition(index: int, code: int, hw: int = -1, log_start: int = -1, records=b"", lso: int | None = None,
               aborted: list | None = None) -> dict:
    # Records are empty, never null, with an error: as Kafka answers, and what librdkafka parses (a
    # null record set is a protocol error to it, so it would retry without ever seeing the code)
    return {"partition_index": index, "error_code": code, "high_watermark": hw,
            "last_stable_offset": hw if lso is None else lso, "log_start_offset": log_start,
            "aborted_transactions": aborted, "preferred_read_replica": -1, "records": records}


def _aborted(plog, offset: int, region, lso: int) -> list[dict]:
    """read_committed: the aborted transactions overlapping the fetched batches (Kafka's
    ``collectAbortedTxns`` from the fetch offset to the offset after the last batch returned); an
    empty list when there are none, as Kafka answers a read_committed fetch (null is read_uncommitted's)."""
    from spark_coord.log.scan import iter_headers

    if region is None:
        return []
    candidates = plog.aborted_transactions(offset, lso)
    if not candidates:
        return []
    upper = offset
    for _, h in iter_headers(region.fileobj, region.offset, region.offset + region.length):
        upper = h.next_offset
    return [{"producer_id": e.producer_id, "first_offset": e.first_offset} for e in candidates
            if e.first_offset < upper]


def _resolve(ctx, version: int, t: dict) -> tuple[str | None, bytes]:
    """(name, id) of a requested topic: by name before v13, by id from v13 (name None when the
    id names no topic)."""
    if version >= FIRST_BY_ID:
        topic_id = t.get("topic_id") or ZERO_TOPIC_ID
        return ctx.view.topic_name(topic_id), topic_id
    name = t.get("topic")
    return name, ctx.view.topic_id(name) or ZERO_TOPIC_ID


def _read_all(ctx, version: int, body: dict, resolved: list[tuple[str | None, bytes]],
              denied: set[str]) -> tuple[list[dict], int, bool]:
    """One pass over the requested partitions (``resolved``: each topic's name and id):
    (responses, bytes found, any error)."""
    from spark_coord.log import OffsetOutOfRange

    budget = body.get("max_bytes", 0x7FFFFFFF)
    if budget <= 0:
        budget = 0x7FFFFFFF
    total = 0
    error = False
    read_committed = body.get("isolation_level", 0) == 1
    responses = []
    for t, (topic, topic_id) in zip(body.get("topics") or [], resolved, strict=True):
        parts = []
        for p in t.get("partitions") or []:
            index = p.get("partition", -1)
            if topic is None:
                code = ErrorCode.UNKNOWN_TOPIC_ID
            elif topic in denied:
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else:
                code = ctx.leader_error(topic, index)
            if code:
                parts.append(_partition(index, code))
                error = True
                continue
            plog = ctx.logs.get_or_create(topic, index)
            offset = p.get("fetch_offset", 0)
            limit = min(max(p.get("partition_max_bytes", 0), 0), budget - total)
            region = None
            lso = plog.last_stable_offset
            try:
                if limit > 0 or total == 0:
                    region = plog.read(offset, max(limit, 1), lso if read_committed else None)
            except OffsetOutOfRange:
                parts.append(_partition(index, ErrorCode.OFFSET_OUT_OF_RANGE, plog.log_end_offset,
                                        plog.log_start_offset))
                error = True
                continue
            if region is not None and region.length > limit and total > 0:
                region = None  # only the first non-empty partition may exceed the limits (KIP-74)
            size = region.length if region is not None else 0
            total += size
            aborted = (_aborted(plog, offset, region if size else None, lso) if read_committed else None)
            parts.append(_partition(index, ErrorCode.NONE, plog.log_end_offset, plog.log_start_offset,
                                    region if size else b"", lso, aborted))
        responses.append({"topic": t.get("topic") if version < FIRST_BY_ID else topic, "topic_id": topic_id,
                          "partitions": parts})
    return responses, total, error


def _current_leaders(ctx, conn, responses: list[dict]) -> list[dict]:
    """KIP-951 (v16+): each NOT_LEADER_OR_FOLLOWER partition names its current leader, and the
    answer carries the endpoints of those leaders on the listener the client connected to."""
    leaders: set[int] = set()
    for t in responses:
        for p in t["partitions"]:
            if p["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER and t["topic"] is not None:
                leader = ctx.view.leader(t["topic"], p["partition_index"])
                if leader is not None and leader in ctx.view.brokers:
                    p["current_leader"] = {"leader_id": leader, "leader_epoch": 0}
                    leaders.add(leader)
    endpoints = []
    for broker_id in sorted(leaders):
        b = ctx.view.brokers[broker_id]
        ep = b.endpoint_for(conn.auth.listener_name)
        if ep is not None:
            endpoints.append({"node_id": b.id, "host": ep.host, "port": ep.port, "rack": b.rack})
    return endpoints


async def handle(ctx, conn, header, body: dict) -> dict:
    if body.get("session_id", 0) != 0:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.FETCH_SESSION_ID_NOT_FOUND, "session_id": 0,
                "responses": []}
    version = header.api_version
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(body.get("max_wait_ms", 0), 0) / 1000
    min_bytes = max(body.get("min_bytes", 0), 0)
    topics = body.get("topics") or []
    allowed: dict[str, bool] = {}
    while True:
        # resolved on every pass: a topic deleted during the wait no longer has its id
        resolved = [_resolve(ctx, version, t) for t in topics]
        for name, _ in resolved:
            if name is not None and name not in allowed:
                allowed[name] = ctx.authorized(conn, AclOperation.READ, Resource.topic(name))
        denied = {name for name, ok in allowed.items() if not ok}
        responses, total, error = _read_all(ctx, version, body, resolved, denied)
        remaining = deadline - loop.time()
        tps = [(name, p.get("partition", -1)) for (name, _), t in zip(resolved, topics, strict=True)
               for p in t.get("partitions") or []]
        if error or total >= min_bytes or remaining <= 0 or not tps or conn.closed:
            if total:
                ctx.metrics.fetched(responses)
            out = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0, "responses": responses}
            if error and version >= FIRST_NODE_ENDPOINTS:
                out["node_endpoints"] = _current_leaders(ctx, conn, responses)
            return out
        await ctx.appends.wait_any(tps, remaining)


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "session_id": 0, "responses": [
        {"topic": t.get("topic"), "topic_id": t.get("topic_id") or ZERO_TOPIC_ID,
         "partitions": [_partition(p.get("partition", -1), code) for p in t.get("partitions") or []]}
        for t in body.get("topics") or []]}


HANDLER = Handler(API_KEY, "Fetch", handle, error_response)
