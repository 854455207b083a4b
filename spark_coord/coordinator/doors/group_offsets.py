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
* **TxnOffsetCommit** (KIP-98, KIP-447): a transactional producer's offsets, held *pending* for its
  producer id until the transaction's marker (``end_transaction``), written fenced to
  ``/consumers/<group>/pending/<producer id>`` before the answer and loaded with the shard
  (``load_pending``), so a failover keeps them.  Who may commit is Kafka's rule for transactional
  commits: generation -1 with no member id is taken (a producer outside the group's membership,
  whatever the group holds: TxnOffsetCommit v0-2 carry no member); a member's commit is checked as
  Kafka's ``validateTransactionalOffsetCommit`` checks it (UNKNOWN_MEMBER_ID; ILLEGAL_GENERATION for a
  member out of its generation or member epoch, a KIP-848 member's stale epoch included, and for a
  group nobody knows; GROUP_ID_NOT_FOUND for a share group).  A producer epoch older than the newest
  this shard saw for the producer id (its pending offsets, its markers) is INVALID_PRODUCER_EPOCH, as
  the group's ``__consumer_offsets`` partition answers a fenced producer in Kafka.  The COMMIT marker
  moves the pending offsets into the group's offsets and deletes the pending node in one multi; ABORT
  deletes it; a producer with nothing pending is a no-op (a marker sent again after a failover).
* **OffsetFetch** with ``require_stable`` (v7+, KIP-447): a partition with pending offsets answers
  UNSTABLE_OFFSET_COMMIT (offset -1), at the partition, as Kafka's ``OffsetMetadataManager``
  answers it (the group's error stays NONE; clients retry the fetch).
* **OffsetDelete** (KIP-496): an unknown group is GROUP_ID_NOT_FOUND, a partition of no topic
  UNKNOWN_TOPIC_OR_PARTITION, a topic the group subscribes to GROUP_SUBSCRIBED_TO_TOPIC.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol

from spark_coord.coordinator.doors.common import ConsumerMembers, not_served, restored_consumer_member
from spark_coord.coordinator.storage.store import Fenced, StoreError
from spark_coord.errors import ErrorCode
from spark_coord.wire.offset_commit import STANDALONE_GENERATION

if TYPE_CHECKING:
    from spark_coord.coordinator.core.group import ConsumerRegistry, GroupRegistry
    from spark_coord.coordinator.core.interface import GroupCoordinator

__all__ = ["ClassicMembers", "GroupOffsets", "PendingOffsets", "offsets_answer"]

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
                   wanted: Iterable[Mapping[str, Any]] | None, unstable: "set[TopicPartition] | None" = None) -> dict:
    """One group of an OffsetFetch v8+ answer: the ``wanted`` partitions (request topics; None: every
    partition with an offset) with their committed offsets, -1 where the group has none; those in
    ``unstable`` (pending in a transaction, asked with ``require_stable``) UNSTABLE_OFFSET_COMMIT and -1."""
    if wanted is None:
        pairs = sorted(offsets)
    else:
        pairs = [(t.get("name"), p) for t in wanted for p in t.get("partition_indexes") or []]
    topics: dict[str, list[dict]] = {}
    for t, p in pairs:
        if unstable and (t, p) in unstable:
            topics.setdefault(t, []).append({"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                                             "metadata": "", "error_code": int(ErrorCode.UNSTABLE_OFFSET_COMMIT)})
            continue
        topics.setdefault(t, []).append({"partition_index": p, "committed_offset": offsets.get((t, p), -1),
                                         "committed_leader_epoch": -1, "metadata": "", "error_code": 0})
    return {"group_id": group_id, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            "error_code": 0}


@dataclass
class PendingOffsets:
    """A producer's offsets of one group, committed in its open transaction (TxnOffsetCommit)."""

    producer_id: int
    producer_epoch: int
    offsets: dict[TopicPartition, int]

    def to_json(self) -> bytes:
        return json.dumps({"version": 1, "producerId": self.producer_id, "producerEpoch": self.producer_epoch,
                           "offsets": [[t, p, o] for (t, p), o in sorted(self.offsets.items())]},
                          separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "PendingOffsets":
        """Raises ValueError on anything ``to_json`` does not write."""
        try:
            d = json.loads(data)
            return cls(int(d["producerId"]), int(d["producerEpoch"]),
                       {(str(t), int(p)): int(o) for t, p, o in d["offsets"]})
        except (KeyError, TypeError, ValueError, json.JSONDecodeError) as e:
            raise ValueError(f"unreadable pending offsets: {e!r}") from None


class GroupOffsets:
    """Kafka's offset APIs on one ``Coordinator`` (answers are version-agnostic response dicts)."""

    def __init__(self, coordinator: "GroupCoordinator", classic: ClassicMembers,
                 consumer: ConsumerMembers | None = None):
        self.c = coordinator
        self.classic = classic
        #: Kafka 4's consumer group protocol door: its members commit here too.
        self.consumer = consumer
        #: Offsets in open transactions: group -> producer id -> its pending offsets.
        self.pending: dict[str, dict[int, PendingOffsets]] = {}
        #: The newest producer epoch seen per producer id (pending offsets, markers): older ones are fenced.
        self.producer_epochs: dict[int, int] = {}
        #: One pending write of a group at a time (TxnOffsetCommit, the markers).
        self._pending_locks: dict[str, asyncio.Lock] = {}

    # ------------------------------------------------------------ offsets in transactions
    async def load_pending(self) -> None:
        """The shard's pending transactional offsets from the store (raises StoreError); an unreadable
        node is logged and left out."""
        loaded = await self.c.store.load_pending()
        self.reset_pending()
        for group_id, producers in loaded.items():
            for producer_id, doc in producers.items():
                try:
                    pending = PendingOffsets.from_json(doc)
                except ValueError as e:
                    log.error("group %s, producer %d: %s", group_id, producer_id, e)
                    continue
                self.pending.setdefault(group_id, {})[producer_id] = pending
                self._saw_epoch(producer_id, pending.producer_epoch)
        if self.pending:
            log.info("%d groups with offsets pending in transactions loaded", len(self.pending))

    def reset_pending(self) -> None:
        self.pending = {}
        self.producer_epochs = {}
        self._pending_locks = {}

    def _saw_epoch(self, producer_id: int, epoch: int) -> None:
        if epoch > self.producer_epochs.get(producer_id, -1):
            self.producer_epochs[producer_id] = epoch

    def unstable(self, group_id: str) -> set[TopicPartition]:
        """The group's partitions with offsets pending in a transaction."""
        return {tp for p in self.pending.get(group_id, {}).values() for tp in p.offsets}

    def _lock(self, group_id: str) -> asyncio.Lock:
        return self._pending_locks.setdefault(group_id, asyncio.Lock())

    async def txn_offset_commit(self, body: Mapping[str, Any], version: int,
                                refused: Callable[[str], int] | None = None) -> dict:
        """TxnOffsetCommit: a code per partition (``refused(topic)``: the code of a topic the client
        may not commit, NONE when it may)."""
        group_id = body.get("group_id") or ""
        producer_id = body.get("producer_id", -1)
        epoch = body.get("producer_epoch", -1)
        generation = body.get("generation_id", STANDALONE_GENERATION) if version >= 3 else STANDALONE_GENERATION
        member_id = (body.get("member_id") or "") if version >= 3 else ""
        wanted = [(t.get("name"), p.get("partition_index"), p.get("committed_offset"))
                  for t in body.get("topics") or [] for p in t.get("partitions") or []]

        def answer(codes: Mapping[TopicPartition, int] | int) -> dict:
            topics: dict[str, list[dict]] = {}
            for t, p, _ in wanted:
                code = codes if isinstance(codes, int) else codes.get((t, p), ErrorCode.NONE)
                topics.setdefault(t, []).append({"partition_index": p, "error_code": int(code)})
            return {"throttle_time_ms": 0, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

        if (code := not_served(self.c, group_id)) is not None:
            return answer(code)
        if not isinstance(producer_id, int) or producer_id < 0 or not isinstance(epoch, int) or epoch < 0:
            return answer(ErrorCode.INVALID_REQUEST)
        if (code := self._txn_member_may_commit(group_id, member_id, generation)) != ErrorCode.NONE:
            return answer(code)
        if epoch < self.producer_epochs.get(producer_id, -1):
            return answer(ErrorCode.INVALID_PRODUCER_EPOCH)
        codes: dict[TopicPartition, int] = {}
        taken: dict[TopicPartition, int] = {}
        for t, p, o in wanted:
            if refused is not None and isinstance(t, str) and refused(t):
                codes[(t, p)] = refused(t)
            elif not isinstance(t, str) or not isinstance(p, int) or not isinstance(o, int) or o < 0:
                codes[(t, p)] = ErrorCode.INVALID_REQUEST
            elif not 0 <= p < self.c.topics.get(t, 0):
                codes[(t, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                taken[(t, p)] = o
        if not taken:
            return answer(codes)
        async with self._lock(group_id):
            if epoch < self.producer_epochs.get(producer_id, -1):  # fenced while waiting
                return answer(ErrorCode.INVALID_PRODUCER_EPOCH)
            before = self.pending.get(group_id, {}).get(producer_id)
            merged = PendingOffsets(producer_id, epoch, {**(before.offsets if before else {}), **taken})
            failure: ErrorCode | None = None
            try:
                await self.c.store.write_pending(group_id, producer_id, merged.to_json())
            except Fenced:
                failure = ErrorCode.NOT_COORDINATOR
            except StoreError as e:
                log.warning("group %s: pending offsets of producer %d not written: %s", group_id, producer_id, e)
                failure = ErrorCode.COORDINATOR_NOT_AVAILABLE
            if failure is None and not self.c.active:
                failure = ErrorCode.NOT_COORDINATOR
            if failure is not None:
                codes.update({tp: failure for tp in taken})
                return answer(codes)
            self.pending.setdefault(group_id, {})[producer_id] = merged
            self._saw_epoch(producer_id, epoch)
        log.debug("group %s: %d offsets pending for producer %d epoch %d", group_id, len(taken), producer_id, epoch)
        return answer(codes)

    def _txn_member_may_commit(self, group_id: str, member_id: str, generation: int) -> ErrorCode:
        """Who may commit in a transaction, Kafka 4.2's ``validateTransactionalOffsetCommit``: a share
        group's id is GROUP_ID_NOT_FOUND (it is not a consumer group); generation -1 with no member id is
        taken whatever the group holds (TxnOffsetCommit v0-2 carry no member), and so is a negative
        generation while the group has no member; a group nobody knows committed to in a generation is
        ILLEGAL_GENERATION (Kafka makes an unknown group a simple group only for generation -1; here it
        is known once it has offsets, members or offsets pending); an unknown member UNKNOWN_MEMBER_ID; a
        member out of its generation, or a KIP-848 member out of its member epoch, ILLEGAL_GENERATION
        (Kafka answers a stale member epoch so in a transaction: the producer aborts, as for a classic
        member, where OffsetCommit's STALE_MEMBER_EPOCH would have it retry)."""
        if group_id in self.c.share_groups:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if generation == STANDALONE_GENERATION and not member_id:
            return ErrorCode.NONE
        group = self.c.groups.get(group_id)
        if isinstance(generation, int) and generation < 0 and (group is None or not group.members):
            return ErrorCode.NONE
        if self.consumer is not None and self.consumer.live(group_id, member_id) is not None:
            _, member = self.consumer.find(group_id, member_id)
            return ErrorCode.NONE if member is not None and member.accepts_epoch(generation) \
                else ErrorCode.ILLEGAL_GENERATION
        if group is None and group_id not in self.pending:
            return ErrorCode.ILLEGAL_GENERATION
        committing = self.classic.validate_commit(group_id, member_id, generation)
        if isinstance(committing, ErrorCode):
            return committing
        _, member, _ = committing
        if member is None or not member.accepts_epoch(generation):
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    async def end_transaction(self, producer_id: int, epoch: int, commit: bool) -> ErrorCode:
        """A transaction marker for this shard's groups: the producer's pending offsets of each group
        become the group's (COMMIT) or are dropped (ABORT), each group in one multi with its pending
        node deleted.  NONE when done (nothing pending: done too), else why not (the sender retries)."""
        if not self.c.active:
            return ErrorCode.NOT_COORDINATOR
        self._saw_epoch(producer_id, epoch)
        for group_id in [g for g, producers in self.pending.items() if producer_id in producers]:
            async with self._lock(group_id):
                pending = self.pending.get(group_id, {}).get(producer_id)
                if pending is None:
                    continue
                code = await self._end_group(group_id, pending, commit)
                if code != ErrorCode.NONE:
                    return code
        return ErrorCode.NONE

    async def _end_group(self, group_id: str, pending: PendingOffsets, commit: bool) -> ErrorCode:
        from spark_coord.coordinator.core.group import GroupRegistry

        group = self.c.groups.get(group_id)
        if commit and group is None:
            group = self.c.groups[group_id] = GroupRegistry(group_id)
        lock = group.store_lock if group is not None else asyncio.Lock()
        async with lock:
            try:
                await self.c.store.end_pending(group_id, pending.producer_id, dict(pending.offsets) if commit else None)
            except Fenced:
                return ErrorCode.NOT_COORDINATOR
            except StoreError as e:
                log.warning("group %s: %s of producer %d's offsets failed: %s", group_id,
                            "commit" if commit else "abort", pending.producer_id, e)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            if commit and group is not None:
                for tp, offset in pending.offsets.items():
                    group.offsets[tp] = offset
                    group.offset_holding.pop(tp, None)
                    group.dirty.discard(tp)
        producers = self.pending.get(group_id, {})
        producers.pop(pending.producer_id, None)
        if not producers:
            self.pending.pop(group_id, None)
        log.info("group %s: %d offsets of producer %d %s", group_id, len(pending.offsets), pending.producer_id,
                 "committed" if commit else "aborted")
        if commit and self.c.on_committed is not None:
            try:
                self.c.on_committed(group_id, dict(pending.offsets))
            except Exception:
                log.exception("group %s: on_committed callback failed", group_id)
        return ErrorCode.NONE

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
        stable = bool(body.get("require_stable")) and version >= 7
        if version >= 8:
            groups = [self._fetch_group(g.get("group_id") or "", g.get("topics"), stable)
                      for g in body.get("groups") or []]
            return {"throttle_time_ms": 0, "groups": groups}
        one = self._fetch_group(body.get("group_id") or "", body.get("topics"), stable)
        code = one["error_code"]
        topics = one["topics"]
        if code != ErrorCode.NONE and version < 2:  # no group-level error code before v2
            topics = [{"name": t.get("name"), "partitions": [
                {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": code}
                for p in t.get("partition_indexes") or []]} for t in body.get("topics") or []]
        return {"throttle_time_ms": 0, "topics": topics, "error_code": code}

    def _fetch_group(self, group_id: str, wanted: Iterable[Mapping[str, Any]] | None, stable: bool = False) -> dict:
        if not self.c.active:
            return {"group_id": group_id, "topics": [], "error_code": int(ErrorCode.NOT_COORDINATOR)}
        group = self.c.groups.get(group_id)
        return offsets_answer(group_id, dict(group.offsets) if group is not None else {}, wanted,
                              self.unstable(group_id) if stable else None)

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
