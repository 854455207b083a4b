"""Kafka's ``group.initial.rebalance.delay.ms`` on the classic door (``doors.initial_join``), with a
hand-driven clock: the first JoinGroups of an empty group wait, a member joining during a period
earns one more, the wait never passes the rebalance timeout, 0 turns it off, and later rebalances
of a group with members do not wait."""

from __future__ import annotations

import asyncio

import pytest
from coord_harness import Harness, admin_of, async_test
from test_kafka_members import KafkaClient

from spark_coord.coordinator.core.group import GroupState
from spark_coord.coordinator.doors.classic import ClassicGroups
from spark_coord.coordinator.doors.initial_join import InitialJoin, Waiter
from spark_coord.errors import ErrorCode

DELAY = 3000


async def _start(delay: int = DELAY, partitions: int = 4) -> tuple[Harness, ClassicGroups]:
    h = await Harness({"t": partitions}, initial_rebalance_delay_ms=delay).start()
    return h, ClassicGroups(h.coord)


def _all(clients) -> set[tuple[str, int]]:
    return set().union(*(c.owned() for c in clients))


@async_test
async def test_the_first_join_of_an_empty_group_waits_the_delay():
    h, kg = await _start()
    a = KafkaClient(h, kg)
    task = await a.join()
    await h.advance(DELAY - 1)
    assert not task.done() and "g" not in h.coord.groups  # not registered yet: no rebalance ran
    await h.advance(1)
    assert task.done()
    await a.joined(task)
    assert a.owned() == {("t", p) for p in range(4)} and h.group().state == GroupState.STABLE


@async_test
async def test_a_member_joining_during_the_delay_extends_it_and_all_share_the_first_generation():
    h, kg = await _start()
    a, b = KafkaClient(h, kg, session=30_000), KafkaClient(h, kg, session=30_000)  # rebalance timeout 30 s
    a_join = await a.join()
    await h.advance(1000)
    b_join = await b.join()
    await h.advance(DELAY - 1000)  # the first period is over, b joined during it: one more
    assert not a_join.done() and not b_join.done()
    await h.advance(DELAY - 1)
    assert not a_join.done() and not b_join.done()
    await h.advance(1)  # nobody joined during the second period: the wait is over
    await a.joined(a_join)
    await b.joined(b_join)
    assert a.generation == b.generation == h.group().generation_id
    assert len(a.owned()) == len(b.owned()) == 2 and _all([a, b]) == {("t", p) for p in range(4)}
    assert a.revoked == b.revoked == []  # nothing handed on from one to the other
    assert h.group().state == GroupState.STABLE


@async_test
async def test_the_wait_stops_at_the_rebalance_timeout():
    # delay 1000, rebalance timeout 2500: periods [0, 1000], [1000, 2000], [2000, 2500]
    h, kg = await _start(delay=1000, partitions=6)
    clients = [KafkaClient(h, kg, session=2500) for _ in range(4)]
    joins = [await clients[0].join()]
    for at in (500, 1500, 2200):  # someone new in every period
        await h.advance(at - h.timer.clock.now_ms())
        joins.append(await clients[len(joins)].join())
    await h.advance(2499 - h.timer.clock.now_ms())
    assert not any(j.done() for j in joins)
    await h.advance(1)
    for c, j in zip(clients, joins, strict=True):
        await c.joined(j)
    assert len({c.generation for c in clients}) == 1
    assert sorted(len(c.owned()) for c in clients) == [1, 1, 2, 2]


@async_test
async def test_zero_turns_the_delay_off():
    h, kg = await _start(delay=0)
    a = KafkaClient(h, kg)
    await a.joined(await a.join())  # answered without any time passing
    assert a.owned() == {("t", p) for p in range(4)} and h.timer.clock.now_ms() == 0


@async_test
async def test_a_later_rebalance_of_a_group_with_members_does_not_wait():
    h, kg = await _start()
    a, b = KafkaClient(h, kg), KafkaClient(h, kg)
    a_join = await a.join()
    await h.advance(DELAY)
    await a.joined(a_join)
    now = h.timer.clock.now_ms()
    b_join = await b.join()
    assert not kg.initial.groups()  # not held
    assert a.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS  # the rebalance started at once
    await a.joined(await a.join())
    await b.joined(b_join)
    assert h.timer.clock.now_ms() == now
    assert len(a.owned()) == len(b.owned()) == 2


@async_test
async def test_a_group_empty_again_waits_again():
    h, kg = await _start()
    a = KafkaClient(h, kg)
    a_join = await a.join()
    await h.advance(DELAY)
    await a.joined(a_join)
    kg.leave_group({"group_id": "g", "member_id": a.member_id}, 0)
    await h.settle()
    assert not h.group().members
    b = KafkaClient(h, kg)
    b_join = await b.join()
    await h.advance(DELAY - 1)
    assert not b_join.done()
    await h.advance(1)
    await b.joined(b_join)
    assert b.owned() == {("t", p) for p in range(4)}


@async_test
async def test_a_waiting_group_is_listed_and_a_waiting_member_may_leave():
    h, kg = await _start()
    a, b = KafkaClient(h, kg), KafkaClient(h, kg)
    a_join = await a.join()
    b_join = await b.join()
    admin = admin_of(kg)
    listed = admin.list_groups({})["groups"]
    assert [(g["group_id"], g["group_state"]) for g in listed] == [("g", "PreparingRebalance")]
    assert admin.describe_groups({"groups": ["g"]})["groups"][0]["group_state"] == "PreparingRebalance"
    assert (await admin.delete_groups({"groups_names": ["g"]}))["results"][0]["error_code"] == ErrorCode.NON_EMPTY_GROUP
    left = kg.leave_group({"group_id": "g", "member_id": b.member_id}, 0)
    assert left["error_code"] == 0
    assert (await asyncio.wait_for(b_join, 5))["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    await h.advance(DELAY)  # b left during the first period: it does not count as new
    await a.joined(a_join)
    assert a.owned() == {("t", p) for p in range(4)} and set(h.group().members) == {a.member_id}


@async_test
async def test_a_member_joining_twice_during_the_delay_is_held_once():
    h, kg = await _start()
    a = KafkaClient(h, kg)
    first = await a.join()
    second = await a.join()  # the client gave up on its first JoinGroup and sent another
    assert (await asyncio.wait_for(first, 5))["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS
    await h.advance(DELAY)  # the same member again is not a new one: no second period
    await a.joined(second)
    assert set(h.group().members) == {a.member_id}


@async_test
async def test_a_newer_incarnation_of_a_static_member_fences_the_waiting_one():
    h, kg = await _start()
    old, new = KafkaClient(h, kg, instance="i1"), KafkaClient(h, kg, instance="i1")
    old_join = await old.join()
    new_join = await new.join()
    answer = await asyncio.wait_for(old_join, 5)
    assert answer["error_code"] == ErrorCode.FENCED_INSTANCE_ID
    old.member_id = answer["member_id"]
    await h.advance(DELAY)
    await new.joined(new_join)
    assert new.owned() == {("t", p) for p in range(4)} and len(h.group().members) == 1
    assert old.heartbeat() == ErrorCode.FENCED_INSTANCE_ID


@async_test
async def test_a_resigning_coordinator_answers_the_waiting_joins():
    h, kg = await _start()
    a = KafkaClient(h, kg)
    a_join = await a.join()
    await h.coord.deactivate()
    kg.reset()
    assert (await asyncio.wait_for(a_join, 5))["error_code"] == ErrorCode.NOT_COORDINATOR
    assert not kg.initial.groups()


@pytest.mark.parametrize("joins, rebalance_ms, periods", [
    ([], 300_000, [3000]),                   # alone: one period
    ([1000], 300_000, [3000, 3000]),         # one newcomer: one period more
    ([1000, 4000], 300_000, [3000, 3000, 3000]),
    ([1000, 4000], 7000, [3000, 3000, 1000]),  # capped: 7000 - 6000 left
    ([1000], 2000, [3000]),                  # the first period is the full delay; nothing is left after it
])
def test_periods_follow_kafka(joins, rebalance_ms, periods):
    loop = asyncio.new_event_loop()
    try:
        initial = InitialJoin("g", 3000, 0)
        initial.add("m0", Waiter("m0", rebalance_ms, loop.create_future()))
        got, end, pending = [3000], 3000, list(joins)
        while True:
            for at in [j for j in pending if j < end]:
                initial.add(f"m{at}", Waiter(f"m{at}", rebalance_ms, loop.create_future()))
            pending = [j for j in pending if j >= end]
            following = initial.next_period_ms(end)
            if following is None:
                break
            got.append(following)
            end += following
        assert got == periods
    finally:
        loop.close()
