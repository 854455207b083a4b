"""Registration and rebalancing, with a hand-driven clock and an in-memory store."""

from __future__ import annotations

import logging

from coord_harness import EPOCH, PING, START, STOP, Harness, async_test
from spark_coord.coordinator.group import LEASE_MARGIN_MS, GroupState
from spark_coord.coordinator.store import StoredGroup
from spark_coord.errors import ErrorCode


@async_test
async def test_registration_errors():
    h = Harness()
    _, r = h.register("c1")
    assert r["error_code"] == ErrorCode.NOT_COORDINATOR  # not active yet
    await h.start()
    _, r = h.register("c1", session=999)
    assert r["error_code"] == ErrorCode.SESSION_TIMEOUT_TOO_SMALL
    _, r = h.register("c1", pattern="(unclosed")
    assert r["error_code"] == ErrorCode.INVALID_SUBSCRIPTION and "(unclosed" in r["error_message"]
    both = {"group_id": "g", "consumer_id": "c1", "topics": [{"topic": "t", "streams": 1}], "pattern": "t.*",
            "pattern_streams": 1, "session_timeout_ms": 3000}
    assert h.coord.register(object(), both)["error_code"] == ErrorCode.INVALID_SUBSCRIPTION  # topics and a pattern
    _, r = h.register("c1", topics={"bad/topic": 1})
    assert r["error_code"] == ErrorCode.INVALID_SUBSCRIPTION
    _, r = h.register("c1", group="a/b")
    assert r["error_code"] == ErrorCode.INVALID_GROUP_ID
    _, r = h.register("c1", auto_offset_reset="sometimes")
    assert r["error_code"] == ErrorCode.INVALID_REQUEST
    assert h.coord.register(object(), ["not", "a", "dict"])["error_code"] == ErrorCode.INVALID_REQUEST
    assert h.coord.groups == {}  # nothing half-registered
    _, r = h.register("c1")
    assert r == {"error_code": 0, "error_message": None, "coordinator_epoch": EPOCH, "generation_id": -1}
    _, r = h.register("c1")
    assert r["error_code"] == ErrorCode.CONSUMER_ID_ALREADY_REGISTERED
    await h.settle()
    assert "c1" in h.store.groups["g"].members  # handleAddedConsumer persisted it


@async_test
async def test_new_group_and_added_consumer_trigger_a_rebalance():
    h = await Harness().start()
    m, _ = h.register("c1", auto=False)
    g = h.group()
    assert g.state == GroupState.PREPARING_REBALANCE and list(g.members) == ["c1"]
    await h.settle()
    assert g.state == GroupState.STOPPING_FETCHERS
    assert m.channel.last(STOP) == {"coordinator_epoch": EPOCH, "generation_id": 0, "consumer_id": "c1"}


@async_test
async def test_full_rebalance_round_three_members_twelve_partitions():
    h = Harness({"t": 12})
    h.store.groups["g"] = StoredGroup("g", offsets={("t", 0): 100, ("t", 5): 7})  # committed earlier
    await h.start()
    assert h.group().state == GroupState.EMPTY
    members = [h.register(f"c{i}", auto=False)[0] for i in (1, 2, 3)]
    await h.settle()
    g = h.group()
    assert g.state == GroupState.STOPPING_FETCHERS
    assert all(len(m.channel.requests(STOP)) == 1 and not m.channel.requests(START) for m in members)
    for m in members[:2]:
        m.answer(STOP)
    await h.settle()
    assert g.state == GroupState.STOPPING_FETCHERS  # still waiting for c3
    members[2].answer(STOP)
    await h.settle()
    assert g.state == GroupState.STARTING_FETCHERS and g.generation_id == 1
    assert h.store.groups["g"].generation_id == 1
    starts = {m.consumer_id: m.channel.last(START) for m in members}
    assert {cid: [(p["topic"], p["partition"]) for o in s["ownership"] for p in o["partitions"]]
            for cid, s in starts.items()} == {
        "c1": [("t", p) for p in range(0, 4)], "c2": [("t", p) for p in range(4, 8)],
        "c3": [("t", p) for p in range(8, 12)]}
    s1 = starts["c1"]
    assert s1["generation_id"] == 1 and s1["coordinator_epoch"] == EPOCH
    assert s1["brokers"] == [{"node_id": 0, "host": "127.0.0.1", "port": 9092}]
    assert s1["ownership"][0]["consumer_thread_id"] == "c1-0"
    assert [p["offset"] for p in s1["ownership"][0]["partitions"]] == [100, -1, -1, -1]
    assert starts["c2"]["ownership"][0]["partitions"][1]["offset"] == 7
    assert h.store.groups["g"].owners == {}  # owners only after every StartFetcher answer
    for m in members:
        m.answer(START)
    await h.settle()
    assert g.state == GroupState.STABLE
    expected = {("t", p): f"c{p // 4 + 1}-0" for p in range(12)}
    assert h.store.groups["g"].owners == expected == g.owners
    d = h.coord.describe_group("g")
    assert d["state"] == "Stable" and d["generation_id"] == 1 and len(d["members"]) == 3 and len(d["owners"]) == 12
    assert h.coord.describe_groups() == [{"group_id": "g", "state": "Stable", "generation_id": 1, "members": 3}]


@async_test
async def test_rebalance_is_skipped_when_owners_and_members_already_match():
    h = await Harness().start()
    members = [h.register(f"c{i}")[0] for i in (1, 2)]
    await h.settle()
    g = h.group()
    assert g.state == GroupState.STABLE and g.generation_id == 1
    sent = [len(m.channel.sent) for m in members]
    h.coord.request_rebalance(g, "test")
    h.coord.on_topics_changed({"t": 12})  # same count: nothing to do
    await h.settle()
    assert g.state == GroupState.STABLE and g.generation_id == 1
    assert [len(m.channel.sent) for m in members] == sent  # no StopFetcher, no StartFetcher


@async_test
async def test_rejoining_member_needs_a_round_even_if_owners_match():
    h = await Harness({"t": 4}).start()
    m1, _ = h.register("c1")
    await h.settle()
    h.coord.on_channel_closed(m1.channel)
    m1b, _ = h.register("c1")  # same id, new connection: has no assignment
    await h.settle()
    g = h.group()
    assert g.state == GroupState.STABLE and g.owners == {("t", p): "c1-0" for p in range(4)}
    assert m1b.channel.requests(START)


@async_test
async def test_wildcard_subscription_picks_up_new_topic_and_ignores_others():
    h = await Harness({"ev-a": 2}).start()
    h.register("c1", pattern="ev-.*", streams=2)
    await h.settle()
    g = h.group()
    assert g.owners == {("ev-a", 0): "c1-0", ("ev-a", 1): "c1-1"} and g.generation_id == 1
    h.coord.on_topics_changed({"other": 3})
    await h.settle()
    assert g.generation_id == 1
    h.coord.on_topics_changed({"ev-b": 3})
    await h.settle()
    assert g.generation_id == 2 and g.state == GroupState.STABLE
    assert sorted(tp for tp in g.owners if tp[0] == "ev-b") == [("ev-b", 0), ("ev-b", 1), ("ev-b", 2)]


@async_test
async def test_partition_count_change_rebalances_the_group():
    h = await Harness({"t": 4}).start()
    m1, _ = h.register("c1")
    m2, _ = h.register("c2")
    await h.settle()
    assert h.group().generation_id == 1
    h.coord.on_topics_changed({"t": 6})
    await h.settle()
    g = h.group()
    assert g.generation_id == 2 and len(g.owners) == 6 and h.store.groups["g"].owners == g.owners
    assert len(m1.positions) == 3 and len(m2.positions) == 3


@async_test
async def test_backoff_retry_then_consumer_rebalance_failed(caplog):
    h = await Harness(rebalance_max_retries=2, rebalance_backoff_ms=500, max_ping_retries=100).start()
    m, _ = h.register("c1", session=30000)
    m.stop_error = int(ErrorCode.UNKNOWN_SERVER_ERROR)  # refuses to stop
    caplog.set_level(logging.WARNING)
    await h.settle()
    assert len(m.channel.requests(STOP)) == 1
    await h.advance(499)
    assert len(m.channel.requests(STOP)) == 1  # backing off
    await h.advance(1)
    assert len(m.channel.requests(STOP)) == 2
    await h.advance(500)
    assert len(m.channel.requests(STOP)) == 3  # 1 attempt + 2 retries
    assert any(r.levelno == logging.ERROR and "ConsumerRebalanceFailed" in r.getMessage() for r in caplog.records)
    assert h.group().state == GroupState.PREPARING_REBALANCE and "UNKNOWN_SERVER_ERROR" in h.group().last_error
    await h.advance(5000)
    assert len(m.channel.requests(STOP)) == 3  # now at the pace of the session timeout (30 s)
    m.stop_error = 0
    h.coord.on_topics_changed({"t": 13})  # a change starts afresh at once and succeeds
    await h.settle()
    assert h.group().state == GroupState.STABLE


@async_test
async def test_round_times_out_after_two_thirds_of_session_and_retry_succeeds():
    h = await Harness(rebalance_backoff_ms=100).start()
    m, _ = h.register("c1", session=30000, auto=False)
    await h.settle()
    await h.advance(19999)
    assert h.group().state == GroupState.STOPPING_FETCHERS
    await h.advance(1)  # 2/3 of 30 s
    assert h.group().state == GroupState.PREPARING_REBALANCE and "timed out" in h.group().last_error
    m.auto = True
    m.answer(PING)  # keep it alive
    await h.advance(100)
    assert h.group().state == GroupState.STABLE and h.group().generation_id == 1


@async_test
async def test_member_failure_during_stop_round_fails_it_at_once_and_retry_succeeds():
    h = await Harness(rebalance_backoff_ms=10_000).start()
    m1, _ = h.register("c1", auto=False)
    m2, _ = h.register("c2", auto=False)
    await h.settle()
    m1.answer(STOP)
    await h.settle()
    assert h.group().state == GroupState.STOPPING_FETCHERS
    h.coord.on_channel_closed(m2.channel)
    await h.settle()  # no time passes: the round failed at once and a new attempt began
    assert "c2" not in h.group().members  # it never started: nothing to wait for
    assert len(m1.channel.requests(STOP)) == 2
    m1.answer(STOP)
    await h.settle()
    m1.answer(START)
    await h.settle()
    g = h.group()
    assert g.state == GroupState.STABLE and set(g.owners.values()) == {"c1-0"} and len(g.owners) == 12
    assert h.timer.clock.now_ms() == 0


@async_test
async def test_member_joining_during_start_round_fails_it_and_triggers_another():
    h = await Harness().start()
    m1, _ = h.register("c1", auto=False)
    await h.settle()
    m1.answer(STOP)
    await h.settle()
    assert h.group().state == GroupState.STARTING_FETCHERS
    m2, _ = h.register("c2")
    await h.settle()
    assert len(m1.channel.requests(STOP)) == 2
    m1.auto = True
    m1.answer(STOP)
    await h.settle()
    g = h.group()
    assert g.state == GroupState.STABLE and g.generation_id == 2
    assert set(g.owners.values()) == {"c1-0", "c2-0"}


@async_test
async def test_empty_group_clears_owners():
    h = await Harness({"t": 2}).start()
    m, _ = h.register("c1")
    await h.settle()
    assert h.store.groups["g"].owners
    h.coord.on_channel_closed(m.channel)
    await h.advance(3000 + LEASE_MARGIN_MS)  # it may still be fetching until its lease surely ended
    assert h.group().state == GroupState.EMPTY and h.store.groups["g"].owners == {}
    assert "c1" not in h.store.groups["g"].members


@async_test
async def test_two_workers_never_rebalance_the_same_group():
    h = await Harness({"t": 6}, rebalance_threads=3).start()
    members = {}
    for round_ in range(4):
        for gi in range(6):
            for ci in range(2):
                cid = f"g{gi}-c{ci}-r{round_}"
                members[cid] = h.register(cid, group=f"g{gi}")[0]
            await h.settle(3)  # let workers interleave mid-rebalance
        for cid, m in list(members.items()):
            if cid.endswith(f"c0-r{round_}"):
                h.coord.on_channel_closed(m.channel)
        h.coord.on_topics_changed({"t": 6 + round_ + 1})
        await h.settle(5)
    await h.advance(10_000)  # the closed members' leases run out
    assert h.coord.rebalancer.concurrency_violations == 0
    assert len({gid for gid, _ in h.coord.rebalancer.completed}) == 6
    for gi in range(6):
        g = h.group(f"g{gi}")
        assert g.state == GroupState.STABLE, (g.group_id, g.state, g.last_error)
        assert len(g.owners) == 10


@async_test
async def test_roundrobin_strategy():
    h = await Harness({"a": 2, "b": 2}, assignment_strategy="roundrobin").start()
    h.register("c1", topics={"a": 1, "b": 1})
    h.register("c2", topics={"a": 1, "b": 1})
    await h.settle()
    assert h.group().owners == {("a", 0): "c1-0", ("a", 1): "c2-0", ("b", 0): "c1-0", ("b", 1): "c2-0"}


@async_test
async def test_a_member_gets_partitions_only_of_topics_its_filter_lets_through():
    """With an authorizer, a member's ``topic_filter`` (may its principal Read the topic?) limits
    what the assignor gives it; a rebalance after the filter changed applies the new one."""
    h = await Harness({"a": 2, "b": 2}).start()
    m, answer = h.register("c1", pattern="a|b")
    assert answer["error_code"] == 0
    allowed = {"a"}
    h.group().members["c1"].topic_filter = lambda t: t in allowed
    await h.settle()
    assert set(m.positions) == {("a", 0), ("a", 1)}
    assert set(h.group().owners) == {("a", 0), ("a", 1)}
    allowed.add("b")
    h.coord.request_rebalance(h.group(), "ACLs changed")
    await h.settle()
    assert set(m.positions) == {("a", 0), ("a", 1), ("b", 0), ("b", 1)}
    allowed.clear()
    h.coord.request_rebalance(h.group(), "ACLs changed")
    await h.settle()
    assert set(m.positions) == set() and h.group().owners == {}
