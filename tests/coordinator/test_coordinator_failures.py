"""Failure detection, absent members and their leases, the committer, fencing."""

from __future__ import annotations

from coord_harness import EPOCH, PING, START, STOP, Harness, async_test

from spark_coord.coordinator.core.group import LEASE_MARGIN_MS, GroupState
from spark_coord.errors import ErrorCode


def _ping_answer(m, generation, offsets=(), **extra) -> dict:
    return {"error_code": 0, "consumer_id": m.consumer_id, "generation_id": generation,
            "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in offsets], **extra}


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
    await h.advance(2000)  # more than max.ping.retries expiries: failed, its connection closed...
    g = h.group()
    assert ms[2].channel.closed and g.members["c3"].channel is None
    # ...but its partitions go to nobody until its lease surely ended: session + margin after the
    # last request sent to it (the ping at 4000)
    assert g.members["c3"].absent_until_ms == 4000 + 3000 + LEASE_MARGIN_MS
    assert g.state == GroupState.STABLE and g.generation_id == 1
    await h.advance(4000 + 3000 + LEASE_MARGIN_MS - h.timer.clock.now_ms() - 1)
    assert "c3" in g.members and g.generation_id == 1
    await h.advance(1)
    assert "c3" not in g.members
    assert g.state == GroupState.STABLE and g.generation_id > 1
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
async def test_late_ping_answers_do_not_keep_a_member_alive():
    """A member that answers every ping only after it expired (2/3 of its session) is failed:
    a late answer neither completes the ping that is out now nor resets the count."""
    h = await Harness({"t": 2}, max_ping_retries=1).start()
    m, _ = h.register("c1", session=3000)
    await h.settle()
    m.muted = True
    await h.advance(1000)                 # ping 0 out
    await h.advance(2000)                 # ping 0 expired at 3000 (1 unanswered); ping 1 out at 3000
    assert h.group().members["c1"].failed_pings == 1
    m.channel.reply(PING, _ping_answer(m, 1), index=0)   # the answer to ping 0 arrives late
    await h.settle()
    member = h.group().members["c1"]
    assert member.failed_pings == 1 and member.ping is not None and not member.ping.is_completed
    await h.advance(2000)                 # ping 1 expires at 5000: failed
    assert m.channel.closed


@async_test
async def test_error_answers_to_pings_do_not_count():
    h = await Harness({"t": 2}, max_ping_retries=1).start()
    m, _ = h.register("c1", session=3000)
    await h.settle()
    m.muted = True
    await h.advance(1000)  # ping 0 out...
    m.channel.reply(PING, _ping_answer(m, 1, error_code=int(ErrorCode.STALE_COORDINATOR_EPOCH)))
    await h.advance(2000)  # ...refused, so it expires at 3000; ping 1 out
    assert h.group().members["c1"].failed_pings == 1
    m.channel.reply(PING, _ping_answer(m, 1, error_code=int(ErrorCode.UNKNOWN_CONSUMER)))
    await h.advance(2000)
    assert m.channel.closed  # refused every ping: failed like a silent member


@async_test
async def test_offsets_from_stale_generation_or_unowned_partitions_are_refused_and_never_go_backwards():
    h = await Harness({"t": 4}).start()
    m1, _ = h.register("c1")
    m2, _ = h.register("c2")
    await h.settle()
    g = h.group()
    assert g.generation_id == 1
    owned1 = sorted(m1.positions)  # [("t",0), ("t",1)]
    m1.muted = True
    await h.advance(1000)  # a ping to answer by hand

    def send(gen, offsets, **extra):
        m1.channel.reply(PING, _ping_answer(m1, gen, offsets, **extra))

    send(0, [(owned1[0], 50)])                       # stale generation
    assert owned1[0] not in g.offsets
    send(1, [(("t", 3), 50)])                        # owned by c2
    assert g.offsets.get(("t", 3)) != 50
    send(1, [(owned1[0], 50)])
    assert g.offsets[owned1[0]] == 50 and owned1[0] in g.dirty
    send(1, [(owned1[0], 40)])                       # backwards within the generation
    assert g.offsets[owned1[0]] == 50
    m1.channel.reply(PING, {"error_code": 0, "consumer_id": "c1", "generation_id": 1, "offsets": [
        {"topic": "t", "partition": owned1[0][1], "offset": 60}, "junk", {"topic": "t", "partition": -1, "offset": 1},
        {"topic": "t", "partition": owned1[1][1], "offset": True}]})  # malformed entries are skipped
    assert g.offsets[owned1[0]] == 60 and owned1[1] not in g.offsets
    m1.channel.reply(PING, "not a struct")  # hostile answer: logged, ignored
    assert g.offsets[owned1[0]] == 60


@async_test
async def test_committer_writes_dirty_offsets_every_interval():
    h = await Harness({"t": 2}, offsets_commit_interval_ms=1000).start()
    m, _ = h.register("c1", session=3000)
    await h.settle()
    m.consume(10)
    await h.advance(1000)  # the committer's tick, then the ping carrying the offsets
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
    m2, _ = h.register("c2", session=30000, auto=False)
    await h.settle()
    assert h.group().state == GroupState.STOPPING_FETCHERS and not m2.channel.requests(START)
    m1.answer(STOP)  # carries offsets 5, 5
    await h.settle()
    assert h.group().state == GroupState.STARTING_FETCHERS
    assert h.store.groups["g"].offsets == {("t", 0): 5, ("t", 1): 5}  # forced commit, no interval elapsed
    ops = [op for op, _, _ in h.store.writes]
    assert ops[-2:] == ["commit_offsets", "save_assignment"]  # offsets first, then owners and epochs
    for m in (m1, m2):
        start = m.channel.last(START)
        assert [p["offset"] for o in start["ownership"] for p in o["partitions"]] == [5]


@async_test
async def test_fenced_store_write_deactivates_and_drops_everything():
    h = await Harness().start()
    m, _ = h.register("c1")
    await h.settle()
    h.store.fenced = True
    m.consume(3)
    await h.advance(1000)  # the ping answer makes offsets dirty...
    await h.advance(1000)  # ...and the committer's write is fenced
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
    m2, r = h.register("c1")  # no claim: joins afresh
    assert r["coordinator_epoch"] == 9
    await h.settle()
    assert h.group().state == GroupState.STABLE and m2.channel.last(START)["coordinator_epoch"] == 9


@async_test
async def test_reconnected_member_with_its_claim_keeps_its_generation_and_offsets():
    """A member whose connection broke comes back on a new one before its lease ran out: its
    claim matches, so it is back in its generation, its positions (also those consumed since
    the last ping) are taken, and nobody is stopped."""
    h = await Harness({"t": 4}).start()
    m1, _ = h.register("c1", session=3000)
    m2, _ = h.register("c2", session=3000)
    await h.settle()
    g = h.group()
    assert g.generation_id == 1
    stops = [len(m.channel.requests(STOP)) for m in (m1, m2)]
    m1.consume(7)
    h.coord.on_channel_closed(m1.channel)
    await h.settle()
    assert g.members["c1"].channel is None and g.state == GroupState.STABLE
    m1b, r = h.register("c1", like=m1, **m1.claim())
    assert r["error_code"] == 0 and r["generation_id"] == 1
    await h.settle()
    assert g.state == GroupState.STABLE and g.generation_id == 1
    assert g.offsets == {tp: 7 for tp in m1.positions}  # the claim's positions, accepted
    assert [len(m.channel.requests(STOP)) for m in (m1, m2)] == stops and not m1b.channel.requests(STOP)
    assert g.members["c1"].absent_until_ms is None
    await h.advance(10_000)  # no lease timer left behind
    assert g.generation_id == 1 and "c1" in g.members and g.members["c1"].channel is m1b.channel


@async_test
async def test_claim_that_does_not_fit_joins_afresh():
    """A v1 member whose claim names a partition another member holds is not taken back: it
    joins as a new member (it drops what it held on reading the answer)."""
    h = await Harness({"t": 4}).start()
    m1, _ = h.register("c1")
    h.register("c2")
    await h.settle()
    h.coord.on_channel_closed(m1.channel)
    bad = m1.claim(offsets={("t", 3): 5})  # claims a partition c2 holds
    m1b, r = h.register("c1", **bad)
    assert r["error_code"] == 0 and r["generation_id"] == -1
    await h.settle()
    g = h.group()
    assert g.state == GroupState.STABLE and len(m1b.positions) == 2 and g.offsets.get(("t", 3)) != 5


@async_test
async def test_refused_claim_of_an_incremental_member_keeps_its_partitions_until_it_registers_again():
    """A v2 member is told CLAIM_REFUSED and stays absent, so nothing it may still be fetching
    moves; it drops its assignment and registers again without a claim: then it joins afresh."""
    h = await Harness({"t": 4}).start()
    m1, _ = h.register("c1", version=2)
    m2, _ = h.register("c2", version=2)
    await h.settle()
    h.coord.on_channel_closed(m1.channel)
    bad = m1.claim(offsets={("t", 3): 5, **m1.positions})
    m1b, r = h.register("c1", version=2, **bad)
    assert r["error_code"] == ErrorCode.CLAIM_REFUSED and "t-3" in r["error_message"]
    g = h.group()
    assert g.members["c1"].channel is None and len(g.members["c1"].owned()) == 2
    await h.settle()
    assert len(m2.positions) == 2  # nothing moved
    m1c, r = h.register("c1", version=2)  # no claim: it stopped everything
    assert r["error_code"] == 0
    await h.settle()
    assert g.state == GroupState.STABLE and len(m1c.positions) == 2 and len(m2.positions) == 2


@async_test
async def test_absent_member_keeps_its_partitions_until_its_lease_ends():
    """A member joins while another one's connection is gone: the absent member's partitions are
    not handed out before its lease surely ended; the newcomer is started with nothing meanwhile."""
    h = await Harness({"t": 4}).start()
    m1, _ = h.register("c1", session=3000)
    await h.settle()
    h.coord.on_channel_closed(m1.channel)
    m2, _ = h.register("c2", session=3000)
    await h.settle()
    g = h.group()
    assert m2.channel.last(START)["ownership"] == [] and m2.positions == {}
    assert g.state == GroupState.STABLE and set(g.owners.values()) == {"c1-0"}
    await h.advance(3000 + LEASE_MARGIN_MS)
    assert "c1" not in g.members and g.state == GroupState.STABLE
    assert set(g.owners.values()) == {"c2-0"} and len(g.owners) == 4 and len(m2.positions) == 4


@async_test
async def test_member_without_an_assignment_is_removed_at_once():
    h = await Harness({"t": 1}).start()
    h.register("c1")
    await h.settle()
    m2, _ = h.register("c2")  # started with nothing: one partition, and c1 has it
    await h.settle()
    assert m2.channel.requests(START) and m2.positions == {}
    h.coord.on_channel_closed(m2.channel)
    await h.settle()
    g = h.group()
    assert list(g.members) == ["c1"] and g.state == GroupState.STABLE


@async_test
async def test_no_pings_while_zookeeper_does_not_confirm_the_election():
    """A coordinator renews members' leases only while ZooKeeper confirmed its election less than
    2/3 of its ZooKeeper session ago (a deposed coordinator resuming from a pause pings nobody)."""
    h = await Harness({"t": 2}, leadership_timeout_ms=6000).start()
    m, _ = h.register("c1", session=3000)
    await h.settle()
    await h.advance(3000)
    assert len(m.channel.requests(PING)) == 3
    h.store.fail_writes = True  # ZooKeeper cannot confirm anything from now on (checks at 4500, 6000...)
    await h.advance(4000)       # t=7000: the last confirmation was sent at 3000, so pings stopped at 7000
    pinged = len(m.channel.requests(PING))
    assert pinged == 6
    await h.advance(3000)
    assert len(m.channel.requests(PING)) == pinged
    h.store.fail_writes = False
    await h.advance(1500)       # the next check confirms it: pings resume
    assert len(m.channel.requests(PING)) > pinged
    h.store.fenced = True
    await h.advance(1500)       # a check that finds another coordinator elected: everything dropped
    assert not h.coord.active and m.channel.closed


@async_test
async def test_a_coordinator_zookeeper_does_not_confirm_decides_no_membership():
    """A coordinator paused past its ZooKeeper session resumes with every timer due at once and may
    already be deposed: until ZooKeeper confirms its election again it removes nobody (an absent
    member's lease, a ping that expired during the pause) and takes no registration -- else it tells a
    member that its successor would take back that it "is not a member", and the member drops its
    partitions and the positions it claimed and starts them again from the offsets in ZooKeeper."""
    h = await Harness({"t": 2}, leadership_timeout_ms=6000).start()
    m, _ = h.register("c1", version=2)
    await h.settle()
    assert len(m.positions) == 2 and h.group().state == GroupState.STABLE
    m.consume(40)
    h.store.fail_writes = True      # ZooKeeper confirms nothing from now on (the broker is paused)
    m.muted = True                  # nor does the member hear from us
    await h.advance(10000)          # resumed: its ping expired, its lease bound passed long ago
    assert "c1" in h.group().members, "removed by a coordinator ZooKeeper no longer confirms"
    h.coord.on_channel_closed(m.channel)  # the member gave up on us and comes back with its claim
    m2, r = h.register("c1", version=2, like=m, **m.claim())
    assert r["error_code"] == ErrorCode.NOT_COORDINATOR, r
    assert "c1" in h.group().members and h.group().members["c1"].owned() == {("t", 0), ("t", 1)}
    h.store.fail_writes = False
    h.store.fenced = True           # the next check finds another coordinator elected: it resigns
    await h.advance(1500)
    assert not h.coord.active
    h.store.fenced = False
    successor = Harness({"t": 2}, leadership_timeout_ms=6000)
    successor.store = successor.coord.store = h.store
    await successor.start(EPOCH + 1)
    m3, r = successor.register("c1", version=2, like=m, **m.claim())
    assert r["error_code"] == 0 and r["generation_id"] == m.generation  # taken back, with its positions
    await successor.settle()
    assert successor.group().offsets == {("t", 0): 40, ("t", 1): 40}


@async_test
async def test_a_member_that_only_gave_up_a_partition_is_taken_back_after_a_failover():
    """StopFetcher v1 gives the member a new epoch without a StartFetcher; the successor restores
    the epoch stored for it, so it must be stored before the StopFetcher carries it -- else the
    member's claim is "newer than" what the successor knows, refused, and the member drops the
    partitions it kept and reads them again from ZooKeeper's offsets."""
    h = await Harness({"t": 2}).start()
    m1, _ = h.register("c1", version=2)
    await h.settle()
    m1.auto = False
    h.register("c2", version=2)
    await h.settle()
    m1.answer(STOP)                 # c1 gives up one partition, in the StopFetcher's epoch...
    m1.consume(30)
    assert len(m1.positions) == 1
    successor = Harness({"t": 2})   # ...and the coordinator dies before any StartFetcher
    successor.store = successor.coord.store = h.store
    await h.coord.deactivate()
    await successor.start(EPOCH + 1)
    back, r = successor.register("c1", version=2, like=m1, **m1.claim())
    assert r["error_code"] == 0 and r["generation_id"] == m1.generation, r
    await successor.settle()
    (kept,) = m1.positions
    assert successor.group().offsets[kept] == m1.positions[kept]


@async_test
async def test_committer_leaves_a_group_whose_write_is_in_flight_for_the_next_tick():
    """The tick writes every dirty group together, except one whose own write still runs (its
    store lock held): that one is written at a later tick, so a group's writes land in order."""
    h = await Harness({"t": 2}, offsets_commit_interval_ms=1000).start()
    a, _ = h.register("ca", group="a", session=3000)
    b, _ = h.register("cb", group="b", session=3000)
    await h.settle()
    a.consume(4)
    b.consume(6)
    await h.advance(1000)  # the pings carrying the offsets (the tick at 1000 ran first)
    assert h.group("a").dirty and h.group("b").dirty
    await h.group("b").store_lock.acquire()  # b's own write (a forced commit, say) in flight
    await h.advance(1000)
    assert h.store.groups["a"].offsets == {("t", 0): 4, ("t", 1): 4}
    assert "b" not in h.store.groups or h.store.groups["b"].offsets == {}
    assert h.group("b").dirty
    h.group("b").store_lock.release()
    await h.advance(1000)
    assert h.store.groups["b"].offsets == {("t", 0): 6, ("t", 1): 6}
    assert not h.group("a").dirty and not h.group("b").dirty
