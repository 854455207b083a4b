"""``OffsetCommitter``: consumed offsets in, ZooKeeper out (seeds 003 sections 5, 9 and 13).

Offsets reach the coordinator three ways, all checked the same (``accept``):

- in Ping and StopFetcher answers (the seeds' way), and in a re-registering
  member's accepted claim;
- in a member's own CommitOffsets request (DESIGN 11, "active commit"), answered
  only once the offsets are in ZooKeeper (``handle_commit``).

The checks: the member must be in the group's current generation
(STALE_GENERATION otherwise, for the whole request), each partition must be one
it owns (PARTITION_NOT_OWNED) in a topic that exists (UNKNOWN_TOPIC_OR_PARTITION:
a deleted topic's offsets are dropped, not written again), and an offset never
moves backwards within a generation (OFFSET_BACKWARDS, which a ping answer's stale offset also just
skips).  Accepted offsets mark their partitions dirty; the committer writes
dirty groups every ``coordinator.offsets.commit.interval.ms``, before every
StartFetcher (the rebalancer forces it), for every CommitOffsets, and once more
when the coordinator shuts down cleanly.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Mapping

from spark_coord.coordinator.clock import TimerHandle
from spark_coord.coordinator.group import ConsumerRegistry, GroupRegistry, TopicPartition
from spark_coord.coordinator.registration import is_int
from spark_coord.coordinator.store import Fenced
from spark_coord.errors import ErrorCode

if TYPE_CHECKING:
    from spark_coord.coordinator.channel import MemberChannel
    from spark_coord.coordinator.coordinator import Coordinator

log = logging.getLogger(__name__)

PartitionCodes = dict[TopicPartition, ErrorCode]


class OffsetCommitter:
    """Checks reported offsets and writes them to the group store."""

    def __init__(self, coordinator: "Coordinator"):
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
        for group in list(self.c.groups.values()):
            if group.is_dirty:
                self.c.spawn(self.commit_group(group), f"commit offsets of {group.group_id}")

    async def commit_group(self, group: GroupRegistry) -> bool:
        """Write the group's dirty offsets; False (still dirty) on a store error; raises Fenced."""
        async with group.store_lock:
            if not group.dirty:
                return True
            batch = {tp: group.offsets[tp] for tp in group.dirty}
            group.dirty.clear()
            try:
                await self.c.store.commit_offsets(group.group_id, batch)
            except Fenced:
                self.c.fenced(f"commit offsets of {group.group_id}")
                raise
            except Exception as e:
                group.dirty.update(tp for tp in batch if tp in group.offsets)
                log.warning("group %s: committing %d offsets failed: %s", group.group_id, len(batch), e)
                return False
        log.debug("group %s: committed %d offsets", group.group_id, len(batch))
        self.c.metrics.offsets_committed(group.group_id, len(batch))  # metrics
        if self.c.on_committed is not None:
            try:
                self.c.on_committed(group.group_id, dict(batch))
            except Exception:
                log.exception("group %s: on_committed callback failed", group.group_id)
        return True

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
        if generation != group.generation_id or member.generation_id != group.generation_id:
            log.warning("group %s: STALE_GENERATION: offsets from consumer %s for generation %r refused "
                        "(group generation %d, member in %r)", group.group_id, member.consumer_id,
                        generation, group.generation_id, member.generation_id)
            codes.update({tp: ErrorCode.STALE_GENERATION for tp, _ in entries})
            return ErrorCode.STALE_GENERATION, codes
        owned = member.owned()
        for tp, o in entries:
            if not 0 <= tp[1] < self.c.topics.get(tp[0], 0):
                log.info("group %s: consumer %s reported an offset for %s-%d, which does not exist (deleted?)",
                         group.group_id, member.consumer_id, tp[0], tp[1])
                codes[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif tp not in owned:
                log.info("group %s: PARTITION_NOT_OWNED: consumer %s reported an offset for %s-%d it does not own",
                         group.group_id, member.consumer_id, tp[0], tp[1])
                codes[tp] = ErrorCode.PARTITION_NOT_OWNED
            elif group.is_behind(tp, o):
                log.debug("group %s: consumer %s reported %s-%d at %d, behind %d; ignored", group.group_id,
                          member.consumer_id, tp[0], tp[1], o, group.offsets[tp])
                codes[tp] = ErrorCode.OFFSET_BACKWARDS
            else:
                member.last_offsets[tp] = o
                group.record_offset(tp, o)
                codes[tp] = ErrorCode.NONE
        return ErrorCode.NONE, codes

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
