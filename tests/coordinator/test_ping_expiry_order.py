"""An unanswered ping is counted even when the next ping tick lands beside its expiry.

Pings go out every ``session // 3`` ms and expire after ``2 * session // 3`` ms, so
an unanswered ping expires within a millisecond of the second tick after it.  When
that tick's posted work ran before the expiry's (the two timers fired in the same
loop iteration, tick first), the tick saw a completed ping, sent a new one, and
the expiry was then dropped as stale: a paused member kept its partitions for as
long as the two timers stayed that close (9-13 s instead of 2 sessions with a
2 s session).
"""

from __future__ import annotations

from coord_harness import PING, Harness, async_test

from spark_coord.coordinator.core.group import LEASE_MARGIN_MS


@async_test
async def test_expiry_posted_after_the_next_ping_tick_still_counts():
    h = await Harness(max_ping_retries=1).start()
    m, _ = h.register("c1", session=2000)  # ticks every 666 ms; a ping expires after 1333 ms
    await h.settle()
    await h.advance(666)                   # first ping, answered
    assert len(m.channel.requests(PING)) == 1
    m.muted = True                         # paused from here on
    await h.advance(666)                   # ping #2 at 1332, unanswered
    assert len(m.channel.requests(PING)) == 2
    await h.advance(665)                   # 1997: the tick at 1998 has not fired yet
    h.timer.advance(668)                   # the tick at 2664 and ping #2's expiry at 2665 fire together, tick first
    await h.settle()
    member = h.group().members["c1"]
    assert member.failed_pings == 1, "the expiry of ping #2 was lost"
    await h.advance(2000)                  # the retry ping expires too: more than max.ping.retries
    assert m.channel.closed                # failed; removed once its lease surely ended
    await h.advance(2000 + LEASE_MARGIN_MS)
    assert "c1" not in h.group().members
