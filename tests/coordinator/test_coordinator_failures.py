"""Failure detection, offsets, the committer, failover restore and fencing."""

from __future__ import annotations

from coord_harness import PING, START, STOP, Harness, async_test
from spark_coord.coordinator.group import GroupState
from spark_coord.coordinator.store import StoredGroup, StoredMember
from spark_coord.coordinator.subscription import TopicCount


@async_test
async def test_ping_every_third_of_session_and_expiry_fails_member_then_survivors_rebalance():
    h = await Harness({"t": 12}, max_ping_retries=1).start()
    ms = [h.register(f"c{i}", session=3000)[0] for i in (1, 2, 3)]
    await h.settle()
    assert h.group().generation_id == 1
    await h.advance(999)
    assert not ms[0].channel.requests(PING)
    await h.advance(1)
    assert [len(m.channel.requests(PING)) for m in ms] == [1, 1, 1]
    assert ms[0].channel.last(PING) == {"coordinator_epoch": 7, "generation_id": 1, "consumer_id": "c1",
                                        "num_retries": 0}
    ms[2].muted = True
    await h.advance(3000)  # first unanswered ping expired, second one out
    assert "c3" in h.group().members and ms[2].channel.last(PING)["num_retries"] == 1
    await h.advance(3000)  # more than max.ping.retries expiries: failed
    g = h.group()
    assert "c3" not in g.members and ms[2].channel.closed
    assert g.state == GroupState.STABLE and g.generation_id == 2
    assert set(g.owners.values()) == {"c1-0", "c2-0"} and len(g.owners) == 12
    assert h.store.groups["g"].owners == g.owners and "c3" not in h.store.groups["g"].members
    assert not ms[0].channel.closed and h.group().members["c1"].failed_pings == 0


@async_test
async def test_a_ping_still_outstanding_is_not_repeated():
    h = await Harness(max_ping_retries=5).start()
    m, _ = h.register("c1", session=3000)
    await h.settle()
    m.muted = True
    await h.advance(1500)  # ping at 1000, due again at 2000
    await h.advance(600)   # at 2000 the first is still outstanding: skipped
    assert len(m.channel.requests(PING)) == 1
    await h.advance(1000)  # expired at 3000; the ping at 3000 goes out
    assert len(m.channel.requests(PING)) == 2


@async_test
async def test_offsets_from_stale_generation_or_unowned_partitions_are_refused_and_never_go_backwards():
    h = await Harness({"t": 4}).start()
    m1, _ = h.register("c1")
    m2, _ = h.register("c2")
    await h.settle()
    g = h.group()
    assert g.generation_id == 1
    owned1 = sorted(m1.positions)  # [("t",0), ("t",1)]
    send = lambda m, gen, offsets: h.coord.on_response(m.channel, PING, {  # noqa: E731
        "error_code": 0, "consumer_id": m.consumer_id, "generation_id": gen,
        "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in offsets]})
    send(m1, 0, [(owned1[0], 50)])                       # stale generation
    assert owned1[0] not in g.offsets
    send(m1, 1, [(("t", 3), 50)])                        # owned by c2
    assert ("t", 3) not in g.offsets
    send(m1, 1, [(owned1[0], 50)])
    assert g.offsets[owned1[0]] == 50 and owned1[0] in g.dirty
    send(m1, 1, [(owned1[0], 40)])                       # backwards within the generation
    assert g.offsets[owned1[0]] == 50
    h.coord.on_response(m1.channel, PING, {"error_code": 0, "consumer_id": "c1", "generation_id": 1, "offsets": [
        {"topic": "t", "partition": owned1[0][1], "offset": 60}, "junk", {"topic": "t", "partition": -1, "offset": 1},
        {"topic": "t", "partition": owned1[1][1], "offset": True}]})  # malformed entries are skipped
    assert g.offsets[owned1[0]] == 60 and owned1[1] not in g.offsets
    h.coord.on_response(m1.channel, PING, "not a struct")  # hostile answer: logged, ignored
    assert g.offsets[owned1[0]] == 60


@async_test
async def test_committer_writes_dirty_offsets_every_interval():
    h = await Harness({"t": 2}, offsets_commit_interval_ms=1000).start()
    m, _ = h.register("c1", session=30000)
    await h.settle()
    m.consume(10)
    m.answer(PING, {"generation_id": 1})
    assert h.group().offsets == {("t", 0): 10, ("t", 1): 10}
    assert h.store.groups["g"].offsets == {}
    await h.advance(1000)
    assert h.store.groups["g"].offsets == {("t", 0): 10, ("t", 1): 10}
    assert not h.group().dirty
    writes = len(h.store.writes)
    await h.advance(3000)
    assert len(h.store.writes) == writes  # nothing dirty: nothing written


@async_test
async def test_offsets_are_committed_before_start_fetcher():
    h = await Harness({"t": 2}, offsets_commit_interval_ms=60_000).start()
    m1, _ = h.register("c1", session=30000)
    await h.settle()
    m1.consume(5)
    m1.auto = False
    h.register("c2", session=30000, auto=False)
    await h.settle()
    m1.answer(STOP)  # carries offsets 5, 5
    h.group().members["c2"].channel.on_send = None
    await h.settle()
    assert h.group().state == GroupState.STOPPING_FETCHERS  # c2 has not answered
    c2 = h.group().members["c2"].channel
    h.coord.on_response(c2, STOP, {"error_code": 0, "consumer_id": "c2", "generation_id": None, "offsets": []})
    await h.settle()
    assert h.group().state == GroupState.STARTING_FETCHERS
    assert h.store.groups["g"].offsets == {("t", 0): 5, ("t", 1): 5}  # forced commit, no interval elapsed
    ops = [op for op, _, _ in h.store.writes]
    assert ops[-2:] == ["commit_offsets", "save_generation"]  # commit first, then generation 2
    start = m1.channel.last(START)
    assert [p["offset"] for o in start["ownership"] for p in o["partitions"]] == [5]


@async_test
async def test_failover_restores_group_and_waits_for_members():
    h = Harness({"t": 4})
    tc = TopicCount.static({"t": 1})
    h.store.groups["g"] = StoredGroup("g", generation_id=5,
                                      members={"c1": StoredMember("c1", tc, session_timeout_ms=3000),
                                               "c2": StoredMember("c2", tc, session_timeout_ms=6000)},
                                      offsets={("t", 0): 11}, owners={("t", 0): "c1-0"})
    await h.start()
    g = h.group()
    assert g.state == GroupState.RESTORING and g.generation_id == 5 and g.offsets == {("t", 0): 11}
    m1, r = h.register("c1")
    assert r["error_code"] == 0
    await h.settle()
    assert g.state == GroupState.RESTORING and not m1.channel.requests(STOP)
    await h.advance(6000)  # the largest restored session timeout: c2 is dropped
    assert "c2" not in g.members and "c2" not in h.store.groups["g"].members
    assert g.state == GroupState.STABLE and g.generation_id == 6 and len(g.owners) == 4
    assert m1.channel.last(START)["ownership"][0]["partitions"][0] == {"topic": "t", "partition": 0, "offset": 11}


@async_test
async def test_failover_rebalances_at_once_when_everyone_is_back():
    h = Harness({"t": 4})
    tc = TopicCount.static({"t": 1})
    h.store.groups["g"] = StoredGroup("g", generation_id=2, members={c: StoredMember(c, tc) for c in ("c1", "c2")})
    await h.start()
    h.register("c1")
    h.register("c2")
    await h.settle()
    g = h.group()
    assert g.state == GroupState.STABLE and g.generation_id == 3 and h.timer.clock.now_ms() == 0


@async_test
async def test_fenced_store_write_deactivates_and_drops_everything():
    h = await Harness().start()
    m, _ = h.register("c1")
    await h.settle()
    h.store.fenced = True
    m.consume(3)
    m.answer(PING, {"generation_id": 1})
    await h.advance(1000)  # the committer's write is fenced
    assert h.fenced_calls == 1
    assert not h.coord.active and h.coord.groups == {} and m.channel.closed
    assert h.timer.pending() == 0
    _, r = h.register("c9")
    assert r["error_code"] == 16  # NOT_COORDINATOR


@async_test
async def test_deactivate_then_activate_again():
    h = await Harness().start()
    m, _ = h.register("c1")
    await h.settle()
    await h.coord.deactivate()
    assert m.channel.closed and h.coord.groups == {} and h.timer.pending() == 0
    await h.coord.activate(9)
    assert h.group().state == GroupState.RESTORING  # c1 was persisted
    m2, r = h.register("c1")
    assert r["coordinator_epoch"] == 9
    await h.settle()
    assert h.group().state == GroupState.STABLE and m2.channel.last(START)["coordinator_epoch"] == 9
