"""The coordinator's only view of a member's connection.

The broker's networking implements ``MemberChannel``; the coordinator never
touches sockets.  ``send`` must not block: it queues the request for the
connection and raises ``ChannelClosed`` when the connection is already gone.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


class ChannelClosed(ConnectionError):
    """The member's connection is closed; nothing was sent."""


@runtime_checkable
class MemberChannel(Protocol):
    """A registered member's connection, as the coordinator sees it."""

    #: ``host:port`` of the member, for logs and ``describe_group``.
    peer: str

    def send(self, api_key: int, body: dict) -> None:
        """Queue a coordinator request (Ping/StopFetcher/StartFetcher) to the member.

        Raises ``ChannelClosed`` when the connection is closed."""
        ...

    def close(self) -> None:
        """Close the connection (idempotent).  The member rediscovers the coordinator."""
        ...
