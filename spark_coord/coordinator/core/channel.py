"""The coordinator's only view of a member's connection.

The broker's networking implements ``MemberChannel``; the coordinator never
touches sockets.  ``send`` must not block: it queues the request for the
connection and raises ``ChannelClosed`` when the connection is already gone.
The member's answer to that one request is handed to the ``on_answer`` given
with it, so an answer can never be taken for the answer to another request
(a late answer to an expired ping stays a late answer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

#: Called on the loop thread with the decoded answer body; never called when the
#: connection closes first (that is reported through ``Coordinator.on_channel_closed``).
OnAnswer = Callable[[Mapping[str, Any]], None]


class ChannelClosed(ConnectionError):
    """The member's connection is closed; nothing was sent."""


@dataclass(frozen=True)
class MemberDescription:
    """A Kafka member as Kafka's describe APIs show it (DescribeGroups, ConsumerGroupDescribe): who
    it is in the protocol it came in by."""

    #: The protocol of the door it came in by: ``classic`` or ``consumer``.
    protocol: str
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rack_id: str | None = None
    #: A classic member: the assignment protocol it is answered in, its subscription as it sent it in
    #: that protocol (empty: not known), and the assignment it synced last, by topic.
    assignment_protocol: str | None = None
    subscription: bytes = b""
    assignment: Mapping[str, list[int]] | None = None


@runtime_checkable
class MemberChannel(Protocol):
    """A registered member's connection, as the coordinator sees it."""

    #: ``host:port`` of the member, for logs and ``describe_group``.
    peer: str

    #: Optional (default True): a request sent renews the member's lease (it may fetch for its
    #: session timeout after receiving it).  Kafka-protocol members never see our requests: their
    #: lease runs from their own last request instead (``classic``).
    renews_lease: bool

    #: Optional: the server-side assignor the member asks its group to use (Kafka 4's consumers:
    #: ``uniform`` or ``range``); None or absent: the coordinator's own.
    assignor: str | None

    def send(self, api_key: int, body: dict, on_answer: OnAnswer, version: int = 0) -> None:
        """Queue a coordinator request (Ping/StopFetcher/StartFetcher) of ``version`` to the member.

        Raises ``ChannelClosed`` when the connection is closed."""
        ...

    def close(self) -> None:
        """Close the connection (idempotent).  The member rediscovers the coordinator."""
        ...

    def describe(self) -> MemberDescription | None:
        """Who the member is in Kafka's terms; None for a member of our own protocol (its registry
        entry describes it)."""
        ...
