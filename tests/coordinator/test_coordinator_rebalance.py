"""Registration and rebalancing, with a hand-driven clock and an in-memory store."""

from __future__ import annotations

import logging

from coord_harness import EPOCH, PING, START, STOP, Harness, async_test

from spark_coord.coordinator.core.group import LEASE_MARGIN_MS, GroupState
from spark_coord.coordinator.storage.store import StoredGroup
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
    assert g.state == GroupState.STARTING_FETCHERS
    assert not m.channel.requests(STOP)  # it holds nothing: nothing to stop
    start = m.channel.last(START)
    assert start["generation_id"] == 1 and start["consumer_id"] == "c1" and start["coordinator_epoch"] == EPOCH


def _parts(start: dict) -> list[tuple[str, int]]:
    return [(p["topic"], p["partition"]) for o in start["ownership"] for p in o["partitions"]]


@async_test
async def test_first_assignment_three_members_twelve_partitions():
    h = Harness({"t": 12})
    h.store.groups["g"] = StoredGroup("g", offsets={("t", 0): 100, ("t", 5): 7})  # committed earlier
    await h.start()
    assert h.group().state == GroupState.EMPTY
    members = [h.register(f"c{i}", auto=False)[0] for i in (1, 2, 3)]
    await h.settle()
    g = h.group()
    assert g.state == GroupState.STARTING_FETCHERS and g.generation_id == 1
    assert all(not m.channel.requests(STOP) and len(m.channel.requests(START)) == 1 for m in members)
    starts = {m.consumer_id: m.channel.last(START) for m in members}
    assert {cid: _parts(s) for cid, s in starts.items()} == {  # sticky from scratch: dealt in turn
        "c1": [("t", p) for p in (0, 3, 6, 9)], "c2": [("t", p) for p in (1, 4, 7, 10)],
        "c3": [("t", p) for p in (2, 5, 8, 11)]}
    s1 = starts["c1"]
    assert s1["generation_id"] == 1 and s1["coordinator_epoch"] == EPOCH
    assert s1["brokers"] == [{"node_id": 0, "host": "127.0.0.1", "port": 9092}]
    assert s1["ownership"][0]["consumer_thread_id"] == "c1-0"
    assert [p["offset"] for p in s1["ownership"][0]["partitions"]] == [100, -1, -1, -1]
    assert starts["c3"]["ownership"][0]["partitions"][1]["offset"] == 7
    # a member may fetch as soon as its StartFetcher arrives: the owners are in the store before
    expected = {("t", p): f"c{p % 3 + 1}-0" for p in range(12)}
    assert h.store.groups["g"].owners == expected
    assert {cid: sm.epoch for cid, sm in h.store.groups["g"].members.items()} == {"c1": 1, "c2": 1, "c3": 1}
    for m in members:
        m.answer(START)
    await h.settle()
    assert g.state == GroupState.STABLE and g.owners == expected
    d = h.coord.describe_group("g")
    assert d["state"] == "Stable" and d["generation_id"] == 1 and len(d["members"]) == 3 and len(d["owners"]) == 12
    assert h.coord.describe_groups() == [{"group_id": "g", "state": "Stable", "generation_id": 1, "members": 3}]


@async_test
async def test_a_joining_member_stops_only_the_partitions_that_move():
    """Incremental members (RegisterConsumer v2): a third member joins two that hold six
    partitions each; each gives up two (StopFetcher v1 naming them), keeps fetching the other
    four from where it is, and the newcomer starts the four at the offsets just reported."""
    h = await Harness({"t": 12}).start()
    m1, _ = h.register("c1", version=2)
    m2, _ = h.register("c2", version=2)
    await h.settle()
    g = h.group()
    assert g.state == GroupState.STABLE and len(m1.positions) == len(m2.positions) == 6
    m1.consume(50)
    m2.consume(30)
    kept1 = dict(m1.positions)
    m1.auto = m2.auto = False
    m3, _ = h.register("c3", version=2, auto=False)
    await h.settle()
    assert g.state == GroupState.STOPPING_FETCHERS
    stop1, stop2 = m1.channel.last(STOP), m2.channel.last(STOP)
    assert (STOP, 1) in m1.channel.versions and stop1["generation_id"] == 2
    stopped = {(e["topic"], p) for s in (stop1, stop2) for e in s["partitions"] for p in e["partitions"]}
    assert len(stopped) == 4 and stopped <= set(kept1) | set(m2.positions)
    assert not m3.channel.requests(STOP)
    m1.auto = m2.auto = True
    m1.answer(STOP)
    m2.answer(STOP)
    await h.settle()
    assert g.state == GroupState.STARTING_FETCHERS and g.generation_id == 3
    start3 = m3.channel.last(START)
    assert set(_parts(start3)) == stopped and start3["generation_id"] == 3
    assert {(p["topic"], p["partition"]): p["offset"] for o in start3["ownership"] for p in o["partitions"]} \
        == {tp: kept1.get(tp, o) for tp, o in h.store.groups["g"].offsets.items() if tp in stopped}
    m3.answer(START)
    await h.settle()
    assert g.state == GroupState.STABLE
    assert {tp: o for tp, o in m1.positions.items()} == {tp: o for tp, o in kept1.items() if tp not in stopped}
    assert sorted(len(m.positions) for m in (m1, m2, m3)) == [4, 4, 4]
    assert {m.generation for m in (m1, m2, m3)} == {3}


@async_test
async def test_a_member_whose_partitions_do_not_move_hears_nothing():
    h = await Harness({"t": 4}).start()
    m1, _ = h.register("c1", version=2)
    m2, _ = h.register("c2")  # a v1 member: it hands over by stopping everything
    await h.settle()
    g = h.group()
    assert len(m1.positions) == len(m2.positions) == 2
    sent1, sent2 = len(m1.channel.sent), len(m2.channel.sent)
    m3, _ = h.register("c3", version=2)  # 4 over 3: c1 (first by id) keeps two, c2 gives one up
    await h.settle()
    assert g.state == GroupState.STABLE
    assert len(m1.channel.sent) == sent1  # nothing at all for c1
    assert [a for a, _, _ in m2.channel.sent[sent2:]] == [STOP, START]  # v1 member: all stopped, restarted
    assert m2.channel.last(STOP) == {"coordinator_epoch": EPOCH, "generation_id": 1, "consumer_id": "c2"}
    assert (len(m1.positions), len(m2.positions), len(m3.positions)) == (2, 1, 1)
    assert g.members["c1"].epoch == 1 and g.members["c2"].epoch == g.members["c3"].epoch == 3


@async_test
async def test_member_commits_go_on_while_others_are_rebalanced():
    h = await Harness({"t": 4}).start()
    m1, _ = h.register("c1", version=2)
    await h.settle()
    m2, _ = h.register("c2", version=2, auto=False)
    await h.settle()
    g = h.group()
    assert g.state == GroupState.STARTING_FETCHERS  # c1 gave two up, c2's StartFetcher is not answered
    m1.consume(10)
    answer = await m1.commit()  # c1 is at epoch 2 now, holding its two partitions
    assert answer["error_code"] == 0 and {p["error_code"] for p in answer["partitions"]} == {0}
    m2.answer(START)
    await h.settle()
    assert g.state == GroupState.STABLE
    assert {tp: o for tp, o in g.offsets.items() if tp in m1.positions} == m1.positions


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
    assert g.generation_id > 1 and g.state == GroupState.STABLE
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
    assert g.generation_id > 1 and len(g.owners) == 6 and h.store.groups["g"].owners == g.owners
    assert len(m1.positions) == 3 and len(m2.positions) == 3


@async_test
async def test_backoff_retry_then_consumer_rebalance_failed(caplog):
    h = await Harness(rebalance_max_retries=2, rebalance_backoff_ms=500, max_ping_retries=100).start()
    m, _ = h.register("c1", session=30000)
    await h.settle()
    m.stop_error = int(ErrorCode.UNKNOWN_SERVER_ERROR)  # refuses to stop
    caplog.set_level(logging.WARNING)
    h.register("c2", session=30000)  # c1 must give half up
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
    assert len(m.positions) == 12  # still holds (and fetches) everything: nothing was given away
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
    assert h.group().state == GroupState.STARTING_FETCHERS
    await h.advance(1)  # 2/3 of 30 s
    assert h.group().state == GroupState.PREPARING_REBALANCE and "no StartFetcher answer" in h.group().last_error
    m.auto = True
    m.answer(PING)  # keep it alive
    await h.advance(100)
    assert h.group().state == GroupState.STABLE and len(m.positions) == 12


@async_test
async def test_member_gone_during_a_round_is_not_waited_for_and_its_partitions_wait_for_its_lease():
    """A StartFetcher sent counts at once: the member may have started fetching before its
    connection went, so its partitions go to nobody else until its lease has surely ended."""
    h = await Harness(rebalance_backoff_ms=100).start()
    m1, _ = h.register("c1", auto=False)
    m2, _ = h.register("c2", auto=False)
    await h.settle()
    assert h.group().state == GroupState.STARTING_FETCHERS
    m1.answer(START)
    await h.settle()
    h.coord.on_channel_closed(m2.channel)
    await h.settle()  # the round does not wait for c2
    g = h.group()
    assert g.current_round is None and "c2" in g.members and len(g.members["c2"].owned()) == 6
    m1.auto = True
    await h.advance(3000)
    assert "c2" in g.members and len(m1.positions) == 6
    await h.advance(LEASE_MARGIN_MS + 10)
    assert "c2" not in g.members
    assert g.state == GroupState.STABLE and set(g.owners.values()) == {"c1-0"} and len(g.owners) == 12
    assert len(m1.positions) == 12


@async_test
async def test_member_joining_during_start_round_gets_its_share_right_after():
    h = await Harness().start()
    m1, _ = h.register("c1", auto=False)
    await h.settle()
    assert h.group().state == GroupState.STARTING_FETCHERS
    m2, _ = h.register("c2")
    await h.settle()
    assert not m2.channel.requests(START)  # the round in flight is not broken
    m1.auto = True
    m1.answer(START)
    await h.settle()
    g = h.group()
    assert g.state == GroupState.STABLE
    assert set(g.owners.values()) == {"c1-0", "c2-0"} and len(m1.positions) == len(m2.positions) == 6


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
