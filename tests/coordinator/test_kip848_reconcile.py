"""How KIP-848 members (``group.protocol=consumer``) reconcile on the coordinator core, with a
hand-driven clock: a StartFetcher is answered as soon as it is queued (an attempt that stops
nobody settles before any heartbeat), and a change while a StopFetcher nobody was told of yet
waits withdraws it, so the member is told the newest target once instead of one round per
change; a StopFetcher already told is never taken back, and withdrawals end after a heartbeat
interval.  Throughout, no partition is in two members' assignments."""

from __future__ import annotations

import asyncio

from coord_harness import async_test
from test_consumer_group import INTERVAL, Modern, _settle, _start

from spark_coord.coordinator.core.group import GroupState
from spark_coord.coordinator.doors.consumer_group import JOIN_WAIT_MS

ALL = {("t", p) for p in range(6)}


def _one_holder(*members: Modern) -> None:
    """Invariant 1 as the members see it: no partition in two members' assignments."""
    seen: dict[tuple[str, int], str] = {}
    for m in members:
        for tp in m.owned:
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {m.member_id}"
            seen[tp] = m.member_id


async def _join_untold(h, m: Modern) -> None:
    """``m`` joins; its joining heartbeat is answered (empty: what it gets is still held) after the join wait."""
    await m.join()
    assert m.owned == set()


@async_test
async def test_an_attempt_that_stops_nobody_settles_before_any_heartbeat():
    h, door, _ = await _start()
    a, b = Modern(h, door), Modern(h, door)
    await a.join()
    await b.join()
    await _settle(h, a, b)
    assert len(a.owned) == len(b.owned) == 3
    revoked, began = list(a.revoked), h.timer.clock.now_ms()
    assert (await b.heartbeat(-1))["error_code"] == 0  # b leaves: its partitions are free, nobody is stopped
    await h.settle()
    # the StartFetcher to a was answered when queued: the group is Stable, a has not heartbeated yet
    assert h.group().state == GroupState.STABLE and h.timer.clock.now_ms() == began
    assert h.coord.rebalancer.completed[-1] == ("g", "settled")
    described = door.describe(["g"])["groups"][0]
    assert described["group_state"] == "Reconciling"  # a still has to hear of its assignment
    answer = await a.heartbeat()
    assert answer["assignment"] is not None and a.owned == ALL and a.revoked == revoked  # nothing taken from it
    assert door.describe(["g"])["groups"][0]["group_state"] == "Stable"


@async_test
async def test_a_change_withdraws_a_stop_the_member_was_not_told_of():
    h, door, _ = await _start()
    a, b, c = Modern(h, door), Modern(h, door), Modern(h, door)
    await a.join()
    assert a.owned == ALL
    await _join_untold(h, b)  # a is asked to stop 3 partitions; it has not heartbeated since
    await _join_untold(h, c)  # the untold stop is withdrawn, a is asked for the 3-member target
    assert h.coord.rebalancer.withdrawn == 1
    await a.heartbeat()  # told once: 4 partitions go
    assert len(a.revoked) == 1 and len(a.revoked[0]) == 4 and len(a.owned) == 2
    _one_holder(a, b, c)
    await b.heartbeat()
    await c.heartbeat()
    assert b.owned == c.owned == set()  # a has not said yet that it gave them up
    await a.heartbeat()  # ...now it has
    await h.settle()
    await b.heartbeat()
    _one_holder(a, b, c)
    await c.heartbeat()
    _one_holder(a, b, c)
    assert len(b.owned) == len(c.owned) == 2 and b.owned | c.owned == a.revoked[0]
    await _settle(h, a, b, c)
    assert a.revoked == [b.owned | c.owned] and b.revoked == c.revoked == []
    assert h.group().state == GroupState.STABLE


@async_test
async def test_a_stop_the_member_was_told_of_is_never_withdrawn():
    h, door, _ = await _start()
    a, b, c = Modern(h, door), Modern(h, door), Modern(h, door)
    await a.join()
    await _join_untold(h, b)
    await a.heartbeat()  # told: 3 partitions go
    assert len(a.revoked) == 1 and len(a.revoked[0]) == 3
    await _join_untold(h, c)  # the told stop stays: its round still waits for a
    assert h.coord.rebalancer.withdrawn == 0
    for _ in range(8):
        await h.advance(INTERVAL // 4)
        for m in (a, b, c):
            await m.heartbeat()
            _one_holder(a, b, c)
    assert [len(r) for r in a.revoked] == [3, 1]  # the first stop answered, then the next target
    assert len(a.owned) == len(b.owned) == len(c.owned) == 2 and a.owned | b.owned | c.owned == ALL


@async_test
async def test_withdrawals_end_after_a_heartbeat_interval():
    h, door, _ = await _start(topics={"t": 12})
    members = [Modern(h, door) for _ in range(5)]
    a = members[0]
    await a.join()
    assert len(a.owned) == 12
    await _join_untold(h, members[1])
    await _join_untold(h, members[2])  # withdrawn: the first withdrawal
    await h.advance(INTERVAL - JOIN_WAIT_MS + 1)
    await _join_untold(h, members[3])  # more than an interval since the first withdrawal: a is left to answer
    assert h.coord.rebalancer.withdrawn == 1
    await a.heartbeat()
    assert [len(r) for r in a.revoked] == [8]  # the 3-member target: 4 each
    for _ in range(12):
        await h.advance(INTERVAL // 4)
        for m in members[:4]:
            await m.heartbeat()
            _one_holder(*members[:4])
    assert {len(m.owned) for m in members[:4]} == {3}
    assert set().union(*(m.owned for m in members[:4])) == {("t", p) for p in range(12)}


@async_test
async def test_a_stop_of_partitions_the_member_never_heard_of_is_answered_at_once():
    h, door, _ = await _start()
    a, b, c = Modern(h, door), Modern(h, door), Modern(h, door)
    await a.join()
    await b.join()
    await _settle(h, a, b)
    mine, theirs, revoked = set(a.owned), set(b.owned), list(a.revoked)
    assert (await b.heartbeat(-1))["error_code"] == 0  # b's partitions are queued for a, untold
    await h.settle()
    answer = await c.join()  # the new target takes b's old partitions from a before a heard of them
    assert answer["assignment"] is not None and c.owned == theirs  # in c's first answer, a never asked
    answer = await a.heartbeat()
    assert a.owned == mine and a.revoked == revoked and a.assigned[-1] != theirs  # never told of them
    _one_holder(a, c)
    await _settle(h, a, c)
    assert a.owned == mine and c.owned == theirs and h.group().state == GroupState.STABLE


@async_test
async def test_the_heartbeat_that_gives_partitions_up_brings_the_next_target_when_the_group_moved_on():
    h, door, _ = await _start()
    a, b, c = Modern(h, door), Modern(h, door), Modern(h, door)
    await a.join()
    await _join_untold(h, b)
    await a.heartbeat()  # told: 3 partitions go
    first = a.revoked[0]
    await _join_untold(h, c)  # the group moved on; the told stop stays
    began = h.timer.clock.now_ms()
    ack = asyncio.get_running_loop().create_task(a.heartbeat())  # it no longer owns them
    await h.settle()
    answer = await asyncio.wait_for(ack, 5)
    # answered within the same instant, carrying the next attempt's stop: one partition more goes
    assert h.timer.clock.now_ms() == began and answer["assignment"] is not None
    assert [len(r) for r in a.revoked] == [3, 1] and a.revoked[0] == first and len(a.owned) == 2
    _one_holder(a, b, c)
    await _settle(h, a, b, c)
    _one_holder(a, b, c)
    assert len(a.owned) == len(b.owned) == len(c.owned) == 2 and a.owned | b.owned | c.owned == ALL
    assert [len(r) for r in a.revoked] == [3, 1]


@async_test
async def test_the_heartbeat_that_gives_partitions_up_waits_for_nothing_when_the_group_did_not_move():
    h, door, _ = await _start()
    a, b = Modern(h, door), Modern(h, door)
    await a.join()
    await _join_untold(h, b)
    await a.heartbeat()  # told: 3 partitions go
    began = h.timer.clock.now_ms()
    answer = await asyncio.wait_for(a.heartbeat(), 5)  # answered at once, no timer
    assert answer["error_code"] == 0 and h.timer.clock.now_ms() == began
    await h.settle()
    await b.heartbeat()
    assert b.owned == a.revoked[0]
