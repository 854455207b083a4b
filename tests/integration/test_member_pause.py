"""A paused member (SIGSTOP) on real processes: its connection stays open, so only the pings can tell.

The coordinator must fail it because its pings go unanswered (the socket is
never closed by the member), within the session timeout plus a margin; its
partitions move to the others.  After SIGCONT the member finds itself dropped
(its connection was closed by the coordinator, or it hears nothing), journals
the lost connection, registers again and gets its share back.
"""

from __future__ import annotations

import logging
import signal
import time

from helpers import wait_until
from support import MEMBER_SESSION_MS, balanced, broker_log_has, topic_partitions, wait_balanced

from spark_coord.zk import paths

log = logging.getLogger(__name__)

TOPIC_PARTITIONS = 6
#: Failing a silent member takes (max.ping.retries + 1) unanswered pings of 2/3 session each; the
#: first goes out up to 1/3 session after the last answer, the retry at the tick after the first
#: expired: at most 2 sessions (4 s) with the default of one retry, 3.3-4 s measured, plus the
#: rebalance among the others.  (Up to 13 s were once seen: an expiry lost to the ping tick that
#: lands beside it, see tests/coordinator/test_ping_expiry_order.py.)  Its partitions then wait
#: until its lease surely ended (a session plus 0.5 s after the last ping sent to it) before they
#: move: about 2.5 sessions in all.
DETECT_BOUND_S = 2.5 * MEMBER_SESSION_MS / 1000 + 3.0


def _coordinator_id(czk) -> int:
    return int(czk.get(paths.shard_leader(0))[0].decode())


def test_sigstopped_member_is_failed_by_pings_then_rejoins(cluster, czk, members, create):
    group, topic = "g-pause", "pause"
    create(topic, TOPIC_PARTITIONS)
    parts = topic_partitions(topic, TOPIC_PARTITIONS)
    ms = [members(f"p{i}", group, topics=[topic]) for i in range(3)]
    gen1, owned = wait_balanced(ms, parts)
    assert sorted(len(v) for v in owned.values()) == [2, 2, 2], owned
    coordinator = _coordinator_id(czk)
    # members journal a StartFetcher before they answer it: paused between the two, the victim fails the round
    # (and the next) instead of its pings -- so it is paused once the coordinator settled the group with all three
    wait_until(lambda: _last_settled(cluster, coordinator, group) == "3 member(s), 6 partition(s) held, 0 absent",
               timeout=30, message=lambda: f"the coordinator to settle {group} with all three members; last: "
                                           f"{_last_settled(cluster, coordinator, group)}")

    victim = ms[1]
    others = [m for m in ms if m is not victim]
    victim_parts = owned[victim.name]
    failed_by_pings = f"consumer {victim.consumer_id} failed: "
    t_stop = time.monotonic()
    victim.signal(signal.SIGSTOP)
    try:
        gen2, owned2 = wait_balanced(others, parts, above=gen1, timeout=DETECT_BOUND_S + 10)
        moved_after = time.monotonic() - t_stop
        # the coordinator's reason: unanswered pings -- the paused member's socket is still open
        log_text = cluster.log_path(coordinator).read_text(errors="replace")
        reasons = [line for line in log_text.splitlines() if failed_by_pings in line]
        assert reasons and all("pings unanswered" in line for line in reasons), reasons
        assert victim.alive()
    finally:
        t_cont = time.time()  # before SIGCONT: the resumed member may journal within microseconds
        victim.signal(signal.SIGCONT)
    print(f"\nSIGSTOPped member failed by unanswered pings; its partitions moved after {moved_after:.2f} s "
          f"(generation {gen1} -> {gen2}, session {MEMBER_SESSION_MS} ms)")
    assert moved_after < DETECT_BOUND_S
    assert victim_parts <= set().union(*owned2.values())

    # resumed: it notices it was dropped, registers again and gets a share in a newer generation
    wait_until(lambda: any(e["ts"] >= t_cont for e in victim.events("lost")), timeout=MEMBER_SESSION_MS / 1000 + 10,
               message=lambda: f"the resumed member to notice it was dropped; its log:\n{victim.log_tail()}")
    gen3, owned3 = wait_until(lambda: (lambda b: b if b and owned_by(b, victim) else None)(
        balanced(ms, parts, above=gen2)), timeout=30,
        message=lambda: f"a balanced assignment including {victim.name} above generation {gen2}")
    assert sorted(len(v) for v in owned3.values()) == [2, 2, 2], owned3
    assert broker_log_has(cluster, coordinator, f"consumer {victim.consumer_id} registered")
    log.info("member %s rejoined in generation %d", victim.name, gen3)


def _last_settled(cluster, coordinator: int, group: str) -> str | None:
    """The tail of the coordinator's last "group G rebalanced (how): N member(s), ..." line."""
    marker = f"group {group} rebalanced ("
    lines = [line for line in cluster.log_path(coordinator).read_text(errors="replace").splitlines() if marker in line]
    return lines[-1].split("): ", 1)[-1] if lines else None


def owned_by(result, member) -> bool:
    """Does the balanced ``(generation, owned)`` give ``member`` at least one partition?"""
    return bool(result[1].get(member.name))
