"""SharePartition (spark_coord.share.partition): one scenario per rule of KIP-932's record states."""

from __future__ import annotations

import json

import pytest

from spark_coord.errors import ErrorCode
from spark_coord.share import AckType, Acquired, RecordState, SharePartition

ACCEPT, RELEASE, REJECT, GAP, RENEW = AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.GAP, AckType.RENEW


def states(sp: SharePartition) -> dict[int, tuple]:
    """offset -> (state, delivery count, holder, deadline), from the range list."""
    out = {}
    for first, last, state, count, holder, deadline in sp._ranges:
        for o in range(first, last + 1):
            out[o] = (RecordState(state), count, holder, deadline)
    return out


def check_ranges(sp: SharePartition) -> None:
    rs = sp._ranges
    expect = sp.start_offset
    for k, (first, last, state, _count, holder, deadline) in enumerate(rs):
        assert first == expect and first <= last
        assert (holder is not None) == (state == RecordState.ACQUIRED) == (deadline is not None)
        if k:
            assert rs[k - 1][2:] != rs[k][2:], f"equal neighbours {rs[k - 1]} {rs[k]}"
        expect = last + 1
    assert expect == sp.end_offset
    if rs:
        assert rs[0][2] in (RecordState.AVAILABLE, RecordState.ACQUIRED)


def test_the_enums_carry_kafkas_ids():
    assert [int(s) for s in RecordState] == [0, 1, 2, 4]
    assert [(t.name, int(t)) for t in AckType] == [("GAP", 0), ("ACCEPT", 1), ("RELEASE", 2), ("REJECT", 3),
                                                    ("RENEW", 4)]


def test_a_new_partition_is_empty_and_reads_from_its_start():
    sp = SharePartition(42)
    assert (sp.start_offset, sp.end_offset, sp.fetch_offset()) == (42, 42, 42)
    assert sp.counts() == {"available": 0, "acquired": 0, "acknowledged": 0, "archived": 0}
    assert sp.holders() == {} and sp.next_lock_deadline() is None
    assert sp.snapshot() == {"version": 1, "start": 42, "ranges": []}
    with pytest.raises(ValueError, match="start_offset"):
        SharePartition(-1)
    with pytest.raises(ValueError, match="delivery_count_limit"):
        SharePartition(0, delivery_count_limit=0)
    with pytest.raises(ValueError, match="max_in_flight"):
        SharePartition(0, max_in_flight=0)


def test_acquire_and_accept_a_steady_stream_keeps_few_ranges():
    sp = SharePartition(0)
    for n in range(20):
        first = n * 500
        assert sp.fetch_offset() == first
        got = sp.acquire("m", [(first, first + 499)], max_records=500, lock_deadline=1000 + n)
        assert got == [Acquired(first, first + 499, 1)]
        assert len(sp._ranges) == 1
        assert sp.acknowledge("m", first, first + 499, [ACCEPT]) == ErrorCode.NONE
        assert sp.start_offset == sp.end_offset == first + 500 and sp._ranges == []
    assert (sp.deliveries_total, sp.acknowledged_total, sp.archived_total) == (10_000, 10_000, 0)


def test_batches_with_a_gap_archive_the_gap_and_never_hand_it_out():
    sp = SharePartition(0)
    sp.acquire("m", [(0, 4)], max_records=5, lock_deadline=100)
    got = sp.acquire("m", [(5, 9), (13, 15), (20, 20)], max_records=100, lock_deadline=100)
    assert got == [Acquired(5, 9, 1), Acquired(13, 15, 1), Acquired(20, 20, 1)]
    s = states(sp)
    assert [o for o in s if s[o][0] == RecordState.ARCHIVED] == [10, 11, 12, 16, 17, 18, 19]
    assert all(s[o][1] == 0 for o in (10, 11, 12, 16, 17, 18, 19))
    assert sp.end_offset == 21 and sp.archived_total == 7 and sp.deliveries_total == 14
    # the gaps are done: accepting the records around them moves the SPSO over everything
    assert sp.acknowledge("m", 0, 9, [ACCEPT]) == ErrorCode.NONE
    assert sp.start_offset == 13
    assert sp.acknowledge("m", 13, 15, [ACCEPT]) == ErrorCode.NONE
    assert sp.acknowledge("m", 20, 20, [ACCEPT]) == ErrorCode.NONE
    assert (sp.start_offset, sp.end_offset, sp.fetch_offset()) == (21, 21, 21)
    # an ack of a gap offset is not an ack of an acquired record
    assert sp.acknowledge("m", 10, 10, [GAP]) == ErrorCode.INVALID_RECORD_STATE


def test_a_gap_before_the_first_batch_of_an_empty_window_moves_the_start():
    sp = SharePartition(10, max_in_flight=5)
    got = sp.acquire("m", [(100, 104)], max_records=10, lock_deadline=1)
    assert got == [Acquired(100, 104, 1)]
    assert (sp.start_offset, sp.end_offset, sp.archived_total) == (100, 105, 90)


def test_a_gap_after_the_window_is_archived_up_to_the_window_limit():
    sp = SharePartition(0, max_in_flight=10)
    sp.acquire("m", [(0, 2)], max_records=10, lock_deadline=1)
    assert sp.acquire("m", [(20, 25)], max_records=10, lock_deadline=1) == []
    assert sp.end_offset == 10 and sp.counts()["archived"] == 7 and sp.fetch_offset() is None


def test_batches_below_the_start_and_straddling_it():
    sp = SharePartition(10)
    got = sp.acquire("m", [(0, 4), (5, 14)], max_records=100, lock_deadline=1)
    assert got == [Acquired(10, 14, 1)] and sp.start_offset == 10


def test_max_records_stops_mid_batch_and_batch_optimized_finishes_it():
    sp = SharePartition(0)
    assert sp.acquire("a", [(0, 9), (10, 19)], max_records=4, lock_deadline=1) == [Acquired(0, 3, 1)]
    assert sp.end_offset == 4 and sp.fetch_offset() == 4
    got = sp.acquire("b", [(0, 9), (10, 19)], max_records=4, lock_deadline=1, batch_optimized=True)
    assert got == [Acquired(4, 9, 1)] and sp.end_offset == 10
    # a zero limit acquires nothing and changes nothing
    v = sp.version
    assert sp.acquire("b", [(10, 19)], max_records=0, lock_deadline=1) == [] and sp.version == v


def test_acquire_refuses_batches_out_of_order():
    sp = SharePartition(0)
    for bad in ([(5, 4)], [(0, 4), (4, 6)], [(5, 9), (0, 4)], [(-2, 3)]):
        with pytest.raises(ValueError, match="ascending"):
            sp.acquire("m", bad, max_records=10, lock_deadline=1)
    assert sp._ranges == [] and sp.version == 0 and sp.deliveries_total == 0  # nothing taken before the refusal


def test_a_record_released_up_to_the_limit_gets_archived():
    sp = SharePartition(0, delivery_count_limit=3)
    for count in (1, 2, 3):
        assert sp.fetch_offset() == 0
        assert sp.acquire("m", [(0, 0), (1, 1)], max_records=10, lock_deadline=5) == [Acquired(0, 1, count)]
        assert sp.acknowledge("m", 0, 1, [RELEASE]) == ErrorCode.NONE
        if count < 3:
            assert states(sp)[0] == (RecordState.AVAILABLE, count, None, None)
    assert sp.counts() == {"available": 0, "acquired": 0, "acknowledged": 0, "archived": 0}
    assert (sp.start_offset, sp.archived_total, sp.deliveries_total) == (2, 2, 6)


def test_per_offset_types_split_one_batch_into_several_states():
    sp = SharePartition(0, delivery_count_limit=2)
    sp.acquire("m", [(0, 7)], max_records=100, lock_deadline=10)
    types = [RELEASE, ACCEPT, ACCEPT, REJECT, GAP, RENEW, RELEASE, ACCEPT]
    assert sp.acknowledge("m", 0, 7, types, lock_deadline=50) == ErrorCode.NONE
    s = states(sp)
    assert [s[o][0] for o in range(8)] == [
        RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED,
        RecordState.ARCHIVED, RecordState.ACQUIRED, RecordState.AVAILABLE, RecordState.ACKNOWLEDGED]
    assert s[5] == (RecordState.ACQUIRED, 1, "m", 50)
    assert sp.start_offset == 0 and sp.fetch_offset() == 0
    assert sp.counts() == {"available": 2, "acquired": 1, "acknowledged": 3, "archived": 2}
    assert (sp.acknowledged_total, sp.archived_total) == (3, 2)
    assert sp.next_lock_deadline() == 50
    check_ranges(sp)
    # a redelivery picks up exactly the available ones; a release at the limit archives them
    got = sp.acquire("n", [(0, 7)], max_records=100, lock_deadline=60)
    assert got == [Acquired(0, 0, 2), Acquired(6, 6, 2)]
    assert sp.acknowledge("n", 0, 0, [RELEASE]) == ErrorCode.NONE
    assert sp.start_offset == 5  # 0 archived at the limit: 0-4 are done
    assert sp.acknowledge("n", 6, 6, [ACCEPT]) == ErrorCode.NONE
    assert sp.acknowledge("m", 5, 5, [ACCEPT]) == ErrorCode.NONE
    assert (sp.start_offset, sp.end_offset) == (8, 8)


def test_an_ack_by_another_member_is_invalid_record_state_and_changes_nothing():
    sp = SharePartition(0)
    sp.acquire("a", [(0, 4)], max_records=5, lock_deadline=10)
    sp.acquire("b", [(5, 9)], max_records=5, lock_deadline=10)
    before, v = sp.snapshot(), sp.version
    ranges = list(sp._ranges)
    for first, last in ((0, 4), (4, 5), (5, 5), (0, 9)):
        assert sp.acknowledge("b" if first < 5 else "a", first, last, [ACCEPT]) == ErrorCode.INVALID_RECORD_STATE
    # a mixed range: a holds 0-4, b 5-9: a cannot ack 3-6 even though 3-4 are its own
    assert sp.acknowledge("a", 3, 6, [ACCEPT]) == ErrorCode.INVALID_RECORD_STATE
    # outside the window, below and above
    assert sp.acknowledge("a", 10, 12, [ACCEPT]) == ErrorCode.INVALID_RECORD_STATE
    sp2 = SharePartition(5)
    assert sp2.acknowledge("a", 0, 1, [ACCEPT]) == ErrorCode.INVALID_RECORD_STATE
    assert sp._ranges == ranges and sp.snapshot() == before and sp.version == v
    # once accepted, a second accept of the same records is refused too
    assert sp.acknowledge("a", 0, 4, [ACCEPT]) == ErrorCode.NONE
    assert sp.acknowledge("a", 0, 4, [ACCEPT]) == ErrorCode.INVALID_RECORD_STATE


def test_invalid_requests_change_nothing():
    sp = SharePartition(0)
    sp.acquire("a", [(0, 4)], max_records=5, lock_deadline=10)
    ranges, v = list(sp._ranges), sp.version
    for first, last, types, kw in [(3, 2, [ACCEPT], {}), (-1, 2, [ACCEPT], {}), (0, 2, [ACCEPT, ACCEPT], {}),
                                   (0, 2, [], {}), (0, 1, [ACCEPT, 5], {}), (0, 1, [-1], {}),
                                   (0, 1, [RENEW], {}), (0, 1, [ACCEPT, RENEW], {})]:
        assert sp.acknowledge("a", first, last, types, **kw) == ErrorCode.INVALID_REQUEST, (first, last, types)
    assert sp._ranges == ranges and sp.version == v


def test_renew_moves_the_lock_and_changes_no_snapshot():
    sp = SharePartition(0)
    sp.acquire("a", [(0, 9)], max_records=10, lock_deadline=10)
    v = sp.version
    assert sp.acknowledge("a", 2, 3, [RENEW], lock_deadline=30) == ErrorCode.NONE
    assert sp.version == v and sp.next_lock_deadline() == 10 and len(sp._ranges) == 3
    assert sp.expire_locks(10) == 8
    assert sp.next_lock_deadline() == 30 and sp.holders() == {"a": 2}
    assert sp.acknowledge("a", 2, 3, [RENEW], lock_deadline=10) == ErrorCode.NONE  # renewing is not extending
    assert sp.next_lock_deadline() == 10


def test_lock_expiry_at_exactly_the_deadline():
    sp = SharePartition(0, delivery_count_limit=2)
    sp.acquire("a", [(0, 4)], max_records=5, lock_deadline=1000)
    sp.acquire("b", [(5, 9)], max_records=5, lock_deadline=2000)
    assert sp.next_lock_deadline() == 1000
    assert sp.expire_locks(999.9) == 0 and sp.holders() == {"a": 5, "b": 5}
    assert sp.expire_locks(1000) == 5
    assert sp.holders() == {"b": 5} and sp.next_lock_deadline() == 2000
    assert sp.fetch_offset() == 0
    assert sp.acknowledge("a", 0, 4, [ACCEPT]) == ErrorCode.INVALID_RECORD_STATE  # too late
    assert sp.acquire("c", [(0, 9)], max_records=10, lock_deadline=3000) == [Acquired(0, 4, 2)]
    assert sp.expire_locks(5000) == 10  # 0-4 reached the limit: archived; 5-9 available again
    s = states(sp)
    assert sp.start_offset == 5 and all(s[o][:2] == (RecordState.AVAILABLE, 1) for o in range(5, 10))
    assert sp.next_lock_deadline() is None and sp.holders() == {}


def test_release_member_gives_back_what_it_holds():
    sp = SharePartition(0)
    sp.acquire("a", [(0, 4)], max_records=5, lock_deadline=10)
    sp.acquire("b", [(5, 9)], max_records=5, lock_deadline=10)
    sp.acquire("a", [(10, 14)], max_records=5, lock_deadline=20)
    assert sp.release_member("nobody") == 0
    v = sp.version
    assert sp.release_member("a") == 10
    assert sp.version == v  # acquired and available look the same in a snapshot
    assert sp.holders() == {"b": 5} and sp.fetch_offset() == 0
    assert sp.counts() == {"available": 10, "acquired": 5, "acknowledged": 0, "archived": 0}
    assert sp.acquire("c", [(0, 14)], max_records=100, lock_deadline=30) == [Acquired(0, 4, 2), Acquired(10, 14, 2)]


def test_a_full_window_has_no_fetch_offset_until_an_ack_frees_room():
    sp = SharePartition(0, max_in_flight=10)
    got = sp.acquire("a", [(0, 14)], max_records=100, lock_deadline=10)
    assert got == [Acquired(0, 9, 1)] and sp.end_offset == 10
    assert sp.fetch_offset() is None
    assert sp.acquire("a", [(10, 14)], max_records=100, lock_deadline=10) == []
    assert sp.acknowledge("a", 5, 9, [ACCEPT]) == ErrorCode.NONE
    assert sp.fetch_offset() is None  # 0-4 still hold the start
    assert sp.acknowledge("a", 0, 2, [REJECT]) == ErrorCode.NONE
    assert sp.start_offset == 3 and sp.fetch_offset() == 10
    assert sp.acquire("b", [(10, 14)], max_records=100, lock_deadline=10) == [Acquired(10, 12, 1)]
    assert sp.fetch_offset() is None
    # a release inside a full window is fetchable again: the read starts there
    assert sp.acknowledge("a", 3, 3, [RELEASE]) == ErrorCode.NONE
    assert sp.fetch_offset() == 3


def test_move_start_drops_what_lies_below_it():
    sp = SharePartition(0)
    sp.acquire("a", [(0, 9)], max_records=10, lock_deadline=10)
    sp.acknowledge("a", 5, 6, [ACCEPT])
    sp.move_start(-3)
    sp.move_start(0)
    assert sp.start_offset == 0
    sp.move_start(5)  # 5 and 6 are done as well: the start moves on to 7
    assert sp.start_offset == 7 and sp.holders() == {"a": 3}
    assert sp.acknowledge("a", 4, 4, [ACCEPT]) == ErrorCode.INVALID_RECORD_STATE
    check_ranges(sp)
    sp.move_start(50)
    assert (sp.start_offset, sp.end_offset, sp.fetch_offset()) == (50, 50, 50)
    assert sp.holders() == {} and sp.next_lock_deadline() is None and sp.expire_locks(10**9) == 0
    assert sp.acquire("a", [(40, 52)], max_records=10, lock_deadline=1) == [Acquired(50, 52, 1)]


def test_version_goes_up_exactly_when_the_snapshot_changes():
    sp = SharePartition(0)
    seen = [(sp.version, sp.snapshot())]

    def step(changes: bool):
        v, snap = seen[-1]
        assert (sp.version != v) == changes and (sp.snapshot() != snap) == changes
        seen.append((sp.version, sp.snapshot()))

    sp.acquire("a", [(0, 9)], max_records=10, lock_deadline=10)
    step(True)
    sp.acknowledge("a", 0, 1, [RENEW], lock_deadline=20)
    step(False)
    sp.acknowledge("a", 0, 1, [RELEASE])
    step(False)
    sp.expire_locks(10)
    step(False)
    sp.acquire("b", [(0, 9)], max_records=3, lock_deadline=10)
    step(True)
    sp.acknowledge("b", 1, 1, [ACCEPT])
    step(True)
    sp.move_start(0)
    step(False)
    sp.move_start(2)
    step(True)


def test_snapshot_restore_round_trip_turns_acquired_into_available_with_its_count():
    sp = SharePartition(0, delivery_count_limit=4)
    sp.acquire("a", [(0, 9), (12, 19)], max_records=100, lock_deadline=10)
    sp.acknowledge("a", 0, 9, [RELEASE] + [ACCEPT] * 3 + [REJECT] * 2 + [RELEASE] * 4)
    sp.acquire("b", [(0, 0), (6, 9)], max_records=100, lock_deadline=10)
    snap = sp.snapshot()
    assert snap == {"version": 1, "start": 0, "ranges": [
        [0, 0, 0, 2], [1, 3, 2, 1], [4, 5, 4, 1], [6, 9, 0, 2], [10, 11, 4, 0], [12, 19, 0, 1]]}
    again = SharePartition.restore(json.loads(json.dumps(snap)), delivery_count_limit=4)
    assert (again.start_offset, again.end_offset) == (sp.start_offset, sp.end_offset)
    assert again.snapshot() == snap
    assert again.holders() == {} and again.next_lock_deadline() is None
    assert again.counts() == {"available": 13, "acquired": 0, "acknowledged": 3, "archived": 4}
    expect = {o: ((RecordState.AVAILABLE if s[0] == RecordState.ACQUIRED else s[0]), s[1], None, None)
              for o, s in states(sp).items()}
    assert states(again) == expect
    check_ranges(again)
    # the next delivery of a record acquired before the crash counts on from its count
    assert again.acquire("c", [(0, 0)], max_records=1, lock_deadline=1) == [Acquired(0, 0, 3)]


def test_restore_of_a_sparse_snapshot_fills_the_gaps_with_fresh_records():
    snap = {"version": 1, "start": 10, "ranges": [[12, 13, 2, 1], [15, 15, 0, 3], [16, 16, 0, 3]]}
    sp = SharePartition.restore(snap)
    assert (sp.start_offset, sp.end_offset, sp.fetch_offset()) == (10, 17, 10)
    assert sp.snapshot() == {"version": 1, "start": 10, "ranges": [[12, 13, 2, 1], [15, 16, 0, 3]]}
    assert [r[:4] for r in sp._ranges] == [(10, 11, 0, 0), (12, 13, 2, 1), (14, 14, 0, 0), (15, 16, 0, 3)]
    assert sp.acquire("a", [(10, 16)], max_records=100, lock_deadline=1) == [
        Acquired(10, 11, 1), Acquired(14, 14, 1), Acquired(15, 16, 4)]
    # a snapshot whose bottom is done restores with the start moved over it
    assert SharePartition.restore({"version": 1, "start": 0, "ranges": [[0, 4, 4, 1]]}).start_offset == 5


@pytest.mark.parametrize("snap, message", [
    ([], "not a dict"),
    ("{}", "not a dict"),
    ({"version": 2, "start": 0, "ranges": []}, "version"),
    ({"start": 0, "ranges": []}, "version"),
    ({"version": 1, "start": -1, "ranges": []}, "start"),
    ({"version": 1, "start": "0", "ranges": []}, "start"),
    ({"version": 1, "start": 0, "ranges": {}}, "ranges must be a list"),
    ({"version": 1, "start": 0}, "ranges must be a list"),
    ({"version": 1, "start": 0, "ranges": [[0, 1, 2]]}, r"ranges\[0\] is not"),
    ({"version": 1, "start": 0, "ranges": [[0, 1, 2, 1], [1, 2, 2, 1]]}, "overlaps"),
    ({"version": 1, "start": 0, "ranges": [[5, 6, 2, 1], [0, 2, 2, 1]]}, "out of order"),
    ({"version": 1, "start": 0, "ranges": [[3, 2, 2, 1]]}, "ends before it starts"),
    ({"version": 1, "start": 5, "ranges": [[3, 6, 2, 1]]}, "below start"),
    ({"version": 1, "start": 0, "ranges": [[0, 1, 3, 1]]}, "unknown state"),
    ({"version": 1, "start": 0, "ranges": [[0, 1, 1, 1]]}, "ACQUIRED"),
    ({"version": 1, "start": 0, "ranges": [[0, 1, 2, -1]]}, "delivery_count is negative"),
    ({"version": 1, "start": 0, "ranges": [[0, 1.5, 2, 1]]}, "last is not an integer"),
    ({"version": 1, "start": 0, "ranges": [[0, 1, True, 1]]}, "state is not an integer"),
])
def test_restore_refuses_garbage(snap, message):
    with pytest.raises(ValueError, match=message):
        SharePartition.restore(snap)


def test_ranges_stay_merged_when_records_come_back_equal():
    sp = SharePartition(0)
    sp.acquire("a", [(0, 99)], max_records=100, lock_deadline=10)
    for o in range(0, 100, 2):
        sp.acknowledge("a", o, o, [RENEW], lock_deadline=20)
    assert len(sp._ranges) == 100
    for o in range(0, 100, 2):
        sp.acknowledge("a", o, o, [RENEW], lock_deadline=10)
    assert len(sp._ranges) == 1
    sp.acknowledge("a", 0, 99, [RELEASE] * 50 + [RENEW] * 50, lock_deadline=30)
    assert len(sp._ranges) == 2
    check_ranges(sp)


def test_many_renewals_do_not_pile_up_lock_deadlines():
    sp = SharePartition(0)
    sp.acquire("a", [(0, 9)], max_records=10, lock_deadline=0)
    for t in range(1, 1000):
        assert sp.acknowledge("a", 0, 9, [RENEW], lock_deadline=t) == ErrorCode.NONE
    assert len(sp._heap) < 100 and sp.next_lock_deadline() == 999
    assert sp.expire_locks(998) == 0 and sp.expire_locks(999) == 10


def test_repr_and_limits():
    sp = SharePartition(3, delivery_count_limit=7, max_in_flight=11)
    assert (sp.delivery_count_limit, sp.max_in_flight) == (7, 11)
    assert "start=3" in repr(sp)


def test_a_record_acquired_at_the_delivery_limit_is_archived_by_a_crash_not_handed_out_again():
    """Seen from outside: with a limit of 2, records released on their first delivery and held on
    their second came back after a leader SIGKILL with delivery count 3.  A crash loses the lock as
    its running out would: at the limit, the record is ARCHIVED."""
    sp = SharePartition(0, delivery_count_limit=2)
    sp.acquire("a", [(0, 19)], max_records=20, lock_deadline=10)
    assert sp.acknowledge("a", 0, 19, [RELEASE]) == ErrorCode.NONE
    assert sp.acquire("b", [(0, 19)], max_records=20, lock_deadline=10) == [Acquired(0, 19, 2)]
    snap = sp.snapshot()
    assert snap == {"version": 1, "start": 0, "ranges": [[0, 19, RecordState.ARCHIVED, 2]]}
    again = SharePartition.restore(json.loads(json.dumps(snap)), delivery_count_limit=2)
    assert again.start_offset == 20  # all 20 final: the start moves past them
    assert again.acquire("c", [(0, 19)], max_records=20, lock_deadline=10) == []
    # one record still below the limit stays AVAILABLE beside them, with its count
    sp = SharePartition(0, delivery_count_limit=2)
    sp.acquire("a", [(0, 2)], max_records=3, lock_deadline=10)
    assert sp.acknowledge("a", 0, 1, [RELEASE]) == ErrorCode.NONE
    sp.acquire("b", [(0, 1)], max_records=1, lock_deadline=10)  # offset 0 at its second delivery
    again = SharePartition.restore(json.loads(json.dumps(sp.snapshot())), delivery_count_limit=2)
    assert again.start_offset == 1
    assert again.acquire("c", [(1, 2)], max_records=5, lock_deadline=10) == [Acquired(1, 2, 2)]
    check_ranges(again)


def test_a_snapshot_written_under_a_higher_limit_restores_records_at_the_lower_one_archived():
    sp = SharePartition(0, delivery_count_limit=5)
    for _ in range(3):
        sp.acquire("a", [(0, 3)], max_records=4, lock_deadline=10)
        assert sp.acknowledge("a", 0, 3, [RELEASE]) == ErrorCode.NONE
    assert sp.snapshot()["ranges"] == [[0, 3, 0, 3]]
    again = SharePartition.restore(sp.snapshot(), delivery_count_limit=3)
    assert again.acquire("b", [(0, 3)], max_records=4, lock_deadline=10) == []
    assert again.start_offset == 4


def test_limits_changed_on_a_live_partition_apply_from_the_next_move_on():
    """A group's share.delivery.count.limit and share.partition.max.record.locks changed while its
    partitions are loaded: records already delivered as often as the new limit allows are ARCHIVED
    when an acquisition reaches them, and the window grows no further than the new bound."""
    sp = SharePartition(0, delivery_count_limit=5, max_in_flight=100)
    for _ in range(2):
        sp.acquire("a", [(0, 9)], max_records=10, lock_deadline=10)
        assert sp.acknowledge("a", 0, 9, [RELEASE]) == ErrorCode.NONE
    sp.acquire("a", [(0, 9)], max_records=10, lock_deadline=10)
    assert sp.acknowledge("a", 0, 4, [RELEASE]) == ErrorCode.NONE  # 0-4 AVAILABLE at count 3, 5-9 held
    version = sp.version
    sp.set_limits(delivery_count_limit=3, max_in_flight=12)
    assert sp.version == version  # the snapshot did not change
    assert sp.acquire("b", [(0, 9), (10, 19)], max_records=20, lock_deadline=10) == [Acquired(10, 11, 1)]
    assert sp.start_offset == 5  # 0-4 ARCHIVED: the start moved over them
    assert sp.archived_total == 5
    assert sp.version > version
    # the held ones reach the limit on release: ARCHIVED too; the start moves over them
    assert sp.acknowledge("a", 5, 9, [RELEASE]) == ErrorCode.NONE
    assert sp.start_offset == 10 and sp.end_offset == 12
    check_ranges(sp)
    with pytest.raises(ValueError, match="delivery_count_limit"):
        sp.set_limits(delivery_count_limit=0, max_in_flight=12)
