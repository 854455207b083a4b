"""Liveness of a member that heartbeats instead of answering pings (Kafka's protocols).

Such a member never sees the coordinator's requests: its lease runs from its own
last request (``contact``), which is when Kafka's session timeout starts too.  A
Ping to it is answered for it when it was heard from within the last third of its
session timeout, held until its next request otherwise, and a member silent for its
whole session timeout is failed (``door.session_expired``), to the millisecond, by
a timer that re-arms itself when the member spoke since it was set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Protocol

from spark_coord.coordinator.core.channel import MemberChannel, OnAnswer
from spark_coord.errors import ErrorCode

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.coordinator.core.clock import TimerHandle
    from spark_coord.coordinator.core.interface import GroupCoordinator


class _LeaseDoor(Protocol):
    """What the lease uses of the door its member came in by."""

    @property
    def c(self) -> GroupCoordinator: ...

    def session_expired(self, member: Any) -> None:  # each door takes its own member class
        ...


class _Leased(MemberChannel, Protocol):
    """A member mixing ``HeartbeatLease`` in, as the lease's methods see it: what its class sets,
    and the lease's own state.  (A self type, not attributes of the mixin: a door's ``door`` keeps
    its own type in its class.)"""

    @property
    def door(self) -> _LeaseDoor: ...

    group_id: str
    key: str
    session_timeout_ms: int
    closed: bool
    last_contact_ms: int
    _held_ping: tuple[dict, OnAnswer] | None
    _expiry: TimerHandle | None

    def _waiting_here(self) -> bool: ...

    def _answer(self, body: Mapping[str, Any]) -> dict: ...

    def _arm(self, delay_ms: int | None = None) -> None: ...

    def _check_expiry(self) -> None: ...


class HeartbeatLease:
    """Mixed into a door's ``MemberChannel``; the class sets ``door`` (with ``c``, the coordinator,
    and ``session_expired(member)``), ``group_id``, ``key``, ``session_timeout_ms`` and ``closed``,
    then calls ``_start_lease``."""

    renews_lease = False
    #: None unless the member's door sets the server-side assignor it names.
    assignor: str | None = None
    last_contact_ms: int
    _held_ping: tuple[dict, OnAnswer] | None
    _expiry: TimerHandle | None

    def _start_lease(self: _Leased) -> None:
        self.last_contact_ms = self.door.c.clock.now_ms()
        self._held_ping = None
        self._expiry = None
        self._arm()

    def _end_lease(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        self._held_ping = None

    def _waiting_here(self) -> bool:
        """Is one of its requests waiting here (it is alive, whatever its last contact)?"""
        return False

    def _answer(self: _Leased, body: Mapping[str, Any]) -> dict:
        """A ping's or StopFetcher's answer: no offsets (a Kafka member commits them itself)."""
        return {"error_code": ErrorCode.NONE, "consumer_id": self.key,
                "generation_id": body.get("generation_id", -1), "offsets": []}

    def _ping(self: _Leased, body: dict, on_answer: OnAnswer) -> None:
        now = self.door.c.clock.now_ms()
        if self._waiting_here() or now - self.last_contact_ms <= max(1, self.session_timeout_ms // 3):
            on_answer(self._answer(body))
        elif now - self.last_contact_ms > self.session_timeout_ms:
            self.door.c.post(self.door.session_expired, self)  # Kafka's rule: no heartbeat for a session
        else:
            self._held_ping = (body, on_answer)

    def _arm(self: _Leased, delay_ms: int | None = None) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        c = self.door.c
        self._expiry = None if self.closed else c.timer.call_later(
            self.session_timeout_ms if delay_ms is None else delay_ms, lambda: c.post(self._check_expiry))

    def _check_expiry(self: _Leased) -> None:
        self._expiry = None
        if self.closed:
            return
        if self._waiting_here():
            self._arm(max(1, self.session_timeout_ms))
            return
        left = self.last_contact_ms + self.session_timeout_ms - self.door.c.clock.now_ms()
        if left > 0:
            self._arm(left)
        else:
            self.door.session_expired(self)

    def contact(self: _Leased) -> None:
        """The member sent a request: it is alive (answers a held ping), and may fetch for its
        session timeout from now."""
        self.last_contact_ms = self.door.c.clock.now_ms()
        if self._expiry is None:  # an armed timer finds the new contact when it fires, and waits on
            self._arm()
        self.door.c.heard_from(self.group_id, self.key, self, self.last_contact_ms)
        held, self._held_ping = self._held_ping, None
        if held is not None:
            held[1](self._answer(held[0]))
