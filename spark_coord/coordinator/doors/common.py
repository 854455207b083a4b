"""What the Kafka group modules of this package share, so that none imports a door: the check
every group request starts with, partitions by topic as the consumer protocol carries them, the
claim that takes a member back with what the registry counts for it, and what the classic door
and OffsetCommit need of the KIP-848 door's members.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol

from spark_coord.errors import ErrorCode
from spark_coord.wire.consumer_protocol import encode_assignment, topic_partitions
from spark_coord.zk import paths

if TYPE_CHECKING:
    from spark_coord.coordinator.core.group import ConsumerRegistry, GroupRegistry
    from spark_coord.coordinator.core.interface import GroupCoordinator

__all__ = ["ConsumerMembers", "Partitions", "by_topic", "encode_partitions", "not_served",
           "restored_consumer_member", "sent_claim"]

#: Partitions by topic, each list sorted (an assignment as the consumer protocol carries it).
Partitions = dict[str, list[int]]


class ConsumerMembers(Protocol):
    """What the classic door and OffsetCommit need of the KIP-848 door (``consumer_group.ConsumerGroups``,
    handed in by whoever composes the doors: no door imports another): a live consumer-protocol
    member, and where the registry keeps it."""

    def live(self, group_id: str, member_id: str) -> Any:
        """The member's live channel (it has ``contact()``), or None."""

    def find(self, group_id: str, member_id: str) -> "tuple[GroupRegistry | None, ConsumerRegistry | None]":
        """The member's group and registry entry (None, None when unknown)."""


def not_served(c: "GroupCoordinator", group_id: str) -> ErrorCode | None:
    """NOT_COORDINATOR while ``c`` is not active, INVALID_GROUP_ID for a name no znode can carry,
    else None."""
    if not c.active:
        return ErrorCode.NOT_COORDINATOR
    try:
        paths.validate_group(group_id)
    except ValueError:
        return ErrorCode.INVALID_GROUP_ID
    return None


def restored_consumer_member(consumer: ConsumerMembers | None, group_id: str, member_id: str) -> bool:
    """A member of Kafka's consumer protocol (KIP-848) the registry knows but has not heard from
    since it was restored (no channel).  Looked up as that door keys its members (a client's
    member id may hold a '/', which the registry's key escapes)."""
    if consumer is None:
        return False
    _, member = consumer.find(group_id, member_id)
    return member is not None and member.kind == "consumer" and member.channel is None


def by_topic(pairs: Iterable[tuple[str, int]]) -> Partitions:
    """``(topic, partition)`` pairs as partitions by topic, topics and partitions sorted."""
    out: Partitions = {}
    for t, p in pairs:
        out.setdefault(t, []).append(p)
    return {t: sorted(ps) for t, ps in sorted(out.items())}


def encode_partitions(partitions: Mapping[str, Iterable[int]]) -> bytes:
    """An assignment in the consumer protocol (v0, no user data)."""
    return encode_assignment({"assigned_partitions": topic_partitions(partitions), "user_data": None}, 0)


def sent_claim(member: "ConsumerRegistry") -> dict:
    """The registration fields that take ``member`` back (a failover, or a static member's new
    incarnation) with what the registry counts for it, in the epoch last sent to it."""
    return {"generation_id": member.sent_epoch, "owned": [
        {"consumer_thread_id": th, "partitions": [{"topic": t, "partition": p, "offset": -1} for t, p in tps]}
        for th, tps in sorted((member.assignment or {}).items())]}
