"""Share groups (KIP-932, "Queues for Kafka") as a door into the coordinator
(DESIGN.md "Share groups (KIP-932)").

A share consumer (confluent-kafka's ``ShareConsumer``, Kafka's ``KafkaShareConsumer``) sends
ShareGroupHeartbeat to its group's coordinator: it joins with epoch 0 and its subscription,
heartbeats every ``share.heartbeat.interval.ms`` with the epoch it was given, and leaves with
epoch -1.  The coordinator answers each heartbeat with the member's epoch and, when it changed,
its assignment.  Unlike every other door, a partition may be assigned to *several* members at
once: the records themselves are handed out by the partition's leader, one at a time under an
acquisition lock (``spark_coord.share``), so there is no owner to stop before a partition moves
and no StopFetcher/StartFetcher round.  A new assignment takes effect with the heartbeat answer
that carries it.

Assignment (Kafka's SimpleAssignor behaviour), per subscribed topic, over the members
subscribed to it in member-id order: with no more members than partitions, partition ``p``
goes to member ``p mod M`` (each partition has exactly one member, shares differ by at most
one); with more members than partitions, member ``i`` gets partition ``i mod P`` (every member
gets a partition, every partition has at least one member, the members per partition differ by
at most one).  The group epoch goes up whenever the assignment changes; a member's epoch is the
group epoch of the assignment it was last told (it moves only with an answer that tells it, so a
member that heard of none of several quick changes is not fenced).  A heartbeat with the member's
epoch or the one before is accepted (the answer that carried the new one may have been lost); any other is
FENCED_MEMBER_EPOCH, an unknown member UNKNOWN_MEMBER_ID: the client joins again with epoch 0.

Liveness: a member silent for its session timeout (``share.session.timeout.ms`` of the group,
else ``group.share.session.timeout.ms``) is removed and the others' assignments recomputed.
The records it held at the leaders go back when their locks run out (or at once, when its
share session closes or its connection drops).

A group id is of one type at a time: a ShareGroupHeartbeat for a consumer group (classic or
KIP-848) held here gets GROUP_ID_NOT_FOUND ("... is not a share group"), and the other doors
refuse a share group's id the same way (``Coordinator.group_type``).  Membership is saved, fenced,
in ``/share-groups/<group>`` (the group epoch, each member's subscription and epoch) whenever it
changes; a coordinator elected for the shard (failover, handover) takes the members back: a
restored member's next heartbeat, in any epoch it can have had, is accepted and answered with the
group's new assignment, and a member that does not come back within its session timeout is
removed.  What each member had acquired stays at the leaders, untouched either way.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from spark_coord.errors import ErrorCode
from spark_coord.zk import paths

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.coordinator.core.clock import TimerHandle
    from spark_coord.coordinator.core.interface import GroupCoordinator

__all__ = ["ShareGroups", "ShareGroup", "ShareMember", "simple_assignment", "JOIN", "LEAVE"]

log = logging.getLogger(__name__)

#: Epochs a heartbeat carries besides the member's own.
JOIN, LEAVE = 0, -1

#: ``(session timeout ms, heartbeat interval ms)`` a group uses, from its group configs.
GroupTimeouts = Callable[[str], "tuple[int, int] | None"]


def simple_assignment(members: Mapping[str, Iterable[str]],
                      topics: Mapping[str, int]) -> dict[str, dict[str, list[int]]]:
    """``{member: {topic: [partitions]}}``: every partition of a subscribed topic goes to at least
    one member subscribed to it, every such member gets at least one partition when it can, balanced
    (see the module docstring)."""
    out: dict[str, dict[str, list[int]]] = {m: {} for m in members}
    subscribers: dict[str, list[str]] = {}
    for m, subs in sorted(members.items()):
        for t in subs:
            if topics.get(t, 0) > 0:
                subscribers.setdefault(t, []).append(m)
    for t, ms in sorted(subscribers.items()):
        n = topics[t]
        if len(ms) <= n:
            for p in range(n):
                out[ms[p % len(ms)]].setdefault(t, []).append(p)
        else:
            for i, m in enumerate(ms):
                out[m].setdefault(t, []).append(i % n)
    return out


@dataclass
class ShareMember:
    """One member of a share group."""

    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed: list[str]
    #: The epoch it was last told, and the one before (a heartbeat may carry either: the answer
    #: that told it the newer may have been lost).
    epoch: int = 0
    previous_epoch: int = -1
    #: ``{topic: [partitions]}`` it is assigned, and the group epoch of that assignment (told to it
    #: with the next heartbeat answer, which moves ``epoch`` there).
    assignment: dict[str, list[int]] = field(default_factory=dict)
    target_epoch: int = 0
    #: The last answer carried ``assignment``.
    told: bool = False
    expiry: "TimerHandle | None" = None
    topic_filter: "Callable[[str], bool] | None" = None
    #: Restored by a newly elected coordinator and not heard from since: its first heartbeat may carry
    #: any epoch up to the group's.
    restored: bool = False

    def partitions(self) -> int:
        return sum(len(ps) for ps in self.assignment.values())


@dataclass
class ShareGroup:
    """A share group as its coordinator holds it."""

    group_id: str
    #: Bumped at every change of the assignment; members' epochs come from it.
    epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    #: The partition counts of the subscribed topics the last assignment was computed for.
    topics_seen: dict[str, int] = field(default_factory=dict)
    #: Serialises the saves of its membership (each writes the membership as it is then).
    save_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def state(self) -> str:
        """Kafka's name of the share group's state (ShareGroupDescribe, ListGroups)."""
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}


class ShareGroups:
    """The share-group door of one coordinator (one shard)."""

    def __init__(self, coordinator: "GroupCoordinator", timeouts: GroupTimeouts | None = None):
        self.c = coordinator
        self.timeouts = timeouts
        #: The coordinator keeps the table, so every door can see which ids are share groups.
        self.groups: dict[str, ShareGroup] = coordinator.share_groups
        coordinator.share_restorer = self.restore

    # ------------------------------------------------------------ life cycle

    def reset(self) -> None:
        """The coordinator resigned: forget every member (their timers too)."""
        for g in self.groups.values():
            for m in g.members.values():
                _cancel(m)
        self.groups.clear()

    # ------------------------------------------------------------ ShareGroupHeartbeat

    def _timeouts(self, group_id: str) -> tuple[int, int]:
        found = self.timeouts(group_id) if self.timeouts is not None else None
        if found is not None:
            return found
        return self.c.config.share_session_timeout_ms, self.c.config.share_heartbeat_interval_ms

    def heartbeat(self, body: Mapping[str, Any], client_id: str, client_host: str,
                  topic_filter: Callable[[str], bool] | None = None) -> dict:
        group_id = body.get("group_id") or ""
        member_id = body.get("member_id") or ""
        epoch = body.get("member_epoch")
        _, interval = self._timeouts(group_id) if isinstance(group_id, str) else (0, 0)

        def error(code: ErrorCode, message: str | None = None) -> dict:
            if code not in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                log.info("ShareGroupHeartbeat %s/%s epoch %r from %s: %s %s", group_id, member_id, epoch,
                         client_host, ErrorCode.name_of(code), message or "")
            return {"throttle_time_ms": 0, "error_code": int(code), "error_message": message,
                    "member_id": member_id or None, "member_epoch": -1, "heartbeat_interval_ms": 0,
                    "assignment": None}

        if not self.c.active:
            return error(ErrorCode.NOT_COORDINATOR)
        try:
            paths.validate_group(group_id)
        except ValueError as e:
            return error(ErrorCode.INVALID_GROUP_ID, str(e))
        if not isinstance(epoch, int) or epoch < LEAVE:
            return error(ErrorCode.INVALID_REQUEST, f"member epoch {epoch!r}")
        if not member_id:
            return error(ErrorCode.INVALID_REQUEST, "MemberId can't be empty")
        kind = self.c.group_type(group_id)
        if kind not in (None, "share"):
            return error(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        names = body.get("subscribed_topic_names")
        if names is not None and any(not isinstance(t, str) or not t for t in names):
            return error(ErrorCode.INVALID_REQUEST, "subscribed topic names must be non-empty strings")
        group = self.groups.get(group_id)
        m = group.members.get(member_id) if group is not None else None

        if epoch == LEAVE:
            if m is not None:
                self._remove(group, m, "left")
            return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": member_id,
                    "member_epoch": LEAVE, "heartbeat_interval_ms": interval, "assignment": None}
        if epoch == JOIN:
            if names is None and m is None:
                return error(ErrorCode.INVALID_REQUEST, "a joining member must name its subscription")
            if group is None:
                group = self.groups[group_id] = ShareGroup(group_id)
                log.info("share group %s created", group_id)
            if m is None:
                if len(group.members) >= self.c.config.share_max_size:
                    return error(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                 f"share group {group_id} has {len(group.members)} members, the most it takes "
                                 f"(group.share.max.size)")
                m = ShareMember(member_id, client_id, client_host, body.get("rack_id"), sorted(set(names or ())))
                group.members[member_id] = m
                log.info("share group %s: member %s joined from %s (%s), subscribed to %s", group_id, member_id,
                         client_host, client_id, ",".join(m.subscribed))
            m.told, m.restored = False, False
        elif m is None:
            return error(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in share group {group_id}")
        elif m.restored and 0 < epoch <= group.epoch:
            m.restored = False  # taken back after a failover, in whatever epoch it had heard of
            m.epoch, m.told = epoch, False
            log.info("share group %s: member %s taken back in epoch %d", group_id, member_id, epoch)
        elif epoch not in (m.epoch, m.previous_epoch):
            return error(ErrorCode.FENCED_MEMBER_EPOCH, f"epoch {epoch}, the member is at {m.epoch}")
        if names is not None and sorted(set(names)) != m.subscribed:
            m.subscribed = sorted(set(names))
            self._save(group)
        m.topic_filter = topic_filter
        if body.get("rack_id") is not None:
            m.rack_id = body.get("rack_id")
        self._arm(group, m)
        self._maybe_assign(group)
        if not m.told or epoch != m.epoch:
            if m.target_epoch != m.epoch:
                m.previous_epoch, m.epoch = m.epoch, m.target_epoch
            m.told = True
            assignment = {"topic_partitions": self._by_id(m.assignment)}
        else:
            assignment = None
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": member_id,
                "member_epoch": m.epoch, "heartbeat_interval_ms": interval, "assignment": assignment}

    def _by_id(self, assignment: Mapping[str, list[int]]) -> list[dict]:
        out = []
        for t, ps in sorted(assignment.items()):
            tid = self.c.topic_ids.get(t)
            if tid is not None:
                out.append({"topic_id": tid, "partitions": sorted(ps)})
        return out

    def _maybe_assign(self, group: ShareGroup, force: bool = False) -> None:
        """Compute the assignment again when members, subscriptions or partition counts changed."""
        wanted = group.subscribed_topics()
        seen = {t: self.c.topics.get(t, 0) for t in wanted if t in self.c.topic_ids}
        target = simple_assignment(
            {mid: [t for t in m.subscribed if t in seen and (m.topic_filter is None or m.topic_filter(t))]
             for mid, m in group.members.items()}, seen)
        changed = force or seen != group.topics_seen or any(
            m.assignment != target.get(mid, {}) for mid, m in group.members.items())
        group.topics_seen = seen
        if not changed:
            return
        group.epoch += 1
        for mid, m in group.members.items():  # every member moves to the new epoch, as in Kafka
            m.assignment = target.get(mid, {})
            m.target_epoch = group.epoch
            m.told = False
        log.info("share group %s: epoch %d, assignment %s", group.group_id, group.epoch,
                 {mid: {t: ps for t, ps in m.assignment.items()} for mid, m in sorted(group.members.items())})
        self._save(group)

    def on_topics_changed(self) -> None:
        """Topics appeared, grew or went: every share group looks again at its assignment."""
        for group in list(self.groups.values()):
            if group.members:
                self._maybe_assign(group)

    # ------------------------------------------------------------ liveness

    def _arm(self, group: ShareGroup, m: ShareMember) -> None:
        _cancel(m)
        session_ms, _ = self._timeouts(group.group_id)

        def expired() -> None:
            if self.groups.get(group.group_id) is group and group.members.get(m.member_id) is m:
                self._remove(group, m, f"silent for its session timeout ({session_ms} ms)")

        m.expiry = self.c.timer.call_later(session_ms, lambda: self.c.post(expired))

    def _remove(self, group: ShareGroup, m: ShareMember, why: str) -> None:
        _cancel(m)
        group.members.pop(m.member_id, None)
        log.info("share group %s: member %s removed: %s", group.group_id, m.member_id, why)
        self._maybe_assign(group)
        self._save(group)

    # ------------------------------------------------------------ kept across failovers

    def _save(self, group: ShareGroup) -> None:
        """Save the group's membership, in the background (fenced: a deposed coordinator's save fails
        and deactivates it).  Each save writes the membership as it is when the write starts, so the
        last one always has the latest."""
        async def save() -> None:
            async with group.save_lock:
                if self.groups.get(group.group_id) is not group:
                    return  # deleted meanwhile
                await self.c.store.save_share_group(group.group_id, encode_membership(group))

        self.c.spawn(save(), f"save share group {group.group_id}")

    def restore(self, saved: Mapping[str, bytes]) -> None:
        """The coordinator was elected: take the saved share groups back (their members until their
        session timeout, unless they heartbeat first); a group with no saved membership is known as
        an empty share group."""
        for group_id, data in saved.items():
            try:
                epoch, members = decode_membership(data)
            except ValueError as e:
                log.warning("share group %s: saved membership unreadable (%s); members join again", group_id, e)
                epoch, members = 0, {}
            group = self.groups[group_id] = ShareGroup(group_id, epoch=epoch)
            for mid, (topics, m_epoch, client_id, host) in members.items():
                m = group.members[mid] = ShareMember(mid, client_id, host, None, topics, epoch=m_epoch,
                                                     restored=True)
                self._arm(group, m)
            if group.members:
                self._maybe_assign(group, force=True)
        if saved:
            log.info("share groups restored: %d (%d members)", len(saved),
                     sum(len(self.groups[g].members) for g in saved))

    # ------------------------------------------------------------ admin

    def describe(self, group_id: str) -> ShareGroup | None:
        return self.groups.get(group_id)

    def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a share group: only an empty one (NON_EMPTY_GROUP otherwise)."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        del self.groups[group_id]
        return ErrorCode.NONE


def _cancel(m: ShareMember) -> None:
    if m.expiry is not None:
        m.expiry.cancel()
        m.expiry = None


def encode_membership(group: ShareGroup) -> bytes:
    """``/share-groups/<group>``'s data: ``{"version":1,"epoch":N,"members":{id:{"topics":[...],
    "epoch":E,"client_id":...,"client_host":...}}}``."""
    return json.dumps({"version": 1, "epoch": group.epoch, "members": {
        mid: {"topics": m.subscribed, "epoch": m.target_epoch or m.epoch, "client_id": m.client_id,
              "client_host": m.client_host} for mid, m in sorted(group.members.items())}},
        separators=(",", ":")).encode()


def decode_membership(data: bytes) -> tuple[int, dict[str, tuple[list[str], int, str, str]]]:
    """(group epoch, {member id: (topics, epoch, client id, client host)}) of saved membership
    (empty data: a group known only by its state); ValueError naming what is wrong."""
    if not data:
        return 0, {}
    try:
        doc = json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("version") != 1:
        raise ValueError("not a version 1 share-group document")
    epoch = doc.get("epoch")
    members = doc.get("members")
    if not isinstance(epoch, int) or epoch < 0 or not isinstance(members, dict):
        raise ValueError("bad epoch or members")
    out = {}
    for mid, m in members.items():
        if not isinstance(m, dict) or not isinstance(m.get("topics"), list) \
                or not all(isinstance(t, str) and t for t in m["topics"]) or not isinstance(m.get("epoch"), int):
            raise ValueError(f"bad member {mid!r}")
        out[mid] = (sorted(set(m["topics"])), m["epoch"], str(m.get("client_id") or ""),
                    str(m.get("client_host") or ""))
    return epoch, out
