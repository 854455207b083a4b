"""``OffsetCommitter``: consumed offsets in, ZooKeeper out (seeds 003 sections 5, 9 and 13).

Offsets reach the coordinator three ways, all checked the same (``accept``):

- in Ping and StopFetcher answers (the seeds' way), and in a re-registering
  member's accepted claim;
- in a member's own CommitOffsets request (an "active commit"; DESIGN.md "Epochs"), answered
  only once the offsets are in ZooKeeper (``handle_commit``).

The checks: the epoch stamped on the report must be one the member can have (at
most the newest sent to it: STALE_GENERATION otherwise, for the whole request);
each partition must be one it holds (PARTITION_NOT_OWNED), got in that epoch or
before (STALE_GENERATION: a report from an earlier holding of the same
partition), in a topic that exists (UNKNOWN_TOPIC_OR_PARTITION: a deleted topic's
offsets are dropped, not written again); and an offset never moves backwards
within one holding (OFFSET_BACKWARDS, which a ping answer's stale offset also
just skips).  Members whose partitions did not move keep their epoch and go on
committing while the rest of the group is rebalanced.  Accepted offsets mark their
partitions dirty; the committer writes dirty groups every
``coordinator.offsets.commit.interval.ms`` (all of them together, in as few fenced multis
as fit), before every StartFetcher (the rebalancer forces it), for every CommitOffsets,
and once more when the coordinator shuts down cleanly.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Mapping

from spark_coord.coordinator.core.clock import TimerHandle
from spark_coord.coordinator.core.group import ConsumerRegistry, GroupRegistry, TopicPartition
from spark_coord.coordinator.core.registration import is_int
from spark_coord.coordinator.storage.store import Fenced
from spark_coord.errors import ErrorCode

if TYPE_CHECKING:
    from spark_coord.coordinator.core.channel import MemberChannel
    from spark_coord.coordinator.core.interface import CoordinatorCore

log = logging.getLogger(__name__)

PartitionCodes = dict[TopicPartition, ErrorCode]


class OffsetCommitter:
    """Checks reported offsets and writes them to the group store."""

    def __init__(self, coordinator: "CoordinatorCore"):
        self.c = coordinator
        self._handle: TimerHandle | None = None

    # ------------------------------------------------------------------ schedule
    def start(self) -> None:
        self._handle = self.c.timer.call_later(self.c.config.offsets_commit_interval_ms,
                                               lambda: self.c.post(self._tick))

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _tick(self) -> None:
        self.start()
        dirty = [group for group in self.c.groups.values() if group.dirty]
        if dirty:
            self.c.spawn(self.commit_groups(dirty), f"commit offsets of {len(dirty)} groups")

    async def commit_groups(self, groups: list[GroupRegistry]) -> None:
        """Write the dirty offsets of many groups together (the tick's work): one fenced multi per
        500 offsets instead of one per group.  With 2,000 groups, writing each group on its own
        meant 2,000 ZooKeeper transactions a second, and the client thread handling them held up
        the event loop, and so pings.  A group whose own write is in flight (its store lock held)
        is left for the next tick, so that each group's writes still land in the order made."""
        held: list[GroupRegistry] = []
        batches: dict[str, dict[TopicPartition, int]] = {}
        for group in groups:
            if group.dirty and not group.store_lock.locked() and self.c.groups.get(group.group_id) is group:
                await group.store_lock.acquire()  # free: taken at once, no other task runs meanwhile
                held.append(group)
                batches[group.group_id] = {tp: group.offsets[tp] for tp in group.dirty}
                group.dirty.clear()
        if not held:
            return
        try:
            await self.c.store.commit_offsets_many(batches)
        except BaseException as e:  # failed, fenced or cancelled: still unwritten, so dirty again
            for group in held:
                _unwritten(group, batches[group.group_id])
            if isinstance(e, Fenced):
                self.c.fenced(f"commit offsets of {len(held)} groups")
                raise
            if not isinstance(e, Exception):
                raise
            log.warning("committing the offsets of %d groups failed: %s", len(held), e)
            return
        finally:
            for group in held:
                group.store_lock.release()
        for group in held:
            self._committed(group, batches[group.group_id])

    async def commit_group(self, group: GroupRegistry) -> bool:
        """Write the group's dirty offsets; False (still dirty) on a store error; raises Fenced.

        True means every offset the group holds is in the store: its callers acknowledge commits
        on it.  So an offset stays dirty until a write of it succeeds (a failed or fenced write
        puts it back), and a broker that is no longer the coordinator answers nothing as written
        (a request that was already past its checks when the election moved)."""
        async with group.store_lock:
            if not self.c.active:
                raise Fenced(f"offsets of {group.group_id}: this broker is not the coordinator any more")
            if not group.dirty:
                return True
            batch = {tp: group.offsets[tp] for tp in group.dirty}
            group.dirty.clear()
            try:
                await self.c.store.commit_offsets(group.group_id, batch)
            except BaseException as e:  # failed, fenced or cancelled: still unwritten, so dirty again
                _unwritten(group, batch)
                if isinstance(e, Fenced):
                    self.c.fenced(f"commit offsets of {group.group_id}")
                    raise
                if not isinstance(e, Exception):
                    raise
                log.warning("group %s: committing %d offsets failed: %s", group.group_id, len(batch), e)
                return False
        self._committed(group, batch)
        return True

    def _committed(self, group: GroupRegistry, batch: dict[TopicPartition, int]) -> None:
        log.debug("group %s: committed %d offsets", group.group_id, len(batch))
        self.c.metrics.offsets_committed(group.group_id, len(batch))  # metrics
        if self.c.on_committed is not None:
            try:
                self.c.on_committed(group.group_id, dict(batch))
            except Exception:
                log.exception("group %s: on_committed callback failed", group.group_id)

    async def commit_all(self) -> None:
        """Write every dirty group now (a clean shutdown); errors are logged."""
        for group in list(self.c.groups.values()):
            if group.is_dirty:
                try:
                    await self.commit_group(group)
                except Fenced:
                    return
                except Exception:
                    log.exception("group %s: final commit failed", group.group_id)

    # ------------------------------------------------------------------ checks
    def accept(self, group: GroupRegistry, member: ConsumerRegistry, offsets: Any,
               generation: Any) -> tuple[ErrorCode, PartitionCodes]:
        """Record the offsets a member reported (a Ping/StopFetcher answer, a claim, a CommitOffsets).

        Returns the request's error code (STALE_GENERATION or INVALID_REQUEST refuse it all,
        else NONE) and a code per partition (NONE, PARTITION_NOT_OWNED, OFFSET_BACKWARDS,
        INVALID_REQUEST).  Refusals are logged."""
        if not offsets:
            return ErrorCode.NONE, {}
        if not isinstance(offsets, list):
            log.warning("group %s: consumer %s sent offsets that are not a list", group.group_id, member.consumer_id)
            return ErrorCode.INVALID_REQUEST, {}
        entries: list[tuple[TopicPartition, int]] = []
        codes: PartitionCodes = {}
        for entry in offsets:
            t = entry.get("topic") if isinstance(entry, Mapping) else None
            p = entry.get("partition") if isinstance(entry, Mapping) else None
            o = entry.get("offset") if isinstance(entry, Mapping) else None
            if not isinstance(t, str) or not is_int(p) or not is_int(o) or p < 0 or o < 0:
                log.warning("group %s: consumer %s sent a malformed offset %r; ignored",
                            group.group_id, member.consumer_id, entry)
                if isinstance(t, str) and is_int(p):
                    codes[(t, p)] = ErrorCode.INVALID_REQUEST
                continue
            entries.append(((t, p), o))
        if not member.accepts_epoch(generation):
            log.warning("group %s: STALE_GENERATION: offsets from consumer %s stamped epoch %r refused "
                        "(its epoch is %r, newest sent %d)", group.group_id, member.consumer_id,
                        generation, member.epoch, member.sent_epoch)
            codes.update({tp: ErrorCode.STALE_GENERATION for tp, _ in entries})
            return ErrorCode.STALE_GENERATION, codes
        for tp, o in entries:
            got_in = member.acquired.get(tp)
            holding = (member.consumer_id, got_in) if got_in is not None else None
            if not 0 <= tp[1] < self.c.topics.get(tp[0], 0):
                log.info("group %s: consumer %s reported an offset for %s-%d, which does not exist (deleted?)",
                         group.group_id, member.consumer_id, tp[0], tp[1])
                codes[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif holding is None:
                log.info("group %s: PARTITION_NOT_OWNED: consumer %s reported an offset for %s-%d it does not hold",
                         group.group_id, member.consumer_id, tp[0], tp[1])
                codes[tp] = ErrorCode.PARTITION_NOT_OWNED
            elif generation < got_in:
                log.info("group %s: consumer %s reported %s-%d in epoch %d, before it got it (epoch %d); ignored",
                         group.group_id, member.consumer_id, tp[0], tp[1], generation, got_in)
                codes[tp] = ErrorCode.STALE_GENERATION
            elif group.is_behind(tp, o, holding):
                log.debug("group %s: consumer %s reported %s-%d at %d, behind %d; ignored", group.group_id,
                          member.consumer_id, tp[0], tp[1], o, group.offsets[tp])
                codes[tp] = ErrorCode.OFFSET_BACKWARDS
            else:
                member.last_offsets[tp] = o
                group.record_offset(tp, o, holding)
                codes[tp] = ErrorCode.NONE
        return ErrorCode.NONE, codes

    def set_outside_generation(self, group_id: str, wanted: list) -> "PartitionCodes | ErrorCode":
        """Offsets set from outside any generation (a tool resetting a group: Kafka's OffsetCommit
        with generation -1 and no member): only while the group has no member -- live, or absent and
        still awaited (restored by a failover, or its connection closed within its session) -- and they
        may move anywhere.  Returns the code per partition (the caller writes them), or UNKNOWN_MEMBER_ID."""
        group = self.c.groups.get(group_id)
        if group is not None and group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID  # Kafka: only an Empty group takes them
        if group is None:
            group = self.c.groups[group_id] = GroupRegistry(group_id)
        codes: PartitionCodes = {}
        for t, p, o in wanted:
            if not isinstance(t, str) or not is_int(p) or not is_int(o) or o < 0:
                codes[(t, p)] = ErrorCode.INVALID_REQUEST
            elif not 0 <= p < self.c.topics.get(t, 0):
                codes[(t, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                group.record_offset((t, p), o, None)
                codes[(t, p)] = ErrorCode.NONE
        return codes

    # ------------------------------------------------------------------ CommitOffsets
    async def handle_commit(self, channel: "MemberChannel", body: Any) -> dict[str, Any]:
        """Answer a member's CommitOffsets once its offsets are in the store."""
        c = self.c

        def answer(code: ErrorCode, message: str | None = None, codes: PartitionCodes | None = None) -> dict:
            return {"error_code": int(code), "error_message": message,
                    "partitions": [{"topic": t, "partition": p, "error_code": int(e)}
                                   for (t, p), e in sorted((codes or {}).items())]}

        if not c.active:
            return answer(ErrorCode.NOT_COORDINATOR, "this broker is not the coordinator")
        found = c.member_of(channel)
        if found is None:
            return answer(ErrorCode.UNKNOWN_CONSUMER, "no consumer is registered on this connection")
        group, member = found
        if not isinstance(body, Mapping) or body.get("group_id") != group.group_id \
                or body.get("consumer_id") != member.consumer_id:
            return answer(ErrorCode.UNKNOWN_CONSUMER,
                          f"this connection registered {member.consumer_id!r} in group {group.group_id!r}")
        leave = body.get("leave") is True
        code, codes = self.accept(group, member, body.get("offsets"), body.get("generation_id"))
        if leave:
            c.member_left(group, member)
        if code != ErrorCode.NONE:
            return answer(code, None, codes)
        accepted = [tp for tp, e in codes.items() if e == ErrorCode.NONE]
        if accepted:
            try:
                written = await self.commit_group(group)
            except Fenced:
                return answer(ErrorCode.NOT_COORDINATOR, "another broker was elected coordinator")
            if not written:
                codes.update({tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in accepted})
                return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the offsets could not be written", codes)
        return answer(ErrorCode.NONE, None, codes)


def _unwritten(group: GroupRegistry, batch: dict[TopicPartition, int]) -> None:
    """A write of ``batch`` failed: its partitions are dirty again (those the group still holds)."""
    group.dirty.update(tp for tp in batch if tp in group.offsets)
