"""ShareFetch (key 78, v1-2): records of a share group, acquired one by one (KIP-932).

Served by the partitions' leader, whatever coordinator the group has (as Kafka: a share
session is the leader's own, keyed by group and member; the leader does not ask the
coordinator whether the member is in the group).  One request, in this order:

1. the share session (``SharePartitionManager.session``): epoch 0 opens one (acknowledgements
   with it are INVALID_REQUEST), a later one must carry the session's next epoch
   (INVALID_SHARE_SESSION_EPOCH / SHARE_SESSION_NOT_FOUND), -1 is the member's last request:
   its acknowledgements are applied, nothing is fetched and the session closes (what the member
   still holds goes back);
2. the acknowledgements piggybacked per partition (Accept, Release, Reject, Gap; v2 Renew),
   each partition's first error in AcknowledgeErrorCode; they are answered only once written to
   ZooKeeper;
3. ForgottenTopicsData leave the session (the member's records there go back); partitions named
   join it (a later epoch adds to the session, as Kafka's incremental share fetch);
4. acquisition over the session's partitions, from the one after where the last request
   started, at most ``MaxRecords`` records (v2 ``ShareAcquireMode`` 1: exactly; else whole batches
   may complete, Kafka's batch-optimized default) and ``MaxBytes``; with nothing acquired the
   request waits up to ``MaxWaitMs`` for new records or records released.

Per partition: NOT_LEADER_OR_FOLLOWER (with CurrentLeader and NodeEndpoints),
UNKNOWN_TOPIC_ID, TOPIC_AUTHORIZATION_FAILED.  Read on the group and on each topic is needed.
Records come as whole batches from the log; AcquiredRecords says which offsets of them the
member holds (the client skips the others) and each range's delivery count.
"""

from __future__ import annotations

import asyncio
import logging

from spark_coord.broker.handlers.base import Handler
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation, Resource
from spark_coord.wire.registry import ApiKey

log = logging.getLogger(__name__)

#: The most bytes read from one partition's log per acquisition.
READ_BYTES = 1 << 20
#: ShareAcquireMode (v2): 1 is record-limit; 0 (and v1) batch-optimized.
RECORD_LIMIT = 1


def _partition(index: int, code: int = 0, ack_code: int | None = None, records: bytes | None = None,
               acquired=(), leader: int = -1) -> dict:
    return {"partition_index": index, "error_code": int(code), "error_message": None,
            "acknowledge_error_code": int(ack_code or 0), "acknowledge_error_message": None,
            "current_leader": {"leader_id": leader, "leader_epoch": 0 if leader >= 0 else -1},
            "records": records if records else b"",  # empty, never null: librdkafka refuses a null record set
            "acquired_records": [{"first_offset": a.first_offset, "last_offset": a.last_offset,
                                  "delivery_count": a.delivery_count} for a in acquired]}


def error_response(body: dict, code: int, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": int(code), "error_message": message,
            "acquisition_lock_timeout_ms": 0, "responses": [], "node_endpoints": []}


def partition_error(ctx, conn, topic: str | None, index: int, allowed: dict[str, bool]) -> ErrorCode:
    """Why this broker cannot serve the partition to ``conn`` (NONE when it can)."""
    if topic is None:
        return ErrorCode.UNKNOWN_TOPIC_ID
    if topic not in allowed:
        allowed[topic] = ctx.authorized(conn, AclOperation.READ, Resource.topic(topic))
    if not allowed[topic]:
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return ctx.leader_error(topic, index)


def check_group(ctx, conn, body: dict) -> tuple[ErrorCode, str | None]:
    group, member = body.get("group_id"), body.get("member_id")
    if not isinstance(group, str) or not group:
        return ErrorCode.INVALID_REQUEST, "GroupId must be given"
    if not isinstance(member, str) or not member:
        return ErrorCode.INVALID_REQUEST, "MemberId must be given"
    if not ctx.authorized(conn, AclOperation.READ, Resource.group(group)):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    return ErrorCode.NONE, None


async def apply_acks(ctx, conn, group: str, member: str, topics: list[dict], parts: dict, allowed: dict,
                     *, renew: bool) -> list[tuple]:
    """Apply every partition's acknowledgements; record each partition's answer in ``parts``
    (``{(topic id, index): partition dict}``); the (held, version) whose writes must land first."""
    share = ctx.share
    pending = []
    for t in topics:
        tid = t.get("topic_id")
        topic = ctx.view.topic_name(tid) if tid else None
        for p in t.get("partitions") or []:
            index = p.get("partition_index", -1)
            batches = p.get("acknowledgement_batches") or []
            if not batches:
                continue
            code = partition_error(ctx, conn, topic, index, allowed)
            if code:
                parts[(tid, index)] = _partition(index, code, ack_code=code, leader=_leader(ctx, topic, index))
                continue
            try:
                held = await share.partition(group, topic, index)
            except Exception as e:  # noqa: BLE001 -- ZooKeeper unreachable: this partition fails
                log.warning("share partition %s/%s-%d not available: %s", group, topic, index, e)
                parts[(tid, index)] = _partition(index, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                                 ack_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
                continue
            ack, version = share.acknowledge(held, member, batches, renew=renew)
            parts[(tid, index)] = _partition(index, ack_code=ack)
            # the write starts now and overlaps what the request does next (its acquisition)
            pending.append((share.durable_soon(held, version), held.key, (tid, index)))
    return pending


async def await_durable(ctx, pending: list[tuple], parts: dict) -> None:
    """Answer acknowledgements only once they are in ZooKeeper."""
    for fut, key, where in pending:
        code = await ctx.share.settle(fut, key)
        if code and not parts[where]["acknowledge_error_code"]:
            parts[where]["acknowledge_error_code"] = int(code)


def _leader(ctx, topic: str | None, index: int) -> int:
    leader = ctx.view.leader(topic, index) if topic is not None else None
    return leader if leader is not None else -1


def node_endpoints(ctx, conn, parts: dict) -> list[dict]:
    out = []
    for node in sorted({p["current_leader"]["leader_id"] for p in parts.values()
                        if p["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER}):
        b = ctx.view.brokers.get(node)
        ep = b.endpoint_for(conn.auth.listener_name) if b is not None else None
        if ep is not None:
            out.append({"node_id": b.id, "host": ep.host, "port": ep.port, "rack": b.rack})
    return out


def group_by_topic(parts: dict) -> list[dict]:
    topics: dict[bytes, list[dict]] = {}
    for (tid, _), p in sorted(parts.items(), key=lambda kv: (kv[0][0] or b"", kv[0][1])):
        topics.setdefault(tid, []).append(p)
    return [{"topic_id": tid, "partitions": ps} for tid, ps in topics.items()]


async def handle(ctx, conn, header, body: dict) -> dict:
    share = ctx.share
    code, message = check_group(ctx, conn, body)
    if code:
        return error_response(body, code, message)
    group, member = body["group_id"], body["member_id"]
    epoch = body.get("share_session_epoch", 0)
    topics = body.get("topics") or []
    has_acks = any(p.get("acknowledgement_batches") for t in topics for p in t.get("partitions") or [])
    if epoch == 0 and has_acks:
        return error_response(body, ErrorCode.INVALID_REQUEST, "a share session is opened without acknowledgements")
    if epoch < -1:
        return error_response(body, ErrorCode.INVALID_SHARE_SESSION_EPOCH, f"epoch {epoch}")
    if epoch == -1 and body.get("forgotten_topics_data"):
        return error_response(body, ErrorCode.INVALID_REQUEST, "a final share fetch forgets no topics")
    session, code = share.session(group, member, epoch)
    if code:
        return error_response(body, code)
    lock_ms = share.settings(group).lock_duration_ms
    allowed: dict[str, bool] = {}
    parts: dict[tuple, dict] = {}
    pending = await apply_acks(ctx, conn, group, member, topics, parts, allowed, renew=header.api_version >= 2)

    if epoch == -1:
        share.close_session(session)
        await await_durable(ctx, pending, parts)
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "acquisition_lock_timeout_ms": lock_ms, "responses": group_by_topic(parts),
                "node_endpoints": node_endpoints(ctx, conn, parts)}

    # the session's partitions: forgotten ones go (their records go back), named ones join
    gone = []
    for f in body.get("forgotten_topics_data") or []:
        topic = ctx.view.topic_name(f.get("topic_id")) if f.get("topic_id") else None
        for index in f.get("partitions") or []:
            if topic is not None and (topic, index) in session.partitions:
                session.partitions.remove((topic, index))
                gone.append((topic, index))
    if gone:
        share.release_member(group, member, gone)
    for t in topics:
        tid = t.get("topic_id")
        topic = ctx.view.topic_name(tid) if tid else None
        for p in t.get("partitions") or []:
            index = p.get("partition_index", -1)
            if topic is None:
                parts.setdefault((tid, index), _partition(index, ErrorCode.UNKNOWN_TOPIC_ID))
            elif (topic, index) not in session.partitions:
                # checked before it joins: answered with its error once, and kept out of the session
                # (kept in, it would make every later fetch of the session answer at once)
                code = partition_error(ctx, conn, topic, index, allowed)
                if code:
                    parts.setdefault((tid, index), _partition(index, code, leader=_leader(ctx, topic, index)))
                else:
                    session.partitions.append((topic, index))

    max_records = body.get("max_records") or 500
    if max_records <= 0:
        max_records = 500
    max_bytes = body.get("max_bytes") or 0x7FFFFFFF
    if max_bytes <= 0:
        max_bytes = 0x7FFFFFFF
    batch_optimized = not (header.api_version >= 2 and body.get("share_acquire_mode") == RECORD_LIMIT)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(body.get("max_wait_ms", 0), 0) / 1000
    while True:
        acquired_any = await _acquire_round(ctx, conn, session, group, member, parts, allowed, max_records,
                                            max_bytes, batch_optimized)
        remaining = deadline - loop.time()
        errors = any(p["error_code"] for p in parts.values())
        if acquired_any or pending or errors or remaining <= 0 or not session.partitions or conn.closed \
                or share.sessions.get((group, member)) is not session:
            break
        await ctx.appends.wait_any(list(session.partitions), remaining)
    await await_durable(ctx, pending, parts)
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "acquisition_lock_timeout_ms": lock_ms,
            "responses": group_by_topic(parts), "node_endpoints": node_endpoints(ctx, conn, parts)}


async def _acquire_round(ctx, conn, session, group: str, member: str, parts: dict, allowed: dict,
                         max_records: int, max_bytes: int, batch_optimized: bool) -> bool:
    from spark_coord.log import OffsetOutOfRange

    share = ctx.share
    n = len(session.partitions)
    if n == 0:
        return False
    start = session.start % n
    session.start = (start + 1) % n
    records_left, bytes_left = max_records, max_bytes
    any_acquired = False
    for i in range(n):
        if records_left <= 0 or bytes_left <= 0:
            break
        topic, index = session.partitions[(start + i) % n]
        tid = ctx.view.topic_id(topic)
        code = partition_error(ctx, conn, topic, index, allowed)
        if code:
            parts[(tid, index)] = _partition(index, code, leader=_leader(ctx, topic, index))
            continue
        try:
            held = await share.partition(group, topic, index)
        except Exception as e:  # noqa: BLE001
            log.warning("share partition %s/%s-%d not available: %s", group, topic, index, e)
            parts[(tid, index)] = _partition(index, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            continue
        if share.sessions.get((group, member)) is not session:
            break  # the session closed while the partition loaded
        acquired, data = [], None
        offset = held.sp.fetch_offset()
        if offset is not None:
            plog = ctx.logs.get_or_create(topic, index)
            try:
                region = plog.read(offset, min(READ_BYTES, bytes_left))
            except OffsetOutOfRange:
                share._follow_log_start(held)
                region = None
            if region is not None:
                acquired, data = share.acquire(held, member, region, max_records=records_left,
                                               batch_optimized=batch_optimized)
        if acquired:
            any_acquired = True
            records_left -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
            bytes_left -= data.length
            entry = parts.get((tid, index))
            if entry is None:
                entry = parts[(tid, index)] = _partition(index)
            entry["records"] = data
            entry["acquired_records"] = [{"first_offset": a.first_offset, "last_offset": a.last_offset,
                                          "delivery_count": a.delivery_count} for a in acquired]
    return any_acquired


HANDLER = Handler(ApiKey.SHARE_FETCH, "ShareFetch", handle, error_response)
