"""Share groups' offsets at the coordinator (KIP-932): DescribeShareGroupOffsets,
AlterShareGroupOffsets, DeleteShareGroupOffsets and the share-group part of DeleteGroups.

Where a share group stands on a partition is its share-partition start offset (SPSO), kept
by the partition's leader in ``/share-groups/<group>/<topic>/<partition>`` (``share.store``;
DESIGN.md "Share groups (KIP-932)").  The coordinator reads those znodes to describe a group
(``GroupStore.read_share_states``); for a group with no member it overwrites them with a fresh
state -- the new start offset, nothing in flight -- or deletes them, fenced by its election
(``write_share_states``, ``delete_share_states``), and the leaders, told by a notification
(``share.changes``), drop what they hold of the group and read the znode again at next use.

Lag (DescribeShareGroupOffsets v1, KIP-1226, computed as Kafka 4.2 does): the records from the
start offset up to the log end the group is not done with, that is log end - start offset -
the offsets of the in-flight window already acknowledged or archived.  -1 when the partition
has no state or its log end cannot be read.

The answers are Kafka's (``GroupCoordinatorService``, ``GroupMetadataManager``):

* Describe: per partition the start offset and leader epoch -1 (the state carries no epoch);
  -1 for a partition without state, and for a topic the cluster does not have (topic id zero,
  no error: absence of data, as OffsetFetch).  Topics null: every partition the group has state
  for, of topics that exist (a topic deleted and created again starts afresh: the old state,
  written with the old topic id, is not shown).  No group-level error for an unknown group.
* Alter: the group must have no member (NON_EMPTY_GROUP), and not be a consumer group
  (GROUP_ID_NOT_FOUND); a group id nobody uses yet gets the state (its consumers start there).
  Per partition UNKNOWN_TOPIC_OR_PARTITION for a topic or partition the cluster does not have;
  INVALID_REQUEST for a negative offset.
* Delete: the group must be a share group (held here, or with state in ZooKeeper: membership
  is not kept across coordinators) without members; per topic UNKNOWN_TOPIC_OR_PARTITION for a
  topic the cluster does not have, else its state is deleted (NONE also when it had none).

A write the election fenced answers NOT_COORDINATOR (the client looks the coordinator up
again); ZooKeeper unreachable, COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable

from spark_coord.coordinator.storage.store import Fenced, StoreError
from spark_coord.errors import ErrorCode
from spark_coord.share.partition import RecordState, SharePartition
from spark_coord.share.store import decode, encode
from spark_coord.zk import paths

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.coordinator.core.interface import GroupCoordinator

__all__ = ["ShareState", "parse_state", "fresh_state", "describe_offsets", "alter_offsets", "delete_offsets",
           "delete_share_group", "NO_OFFSET", "ZERO_UUID"]

TopicPartition = tuple[str, int]
#: ``log_ends(partitions) -> {partition: log end}``: what the coordinator's process can learn (``FrontDoor.log_ends``).
LogEnds = Callable[[list[TopicPartition]], Awaitable[dict[TopicPartition, int]]]
#: ``topic_code(topic) -> NONE | TOPIC_AUTHORIZATION_FAILED`` for the request's principal.
TopicCode = Callable[[str], int]

#: Start offset, leader epoch and lag of a partition with no state.
NO_OFFSET = -1
ZERO_UUID = bytes(16)
_DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(frozen=True)
class ShareState:
    """What a share-partition znode says, as far as the coordinator needs it."""

    start: int
    #: ``(first, last)`` ranges at or after ``start`` the group is done with (acknowledged, archived).
    done: tuple[tuple[int, int], ...] = ()
    topic_id: bytes | None = None

    def done_below(self, end: int) -> int:
        """How many offsets in ``[start, end)`` are done."""
        return sum(min(last, end - 1) - first + 1 for first, last in self.done if first < end)

    def lag(self, log_end: int) -> int:
        """Records in ``[start, log_end)`` not yet acknowledged or archived."""
        return max(0, log_end - self.start - self.done_below(log_end))


def parse_state(data: bytes) -> ShareState:
    """A share-partition znode's content (``SharePartition.snapshot`` and the topic id); ValueError
    naming what is wrong."""
    snap, topic_id = decode(data)
    start = snap.get("start")
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ValueError(f"start must be an integer >= 0, not {start!r}")
    ranges = snap.get("ranges")
    if not isinstance(ranges, list):
        raise ValueError("ranges must be a list")
    done = []
    for item in ranges:
        if not (isinstance(item, list) and len(item) == 4 and all(isinstance(v, int) for v in item)):
            raise ValueError(f"a range is not [first, last, state, deliveries]: {item!r}")
        first, last, state, _ = item
        if state in _DONE and last >= max(first, start):
            done.append((max(first, start), last))
    return ShareState(start, tuple(done), topic_id)


def fresh_state(start_offset: int, topic_id: bytes | None) -> bytes:
    """What AlterShareGroupOffsets writes: the start offset, nothing in flight (the leaders'
    snapshot format, so they restore it as they restore their own)."""
    return encode(SharePartition(start_offset).snapshot(), topic_id)


async def _states(c: "GroupCoordinator", group_id: str) -> dict[TopicPartition, ShareState]:
    """The group's readable share-partition states of topics as they are now (StoreError)."""
    out = {}
    for tp, data in (await c.store.read_share_states(group_id)).items():
        try:
            state = parse_state(data)
        except ValueError as e:
            log.warning("share group %s: state of %s-%d unreadable (%s); left out", group_id, tp[0], tp[1], e)
            continue
        tid = c.topic_ids.get(tp[0])
        if state.topic_id is not None and tid is not None and state.topic_id != tid:
            continue  # written for an older topic of that name: the leader starts that one afresh
        out[tp] = state
    return out


def _allowed(_: str) -> int:
    return ErrorCode.NONE


def _exists(c: "GroupCoordinator", topic: Any) -> bool:
    """Whether the cluster has ``topic`` (a cluster whose brokers name no topic ids still has topics)."""
    return isinstance(topic, str) and (topic in c.topics or topic in c.topic_ids)


def _bad_group(group_id: Any) -> str | None:
    """Why ``group_id`` cannot be a group (INVALID_GROUP_ID), None when it can."""
    try:
        paths.validate_group(group_id)
    except (ValueError, TypeError) as e:
        return str(e) or "invalid group id"
    return None


# ---------------------------------------------------------------- DescribeShareGroupOffsets

def describe_error(group_id: Any, code: int, message: str | None = None) -> dict:
    return {"group_id": group_id if isinstance(group_id, str) else "", "topics": [], "error_code": int(code),
            "error_message": message}


async def describe_offsets(c: "GroupCoordinator", group_id: str, topics: list[dict] | None, log_ends: LogEnds | None,
                           topic_code: TopicCode = _allowed) -> dict:
    """One group of a DescribeShareGroupOffsets answer (``topics``: the request's, None for all)."""
    if (bad := _bad_group(group_id)) is not None:
        return describe_error(group_id, ErrorCode.INVALID_GROUP_ID, bad)
    try:
        states = await _states(c, group_id)
    except StoreError as e:
        log.warning("DescribeShareGroupOffsets %s: %s", group_id, e)
        return describe_error(group_id, ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e))
    if topics is None:
        wanted = [(t, sorted(p for tt, p in states if tt == t)) for t in sorted({t for t, _ in states})
                  if _exists(c, t) and not topic_code(t)]
    else:
        wanted = [(t.get("topic_name"), list(t.get("partitions") or [])) for t in topics]
    ends: dict[TopicPartition, int] = {}
    asked = [(t, p) for t, ps in wanted for p in ps if (t, p) in states]
    if asked and log_ends is not None:
        try:
            ends = await log_ends(asked)
        except Exception as e:  # noqa: BLE001 -- lag is left unknown, the offsets are still answered
            log.warning("DescribeShareGroupOffsets %s: log end offsets not read (%s)", group_id, e)
    out = []
    for name, partitions in wanted:
        refused = topic_code(name) if isinstance(name, str) else ErrorCode.NONE
        tid = c.topic_ids.get(name) if isinstance(name, str) else None
        known = _exists(c, name)
        rows = []
        for p in partitions:
            state = states.get((name, p)) if known and not refused else None
            end = ends.get((name, p))
            rows.append({"partition_index": p, "start_offset": state.start if state else NO_OFFSET,
                         "leader_epoch": NO_OFFSET,
                         "lag": state.lag(end) if state is not None and end is not None else NO_OFFSET,
                         "error_code": int(refused), "error_message": None})
        out.append({"topic_name": name, "topic_id": tid or ZERO_UUID, "partitions": rows})
    return {"group_id": group_id, "topics": out, "error_code": 0, "error_message": None}


# ---------------------------------------------------------------- AlterShareGroupOffsets

def alter_error(body: dict, code: int, message: str | None = None) -> dict:
    """The whole answer carrying ``code`` at the top and on every partition (Kafka's ``getErrorResponse``)."""
    return {"throttle_time_ms": 0, "error_code": int(code), "error_message": message, "responses": [
        {"topic_name": t.get("topic_name"), "topic_id": ZERO_UUID, "partitions": [
            {"partition_index": p.get("partition_index"), "error_code": int(code), "error_message": message}
            for p in t.get("partitions") or []]} for t in body.get("topics") or []]}


def _membership_error(c: "GroupCoordinator", group_id: str) -> tuple[int, str] | None:
    if c.group_type(group_id) == "consumer":
        return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group."
    group = c.share_groups.get(group_id)
    if group is not None and group.members:
        return ErrorCode.NON_EMPTY_GROUP, (f"The group has active members ({len(group.members)}); its offsets can "
                                           f"be changed only while it is empty.")
    return None


def _write_failed(what: str, group_id: str, e: Exception) -> tuple[int, str]:
    if isinstance(e, Fenced):
        return ErrorCode.NOT_COORDINATOR, "this coordinator no longer holds the group's shard"
    log.warning("%s %s: %s", what, group_id, e)
    return ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)


async def alter_offsets(c: "GroupCoordinator", body: dict, topic_code: TopicCode = _allowed) -> dict:
    """The AlterShareGroupOffsets answer for ``body`` (the group already routed here and authorized)."""
    group_id = body.get("group_id") or ""
    if (bad := _bad_group(group_id)) is not None:
        return alter_error(body, ErrorCode.INVALID_GROUP_ID, bad)
    refused = _membership_error(c, group_id)
    if refused is not None:
        return alter_error(body, *refused)
    responses, writes, written = [], {}, []
    for topic in body.get("topics") or []:
        name = topic.get("topic_name")
        denied = topic_code(name)
        tid = c.topic_ids.get(name)
        count = c.topics.get(name, 0) if isinstance(name, str) else 0
        rows = []
        for p in topic.get("partitions") or []:
            index, offset = p.get("partition_index"), p.get("start_offset")
            code, message = ErrorCode.NONE, None
            if denied:
                code = denied
            elif not isinstance(index, int) or not 0 <= index < count:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
            elif not isinstance(offset, int) or offset < 0:
                code, message = ErrorCode.INVALID_REQUEST, f"start offset {offset!r}: must be >= 0"
            else:
                writes[(name, index)] = fresh_state(offset, tid)
            row = {"partition_index": index, "error_code": int(code), "error_message": message}
            if code == ErrorCode.NONE:
                written.append(row)
            rows.append(row)
        responses.append({"topic_name": name, "topic_id": tid or ZERO_UUID, "partitions": rows})
    answer = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": responses}
    if writes:
        try:
            await c.store.write_share_states(group_id, writes)
        except (Fenced, StoreError) as e:
            code, message = _write_failed("AlterShareGroupOffsets", group_id, e)
            for row in written:
                row.update(error_code=int(code), error_message=message)
            answer.update(error_code=int(code), error_message=message)
            return answer
        log.info("share group %s: start offsets set: %s", group_id,
                 ", ".join(f"{t}-{p}" for t, p in sorted(writes)))
    return answer


# ---------------------------------------------------------------- DeleteShareGroupOffsets

def delete_error(code: int, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": int(code), "error_message": message, "responses": []}


async def _is_share_group(c: "GroupCoordinator", group_id: str) -> bool:
    kind = c.group_type(group_id)
    if kind is not None:
        return kind == "share"
    return await c.store.has_share_state(group_id)


async def delete_offsets(c: "GroupCoordinator", body: dict, topic_code: TopicCode = _allowed) -> dict:
    """The DeleteShareGroupOffsets answer for ``body`` (the group already routed here and authorized
    for Delete; ``topic_code`` checks Read on each topic)."""
    group_id = body.get("group_id") or ""
    if (bad := _bad_group(group_id)) is not None:
        return delete_error(ErrorCode.INVALID_GROUP_ID, bad)
    try:
        if not await _is_share_group(c, group_id):
            return delete_error(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
    except StoreError as e:
        return delete_error(*_write_failed("DeleteShareGroupOffsets", group_id, e))
    refused = _membership_error(c, group_id)
    if refused is not None:
        return delete_error(*refused)
    responses, names = [], []
    for topic in body.get("topics") or []:
        name = topic.get("topic_name")
        tid = c.topic_ids.get(name)
        code, message = topic_code(name), None
        if not code and not _exists(c, name):
            code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
        if not code:
            names.append(name)
        responses.append({"topic_name": name, "topic_id": tid or ZERO_UUID, "error_code": int(code),
                          "error_message": message})
    if names:
        try:
            await c.store.delete_share_states(group_id, sorted(set(names)))
        except (Fenced, StoreError) as e:
            return delete_error(*_write_failed("DeleteShareGroupOffsets", group_id, e))
        log.info("share group %s: state of %s deleted", group_id, ", ".join(sorted(set(names))))
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": responses}


# ---------------------------------------------------------------- DeleteGroups

async def delete_share_group(c: "GroupCoordinator", group_id: str) -> ErrorCode | None:
    """DeleteGroups of a share group: NON_EMPTY_GROUP while it has members, else its state in
    ZooKeeper (every share partition) goes, then the group; None when ``group_id`` is not a share
    group here (neither held nor with state: DeleteGroups goes on to the other group types)."""
    if _bad_group(group_id) is not None:
        return None
    group = c.share_groups.get(group_id)
    if group is None:
        if c.group_type(group_id) is not None:
            return None
        try:
            if not await c.store.has_share_state(group_id):
                return None
        except StoreError as e:
            return _write_failed("DeleteGroups", group_id, e)[0]
    elif group.members:
        return ErrorCode.NON_EMPTY_GROUP
    try:
        await c.store.delete_share_states(group_id)
    except (Fenced, StoreError) as e:
        return _write_failed("DeleteGroups", group_id, e)[0]
    if group is not None and c.share_groups.get(group_id) is group and not group.members:
        del c.share_groups[group_id]
    log.info("share group %s deleted (with its share-partition state)", group_id)
    return ErrorCode.NONE


def topics_of(body: dict) -> Iterable[str]:
    return [t.get("topic_name") for t in body.get("topics") or [] if isinstance(t.get("topic_name"), str)]


def read_states_blocking(zk: Any, group_id: str) -> dict[TopicPartition, ShareState]:
    """The group's readable share-partition states, read with kazoo's blocking calls (the metrics
    sampler's thread, never the event loop); unreadable ones are left out.  Topic ids are not
    checked here (no topic view): a state written for an older topic of the name is shown until
    its leader writes the new one."""
    from kazoo.exceptions import NoNodeError

    root = paths.share_group(group_id)
    out: dict[TopicPartition, ShareState] = {}
    try:
        topics = zk.get_children(root)
    except NoNodeError:
        return out
    for t in topics:
        try:
            tpath = paths.share_topic(group_id, t)
            children = zk.get_children(tpath)
        except (ValueError, NoNodeError):
            continue
        for child in children:
            if not child.isdigit():
                continue
            try:
                data, _ = zk.get(f"{tpath}/{child}")
                out[(t, int(child))] = parse_state(data)
            except (NoNodeError, ValueError):
                continue
    return out
