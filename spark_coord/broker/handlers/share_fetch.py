"""ShareFetch (key 78, v1-2): records of a share group, acquired one by one (KIP-932).

Served by the partitions' leader, whatever coordinator the group has (as Kafka: a share
session is the leader's own, keyed by group and member; the leader does not ask the
coordinator whether the member is in the group).  One request, in this order:

1. a v2 renewal (IsRenewAck) must set MaxBytes, MinBytes, MaxRecords and MaxWaitMs to 0, else the
   request is INVALID_REQUEST (as Kafka; BatchSize is not checked);
2. the share session (``SharePartitionManager.session``): epoch 0 opens one (acknowledgements
   with it are INVALID_REQUEST), a later one must carry the session's next epoch
   (INVALID_SHARE_SESSION_EPOCH / SHARE_SESSION_NOT_FOUND), -1 is the member's last request:
   its acknowledgements are applied, nothing is fetched and the session closes (what the member
   still holds goes back);
3. the acknowledgements piggybacked per partition (Accept, Release, Reject, Gap; Renew only in a
   v2 request with IsRenewAck), each partition's first error in AcknowledgeErrorCode; a partition
   whose batches break Kafka's rules gets INVALID_REQUEST and none of them applies; they are
   answered only once written to ZooKeeper;
4. ForgottenTopicsData leave the session (the member's records there go back); partitions named
   join it (a later epoch adds to the session, as Kafka's incremental share fetch);
5. a renewal ends here: it acquires nothing.  Else acquisition over the session's partitions,
   from the one after where the last round started, at most ``MaxRecords`` records (none for 0;
   v2 ``ShareAcquireMode`` 1: exactly; else whole batches may complete, Kafka's batch-optimized
   default, each AcquiredRecords range cut at the first batch boundary ``BatchSize`` records or
   more into it) and ``MaxBytes``.  It waits, up to ``MaxWaitMs``, until the log holds
   ``MinBytes`` (at most ``MaxBytes``) from where the session's partitions acquire next, as Kafka's
   ``DelayedShareFetch``; with a MinBytes of 1 (what clients send), until something is acquired.
   When the wait runs out, what can be acquired then is.  A request carrying acknowledgements,
   or meeting a partition error, is answered at once with what can be acquired then.

Per partition: NOT_LEADER_OR_FOLLOWER (with CurrentLeader and NodeEndpoints),
UNKNOWN_TOPIC_ID, TOPIC_AUTHORIZATION_FAILED.  Read on the group and on each topic is needed.
Records come as whole batches from the log; AcquiredRecords says which offsets of them the
member holds (the client skips the others) and each range's delivery count.  The group's
``share.isolation.level`` is read at each fetch: read_committed acquires below the last stable
offset only and archives the records of aborted transactions instead of handing them out;
transaction markers are never acquired in either level (``SharePartitionManager.acquire``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from spark_coord.broker.handlers.base import Handler
from spark_coord.broker.handlers.share_common import (
    apply_acknowledgements,
    await_acknowledgements,
    check_group,
    error_response,
    failed,
    partition_error,
    response,
    result,
    unavailable,
)
from spark_coord.errors import ErrorCode
from spark_coord.wire.registry import ApiKey

log = logging.getLogger(__name__)

#: ShareAcquireMode (v2): 1 is record-limit; 0 (and v1) batch-optimized.
RECORD_LIMIT = 1
#: The fields a renewal (IsRenewAck) must set to 0, as Kafka checks and names them.
RENEWAL_ZEROS = (("max_bytes", "maxBytes"), ("min_bytes", "minBytes"), ("max_records", "maxRecords"),
                 ("max_wait_ms", "maxWaitMs"))


@dataclass(frozen=True)
class _Ask:
    """What the request asks of the acquisition."""

    max_records: int
    max_bytes: int
    #: The bytes the log must hold before the fetch is answered (MinBytes, at most MaxBytes).
    min_bytes: int
    batch_optimized: bool
    batch_size: int

    @classmethod
    def of(cls, version: int, body: dict) -> _Ask:
        max_bytes = body.get("max_bytes") or 0x7FFFFFFF
        if max_bytes <= 0:
            max_bytes = 0x7FFFFFFF
        return cls(max_records=max(body.get("max_records", 0), 0), max_bytes=max_bytes,
                   min_bytes=min(max(body.get("min_bytes", 0), 0), max_bytes),
                   batch_optimized=not (version >= 2 and body.get("share_acquire_mode") == RECORD_LIMIT),
                   batch_size=body.get("batch_size", 0))


def _renewal_refused(body: dict) -> str | None:
    """Why a renewal asks for more than it may (Kafka's message), None when it asks for nothing."""
    wrong = [f"{name} must be set to 0, " for field, name in RENEWAL_ZEROS if body.get(field, 0) != 0]
    return "".join(wrong) + "if isRenewAck is true." if wrong else None


async def handle(ctx, conn, header, body: dict) -> dict:
    share = ctx.share
    code, message = check_group(ctx, conn, body)
    if code:
        return error_response(body, code, message)
    renewal = header.api_version >= 2 and bool(body.get("is_renew_ack"))
    if renewal:
        message = _renewal_refused(body)
        if message:
            return error_response(body, ErrorCode.INVALID_REQUEST, message)
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
    allowed: dict[str, bool] = {}
    parts: dict[tuple, dict] = {}
    pending = await apply_acknowledgements(ctx, conn, group, member, topics, parts, allowed, renew=renewal)
    if epoch == -1:
        share.close_session(session)
    else:
        _update_session(ctx, conn, session, body, topics, parts, allowed)
        if not renewal:
            await _fetch(ctx, conn, session, parts, allowed, _Ask.of(header.api_version, body),
                         body.get("max_wait_ms", 0), answer_now=bool(pending))
    await await_acknowledgements(pending, parts)
    return response(ctx, conn, parts, share.settings(group).lock_duration_ms)


def _update_session(ctx, conn, session, body: dict, topics: list[dict], parts: dict, allowed: dict) -> None:
    """Forgotten partitions leave the session (their records go back); named ones join it, each
    checked first: one failing is answered with its error once and kept out of the session (kept in,
    it would make every later fetch of the session answer at once)."""
    forgotten = []
    for f in body.get("forgotten_topics_data") or []:
        topic = ctx.view.topic_name(f.get("topic_id")) if f.get("topic_id") else None
        if topic is not None:
            forgotten.extend((topic, index) for index in f.get("partitions") or [])
    ctx.share.forget(session, forgotten)
    for t in topics:
        tid = t.get("topic_id")
        topic = ctx.view.topic_name(tid) if tid else None
        for p in t.get("partitions") or []:
            index = p.get("partition_index", -1)
            if topic is not None and (topic, index) in session:
                continue
            code = partition_error(ctx, conn, topic, index, allowed)
            if code:
                parts.setdefault((tid, index), failed(ctx, topic, index, code))
            else:
                session.add(topic, index)


async def _fetch(ctx, conn, session, parts: dict, allowed: dict, ask: _Ask, max_wait_ms: int, *,
                 answer_now: bool) -> None:
    """Acquire for the session's member into ``parts``, waiting as ``ask`` says (module docstring, 5)."""
    share = ctx.share
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(max_wait_ms, 0) / 1000
    while True:
        served = await _servable(ctx, conn, session, parts, allowed)
        if served is None:
            return  # the session closed while a partition loaded
        remaining = deadline - loop.time()
        errors = any(p["error_code"] for p in parts.values())
        now = answer_now or errors or remaining <= 0 or not served or conn.closed
        if ask.max_records > 0 and ask.min_bytes == 1 and not now:
            if _acquire(ctx, session, served, parts, ask):
                return  # acquiring is what reading MinBytes' one byte would find
        elif now or _ready(share, served, ask.min_bytes):
            _acquire(ctx, session, served, parts, ask)
            return
        await ctx.appends.wait_any([tp for tp, _, _ in served], remaining)


async def _servable(ctx, conn, session, parts: dict, allowed: dict) -> list[tuple] | None:
    """The session's partitions this broker serves now, each ``((topic, index), topic id, share
    partition)`` in the session's order; the others' errors go to ``parts``.  None when the
    session closed meanwhile."""
    share = ctx.share
    group = session.group
    out = []
    for topic, index in list(session.partitions):
        tid = ctx.view.topic_id(topic)
        code = partition_error(ctx, conn, topic, index, allowed)
        if code:
            parts[(tid, index)] = failed(ctx, topic, index, code)
            continue
        try:
            held = await share.partition(group, topic, index)
        except Exception as e:  # noqa: BLE001 -- ZooKeeper unreachable, or another leader took it over
            parts[(tid, index)] = result(index, unavailable(group, topic, index, e))
            continue
        if not share.is_open(session):
            return None
        out.append(((topic, index), tid, held))
    return out


def _ready(share, served: list[tuple], min_bytes: int) -> bool:
    """The log holds ``min_bytes`` from where ``served`` acquire next (any that can acquire, for 0)."""
    found, acquirable = 0, False
    for _, _, held in served:
        n = share.readable_bytes(held, min_bytes - found)
        if n is not None:
            acquirable = True
            found += n
            if found >= min_bytes:
                break
    return acquirable and found >= min_bytes


def _acquire(ctx, session, served: list[tuple], parts: dict, ask: _Ask) -> bool:
    """One acquisition round over ``served``, from the partition after where the last round
    started; the records and ranges acquired go to ``parts``.  Whether any were."""
    share = ctx.share
    held_of = {tp: (tid, held) for tp, tid, held in served}
    records_left, bytes_left = ask.max_records, ask.max_bytes
    any_acquired = False
    for tp in session.in_turn():
        if records_left <= 0 or bytes_left <= 0:
            break
        if tp not in held_of:
            continue
        tid, held = held_of[tp]
        acquired, data = share.acquire(held, session.member_id, max_records=records_left, max_bytes=bytes_left,
                                       batch_optimized=ask.batch_optimized, batch_size=ask.batch_size)
        if not acquired:
            continue
        any_acquired = True
        records_left -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
        bytes_left -= data.length
        entry = parts.setdefault((tid, tp[1]), result(tp[1]))
        entry["records"] = data
        entry["acquired_records"] = [{"first_offset": a.first_offset, "last_offset": a.last_offset,
                                      "delivery_count": a.delivery_count} for a in acquired]
    return any_acquired


HANDLER = Handler(ApiKey.SHARE_FETCH, "ShareFetch", handle, error_response)
