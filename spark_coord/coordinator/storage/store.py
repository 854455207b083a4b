"""Where the coordinator keeps what must survive it: the ``GroupStore`` interface.

Two implementations: ``MemoryGroupStore`` (unit tests; can be told to fence or
fail) and ``zk_store.ZkGroupStore`` (Kafka 0.8's ZooKeeper layout, every write
fenced by the coordinator's election).  A write from a coordinator that is no
longer the elected one raises ``Fenced`` and changes nothing.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from spark_coord.common import LARGEST, OFFSET_RESETS, TopicPartition
from spark_coord.coordinator.core.subscription import TopicCount


class Fenced(Exception):
    """This coordinator is no longer the elected one; the write did not happen."""


class StoreError(Exception):
    """A store operation failed for another reason (the message says which)."""


@dataclass
class StoredMember:
    """A member as the store keeps it (enough to restore the group after failover)."""

    consumer_id: str
    topic_count: TopicCount
    auto_commit: bool = True
    auto_offset_reset: str = LARGEST
    session_timeout_ms: int = 10000
    #: The newest epoch the coordinator sent the member (None: none yet, or stored before epochs
    #: were per member: the group's generation stands for it).
    epoch: int | None = None
    #: The member hands partitions over incrementally.
    incremental: bool = False
    #: The door it came in by: None (the seeds' channel), "classic" or "consumer" (Kafka's protocols).
    kind: str | None = None
    #: Its Kafka member id when the registry knows it by another name (a static member: its instance id).
    member_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc = {"version": 1, **self.topic_count.to_json(), "auto_commit": self.auto_commit,
               "auto_offset_reset": self.auto_offset_reset, "session_timeout_ms": self.session_timeout_ms}
        if self.epoch is not None:
            doc["epoch"] = self.epoch
        if self.incremental:
            doc["incremental"] = True
        if self.kind is not None:
            doc["kind"] = self.kind
        if self.member_id is not None:
            doc["member_id"] = self.member_id
        return doc

    @classmethod
    def from_json(cls, consumer_id: str, doc: Any) -> "StoredMember":
        """Inverse of ``to_json``; ``ValueError`` on anything malformed."""
        if not isinstance(doc, dict):
            raise ValueError(f"member {consumer_id!r}: expected a JSON object")
        tc = TopicCount.from_json(doc)
        auto_commit = doc.get("auto_commit", True)
        reset = doc.get("auto_offset_reset", LARGEST)
        session = doc.get("session_timeout_ms", 10000)
        if not isinstance(auto_commit, bool):
            raise ValueError(f"member {consumer_id!r}: auto_commit {auto_commit!r} is not a boolean")
        if reset not in OFFSET_RESETS:
            raise ValueError(f"member {consumer_id!r}: auto_offset_reset {reset!r} is not smallest|largest")
        if isinstance(session, bool) or not isinstance(session, int) or session <= 0:
            raise ValueError(f"member {consumer_id!r}: session_timeout_ms {session!r} is not a positive integer")
        epoch = doc.get("epoch")
        if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0):
            raise ValueError(f"member {consumer_id!r}: epoch {epoch!r} is not an integer >= 0")
        incremental = doc.get("incremental", False)
        if not isinstance(incremental, bool):
            raise ValueError(f"member {consumer_id!r}: incremental {incremental!r} is not a boolean")
        kind, member_id = doc.get("kind"), doc.get("member_id")
        if kind not in (None, "classic", "consumer"):
            raise ValueError(f"member {consumer_id!r}: kind {kind!r} is not classic or consumer")
        if member_id is not None and (not isinstance(member_id, str) or not member_id or len(member_id) > 1000):
            raise ValueError(f"member {consumer_id!r}: member_id {member_id!r} is not a string")
        return cls(consumer_id, tc, auto_commit, reset, session, epoch, incremental, kind, member_id)


@dataclass
class StoredGroup:
    """Everything ``load_groups`` restores for one group."""

    group_id: str
    generation_id: int = 0
    members: dict[str, StoredMember] = field(default_factory=dict)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    owners: dict[TopicPartition, str] = field(default_factory=dict)


class GroupStore(ABC):
    """Persistent group state.  All methods are coroutines; writes may raise ``Fenced``."""

    @abstractmethod
    async def load_groups(self) -> dict[str, StoredGroup]:
        """Every group with its members, generation, offsets and owners."""

    @abstractmethod
    async def save_member(self, group_id: str, member: StoredMember) -> None:
        """Create or replace a member's registration."""

    @abstractmethod
    async def remove_member(self, group_id: str, consumer_id: str) -> None:
        """Delete a member's registration (no error when it is absent)."""

    @abstractmethod
    async def save_generation(self, group_id: str, generation_id: int) -> None:
        """Persist the group's generation."""

    @abstractmethod
    async def save_assignment(self, group_id: str, generation_id: int, members: list[StoredMember],
                              owners: dict[TopicPartition, str]) -> None:
        """In one write: the group's generation, these members (with their new epochs) and the
        group's owners, replaced by exactly ``owners``."""

    @abstractmethod
    async def commit_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """Write these partitions' offsets (others keep theirs)."""

    async def commit_offsets_many(self, offsets: dict[str, dict[TopicPartition, int]]) -> None:
        """``commit_offsets`` for several groups (``{group: offsets}``); a store that can write them
        together does (ZooKeeper: in as few multis as fit, each fenced)."""
        for group_id, batch in offsets.items():
            await self.commit_offsets(group_id, batch)

    # Offsets in a transaction (KIP-98): a producer's TxnOffsetCommit, held until its marker.
    async def load_pending(self) -> dict[str, dict[int, bytes]]:
        """Every group's pending transactional offsets ``{group: {producer id: document}}`` (a store
        without them: none)."""
        return {}

    async def write_pending(self, group_id: str, producer_id: int, doc: bytes) -> None:
        """Write a producer's pending offsets of ``group_id`` (the whole document, replaced)."""
        raise StoreError(f"group {group_id}: this store keeps no pending transactional offsets")

    async def end_pending(self, group_id: str, producer_id: int, offsets: dict[TopicPartition, int] | None) -> None:
        """A producer's transaction ended for ``group_id``: ``offsets`` (a commit) become the group's and
        the pending document is deleted in the same write; None (an abort): just deleted."""
        raise StoreError(f"group {group_id}: this store keeps no pending transactional offsets")

    @abstractmethod
    async def delete_topic(self, group_id: str, topic: str) -> None:
        """Forget the group's offsets and owners of a (deleted) topic."""

    @abstractmethod
    async def delete_group(self, group_id: str) -> None:
        """Forget everything of a group with no members (Kafka's DeleteGroups)."""

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> None:
        """Forget the group's committed offsets of these partitions (Kafka's OffsetDelete); owners
        and members stay."""
        raise StoreError("this store cannot delete offsets")

    @abstractmethod
    async def read_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        """The group's committed offsets."""

    @abstractmethod
    async def read_owners(self, group_id: str) -> dict[TopicPartition, str]:
        """The group's partition owners (consumer thread ids)."""

    @abstractmethod
    async def write_owners(self, group_id: str, owners: dict[TopicPartition, str]) -> None:
        """Replace the group's owners by exactly ``owners``."""

    @abstractmethod
    async def topics(self) -> dict[str, int]:
        """Every topic of the cluster with its number of partitions."""

    @abstractmethod
    async def verify(self) -> None:
        """Change nothing, but raise ``Fenced`` unless this coordinator is still the elected one
        (``StoreError`` when the store cannot tell right now)."""

    # ------------------------------------------------------------ share groups (KIP-932)
    # A share partition's state is written by the partition's leader (``spark_coord.share``); the
    # coordinator only reads it, and rewrites or deletes it for the admin APIs of an empty group.

    async def read_share_states(self, group_id: str) -> dict[TopicPartition, bytes]:
        """The stored state of every share partition of ``group_id`` (the leaders' snapshots)."""
        raise StoreError("this store keeps no share-group state")

    async def has_share_state(self, group_id: str) -> bool:
        """Whether ``group_id`` has share-group state (it is a share group, known even with no member)."""
        return False

    async def write_share_states(self, group_id: str, states: dict[TopicPartition, bytes]) -> None:
        """Create or overwrite these share partitions' states (AlterShareGroupOffsets), fenced, and
        tell the leaders (they drop what they hold and read it again)."""
        raise StoreError("this store keeps no share-group state")

    async def delete_share_states(self, group_id: str, topics: list[str] | None = None) -> None:
        """Delete the share-group state of these topics (None: the whole group), fenced, and tell
        the leaders (DeleteShareGroupOffsets, DeleteGroups)."""
        raise StoreError("this store keeps no share-group state")

    async def save_share_group(self, group_id: str, doc: bytes) -> None:
        """Write a share group's membership (its epoch, members, their subscriptions and epochs),
        fenced, so that the next coordinator of its shard takes the members back."""
        raise StoreError("this store keeps no share-group state")

    async def load_share_groups(self) -> dict[str, bytes]:
        """Every share group of this store's shard with its membership as saved (``b""``: a share
        group known only by its share partitions' state)."""
        return {}


class MemoryGroupStore(GroupStore):
    """A ``GroupStore`` in a dict, for unit tests.

    ``fenced = True`` makes every write raise ``Fenced``; ``fail_writes`` makes them
    raise ``StoreError``; ``writes`` logs every successful write in order.
    """

    def __init__(self, topics: dict[str, int] | None = None):
        self.groups: dict[str, StoredGroup] = {}
        self.cluster_topics: dict[str, int] = dict(topics or {})
        self.fenced = False
        self.fail_writes = False
        self.writes: list[tuple[str, str, Any]] = []
        #: Share-group state: group -> {(topic, partition): stored bytes}.
        self.share_states: dict[str, dict[TopicPartition, bytes]] = {}
        #: Share groups' membership as saved (``save_share_group``).
        self.share_groups: dict[str, bytes] = {}

    def _group(self, group_id: str) -> StoredGroup:
        return self.groups.setdefault(group_id, StoredGroup(group_id))

    def _write(self, op: str, group_id: str, arg: Any) -> StoredGroup:
        if self.fenced:
            raise Fenced(f"{op} for group {group_id!r}: fenced")
        if self.fail_writes:
            raise StoreError(f"{op} for group {group_id!r}: store unavailable")
        self.writes.append((op, group_id, copy.deepcopy(arg)))
        return self._group(group_id)

    async def load_groups(self) -> dict[str, StoredGroup]:
        return copy.deepcopy(self.groups)

    async def save_member(self, group_id: str, member: StoredMember) -> None:
        self._write("save_member", group_id, member.consumer_id).members[member.consumer_id] = copy.deepcopy(member)

    async def remove_member(self, group_id: str, consumer_id: str) -> None:
        self._write("remove_member", group_id, consumer_id).members.pop(consumer_id, None)

    async def save_generation(self, group_id: str, generation_id: int) -> None:
        self._write("save_generation", group_id, generation_id).generation_id = generation_id

    async def save_assignment(self, group_id: str, generation_id: int, members: list[StoredMember],
                              owners: dict[TopicPartition, str]) -> None:
        g = self._write("save_assignment", group_id, (generation_id, [m.consumer_id for m in members], owners))
        g.generation_id = generation_id
        for m in members:
            g.members[m.consumer_id] = copy.deepcopy(m)
        g.owners = dict(owners)

    async def commit_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        self._write("commit_offsets", group_id, offsets).offsets.update(offsets)

    async def delete_topic(self, group_id: str, topic: str) -> None:
        g = self._write("delete_topic", group_id, topic)
        g.offsets = {tp: o for tp, o in g.offsets.items() if tp[0] != topic}
        g.owners = {tp: o for tp, o in g.owners.items() if tp[0] != topic}

    async def delete_group(self, group_id: str) -> None:
        self._write("delete_group", group_id, None)
        del self.groups[group_id]

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> None:
        g = self._write("delete_offsets", group_id, list(partitions))
        for tp in partitions:
            g.offsets.pop(tp, None)

    async def read_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        return dict(self.groups[group_id].offsets) if group_id in self.groups else {}

    async def read_owners(self, group_id: str) -> dict[TopicPartition, str]:
        return dict(self.groups[group_id].owners) if group_id in self.groups else {}

    async def write_owners(self, group_id: str, owners: dict[TopicPartition, str]) -> None:
        self._write("write_owners", group_id, owners).owners = dict(owners)

    async def topics(self) -> dict[str, int]:
        return dict(self.cluster_topics)

    async def verify(self) -> None:
        if self.fenced:
            raise Fenced("verify: fenced")
        if self.fail_writes:
            raise StoreError("verify: store unavailable")

    async def read_share_states(self, group_id: str) -> dict[TopicPartition, bytes]:
        if self.fail_writes:
            raise StoreError("read_share_states: store unavailable")
        return dict(self.share_states.get(group_id, {}))

    async def has_share_state(self, group_id: str) -> bool:
        return group_id in self.share_states

    async def write_share_states(self, group_id: str, states: dict[TopicPartition, bytes]) -> None:
        self._write_share("write_share_states", group_id, states)
        self.share_states.setdefault(group_id, {}).update(states)

    async def delete_share_states(self, group_id: str, topics: list[str] | None = None) -> None:
        self._write_share("delete_share_states", group_id, topics)
        if topics is None:
            self.share_states.pop(group_id, None)
        elif group_id in self.share_states:
            gone = set(topics)
            self.share_states[group_id] = {tp: d for tp, d in self.share_states[group_id].items() if tp[0] not in gone}

    async def save_share_group(self, group_id: str, doc: bytes) -> None:
        self._write_share("save_share_group", group_id, doc)
        self.share_groups[group_id] = doc

    async def load_share_groups(self) -> dict[str, bytes]:
        out = {g: b"" for g in self.share_states}
        out.update(self.share_groups)
        return out

    def _write_share(self, op: str, group_id: str, arg: Any) -> None:
        if self.fenced:
            raise Fenced(f"{op} for group {group_id!r}: fenced")
        if self.fail_writes:
            raise StoreError(f"{op} for group {group_id!r}: store unavailable")
        self.writes.append((op, group_id, copy.deepcopy(arg)))
