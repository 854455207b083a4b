"""The coordinator's delayed operations (seeds 003 sections 5 and 8).

``DelayedPing``: one member's ping awaiting its answer; it expires after 2/3 of
the member's session timeout and then tells the coordinator (by posting work,
never by touching the group itself).

``DelayedFetcherRound``: a StopFetcher or StartFetcher round awaiting every
member of the group's snapshot.  It completes when all answered, fails at once
when forced by a member failure or a membership change (``fail``), and
expires after 2/3 of the members' session timeout.  Its outcome -- None for
success, else the reason -- resolves an asyncio future the rebalancer awaits.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Callable, Iterable

from spark_coord.coordinator.purgatory import DelayedOperation


def response_timeout_ms(session_timeout_ms: int) -> int:
    """How long a member has to answer a coordinator request: 2/3 of its session timeout."""
    return max(1, (2 * int(session_timeout_ms)) // 3)


class DelayedPing(DelayedOperation):
    """A ping sent to one member, waiting for its answer."""

    def __init__(self, group_id: str, consumer_id: str, session_timeout_ms: int,
                 on_expired: Callable[["DelayedPing"], None]):
        super().__init__(response_timeout_ms(session_timeout_ms))
        self.group_id = group_id
        self.consumer_id = consumer_id
        self.answered = False
        self._on_expired = on_expired

    def try_complete(self) -> bool:
        return self.force_complete() if self.answered else False

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self._on_expired(self)

    def __repr__(self) -> str:
        return f"DelayedPing({self.group_id}/{self.consumer_id})"


class RoundKind(enum.Enum):
    STOP_FETCHER = "StopFetcher"
    START_FETCHER = "StartFetcher"


class DelayedFetcherRound(DelayedOperation):
    """A StopFetcher/StartFetcher round over a fixed set of members."""

    def __init__(self, kind: RoundKind, group_id: str, generation_id: int, consumer_ids: Iterable[str],
                 delay_ms: int, future: "asyncio.Future[str | None]"):
        super().__init__(delay_ms)
        self.kind = kind
        self.group_id = group_id
        self.generation_id = generation_id
        self.members = frozenset(consumer_ids)
        self.pending = set(self.members)
        self.failure: str | None = None
        #: Members whose answer made the round fail (an error code, a wrong generation).
        self.blamed: set[str] = set()
        self.future = future
        #: StartFetcher rounds: ``{consumer_id: {thread_id: [(topic, partition)]}}`` being handed out.
        self.planned: dict[str, dict[str, list[tuple[str, int]]]] = {}

    def answered(self, consumer_id: str) -> bool:
        """Record one member's successful answer; False if it was not awaited."""
        if consumer_id not in self.pending:
            return False
        self.pending.discard(consumer_id)
        return True

    def fail(self, reason: str) -> bool:
        """Fail the round now (a member failed, joined, or answered with an error)."""
        if self.is_completed:
            return False
        self.failure = reason
        return self.force_complete()

    def blame(self, consumer_id: str, reason: str) -> bool:
        """Fail the round because of ``consumer_id``'s answer."""
        if self.is_completed:
            return False
        self.blamed.add(consumer_id)
        return self.fail(reason)

    def try_complete(self) -> bool:
        if self.failure is not None or not self.pending:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        if self.failure is None and self.expired:
            self.failure = f"{self.kind.value} round timed out after {self.delay_ms} ms waiting for {sorted(self.pending)}"
        if not self.future.done():
            self.future.set_result(self.failure)

    def __repr__(self) -> str:
        return f"DelayedFetcherRound({self.kind.value}, {self.group_id}, gen {self.generation_id})"
