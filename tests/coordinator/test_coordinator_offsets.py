"""Active commit (CommitOffsets), deleted topics, and the offsets a clean shutdown writes."""

from __future__ import annotations

from coord_harness import START, STOP, Harness, async_test

from spark_coord.coordinator.core.group import GroupState
from spark_coord.errors import ErrorCode


def _codes(answer: dict) -> dict:
    return {(p["topic"], p["partition"]): p["error_code"] for p in answer["partitions"]}


@async_test
async def test_commit_offsets_is_answered_once_the_offsets_are_in_the_store():
    h = await Harness({"t": 4}, offsets_commit_interval_ms=60_000).start()
    m1, _ = h.register("c1")
    h.register("c2")
    await h.settle()
    mine = sorted(m1.positions)
    answer = await m1.commit({mine[0]: 17, mine[1]: 5})
    assert answer["error_code"] == 0 and set(_codes(answer).values()) == {0}
    assert h.store.groups["g"].offsets == {mine[0]: 17, mine[1]: 5}  # no commit interval elapsed
    assert not h.group().dirty


@async_test
async def test_commit_offsets_checks_like_ping_offsets():
    h = await Harness({"t": 4}).start()
    m1, _ = h.register("c1")
    h.register("c2")
    await h.settle()
    mine = sorted(m1.positions)
    assert (await m1.commit({mine[0]: 9}, generation=5))["error_code"] == ErrorCode.STALE_GENERATION  # not sent
    answer = await m1.commit({mine[0]: 9}, generation=0)  # an epoch before it got the partition
    assert answer["error_code"] == 0 and _codes(answer) == {mine[0]: ErrorCode.STALE_GENERATION}
    assert mine[0] not in h.store.groups["g"].offsets
    answer = await m1.commit({mine[0]: 9, ("t", 3): 4})
    assert answer["error_code"] == 0
    assert _codes(answer) == {mine[0]: 0, ("t", 3): ErrorCode.PARTITION_NOT_OWNED}
    answer = await m1.commit({mine[0]: 8})
    assert _codes(answer) == {mine[0]: ErrorCode.OFFSET_BACKWARDS}
    assert h.store.groups["g"].offsets == {mine[0]: 9}
    assert (await m1.commit({mine[0]: 10}, consumer_id="c2"))["error_code"] == ErrorCode.UNKNOWN_CONSUMER
    assert (await h.coord.handle_commit(object(), {"group_id": "g"}))["error_code"] == ErrorCode.UNKNOWN_CONSUMER


@async_test
async def test_a_commit_that_overtakes_the_first_start_fetcher_answer_is_taken():
    """A member commits as soon as it started fetching: its CommitOffsets may reach the coordinator
    before its answer to the StartFetcher that gave it the partitions (two connections, or the
    answer still being written).  The epoch that StartFetcher carried is one the member can have."""
    h = await Harness({"t": 2}, offsets_commit_interval_ms=60_000).start()
    m, _ = h.register("c1", auto=False)
    await h.settle()
    start = m.channel.last(START)
    epoch = start["generation_id"]
    assert h.group().members["c1"].epoch is None  # its answer has not come
    assert (await m.commit({("t", 0): 4}, generation=epoch + 1))["error_code"] == ErrorCode.STALE_GENERATION
    answer = await m.commit({("t", 0): 4, ("t", 1): 2}, generation=epoch)
    assert answer["error_code"] == 0 and set(_codes(answer).values()) == {0}
    assert h.store.groups["g"].offsets == {("t", 0): 4, ("t", 1): 2}
    m.answer(START)
    await h.settle()
    assert h.group().members["c1"].epoch == epoch and h.group().state == GroupState.STABLE


@async_test
async def test_commit_offsets_that_cannot_be_written_say_so():
    h = await Harness({"t": 2}).start()
    m, _ = h.register("c1")
    await h.settle()
    h.store.fail_writes = True
    answer = await m.commit({("t", 0): 3})
    assert answer["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert _codes(answer) == {("t", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE}
    h.store.fail_writes = False
    assert (await m.commit({("t", 0): 3}))["error_code"] == 0
    assert h.store.groups["g"].offsets == {("t", 0): 3}


@async_test
async def test_leaving_member_commits_then_the_group_rebalances_at_once():
    h = await Harness({"t": 4}).start()
    m1, _ = h.register("c1")
    m2, _ = h.register("c2")
    await h.settle()
    g = h.group()
    mine = sorted(m1.positions)
    answer = await m1.commit({tp: 30 for tp in mine}, leave=True)
    assert answer["error_code"] == 0 and h.store.groups["g"].offsets == {tp: 30 for tp in mine}
    await h.settle()
    generation = g.generation_id
    assert "c1" not in g.members and generation > 1 and g.state == GroupState.STABLE
    assert set(g.owners.values()) == {"c2-0"} and h.timer.clock.now_ms() == 0  # no lease to wait for
    starts = [p for o in m2.channel.last(START)["ownership"] for p in o["partitions"]]
    assert {(p["topic"], p["partition"]): p["offset"] for p in starts if (p["topic"], p["partition"]) in mine} == \
        {tp: 30 for tp in mine}
    h.coord.on_channel_closed(m1.channel)  # its connection closes after it left: nothing more happens
    await h.settle()
    assert g.generation_id == generation


@async_test
async def test_deleted_topic_forgets_offsets_and_a_new_one_starts_from_scratch():
    h = await Harness({"t": 2, "u": 1}).start()
    m, _ = h.register("c1", topics={"t": 1, "u": 1})
    await h.settle()
    assert (await m.commit({("t", 0): 500, ("t", 1): 7, ("u", 0): 3}))["error_code"] == 0
    h.coord.on_topics_changed({"u": 1}, complete=True)  # t deleted
    await h.settle()
    g = h.group()
    assert ("t", 0) not in g.offsets and ("t", 0) not in g.owners and g.offsets == {("u", 0): 3}
    assert h.store.groups["g"].offsets == {("u", 0): 3}
    h.coord.on_topics_changed({"t": 2, "u": 1}, complete=True)  # created again
    await h.settle()
    start = {(p["topic"], p["partition"]): p["offset"] for o in m.channel.last(START)["ownership"]
             for p in o["partitions"]}
    assert start[("t", 0)] == -1  # no stale offset handed out: auto.offset.reset applies
    assert (await m.commit({("t", 0): 20}))["error_code"] == 0  # lower than 500: not "backwards"
    assert h.store.groups["g"].offsets[("t", 0)] == 20


@async_test
async def test_clean_shutdown_commits_the_offsets_it_holds():
    h = await Harness({"t": 2}, offsets_commit_interval_ms=60_000).start()
    m, _ = h.register("c1", session=3000)
    await h.settle()
    m.consume(12)
    await h.advance(1000)  # a ping answer carries the offsets; no commit interval elapsed
    assert h.group().dirty and h.store.groups["g"].offsets == {}
    await h.coord.shutdown()
    assert h.store.groups["g"].offsets == {("t", 0): 12, ("t", 1): 12}
    assert not h.coord.active and m.channel.closed


@async_test
async def test_member_failing_every_round_is_failed_and_the_group_settles_without_it():
    """A member that answers pings but refuses every StopFetcher is failed after
    max.ping.retries + 1 failed rounds; the others get its partitions."""
    h = await Harness({"t": 4}, max_ping_retries=1, rebalance_backoff_ms=100, rebalance_max_retries=20).start()
    m1, _ = h.register("c1", session=3000)
    await h.settle()
    m1.stop_error = int(ErrorCode.UNKNOWN_SERVER_ERROR)
    m2, _ = h.register("c2", session=3000)
    await h.settle()
    await h.advance(100)
    g = h.group()
    assert m1.channel.closed and len(m1.channel.requests(STOP)) == 2  # two failed rounds
    await h.advance(3000 + 1000)  # its lease: it may be fetching until then
    assert "c1" not in g.members and g.state == GroupState.STABLE
    assert set(g.owners.values()) == {"c2-0"}


@async_test
async def test_rebalance_keeps_trying_after_consumer_rebalance_failed():
    """After rebalance.max.retries failures the group is not left stopped: attempts go on at the
    pace of the largest session timeout until one succeeds."""
    h = await Harness({"t": 2}, max_ping_retries=1000, rebalance_backoff_ms=100, rebalance_max_retries=2).start()
    m, _ = h.register("c1", session=3000)
    await h.settle()
    m.stop_error = int(ErrorCode.UNKNOWN_SERVER_ERROR)
    h.register("c2", session=3000)  # c1 must give one partition up, and refuses to stop
    await h.settle()
    await h.advance(200)
    assert len(m.channel.requests(STOP)) == 3
    await h.advance(2999)
    assert len(m.channel.requests(STOP)) == 3  # now at the pace of the session timeout
    await h.advance(1)
    assert len(m.channel.requests(STOP)) == 4
    m.stop_error = 0
    await h.advance(3000)
    assert h.group().state == GroupState.STABLE
