"""What ShareFetch and ShareAcknowledge share (KIP-932): the group check, a partition's checks,
the acknowledgements applied and awaited, and the parts of the answer both have.

A request's partitions are gathered as ShareFetch's PartitionData (``result``), keyed by
``(topic id, partition index)``; ShareFetch answers them as they are, ShareAcknowledge with one
error each (``acknowledge_partitions``).
"""

from __future__ import annotations

import asyncio
import logging

from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation, Resource

log = logging.getLogger(__name__)


def result(index: int, code: int = 0, ack_code: int = 0, leader: int = -1) -> dict:
    """A partition's ShareFetch PartitionData with no records (yet)."""
    return {"partition_index": index, "error_code": int(code), "error_message": None,
            "acknowledge_error_code": int(ack_code), "acknowledge_error_message": None,
            "current_leader": {"leader_id": leader, "leader_epoch": 0 if leader >= 0 else -1},
            "records": b"",  # empty, never null: librdkafka and Kafka's Java client refuse a null record set
            "acquired_records": []}


def error_response(body: dict, code: int, message: str | None = None) -> dict:
    """A whole request refused (both APIs' answers have these fields)."""
    return {"throttle_time_ms": 0, "error_code": int(code), "error_message": message,
            "acquisition_lock_timeout_ms": 0, "responses": [], "node_endpoints": []}


def check_group(ctx, conn, body: dict) -> tuple[ErrorCode, str | None]:
    """The group and member of a request: named, and Read on the group allowed."""
    group, member = body.get("group_id"), body.get("member_id")
    if not isinstance(group, str) or not group:
        return ErrorCode.INVALID_REQUEST, "GroupId must be given"
    if not isinstance(member, str) or not member:
        return ErrorCode.INVALID_REQUEST, "MemberId must be given"
    if not ctx.authorized(conn, AclOperation.READ, Resource.group(group)):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    return ErrorCode.NONE, None


def partition_error(ctx, conn, topic: str | None, index: int, allowed: dict[str, bool]) -> ErrorCode:
    """Why this broker cannot serve the partition to ``conn`` (NONE when it can); ``allowed``
    remembers each topic's Read check for the request."""
    if topic is None:
        return ErrorCode.UNKNOWN_TOPIC_ID
    if topic not in allowed:
        allowed[topic] = ctx.authorized(conn, AclOperation.READ, Resource.topic(topic))
    if not allowed[topic]:
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return ctx.leader_error(topic, index)


def failed(ctx, topic: str | None, index: int, code: ErrorCode, *, acknowledging: bool = False) -> dict:
    """The result of a partition that failed ``partition_error``, naming its leader."""
    leader = ctx.view.leader(topic, index) if topic is not None else None
    return result(index, code, ack_code=code if acknowledging else 0, leader=-1 if leader is None else leader)


async def apply_acknowledgements(ctx, conn, group: str, member: str, topics: list[dict], parts: dict,
                                 allowed: dict, *, renew: bool) -> list[tuple]:
    """Apply every partition's AcknowledgementBatches (``renew``: Renew allowed, a v2 request with
    IsRenewAck) and record each partition's result in ``parts``; the ``(future, where)`` to await
    before answering (``await_acknowledgements``).  Their write is the group commit at the end of this
    turn of the event loop (``SharePartitionManager.durable_soon``): with some to wait for, this
    coroutine yields once before it returns, so that write is on its way before the caller's own work
    (a ShareFetch's acquisition) and overlaps it."""
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
                parts[(tid, index)] = failed(ctx, topic, index, code, acknowledging=True)
                continue
            try:
                held = await share.partition(group, topic, index)
            except Exception as e:  # noqa: BLE001 -- ZooKeeper unreachable, or another leader took it over
                code = unavailable(group, topic, index, e)
                parts[(tid, index)] = result(index, code, ack_code=code)
                continue
            ack, written = share.acknowledge(held, member, batches, renew=renew)
            parts[(tid, index)] = result(index, ack_code=ack)
            pending.append((written, (tid, index)))
    if pending:
        await asyncio.sleep(0)
    return pending


def unavailable(group: str, topic: str, index: int, e: Exception) -> ErrorCode:
    """The error for a share partition that could not be had (``SharePartitionManager.partition``
    raised ``e``): NOT_LEADER_OR_FOLLOWER once another leader took it over, GROUP_ID_NOT_FOUND when
    it has no state and its group none either (deleted, or nobody joined it: ``ShareGroupUnknown``),
    else COORDINATOR_NOT_AVAILABLE (its state could not be read or written in ZooKeeper)."""
    log.warning("share partition %s/%s-%d not available: %s", group, topic, index, e)
    return ErrorCode(getattr(e, "error_code", ErrorCode.COORDINATOR_NOT_AVAILABLE))


async def await_acknowledgements(pending: list[tuple], parts: dict) -> None:
    """Answer acknowledgements only once they are in ZooKeeper: a write that failed is the
    partition's acknowledgement error, unless it has one already."""
    for written, where in pending:
        code = await written
        if code and not parts[where]["acknowledge_error_code"]:
            parts[where]["acknowledge_error_code"] = int(code)


def by_topic(parts: dict) -> list[dict]:
    """``parts`` as the answer's topics, in topic id and partition order."""
    topics: dict[bytes, list[dict]] = {}
    for (tid, _), p in sorted(parts.items(), key=lambda kv: (kv[0][0] or b"", kv[0][1])):
        topics.setdefault(tid, []).append(p)
    return [{"topic_id": tid, "partitions": ps} for tid, ps in topics.items()]


def node_endpoints(ctx, conn, parts: dict) -> list[dict]:
    """KIP-951: the endpoints, on the client's listener, of the leaders named by NOT_LEADER_OR_FOLLOWER."""
    out = []
    for node in sorted({p["current_leader"]["leader_id"] for p in parts.values()
                        if p["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER}):
        b = ctx.view.brokers.get(node)
        ep = b.endpoint_for(conn.auth.listener_name) if b is not None else None
        if ep is not None:
            out.append({"node_id": b.id, "host": ep.host, "port": ep.port, "rack": b.rack})
    return out


def response(ctx, conn, parts: dict, lock_ms: int) -> dict:
    """The answer to a request served (``parts`` as ShareFetch's PartitionData)."""
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "acquisition_lock_timeout_ms": lock_ms,
            "responses": by_topic(parts), "node_endpoints": node_endpoints(ctx, conn, parts)}


def acknowledge_partitions(answer: dict) -> dict:
    """``answer`` (``response``) as ShareAcknowledge's: each partition's one error is its
    acknowledgement's, else its own."""
    for t in answer["responses"]:
        t["partitions"] = [{"partition_index": p["partition_index"],
                            "error_code": p["acknowledge_error_code"] or p["error_code"], "error_message": None,
                            "current_leader": p["current_leader"]} for p in t["partitions"]]
    return answer
