"""Assignors (property tests), subscriptions, purgatory and the manual timer."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_coord.coordinator.core.assignors import get_assignor, range_assign, roundrobin_assign, sticky_assign
from spark_coord.coordinator.core.clock import ManualTimer
from spark_coord.coordinator.core.delayed import DelayedPing
from spark_coord.coordinator.core.purgatory import MemberKey, Purgatory
from spark_coord.coordinator.core.subscription import TopicCount

topics_st = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 20), min_size=1)
members_st = st.dictionaries(
    st.sampled_from([f"m{i}" for i in range(8)]),
    st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(1, 3), min_size=1), min_size=1)


def _check_complete(owners, members, topics):
    expected = {(t, p) for t, n in topics.items() for p in range(n)
                if any(tc.matches(t) for tc in members.values())}
    assert set(owners) == expected  # complete, and nothing outside it
    for (t, _p), thread in owners.items():
        cid, _, i = thread.rpartition("-")
        assert members[cid].matches(t) and int(i) < members[cid].streams_for(t)


@settings(max_examples=200, deadline=None)
@given(members_st, topics_st)
def test_range_is_complete_and_balanced_per_topic(subs, topics):
    members = {cid: TopicCount.static(s) for cid, s in subs.items()}
    owners = range_assign(members, topics)
    _check_complete(owners, members, topics)
    for t, n in topics.items():
        threads = [tid for cid, tc in members.items() for tid in tc.thread_ids(cid, t)]
        if not threads or n == 0:
            continue
        counts = Counter(owners[(t, p)] for p in range(n))
        per_thread = [counts.get(th, 0) for th in threads]
        assert max(per_thread) - min(per_thread) <= 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([f"m{i}" for i in range(8)]), min_size=1, unique=True), topics_st, st.integers(1, 3))
def test_roundrobin_is_complete_and_balanced_for_identical_subscriptions(cids, topics, streams):
    tc = TopicCount.static({t: streams for t in topics})
    members = {cid: tc for cid in cids}
    owners = roundrobin_assign(members, topics)
    _check_complete(owners, members, topics)
    counts = Counter(owners.values())
    threads = [f"{c}-{i}" for c in cids for i in range(streams)]
    per = [counts.get(t, 0) for t in threads]
    assert max(per) - min(per) <= 1


@settings(max_examples=100, deadline=None)
@given(members_st, topics_st)
def test_roundrobin_is_complete_for_mixed_subscriptions(subs, topics):
    members = {cid: TopicCount.static(s) for cid, s in subs.items()}
    _check_complete(roundrobin_assign(members, topics), members, topics)


def test_range_matches_kafka_example():
    members = {"c1": TopicCount.static({"t": 1}), "c2": TopicCount.static({"t": 2})}
    owners = range_assign(members, {"t": 5})
    assert owners == {("t", 0): "c1-0", ("t", 1): "c1-0", ("t", 2): "c2-0", ("t", 3): "c2-0", ("t", 4): "c2-1"}


def test_unknown_strategy_is_named():
    with pytest.raises(ValueError, match="cooperative-sticky.*known: sticky, range, roundrobin"):
        get_assignor("cooperative-sticky")


previous_st = st.dictionaries(st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 20)),
                              st.sampled_from([f"m{i}-{j}" for i in range(10) for j in range(3)]))


def _share(owners: dict, threads: list[str]) -> dict[str, int]:
    counts = Counter(owners.values())
    return {th: counts.get(th, 0) for th in threads}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([f"m{i}" for i in range(10)]), min_size=1, unique=True), topics_st,
       st.integers(1, 3), previous_st)
def test_sticky_with_one_subscription_is_balanced_and_moves_only_what_balance_needs(cids, topics, streams, previous):
    tc = TopicCount.static({t: streams for t in topics})
    members = {cid: tc for cid in cids}
    owners = sticky_assign(members, topics, previous)
    _check_complete(owners, members, topics)
    threads = [f"{c}-{i}" for c in cids for i in range(streams)]
    share = _share(owners, threads)
    assert max(share.values()) - min(share.values()) <= 1
    # fewest moves: a partition leaves a live owner only when that owner is above its share
    kept_before = Counter(th for tp, th in previous.items() if tp in owners and th in share)
    moved_from_live = sum(1 for tp, th in previous.items() if tp in owners and th in share and owners[tp] != th)
    n, k = len(owners), len(threads)
    base, extra = divmod(n, k)
    order = sorted(threads, key=lambda th: (-kept_before.get(th, 0), th))
    quota = {th: base + (1 if i < extra else 0) for i, th in enumerate(order)}
    assert moved_from_live == sum(max(0, kept_before.get(th, 0) - quota[th]) for th in threads)
    assert sticky_assign(members, topics, previous) == owners  # deterministic


@settings(max_examples=200, deadline=None)
@given(members_st, topics_st, previous_st)
def test_sticky_with_mixed_subscriptions_is_complete_and_no_single_move_helps(subs, topics, previous):
    members = {cid: TopicCount.static(s) for cid, s in subs.items()}
    owners = sticky_assign(members, topics, previous)
    _check_complete(owners, members, topics)
    threads = {tid: tc for cid, tc in members.items() for t in topics for tid in tc.thread_ids(cid, t)}
    share = _share(owners, list(threads))
    for tp, th in owners.items():
        for other, tc in members.items():
            for tid in tc.thread_ids(other, tp[0]):
                assert share[tid] + 2 > share[th], (tp, th, tid, share)
    assert sticky_assign(members, topics, previous) == owners


def test_sticky_moves_exactly_the_new_members_share_when_one_joins():
    tc = TopicCount.static({"t": 1})
    members = {f"m{i:02d}": tc for i in range(10)}
    before = sticky_assign(members, {"t": 100})
    assert set(Counter(before.values()).values()) == {10}
    members["new"] = tc
    after = sticky_assign(members, {"t": 100}, before)
    moved = {tp for tp in after if after[tp] != before[tp]}
    assert len(moved) == 9 and {after[tp] for tp in moved} == {"new-0"}
    # and one leaving hands out only its own partitions
    del members["m03"]
    again = sticky_assign(members, {"t": 100}, after)
    assert {tp for tp in again if again[tp] != after[tp]} == {tp for tp, th in after.items() if th == "m03-0"}


def test_topic_count():
    tc = TopicCount.wildcard("ev-.*", 2)
    assert tc.matches("ev-1") and not tc.matches("xev-1") and not tc.matches("ev")
    assert tc.thread_ids("c", "ev-1") == ["c-0", "c-1"] and tc.thread_ids("c", "x") == []
    assert TopicCount.from_json(tc.to_json()) == tc
    st_ = TopicCount.from_request([{"topic": "a", "streams": 2}, {"topic": "b"}], None, None)
    assert st_.to_json() == {"pattern": "static", "subscription": {"a": 2, "b": 1}}
    for bad in [([], None, 1), ([{"topic": "a", "streams": 0}], None, 1), (None, "[", 1), (None, "a", True),
                ([{"topic": "a"}, {"topic": "a"}], None, 1), ("a", None, 1), ([{"no": 1}], None, 1)]:
        with pytest.raises(ValueError):
            TopicCount.from_request(*bad)


def test_manual_timer_fires_in_order_and_purgatory_completes_once():
    timer = ManualTimer()
    fired = []
    timer.call_later(20, lambda: fired.append("b"))
    timer.call_later(10, lambda: fired.append("a"))
    h = timer.call_later(15, lambda: fired.append("x"))
    h.cancel()
    assert timer.advance(25) == 2 and fired == ["a", "b"] and timer.clock.now_ms() == 25

    purgatory = Purgatory(timer)
    expired = []
    op = DelayedPing("g", "c", 3000, on_expired=expired.append)
    assert not purgatory.try_complete_else_watch(op, [MemberKey("g", "c")])
    assert purgatory.check_and_complete(MemberKey("g", "c")) == 0
    timer.advance(1999)
    assert not op.is_completed
    timer.advance(1)
    assert op.is_completed and op.expired and expired == [op]
    assert not op.force_complete()  # exactly once
    op2 = DelayedPing("g", "c", 3000, on_expired=expired.append)
    purgatory.try_complete_else_watch(op2, [MemberKey("g", "c")])
    op2.answered = True
    assert purgatory.check_and_complete(MemberKey("g", "c")) == 1
    timer.advance(5000)
    assert expired == [op] and purgatory.pending() == 0


@settings(max_examples=200, deadline=None)
@given(members_st, topics_st, previous_st)
def test_sticky_range_is_balanced_per_topic_and_keeps_holders_within_their_share(subs, topics, previous):
    from spark_coord.coordinator.core.assignors import sticky_range_assign

    members = {cid: TopicCount.static(s) for cid, s in subs.items()}
    owners = sticky_range_assign(members, topics, previous)
    _check_complete(owners, members, topics)
    for t, n in topics.items():
        threads = [tid for cid, tc in members.items() for tid in tc.thread_ids(cid, t)]
        if not threads or n == 0:
            continue
        counts = Counter(owners[(t, p)] for p in range(n))
        per = [counts.get(th, 0) for th in threads]
        assert max(per) - min(per) <= 1
        kept = Counter(th for (tt, p), th in previous.items() if tt == t and p < n and th in threads)
        for th in threads:  # a holder keeps min(what it had, its share)
            assert sum(1 for (tt, p), o in owners.items() if tt == t and o == th and previous.get((tt, p)) == th) \
                == min(kept.get(th, 0), counts.get(th, 0))
    assert sticky_range_assign(members, topics, previous) == owners
