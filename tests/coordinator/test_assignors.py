"""Assignors (property tests), subscriptions, purgatory and the manual timer."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_coord.coordinator.assignors import get_assignor, range_assign, roundrobin_assign
from spark_coord.coordinator.clock import ManualTimer
from spark_coord.coordinator.delayed import DelayedPing
from spark_coord.coordinator.purgatory import MemberKey, Purgatory
from spark_coord.coordinator.subscription import TopicCount

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
    with pytest.raises(ValueError, match="sticky"):
        get_assignor("sticky")


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
