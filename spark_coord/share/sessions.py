"""Share sessions (KIP-932), keyed by (group, member), as Kafka's ShareSessionCache.

Epoch 0 opens one (replacing any old one; records are held by the member, not the session, so it
keeps them and may acknowledge them in the new one), each later request must carry the session's
next epoch (else INVALID_SHARE_SESSION_EPOCH and the session stays as it was; no session:
SHARE_SESSION_NOT_FOUND), -1 closes it, and the records its member still holds go back.  A session
is not tied to a connection (librdkafka may send a session's requests over another connection than
the one that opened it, and closes its bootstrap connections early): a member that dies leaves its
records to their locks, and its session is dropped once idle for ``SESSION_IDLE_MS``.

``ShareSessions`` is the part of ``SharePartitionManager`` that keeps them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Iterable

from spark_coord.errors import ErrorCode

log = logging.getLogger(__name__)

__all__ = ["ShareSession", "ShareSessions", "OPEN_EPOCH", "FINAL_EPOCH", "MAX_EPOCH", "SESSION_IDLE_MS"]

#: Epochs of a share session (ShareFetch / ShareAcknowledge); after MAX_EPOCH comes 1, as in Kafka.
OPEN_EPOCH, FINAL_EPOCH, MAX_EPOCH = 0, -1, 2**31 - 1
#: A share session that saw no request for this long is dropped (its member is gone; what it held
#: went back when the locks ran out).
SESSION_IDLE_MS = 120_000


@dataclass
class ShareSession:
    """One member's share session on this broker (Kafka's ShareSession)."""

    group: str
    member_id: str
    #: The epoch the member's next request must carry.
    epoch: int = 1
    partitions: list[tuple[str, int]] = field(default_factory=list)
    #: Where the next fetch starts among ``partitions`` (fairness).
    start: int = 0
    #: When it last served a request (the manager's clock, ms).
    used_ms: float = 0.0

    def __contains__(self, tp: tuple[str, int]) -> bool:
        return tp in self.partitions

    def add(self, topic: str, partition: int) -> None:
        """A partition named in a request joins the session (the caller checked it first)."""
        if (topic, partition) not in self.partitions:
            self.partitions.append((topic, partition))

    def in_turn(self) -> list[tuple[str, int]]:
        """The session's partitions, starting one further than the last call did (each gets its
        turn to be acquired from first)."""
        n = len(self.partitions)
        if n == 0:
            return []
        start = self.start % n
        self.start = (start + 1) % n
        return self.partitions[start:] + self.partitions[:start]


class ShareSessions:
    """The share sessions of a ``SharePartitionManager`` (which sets ``sessions``, ``max_sessions`` and
    ``clock``, and releases a member's records: ``release_member``)."""

    sessions: dict[tuple[str, str], ShareSession]
    max_sessions: int
    clock: Callable[[], float]

    def release_member(self, group: str, member_id: str, partitions: Iterable[tuple[str, int]]) -> int:
        raise NotImplementedError

    def session(self, group: str, member_id: str, epoch: int) -> tuple[ShareSession | None, ErrorCode]:
        """The member's session for a request carrying ``epoch`` (ShareFetch and ShareAcknowledge):
        opened (0), continued (its next epoch) or found to close (-1)."""
        key = (group, member_id)
        session = self.sessions.get(key)
        if epoch == OPEN_EPOCH:
            if session is not None:  # as Kafka: the old session goes, the member keeps what it holds
                log.info("share session %s/%s opened again; the member keeps the records it holds (acknowledged "
                         "in the new session, or back when their locks run out)", group, member_id)
            elif len(self.sessions) >= self.max_sessions:
                log.warning("share session %s/%s refused: this broker keeps %d share sessions already "
                            "(group.share.max.share.sessions)", group, member_id, len(self.sessions))
                return None, ErrorCode.SHARE_SESSION_LIMIT_REACHED
            session = self.sessions[key] = ShareSession(group, member_id)
        elif session is None:
            return None, ErrorCode.SHARE_SESSION_NOT_FOUND
        elif epoch != FINAL_EPOCH:
            if epoch != session.epoch:  # as Kafka: refused, and the session stays as it was
                log.info("share session %s/%s: epoch %d, expected %d; refused", group, member_id, epoch,
                         session.epoch)
                return None, ErrorCode.INVALID_SHARE_SESSION_EPOCH
            session.epoch = 1 if session.epoch >= MAX_EPOCH else session.epoch + 1
        session.used_ms = self.clock()
        return session, ErrorCode.NONE

    def close_session(self, session: ShareSession) -> None:
        """A final request (-1) was served: the session goes, its member's records go back."""
        self._close(session)

    def is_open(self, session: ShareSession) -> bool:
        """``session`` is still its member's session here (not closed, evicted or opened again)."""
        return self.sessions.get((session.group, session.member_id)) is session

    def forget(self, session: ShareSession, partitions: Iterable[tuple[str, int]]) -> None:
        """ForgottenTopicsData: these partitions leave ``session``; its member's records there go back."""
        gone = [tp for tp in partitions if tp in session]
        for tp in gone:
            session.partitions.remove(tp)
        if gone:
            self.release_member(session.group, session.member_id, gone)

    def _close(self, session: ShareSession) -> int:
        """Drop ``session``; the records its member holds go back.  How many did."""
        key = (session.group, session.member_id)
        if self.sessions.get(key) is session:
            del self.sessions[key]
        return self.release_member(session.group, session.member_id, session.partitions)

    def _evict_idle(self, now: float) -> None:
        for session in [s for s in self.sessions.values() if now - s.used_ms > SESSION_IDLE_MS]:
            log.info("share session %s/%s idle for %d s; dropped", session.group, session.member_id,
                     SESSION_IDLE_MS // 1000)
            self._close(session)
