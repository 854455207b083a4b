"""The coordinator's delayed operations (seeds 003 sections 5 and 8).

``DelayedPing``: one member's ping awaiting its answer; it expires after 2/3 of
the member's session timeout and then tells the coordinator (by posting work,
never by touching the group itself).

``DelayedJoin``: a Kafka member's JoinGroup waiting for its assignment (Kafka's
DelayedJoin), expiring after the member's rebalance timeout.

``DelayedFetcherRound``: a StopFetcher or StartFetcher round awaiting the members
a rebalance sends it to.  Each member answers for itself; the round completes when
none is pending (answered, refused, or gone) or expires after 2/3 of the members'
session timeout, and resolves an asyncio future the rebalancer awaits.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Callable, Iterable

from spark_coord.coordinator.core.purgatory import DelayedOperation


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
    """A StopFetcher/StartFetcher round over a fixed set of members, each answering for itself.

    It completes when no member is pending any more -- each one answered, answered with an
    error (``blame``), or went away (``drop``) -- or expires after 2/3 of the members'
    session timeout, when the members still pending are blamed for it.  A member's
    trouble never holds up the others' answers: the rebalancer goes on with those who
    answered (``done``) and retries the rest."""

    def __init__(self, kind: RoundKind, group_id: str, epoch: int, consumer_ids: Iterable[str],
                 delay_ms: int, future: "asyncio.Future[None]"):
        super().__init__(delay_ms)
        self.kind = kind
        self.group_id = group_id
        self.epoch = epoch
        self.members = frozenset(consumer_ids)
        self.pending = set(self.members)
        #: Members that answered without an error.
        self.done: set[str] = set()
        #: Members that did not: why (an error code, a wrong epoch, gone, timed out).
        self.failed: dict[str, str] = {}
        #: Members whose answer (or silence) is their own fault: counted against them.
        self.blamed: set[str] = set()
        self.future = future

    def answered(self, consumer_id: str) -> bool:
        """Record one member's successful answer; False if it was not awaited."""
        if consumer_id not in self.pending:
            return False
        self.pending.discard(consumer_id)
        self.done.add(consumer_id)
        return True

    def drop(self, consumer_id: str, reason: str) -> bool:
        """The member went away (failed, left, lost its connection): stop waiting for it."""
        if consumer_id not in self.pending:
            return False
        self.pending.discard(consumer_id)
        self.failed[consumer_id] = reason
        return True

    def blame(self, consumer_id: str, reason: str) -> bool:
        """The member answered with an error: stop waiting for it, and count it against it."""
        if self.drop(consumer_id, reason):
            self.blamed.add(consumer_id)
            return True
        return False

    def try_complete(self) -> bool:
        if not self.pending:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        if self.expired:
            for cid in sorted(self.pending):
                self.failed[cid] = f"no {self.kind.value} answer within {self.delay_ms} ms"
                self.blamed.add(cid)
            self.pending.clear()
        if not self.future.done():
            self.future.set_result(None)

    def outcome(self) -> str | None:
        """None when every member answered, else why not (for logs and ``last_error``)."""
        if not self.failed:
            return None
        return "; ".join(f"{cid}: {why}" for cid, why in sorted(self.failed.items()))

    def __repr__(self) -> str:
        return f"DelayedFetcherRound({self.kind.value}, {self.group_id}, epoch {self.epoch})"


class DelayedJoin(DelayedOperation):
    """A Kafka member's JoinGroup waiting for its assignment (Kafka's DelayedJoin).

    It completes when the member's answer is ready (``generation`` set: the JoinGroup is
    answered with it), when the member or its connection is gone (``gone``), or when
    its rebalance timeout passes; the future gets the generation, or None for the
    last two (the JoinGroup is answered with an error and the client joins again)."""

    def __init__(self, group_id: str, member_id: str, delay_ms: int, future: "asyncio.Future[int | None]",
                 on_done: Callable[[], None] | None = None):
        super().__init__(max(1, delay_ms))
        self.group_id = group_id
        self.member_id = member_id
        self.generation: int | None = None
        self.gone = False
        self.future = future
        #: Runs when it completes, before anything else runs (the member waited here until now).
        self._on_done = on_done

    def try_complete(self) -> bool:
        if self.generation is not None or self.gone:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        if self._on_done is not None and not self.gone:
            self._on_done()
        if not self.future.done():
            self.future.set_result(None if self.gone or self.expired else self.generation)

    def __repr__(self) -> str:
        return f"DelayedJoin({self.group_id}/{self.member_id})"
