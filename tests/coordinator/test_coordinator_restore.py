"""A newly elected coordinator restores groups from the store and takes members back into
their generation (claims), waiting out the leases of those that do not come back."""

from __future__ import annotations

from coord_harness import START, STOP, Harness, async_test

from spark_coord.coordinator.core.group import LEASE_MARGIN_MS, GroupState
from spark_coord.coordinator.core.subscription import TopicCount
from spark_coord.coordinator.storage.store import StoredGroup, StoredMember

TC = TopicCount.static({"t": 1})


def _stored(generation: int = 5, sessions=(("c1", 3000), ("c2", 6000)), offsets=None, owners=None) -> StoredGroup:
    return StoredGroup("g", generation_id=generation,
                       members={cid: StoredMember(cid, TC, session_timeout_ms=s) for cid, s in sessions},
                       offsets=dict(offsets or {}), owners=dict(owners or {}))


def _claim(cid: str, generation: int, positions: dict) -> dict:
    return {"generation_id": generation, "owned": [{"consumer_thread_id": f"{cid}-0", "partitions": [
        {"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(positions.items())]}]}


@async_test
async def test_failover_restores_group_and_waits_for_members():
    h = Harness({"t": 4})
    h.store.groups["g"] = _stored(offsets={("t", 0): 11}, owners={("t", 0): "c1-0"})
    await h.start()
    g = h.group()
    assert g.state == GroupState.RESTORING and g.generation_id == 5 and g.offsets == {("t", 0): 11}
    m1, r = h.register("c1")  # no claim: it holds nothing
    assert r["error_code"] == 0 and r["generation_id"] == -1
    await h.settle()
    assert g.state == GroupState.RESTORING and not m1.channel.requests(STOP)
    await h.advance(6000 + LEASE_MARGIN_MS - 1)  # c2 may be fetching until its lease surely ended
    assert g.state == GroupState.RESTORING and "c2" in g.members
    await h.advance(1)
    assert "c2" not in g.members and "c2" not in h.store.groups["g"].members
    assert g.state == GroupState.STABLE and g.generation_id == 6 and len(g.owners) == 4
    assert m1.channel.last(START)["ownership"][0]["partitions"][0] == {"topic": "t", "partition": 0, "offset": 11}


@async_test
async def test_failover_rebalances_at_once_when_everyone_is_back():
    h = Harness({"t": 4})
    h.store.groups["g"] = StoredGroup("g", generation_id=2, members={c: StoredMember(c, TC) for c in ("c1", "c2")})
    await h.start()
    h.register("c1")
    h.register("c2")
    await h.settle()
    g = h.group()
    assert g.state == GroupState.STABLE and g.generation_id == 3 and h.timer.clock.now_ms() == 0


@async_test
async def test_failover_with_unchanged_membership_stops_nobody():
    """Every restored member comes back with a claim matching the restored owners: the new
    coordinator confirms generation 5 without a StopFetcher, and takes the claimed positions."""
    owners = {("t", 0): "c1-0", ("t", 1): "c1-0", ("t", 2): "c2-0", ("t", 3): "c2-0"}
    h = Harness({"t": 4})
    h.store.groups["g"] = _stored(offsets={("t", p): 10 for p in range(4)}, owners=owners)
    await h.start()
    m1, r1 = h.register("c1", **_claim("c1", 5, {("t", 0): 15, ("t", 1): 12}))
    m2, r2 = h.register("c2", **_claim("c2", 5, {("t", 2): 10, ("t", 3): 19}))
    assert r1["generation_id"] == 5 and r2["generation_id"] == 5
    await h.settle()
    g = h.group()
    assert g.state == GroupState.STABLE and g.generation_id == 5 and g.owners == owners
    assert not m1.channel.requests(STOP) and not m2.channel.requests(STOP)
    assert g.offsets == {("t", 0): 15, ("t", 1): 12, ("t", 2): 10, ("t", 3): 19}
    await h.advance(1000)  # pings of the restored generation carry offsets that are accepted
    assert h.store.groups["g"].offsets[("t", 3)] == 19


@async_test
async def test_restored_member_back_others_wait_for_the_absent_one():
    """c1 is back with its claim and keeps fetching; c2's partitions are handed out only after
    c2's lease (counted from the election) surely ended."""
    owners = {("t", 0): "c1-0", ("t", 1): "c1-0", ("t", 2): "c2-0", ("t", 3): "c2-0"}
    h = Harness({"t": 4})
    h.store.groups["g"] = _stored(owners=owners)
    await h.start()
    m1, r = h.register("c1", **_claim("c1", 5, {("t", 0): 3, ("t", 1): 4}))
    assert r["generation_id"] == 5
    await h.settle()
    g = h.group()
    assert g.state == GroupState.RESTORING and not m1.channel.requests(STOP)
    await h.advance(1000)
    assert g.offsets[("t", 0)] == 3  # c1 reports in its restored generation meanwhile
    await h.advance(6000 + LEASE_MARGIN_MS - 1000)
    assert g.state == GroupState.STABLE and g.generation_id > 5
    assert set(g.owners.values()) == {"c1-0"} and m1.channel.requests(STOP)  # a v1 member: stopped, restarted


@async_test
async def test_restored_incremental_member_gets_the_absent_ones_partitions_without_a_stop():
    owners = {("t", 0): "c1-0", ("t", 1): "c1-0", ("t", 2): "c2-0", ("t", 3): "c2-0"}
    h = Harness({"t": 4})
    h.store.groups["g"] = _stored(owners=owners)
    await h.start()
    m1, r = h.register("c1", version=2, **_claim("c1", 5, {("t", 0): 3, ("t", 1): 4}))
    assert r["generation_id"] == 5
    m1.generation, m1.positions = 5, {("t", 0): 3, ("t", 1): 4}
    await h.advance(6000 + LEASE_MARGIN_MS)
    g = h.group()
    assert g.state == GroupState.STABLE and set(g.owners.values()) == {"c1-0"}
    assert not m1.channel.requests(STOP) and len(m1.channel.requests(START)) == 1
    assert m1.positions == {("t", 0): 3, ("t", 1): 4, ("t", 2): 0, ("t", 3): 0}


@async_test
async def test_claims_after_failover_must_fit_what_the_store_says():
    """A restored member is taken back with what it claims when the restored owners give it
    every claimed partition, in an epoch it can have had; anything else is refused."""
    owners = {("t", 0): "c1-0", ("t", 1): "c1-0", ("t", 2): "c2-0"}
    h = Harness({"t": 3})
    h.store.groups["g"] = _stored(owners=owners)
    await h.start()
    _, r = h.register("c1", **_claim("c1", 6, {("t", 0): 3}))  # an epoch never sent to it
    assert r["generation_id"] == -1
    h.coord.on_channel_closed(h.group().members["c1"].channel)
    await h.settle()
    h2 = Harness({"t": 3})
    h2.store.groups["g"] = _stored(owners=owners)
    await h2.start()
    _, r = h2.register("c1", **_claim("c1", 5, {("t", 0): 3, ("t", 2): 1}))  # c2's partition
    assert r["generation_id"] == -1
    h3 = Harness({"t": 3})
    h3.store.groups["g"] = _stored(owners=owners)
    await h3.start()
    _, r = h3.register("c1", **_claim("c1", 4, {("t", 1): 8}))  # older epoch, fewer partitions: fits
    assert r["generation_id"] == 4
    g = h3.group()
    assert g.members["c1"].owned() == {("t", 1)} and g.offsets[("t", 1)] == 8


@async_test
async def test_restored_offsets_of_deleted_topics_are_dropped():
    h = Harness({"t": 2})
    h.store.groups["g"] = StoredGroup("g", generation_id=1, offsets={("t", 0): 4, ("gone", 0): 99},
                                      owners={("gone", 0): "c1-0"})
    await h.start()
    await h.settle()
    g = h.group()
    assert g.offsets == {("t", 0): 4} and g.owners == {}
    assert h.store.groups["g"].offsets == {("t", 0): 4} and h.store.groups["g"].owners == {}
