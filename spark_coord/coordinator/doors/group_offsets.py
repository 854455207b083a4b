"""Kafka's offset APIs for every kind of group on one coordinator: OffsetCommit, OffsetFetch and
OffsetDelete (as Kafka keeps its ``OffsetMetadataManager`` apart from its ``GroupMetadataManager``).

Offsets live in the group's ZooKeeper znodes (``/consumers/<group>/offsets/<topic>/<partition>``),
the same ones our members' pings and CommitOffsets write, so Kafka tools see every group, Spark
queries' groups included.

* **OffsetCommit** goes through the coordinator's checks (``core.offsets``: the member's epoch, what
  it holds, never backwards).  Who may commit is the door's to say (Kafka's
  ``validateOffsetCommit``): a classic member in the generation it synced (``ClassicMembers``), a
  KIP-848 member in its member epoch (``common.ConsumerMembers``; STALE_MEMBER_EPOCH makes it
  refresh its epoch and commit again).  An offset below the one already committed by the same
  holding is answered NONE but not taken (DESIGN.md "Epochs").  Commits with generation -1 and no
  member id (tools resetting a group) are taken only while the group has no live member, as Kafka
  does, and may move offsets anywhere.  Answered once the offsets are in ZooKeeper.
* **OffsetFetch**: the committed offsets, -1 where the group has none; v8+ ask for several groups.
* **OffsetDelete** (KIP-496): an unknown group is GROUP_ID_NOT_FOUND, a partition of no topic
  UNKNOWN_TOPIC_OR_PARTITION, a topic the group subscribes to GROUP_SUBSCRIBED_TO_TOPIC.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol

from spark_coord.coordinator.doors.common import ConsumerMembers, not_served, restored_consumer_member
from spark_coord.coordinator.storage.store import Fenced, StoreError
from spark_coord.errors import ErrorCode
from spark_coord.wire.offset_commit import STANDALONE_GENERATION

if TYPE_CHECKING:
    from spark_coord.coordinator.core.group import ConsumerRegistry, GroupRegistry
    from spark_coord.coordinator.core.interface import GroupCoordinator

__all__ = ["ClassicMembers", "GroupOffsets", "offsets_answer"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class ClassicMembers(Protocol):
    """What OffsetCommit needs of the classic door (``classic.ClassicGroups``, handed in by whoever
    composes the doors)."""

    def validate_commit(self, group_id: str, member_id: str, generation: int) \
            -> "tuple[GroupRegistry | None, ConsumerRegistry | None, ErrorCode] | ErrorCode":
        """The classic member committing in ``generation`` (heard from now), its group and registry
        entry, and what a commit out of its generation is answered; or why it cannot commit."""


def offsets_answer(group_id: str, offsets: Mapping[TopicPartition, int],
                   wanted: Iterable[Mapping[str, Any]] | None) -> dict:
    """One group of an OffsetFetch v8+ answer: the ``wanted`` partitions (request topics; None: every
    partition with an offset) with their committed offsets, -1 where the group has none."""
    if wanted is None:
        pairs = sorted(offsets)
    else:
        pairs = [(t.get("name"), p) for t in wanted for p in t.get("partition_indexes") or []]
    topics: dict[str, list[dict]] = {}
    for t, p in pairs:
        topics.setdefault(t, []).append({"partition_index": p, "committed_offset": offsets.get((t, p), -1),
                                         "committed_leader_epoch": -1, "metadata": "", "error_code": 0})
    return {"group_id": group_id, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            "error_code": 0}


class GroupOffsets:
    """Kafka's offset APIs on one ``Coordinator`` (answers are version-agnostic response dicts)."""

    def __init__(self, coordinator: "GroupCoordinator", classic: ClassicMembers,
                 consumer: ConsumerMembers | None = None):
        self.c = coordinator
        self.classic = classic
        #: Kafka 4's consumer group protocol door: its members commit here too.
        self.consumer = consumer

    # ------------------------------------------------------------ OffsetCommit
    async def offset_commit(self, body: Mapping[str, Any], version: int) -> dict:
        group_id = body.get("group_id") or ""
        member_id = body.get("member_id") or ""
        generation = body.get("generation_id_or_member_epoch", STANDALONE_GENERATION) if version >= 1 \
            else STANDALONE_GENERATION
        wanted = [(t.get("name"), p.get("partition_index"), p.get("committed_offset"))
                  for t in body.get("topics") or [] for p in t.get("partitions") or []]

        def answer(codes: Mapping[TopicPartition, int] | int) -> dict:
            topics: dict[str, list[dict]] = {}
            for t, p, _ in wanted:
                code = codes if isinstance(codes, int) else codes.get((t, p), ErrorCode.NONE)
                topics.setdefault(t, []).append({"partition_index": p, "error_code": int(code)})
            return {"throttle_time_ms": 0, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

        if (refused := not_served(self.c, group_id)) is not None:
            return answer(refused)
        offsets = [{"topic": t, "partition": p, "offset": o} for t, p, o in wanted]
        if generation == STANDALONE_GENERATION and not member_id:
            return await self._standalone_commit(group_id, wanted, answer)
        if self.consumer is not None and (modern := self.consumer.live(group_id, member_id)) is not None:
            modern.contact()
            group, member = self.consumer.find(group_id, member_id)
            stale = ErrorCode.STALE_MEMBER_EPOCH  # KIP-848: the member refreshes its epoch and commits again
        elif restored_consumer_member(self.consumer, group_id, member_id):
            # a KIP-848 member restored after a failover or handover, committing before its heartbeat
            # took it back: its commit is taken in an epoch it can have, for the partitions it is
            # counted for, as Kafka takes commits from the members it loaded; it stays absent (only
            # its heartbeat takes it back, in its own protocol, and restarts its session)
            assert self.consumer is not None
            group, member = self.consumer.find(group_id, member_id)
            stale = ErrorCode.STALE_MEMBER_EPOCH
        else:
            committing = self.classic.validate_commit(group_id, member_id, generation)
            if isinstance(committing, ErrorCode):
                return answer(committing)
            group, member, stale = committing
        assert group is not None and member is not None
        code, codes = self.c.offsets.accept(group, member, offsets, generation)
        if code == ErrorCode.STALE_GENERATION:
            return answer(stale)
        if code != ErrorCode.NONE:
            return answer(ErrorCode.INVALID_REQUEST)
        not_now = ErrorCode.ILLEGAL_GENERATION if stale != ErrorCode.STALE_MEMBER_EPOCH else stale
        kafka_codes = {tp: {ErrorCode.NONE: ErrorCode.NONE, ErrorCode.OFFSET_BACKWARDS: ErrorCode.NONE,
                            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            ErrorCode.STALE_GENERATION: not_now,
                            ErrorCode.PARTITION_NOT_OWNED: not_now}.get(e, ErrorCode.INVALID_REQUEST)
                       for tp, e in codes.items()}
        if any(e == ErrorCode.NONE for e in codes.values()):
            failure = await self._write(group)
            if failure is not None:
                kafka_codes = {tp: (failure if e == ErrorCode.NONE else e) for tp, e in kafka_codes.items()}
        return answer(kafka_codes)

    async def _standalone_commit(self, group_id: str, wanted: list, answer) -> dict:
        codes = self.c.offsets.set_outside_generation(group_id, wanted)
        if isinstance(codes, ErrorCode):
            return answer(codes)
        if any(e == ErrorCode.NONE for e in codes.values()):
            failure = await self._write(self.c.groups[group_id])
            if failure is not None:
                codes = {tp: (failure if e == ErrorCode.NONE else e) for tp, e in codes.items()}
        log.info("group %s: %d offsets set from outside any generation", group_id,
                 sum(1 for e in codes.values() if e == ErrorCode.NONE))
        return answer(codes)

    async def _write(self, group: "GroupRegistry") -> ErrorCode | None:
        try:
            written = await self.c.offsets.commit_group(group)
        except Fenced:
            return ErrorCode.NOT_COORDINATOR
        return None if written else ErrorCode.COORDINATOR_NOT_AVAILABLE

    # ------------------------------------------------------------ OffsetFetch
    def offset_fetch(self, body: Mapping[str, Any], version: int) -> dict:
        if version >= 8:
            groups = [self._fetch_group(g.get("group_id") or "", g.get("topics")) for g in body.get("groups") or []]
            return {"throttle_time_ms": 0, "groups": groups}
        one = self._fetch_group(body.get("group_id") or "", body.get("topics"))
        code = one["error_code"]
        topics = one["topics"]
        if code != ErrorCode.NONE and version < 2:  # no group-level error code before v2
            topics = [{"name": t.get("name"), "partitions": [
                {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": code}
                for p in t.get("partition_indexes") or []]} for t in body.get("topics") or []]
        return {"throttle_time_ms": 0, "topics": topics, "error_code": code}

    def _fetch_group(self, group_id: str, wanted: Iterable[Mapping[str, Any]] | None) -> dict:
        if not self.c.active:
            return {"group_id": group_id, "topics": [], "error_code": int(ErrorCode.NOT_COORDINATOR)}
        group = self.c.groups.get(group_id)
        return offsets_answer(group_id, dict(group.offsets) if group is not None else {}, wanted)

    # ------------------------------------------------------------ OffsetDelete
    async def offset_delete(self, group_id: str, partitions: Iterable[TopicPartition],
                            refused: Callable[[str], int] | None = None) -> dict[TopicPartition, int] | ErrorCode:
        """Delete ``group_id``'s offsets of ``partitions``: a code per partition, or the group's error.
        ``refused(topic)``: the code of a topic the client may not touch (NONE: it may)."""
        if group_id not in self.c.groups:
            return ErrorCode.GROUP_ID_NOT_FOUND
        codes: dict[TopicPartition, int] = {}
        wanted = []
        for tp in partitions:
            if refused is not None and refused(tp[0]):
                codes[tp] = refused(tp[0])
            elif not isinstance(tp[1], int) or not 0 <= tp[1] < self.c.topics.get(tp[0], 0):
                codes[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                wanted.append(tp)
        if not wanted:
            return codes
        try:
            result = await self.c.delete_offsets(group_id, wanted)
        except Fenced:
            return ErrorCode.NOT_COORDINATOR
        except StoreError as e:
            log.warning("group %s: deleting offsets failed: %s", group_id, e)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if isinstance(result, ErrorCode):
            return result
        codes.update(result)
        return codes
