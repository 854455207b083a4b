"""What the coordinator is to its parts and to its doors: two narrow interfaces it implements.

``Coordinator`` (``core.coordinator``) composes its parts -- the ``PingScheduler``, the
``Rebalancer``, the ``OffsetCommitter``, the ``LeadershipLease`` -- and each part is handed the
coordinator to call back into.  The parts type that handle as ``CoordinatorCore``, the doors
(``coordinator.doors``) theirs as ``GroupCoordinator``; neither imports the class, so the
composition has no import circle and a door can be driven by anything with these attributes.
The parts themselves (``offsets``, ``rebalancer``, ``leadership``) and the metrics observer are
typed loosely here: naming their modules would bring the circle back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping, Protocol

if TYPE_CHECKING:  # pragma: no cover
    import asyncio

    from spark_coord.coordinator.core.assignors import Assignor
    from spark_coord.coordinator.core.channel import MemberChannel, OnAnswer
    from spark_coord.coordinator.core.clock import Clock, Timer
    from spark_coord.coordinator.core.config import CoordinatorConfig
    from spark_coord.coordinator.core.group import ConsumerRegistry, GroupRegistry
    from spark_coord.coordinator.core.subscription import TopicCount
    from spark_coord.coordinator.storage.store import GroupStore
    from spark_coord.errors import ErrorCode

__all__ = ["CoordinatorCore", "GroupCoordinator"]


class _Common(Protocol):
    config: "CoordinatorConfig"
    clock: "Clock"
    timer: "Timer"
    store: "GroupStore"
    #: Elected and serving; the epoch of its election (None when not).
    active: bool
    epoch: int | None
    groups: "dict[str, GroupRegistry]"
    #: Share groups held here (``doors.share_group``): a group id is of one type at a time; and the
    #: share door's hook taking their saved members back when the coordinator is elected.
    share_groups: dict[str, Any]
    share_restorer: Callable[[dict[str, bytes]], None] | None
    topics: dict[str, int]
    topic_ids: dict[str, bytes]
    #: The parts (``offsets.OffsetCommitter``, ``rebalancer.Rebalancer``, ``leadership.LeadershipLease``)
    #: and the metrics observer (``metrics.CoordinatorMetrics``).
    offsets: Any
    rebalancer: Any
    leadership: Any
    metrics: Any

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop soon, unless the coordinator resigned meanwhile."""

    def spawn(self, coro: Awaitable[Any], what: str) -> "asyncio.Task[Any]":
        """Run ``coro`` as a task of this incarnation (cancelled on deactivate); Fenced deactivates."""

    def handle_consumer_failure(self, group: "GroupRegistry", member: "ConsumerRegistry", reason: str) -> None:
        """Stop pinging the member, close its connection; it is removed once it can no longer be
        fetching (at once when it holds no assignment)."""

    def member_left(self, group: "GroupRegistry", member: "ConsumerRegistry") -> None:
        """The member stopped fetching and leaves: rebalance at once."""

    def group_type(self, group_id: str) -> str | None:
        """``"share"``, ``"consumer"`` (any member kind of the one registry), or None for a group id
        nobody uses here: a group id is of one type at a time."""


class CoordinatorCore(_Common, Protocol):
    """The coordinator as its own parts (pings, rebalancer, offsets, leadership) see it."""

    #: ``() -> [(broker id, host, port)]``: the brokers members fetch from.
    cluster_view: Callable[[], Iterable[tuple[int, str, int]]]
    #: Called with (group id, offsets) after offsets were written (the standalone coordinator's mirror).
    on_committed: Callable[[str, dict], None] | None

    def fenced(self, what: str) -> None:
        """A store write found that another coordinator was elected: drop everything."""

    def current_group(self, member: "ConsumerRegistry") -> "GroupRegistry | None":
        """The member's group if the member is still registered there with a live channel."""

    def send(self, group: "GroupRegistry", member: "ConsumerRegistry", api_key: int, body: dict,
             on_answer: "OnAnswer", version: int = 0) -> bool:
        """Send a request to a member (its lease runs from now); False if its connection is gone."""

    def member_of(self, channel: "MemberChannel") -> "tuple[GroupRegistry, ConsumerRegistry] | None":
        """The group and member registered on ``channel``, if any."""

    def assignor_for(self, group: "GroupRegistry") -> "Assignor":
        """The assignor that computes ``group``'s targets."""


class GroupCoordinator(_Common, Protocol):
    """The coordinator as the doors see it: the registry, and the calls that change it -- nothing
    outside the coordinator writes registry fields."""

    def register(self, channel: "MemberChannel", body: Mapping[str, Any], version: int = 1,
                 incremental: bool | None = None, kind: str | None = None,
                 external_id: str | None = None) -> dict[str, Any]:
        """Answer a registration; on success the member joins its group (``kind``: the door it came in
        by; ``external_id``: its Kafka member id when it registers under its instance id)."""

    def released(self, group: "GroupRegistry", member: "ConsumerRegistry", partitions: "set | None",
                 reason: str) -> None:
        """A member stopped ``partitions`` (None: everything) on its own: they are free, and the group
        gets a new assignment."""

    def on_channel_closed(self, channel: "MemberChannel") -> None:
        """A member's connection went away."""

    def set_topic_filter(self, group_id: str, consumer_id: str, topic_filter: "Callable[[str], bool] | None") -> None:
        """Limit what the member is given to the topics its principal may Read."""

    def request_rebalance(self, group: "GroupRegistry", reason: str) -> None:
        """The group needs a new assignment."""

    def resubscribe(self, group_id: str, consumer_id: str, topic_count: "TopicCount") -> bool:
        """A member changed its subscription; False if it is not a member."""

    def topic_of(self, topic_id: bytes) -> str | None:
        """The topic of an id (None: no such topic, or it was deleted)."""

    async def delete_group(self, group_id: str) -> "ErrorCode":
        """Kafka's DeleteGroups: forget an empty group, here and in the store."""

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) \
            -> "ErrorCode | dict[tuple[str, int], ErrorCode]":
        """Kafka's OffsetDelete: forget the group's committed offsets of ``partitions``, here and in
        the store (raises Fenced, StoreError)."""

    def heard_from(self, group_id: str, consumer_id: str, channel: "MemberChannel", at_ms: int) -> None:
        """A member whose lease runs from its own requests sent one."""
