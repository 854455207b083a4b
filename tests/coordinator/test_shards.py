"""The shard of a group (Kafka's rule over Java's String.hashCode) and the placement of shards."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_coord.coordinator.core.shards import java_hash, place, shard_of


def test_java_hash_known_values():
    # Java: "".hashCode() == 0, "a".hashCode() == 97, "hello".hashCode() == 99162322; "Aa" and "BB"
    # collide (2112); "polygenelubricants".hashCode() == Integer.MIN_VALUE
    assert java_hash("") == 0
    assert java_hash("a") == 97
    assert java_hash("hello") == 99162322
    assert java_hash("Aa") == java_hash("BB") == 2112
    assert java_hash("polygenelubricants") == -2**31
    assert java_hash("group-1") == 293427299
    # non-ASCII: UTF-16 code units, a supplementary character as its two surrogates
    assert java_hash("é") == 0xE9
    assert java_hash("grüße") == 98768023
    assert java_hash("😀") == 0xD83D * 31 + 0xDE00


def _formula(s: str) -> int:
    units = [int.from_bytes(s.encode("utf-16-be", "surrogatepass")[i:i + 2], "big")
             for i in range(0, len(s.encode("utf-16-be", "surrogatepass")), 2)]
    h = sum(u * 31 ** (len(units) - 1 - i) for i, u in enumerate(units))
    return (h + 2**31) % 2**32 - 2**31


@given(st.text(max_size=40))
def test_java_hash_is_the_formula_wrapped_to_32_bits(s):
    assert java_hash(s) == _formula(s)


def test_shard_of_is_kafkas_partition_of_the_group():
    assert shard_of("", 50) == 0
    assert shard_of("hello", 50) == 99162322 % 50
    assert shard_of("polygenelubricants", 16) == 0  # abs(MIN_VALUE) is 0 with the mask, as Utils.abs
    negative = next(g for g in (f"group-{i}" for i in range(1000)) if java_hash(g) < 0)
    assert shard_of(negative, 50) == (java_hash(negative) & 0x7FFFFFFF) % 50


def _loads(target, ids):
    return [sum(1 for t in target.values() if t == c) for c in ids]


ids_st = st.lists(st.integers(0, 20), min_size=1, max_size=8, unique=True)


@settings(max_examples=300)
@given(st.integers(1, 60), ids_st, st.data())
def test_placement_is_balanced_within_one_and_deterministic(count, ids, data):
    holders = data.draw(st.dictionaries(st.integers(0, count - 1), st.one_of(st.none(), st.integers(0, 25))))
    target = place(count, ids, holders)
    assert set(target) == set(range(count)) and set(target.values()) <= set(ids)
    loads = _loads(target, ids)
    assert max(loads) - min(loads) <= 1 and max(loads) == math.ceil(count / len(ids))
    assert place(count, list(reversed(ids)), dict(holders)) == target


@settings(max_examples=300)
@given(st.integers(1, 60), ids_st, st.integers(21, 30))
def test_a_coordinator_joining_moves_only_what_must_move(count, ids, newcomer):
    before = place(count, ids, {})
    after = place(count, ids + [newcomer], before)
    moved = [s for s in range(count) if after[s] != before[s]]
    assert all(after[s] == newcomer for s in moved)  # only shards given to the newcomer move
    assert len(moved) == _loads(after, [newcomer])[0] <= math.ceil(count / (len(ids) + 1))
    loads = _loads(after, ids + [newcomer])
    assert max(loads) - min(loads) <= 1


@settings(max_examples=300)
@given(st.integers(1, 60), st.lists(st.integers(0, 20), min_size=2, max_size=8, unique=True), st.data())
def test_a_coordinator_leaving_moves_only_its_shards(count, ids, data):
    before = place(count, ids, {})
    gone = data.draw(st.sampled_from(ids))
    survivors = [c for c in ids if c != gone]
    after = place(count, survivors, {s: (None if h == gone else h) for s, h in before.items()})
    moved = {s for s in range(count) if after[s] != before[s]}
    assert moved == {s for s, h in before.items() if h == gone}
    loads = _loads(after, survivors)
    assert max(loads) - min(loads) <= 1


def test_placement_examples():
    assert place(4, [], {}) == {0: None, 1: None, 2: None, 3: None}
    assert place(4, [7], {0: 3}) == {0: 7, 1: 7, 2: 7, 3: 7}
    spread = place(16, [0, 1, 2], {})
    assert _loads(spread, [0, 1, 2]) == [6, 5, 5]
    # a fourth joins: the four shards above each holder's share of four move to it, no other
    joined = place(16, [0, 1, 2, 3], spread)
    assert _loads(joined, [0, 1, 2, 3]) == [4, 4, 4, 4]
    assert sum(1 for s in range(16) if joined[s] != spread[s]) == 4


@settings(max_examples=200)
@given(st.integers(1, 60), ids_st, st.integers(21, 30), st.randoms(use_true_random=False))
def test_a_handover_one_shard_at_a_time_ends_where_it_was_planned(count, ids, newcomer, rnd):
    """Coordinators hand shards over one by one, in any order, each step placing again from what
    ZooKeeper shows then (the shard handed over is free until its target is elected): the end is
    the plan made when the newcomer joined, and nothing moves twice."""
    holders = place(count, ids, {})
    live = ids + [newcomer]
    planned = place(count, live, holders)
    moves = 0
    while True:
        target = place(count, live, holders)
        leaving = [s for s, h in holders.items() if h is not None and target[s] != h]
        if not leaving:
            break
        s = rnd.choice(leaving)
        holders = {**holders, s: None}  # the old holder deleted its leader node
        holders[s] = place(count, live, holders)[s]  # its target is elected
        moves += 1
    assert holders == planned
    assert moves == sum(1 for s in range(count) if planned[s] != place(count, ids, {})[s])
