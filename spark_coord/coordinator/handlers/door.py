"""What the front door's handlers need from the process that serves them (``FrontDoor``)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Awaitable, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.coordinator.channel import MemberChannel
    from spark_coord.coordinator.classic import ClassicGroups
    from spark_coord.coordinator.consumer_group import ConsumerGroups
    from spark_coord.coordinator.coordinator import Coordinator
    from spark_coord.errors import ErrorCode


class FrontDoor(Protocol):
    """A broker or a standalone coordinator, as the group API handlers see it."""

    #: This process's coordinator (None: it does not stand for election) and its Kafka doors.
    coordinator: "Coordinator | None"
    classic: "ClassicGroups | None"
    consumer: "ConsumerGroups | None"
    #: Who coordinates, as the election node says (-1: nobody right now), and its epoch.
    coordinator_id: int
    coordinator_epoch: int
    #: What a handler returns when it answers later itself.
    deferred: Any

    def not_serving(self) -> "ErrorCode | None":
        """Why this process cannot serve a group request now: NOT_COORDINATOR, or
        COORDINATOR_LOAD_IN_PROGRESS while it restores groups; None when it can."""

    def coordinator_endpoint(self, conn: Any) -> tuple[int, str, int] | None:
        """The coordinator's endpoint on the listener ``conn`` came in on (None: none elected)."""

    def live_brokers(self, listener: str | None) -> list[tuple[int, str, int]]:
        """The brokers members fetch from, at their endpoints of ``listener``."""

    def coordinator_nodes(self, listener: str | None) -> list[tuple[int, str, int]]:
        """The nodes ClusterMetadata names (where members look for the coordinator)."""

    def member_channel(self, conn: Any) -> "MemberChannel":
        """The coordinator's channel for a member registering on ``conn`` (one per connection)."""

    def closed_future(self, conn: Any) -> "asyncio.Future[Any]":
        """A future done when ``conn`` closes."""

    def answer_later(self, conn: Any, header: Any, answer: Awaitable[dict]) -> Any:
        """Write ``answer``'s result as the response to ``header`` when it is ready; returns
        ``deferred``."""
