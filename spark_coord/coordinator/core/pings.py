"""``PingScheduler``: failure detection (seeds 003 sections 5 and 8).

Every member is pinged every third of its session timeout; the ping waits in
the ping purgatory for 2/3 of the session timeout.  Only an error-free answer
to *that* ping, arriving before it expired, counts as a sign of life: it
completes the ping and resets the member's count of unanswered pings.  A late
answer (its ping expired already) or an answer carrying an error code does not,
so a member that always answers after 2/3 of its session, or that keeps
refusing our pings, is failed after ``coordinator.max.ping.retries`` + 1
expiries in a row.  Offsets in a late answer are still taken (they are the
member's positions, checked like any others).

Timer callbacks only post work to the coordinator's loop (``Coordinator.post``).
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING, Any, Mapping

from spark_coord.coordinator.core.api import CoordinatorApi
from spark_coord.coordinator.core.delayed import DelayedPing
from spark_coord.coordinator.core.group import ConsumerRegistry
from spark_coord.coordinator.core.purgatory import MemberKey, Purgatory
from spark_coord.coordinator.core.registration import is_int
from spark_coord.errors import ErrorCode

if TYPE_CHECKING:
    from spark_coord.coordinator.core.interface import CoordinatorCore

log = logging.getLogger(__name__)

#: A member's first ping comes up to this fraction of the ping interval early, at random, so that
#: members registering together (a failover, a restarted job) are not pinged in one burst ever after.
FIRST_PING_JITTER = 0.25


class PingScheduler:
    """Pings every member every session_timeout/3 and fails the ones that stop answering."""

    def __init__(self, coordinator: "CoordinatorCore", first_ping_jitter: float = FIRST_PING_JITTER,
                 rng: random.Random | None = None):
        self.c = coordinator
        self.first_ping_jitter = first_ping_jitter
        self._rng = rng or random.Random()
        self.purgatory = Purgatory(coordinator.timer, "ping")

    def start(self, member: ConsumerRegistry) -> None:
        """Schedule the member's first ping (a little early, at random)."""
        self._schedule(member, first=True)

    def stop(self, member: ConsumerRegistry) -> None:
        """No more pings for this member; its outstanding ping is forgotten."""
        if member.ping_handle is not None:
            member.ping_handle.cancel()
            member.ping_handle = None
        if member.ping is not None:
            member.ping.force_complete()
            member.ping = None

    def cancel_all(self) -> None:
        self.purgatory.cancel_all()

    def _schedule(self, member: ConsumerRegistry, first: bool = False) -> None:
        interval = max(1, member.session_timeout_ms // 3)
        if first and self.first_ping_jitter > 0:  # early, never late: failure detection is not delayed
            interval = max(1, round(interval * (1 - self.first_ping_jitter * self._rng.random())))
        member.ping_handle = self.c.timer.call_later(interval, lambda: self.c.post(self._due, member))

    def _due(self, member: ConsumerRegistry) -> None:
        group = self.c.current_group(member)
        if group is None:
            return
        self._schedule(member)
        if member.ping is not None and (not member.ping.is_completed or member.ping.expired):
            return  # the previous ping is still out, or its expiry (posted) is not counted yet
        if not self.c.leadership.fresh():
            return  # maybe deposed (paused past our ZooKeeper session): renew nobody's lease
        op = DelayedPing(group.group_id, member.consumer_id, member.session_timeout_ms,
                         on_expired=lambda expired: self.c.post(self._expired, member, expired))
        member.ping = op
        self.purgatory.try_complete_else_watch(op, [MemberKey(group.group_id, member.consumer_id)])
        self.c.send(group, member, CoordinatorApi.PING, {
            "coordinator_epoch": self.c.epoch, "generation_id": member.epoch if member.epoch is not None else -1,
            "consumer_id": member.consumer_id, "num_retries": member.failed_pings},
            lambda body: self._answered(member, op, body))
        self.c.metrics.ping_sent()  # metrics

    def _answered(self, member: ConsumerRegistry, op: DelayedPing, body: Mapping[str, Any]) -> None:
        group = self.c.current_group(member)
        if group is None:
            return
        if not isinstance(body, Mapping) or body.get("consumer_id", member.consumer_id) != member.consumer_id:
            log.warning("group %s: consumer %s sent a malformed or misaddressed ping answer; ignored",
                        group.group_id, member.consumer_id)
            return
        code = body.get("error_code", 0)
        if code != ErrorCode.NONE:
            log.warning("group %s: consumer %s answered ping with %s (not counted as an answer)", group.group_id,
                        member.consumer_id, ErrorCode.name_of(code) if is_int(code) else repr(code))
            return
        if op is member.ping and not op.is_completed:
            member.failed_pings = 0
            op.answered = True
            self.purgatory.check_and_complete(MemberKey(group.group_id, member.consumer_id))
            member.ping = None
        else:
            log.info("group %s: consumer %s answered an expired ping; it does not count", group.group_id,
                     member.consumer_id)
        self.c.offsets.accept(group, member, body.get("offsets"), body.get("generation_id"))

    def _expired(self, member: ConsumerRegistry, op: DelayedPing) -> None:
        group = self.c.current_group(member)
        if group is None or member.ping is not op:
            return
        member.ping = None
        if not self.c.leadership.fresh():
            return  # expired while we were paused (maybe deposed): no answer could have been read
        member.failed_pings += 1
        self.c.metrics.ping_expired()  # metrics
        log.warning("group %s: consumer %s did not answer ping (%d unanswered in a row)",
                    group.group_id, member.consumer_id, member.failed_pings)
        if member.failed_pings > self.c.config.max_ping_retries:
            self.c.handle_consumer_failure(group, member, f"{member.failed_pings} pings unanswered")
