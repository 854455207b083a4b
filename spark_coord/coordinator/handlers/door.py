"""What the front door's handlers need from the process that serves them (``FrontDoor``)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Awaitable, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.coordinator.core.channel import MemberChannel
    from spark_coord.coordinator.core.coordinator import Coordinator
    from spark_coord.coordinator.doors.classic import ClassicGroups
    from spark_coord.coordinator.doors.consumer_group import ConsumerGroups
    from spark_coord.coordinator.doors.group_admin import GroupAdmin
    from spark_coord.coordinator.doors.group_offsets import GroupOffsets
    from spark_coord.coordinator.doors.share_group import ShareGroups
    from spark_coord.errors import ErrorCode


class ShardRole(Protocol):
    """One coordinator shard this process serves: its coordinator, its Kafka doors, and the offset
    and admin APIs of every kind of group."""

    shard: int
    coordinator: "Coordinator"
    classic: "ClassicGroups"
    consumer: "ConsumerGroups"
    share: "ShareGroups"
    offsets: "GroupOffsets"
    admin: "GroupAdmin"


class FrontDoor(Protocol):
    """A broker or a standalone coordinator, as the group API handlers see it."""

    #: What a handler returns when it answers later itself.
    deferred: Any

    def for_group(self, group_id: Any) -> "tuple[ShardRole | None, ErrorCode | None]":
        """The role serving ``group_id``'s shard here, or why this process cannot serve it now:
        NOT_COORDINATOR, or COORDINATOR_LOAD_IN_PROGRESS while it restores the shard's groups."""

    def active_roles(self) -> "list[ShardRole]":
        """Every shard this process serves now (ListGroups and the like list all their groups)."""

    def holder_of(self, group_id: Any) -> tuple[int, int]:
        """(coordinator id, epoch) of the holder of ``group_id``'s shard (None: shard 0), (-1, -1)
        while nobody holds it."""

    def coordinator_endpoint(self, conn: Any, group_id: Any = None) -> tuple[int, str, int] | None:
        """The endpoint of the holder of ``group_id``'s shard on the listener ``conn`` came in on
        (None: nobody holds it)."""

    async def stored_offsets(self, group_id: str) -> dict[tuple[str, int], int] | None:
        """``group_id``'s committed offsets as ZooKeeper holds them (every commit a coordinator
        acknowledges is written there first), for OffsetFetch where this process does not serve the
        group's shard now; None when ZooKeeper cannot be read in time."""

    async def stored_pending(self, group_id: str) -> set[tuple[str, int]] | None:
        """``group_id``'s partitions with offsets pending in a transaction, as ZooKeeper holds them
        (``/consumers/<group>/pending``), for OffsetFetch with require_stable where this process does
        not serve the group's shard now; None when ZooKeeper cannot be read in time."""

    async def log_ends(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The log end offset of each partition this process can learn: from its own logs, else
        from the partition's leader by ListOffsets (off the event loop); the others are left out
        (DescribeShareGroupOffsets' lag)."""

    def live_brokers(self, listener: str | None) -> list[tuple[int, str, int]]:
        """The brokers members fetch from, at their endpoints of ``listener``."""

    def coordinator_nodes(self, listener: str | None) -> list[tuple[int, str, int]]:
        """The nodes ClusterMetadata names (where members look for the coordinator)."""

    def member_channel(self, conn: Any, role: ShardRole) -> "MemberChannel":
        """The coordinator's channel for a member of ``role``'s shard registering on ``conn`` (one
        per connection)."""

    def closed_future(self, conn: Any) -> "asyncio.Future[Any]":
        """A future done when ``conn`` closes."""

    def answer_later(self, conn: Any, header: Any, answer: Awaitable[dict]) -> Any:
        """Write ``answer``'s result as the response to ``header`` when it is ready; returns
        ``deferred``."""
