"""Invariants over random join / leave / fail / topic-change sequences (hypothesis)."""

from __future__ import annotations

import asyncio

from coord_harness import Harness
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_coord.coordinator.core.group import GroupState
from spark_coord.errors import ErrorCode

CIDS = [f"c{i}" for i in range(5)]
op_st = st.one_of(
    st.tuples(st.just("join"), st.sampled_from(CIDS), st.integers(1, 2)),
    st.tuples(st.just("join2"), st.sampled_from(CIDS), st.integers(1, 2)),
    st.tuples(st.just("leave"), st.sampled_from(CIDS), st.just(0)),
    st.tuples(st.just("exit"), st.sampled_from(CIDS), st.just(0)),
    st.tuples(st.just("reconnect"), st.sampled_from(CIDS), st.just(0)),
    st.tuples(st.just("mute"), st.sampled_from(CIDS), st.just(0)),
    st.tuples(st.just("advance"), st.just(""), st.integers(1, 4000)),
    st.tuples(st.just("grow"), st.just(""), st.integers(1, 3)),
    st.tuples(st.just("settle"), st.just(""), st.integers(1, 10)),
)


def _check_one_owner_per_partition(h: Harness, live: dict) -> None:
    """At no moment do two members hold the same partition -- whatever their epochs, and
    counting members whose connection is gone but whose lease may not have ended -- and the
    coordinator never counts a member for less than it fetches."""
    g = h.coord.groups.get("g")
    if g is None:
        return
    seen: dict[tuple[str, int], str] = {}
    for m in g.members.values():
        for tp in m.owned():
            assert tp not in seen, f"{tp} held by {seen[tp]} and {m.consumer_id} (epoch {m.epoch})"
            seen[tp] = m.consumer_id
    for cid, fake in live.items():
        m = g.members.get(cid)
        if m is not None and m.channel is fake.channel:
            assert set(fake.positions) <= m.owned(), (cid, sorted(fake.positions), sorted(m.owned()))


async def _run(ops) -> None:
    h = await Harness({"a": 3, "b": 2}, rebalance_backoff_ms=50, max_ping_retries=1).start()
    live: dict[str, object] = {}
    partitions_b = 2
    for kind, cid, n in ops:
        if kind in ("join", "join2") and cid not in live:
            m, r = h.register(cid, topics={"a": n, "b": 1}, session=3000, version=2 if kind == "join2" else 1)
            assert r["error_code"] == 0
            live[cid] = m
        elif kind == "leave" and cid in live:
            h.coord.on_channel_closed(live.pop(cid).channel)
        elif kind == "reconnect" and cid in live:  # same process, new connection, claims what it holds
            old = live[cid]
            h.coord.on_channel_closed(old.channel)
            old.channel.closed = True
            claim = old.claim()
            version = 2 if old.incremental else 1
            m, r = h.register(cid, topics={"a": n or 1, "b": 1}, session=3000, like=old, version=version, **claim)
            if r["error_code"] == ErrorCode.CLAIM_REFUSED:  # it stops everything and registers again
                m.channel.closed = True
                m, r = h.register(cid, topics={"a": n or 1, "b": 1}, session=3000, version=version)
            assert r["error_code"] == 0
            if r["generation_id"] != claim["generation_id"]:  # not taken back: it drops what it held
                m.positions, m.generation = {}, None
            live[cid] = m
        elif kind == "exit" and cid in live:
            m = live.pop(cid)
            await m.commit(leave=True)
        elif kind == "mute" and cid in live:
            live[cid].muted = True
        elif kind == "advance":
            await h.advance(n)
        elif kind == "grow":
            partitions_b += n
            h.coord.on_topics_changed({"b": partitions_b})
        else:
            await h.settle(n)
        _check_one_owner_per_partition(h, live)
    await h.advance(20_000)  # muted members fail, everything settles
    _check_one_owner_per_partition(h, live)
    g = h.coord.groups.get("g")
    if g is None:
        return
    alive = {cid for cid, m in live.items() if not m.channel.closed}
    assert set(g.members) == alive
    if not alive:
        assert g.state == GroupState.EMPTY and g.owners == {}
        return
    assert g.state == GroupState.STABLE, (g.state, g.last_error)
    expected = {("a", p) for p in range(3)} | {("b", p) for p in range(partitions_b)}
    assert set(g.owners) == expected  # complete
    assert {o.rsplit("-", 1)[0] for o in g.owners.values()} <= alive
    assert h.store.groups["g"].owners == g.owners
    for cid in alive:  # every member runs exactly its share, in the epoch it was last sent
        m = g.members[cid]
        assert m.epoch == m.sent_epoch <= g.generation_id and live[cid].generation == m.epoch
        assert m.owned() == {tp for tp, o in g.owners.items() if o.rsplit("-", 1)[0] == cid} == set(live[cid].positions)
    loads: dict[str, int] = {}  # balanced by consumer thread: no partition could go to a thread with 2 fewer
    for thread in g.owners.values():
        loads[thread] = loads.get(thread, 0) + 1
    threads = {(t, f"{cid}-{i}") for cid in alive for t in ("a", "b")
               for i in range(g.members[cid].topic_count.streams_for(t))}
    for (t, _), thread in g.owners.items():
        assert all(loads.get(other, 0) + 2 > loads[thread] for tt, other in threads if tt == t), (loads, g.owners)
    assert h.coord.rebalancer.concurrency_violations == 0


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op_st, min_size=1, max_size=25))
def test_random_membership_sequences_keep_the_invariants(ops):
    asyncio.run(_run(ops))
