"""``LeadershipLease``: a coordinator renews members' leases only while its election is fresh.

Members keep fetching until their session timeout has passed since a
coordinator last pinged them (see ``coordinator``).  A coordinator whose broker
was paused (a GC pause, SIGSTOP) past its ZooKeeper session is no longer the
coordinator when it resumes, but its timers fire at once and it would ping its
old members -- renewing leases a newly elected coordinator does not know about --
before it learns that its session expired.  So the coordinator pings only while
ZooKeeper confirmed its election recently: a fenced no-op write (the election
checks alone) every quarter of ``leadership_timeout_ms`` (the broker's ZooKeeper
session timeout), and pings stop once 2/3 of it passed since the last confirmed
one was *sent*.  ZooKeeper cannot have expired a session within its timeout of a
request it answered, and no other broker can be elected before it did; so every
ping of a deposed coordinator was sent before its successor was elected, and the
successor's wait for absent members (their session timeout from its election)
outlasts every lease such a ping renewed.

For the same reason a coordinator whose election is not fresh decides no
membership: it fails nobody for pings that expired meanwhile (they could not be
answered while it was paused), removes no absent member, expires no Kafka member's
session, and takes no registration (NOT_COORDINATOR: the member tries again, and
keeps what it claims).  A deposed coordinator that told a member, which its
successor would take back, that it "is not a member" would make it drop its
partitions and the positions it claimed, and read them again from the offsets
in ZooKeeper (invariant 7).  Each put-off decision is looked at again once the
election is confirmed, or dropped when the coordinator resigns.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from spark_coord.coordinator.core.clock import TimerHandle
from spark_coord.coordinator.storage.store import StoreError

if TYPE_CHECKING:
    from spark_coord.coordinator.core.interface import CoordinatorCore

log = logging.getLogger(__name__)


class LeadershipLease:
    """Periodic election checks and the freshness test the ping scheduler asks."""

    def __init__(self, coordinator: "CoordinatorCore"):
        self.c = coordinator
        self.timeout_ms = coordinator.config.leadership_timeout_ms
        self.confirmed_at: int | None = None   # send time of the last confirmed check (clock ms)
        self._handle: TimerHandle | None = None
        self._checking = False
        self._lapsed = False

    def start(self) -> None:
        """Just elected: the election itself is the first confirmation."""
        self.confirmed_at = self.c.clock.now_ms()
        self._lapsed = False
        self._schedule()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self.confirmed_at = None

    def fresh(self) -> bool:
        """May the coordinator renew members' leases now?"""
        if self.timeout_ms <= 0:
            return True
        ok = self.confirmed_at is not None and self.c.clock.now_ms() < self.confirmed_at + self.timeout_ms * 2 // 3
        if not ok and not self._lapsed:
            self._lapsed = True
            log.warning("ZooKeeper has not confirmed this coordinator's election for %d ms: no pings until it does",
                        self.c.clock.now_ms() - (self.confirmed_at or 0))
            self._check()
        return ok

    def recheck_ms(self) -> int:
        """How long a decision put off until the election is confirmed again waits before it looks
        again (the interval of the election checks)."""
        return max(1, self.timeout_ms // 4)

    def _schedule(self) -> None:
        if self.timeout_ms > 0:
            self._handle = self.c.timer.call_later(max(1, self.timeout_ms // 4), lambda: self.c.post(self._tick))

    def _tick(self) -> None:
        self._schedule()
        self._check()

    def _check(self) -> None:
        if not self._checking:
            self._checking = True
            self.c.spawn(self._verify(), "verify the election")

    async def _verify(self) -> None:
        sent = self.c.clock.now_ms()
        try:
            await self.c.store.verify()  # Fenced propagates: the coordinator deactivates
        except StoreError as e:
            log.info("could not confirm the election with ZooKeeper: %s", e)
            return
        finally:
            self._checking = False
        self.confirmed_at = max(self.confirmed_at or 0, sent)
        if self._lapsed:
            self._lapsed = False
            log.info("ZooKeeper confirmed the election again; pings resume")
