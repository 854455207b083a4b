"""The invariant checks themselves, on hand-made journals: each one finds what it is for."""

from __future__ import annotations

from spark_coord.testing import invariants

T = "t"


def _assign(ts, gen, *parts, ev="assign"):
    return {"ts": ts, "ev": ev, "gen": gen, "parts": [[T, p, o] for p, o in parts]}


def _recs(ts, p, *offs):
    return {"ts": ts, "ev": "recs", "t": T, "p": p, "offs": list(offs), "gen": 1}


def test_ownership_ends_at_stop_lease_end_or_death():
    journals = {
        "a": [_assign(1.0, 1, (0, 0), (1, 0)), {"ts": 5.0, "ev": "stop", "gen": 1}],
        "b": [_assign(2.0, 1, (2, 0)), {"ts": 9.0, "ev": "lost", "gen": 1, "lease_end": 7.0},
              _assign(10.0, 1, (2, 5), ev="resume")],
        "c": [_assign(3.0, 1, (3, 0))],
    }
    spans = invariants.ownership_intervals(journals, deaths={"c": 4.0}, end_of_run=20.0)
    assert spans[(T, 0)] == [(1.0, 5.0, "a")]
    assert spans[(T, 2)] == [(2.0, 7.0, "b"), (10.0, 20.0, "b")]
    assert spans[(T, 3)] == [(3.0, 4.0, "c")]


def test_one_owner_at_a_time_finds_overlaps_across_generations():
    ok = {"a": [_assign(1.0, 1, (0, 0)), {"ts": 5.0, "ev": "stop", "gen": 1}], "b": [_assign(5.5, 2, (0, 3))]}
    assert invariants.one_owner_at_a_time(invariants.ownership_intervals(ok, end_of_run=9)) == []
    bad = {"a": [_assign(1.0, 1, (0, 0)), {"ts": 6.0, "ev": "lost", "gen": 1, "lease_end": 6.0}],
           "b": [_assign(5.5, 2, (0, 3))]}
    found = invariants.one_owner_at_a_time(invariants.ownership_intervals(bad, end_of_run=9))
    assert len(found) == 1 and "t-0 owned by a" in found[0] and "0.500 s at once" in found[0]


def test_deliveries_outside_ownership_are_found():
    journals = {"a": [_assign(1.0, 1, (0, 0)), _recs(2.0, 0, 0, 1), {"ts": 3.0, "ev": "lost", "gen": 1,
                                                                      "lease_end": 3.0}, _recs(4.0, 0, 2)]}
    spans = invariants.ownership_intervals(journals, end_of_run=9)
    found = invariants.delivered_outside_ownership(journals, spans)
    assert len(found) == 1 and "offsets 2..2 at 4.000" in found[0]


def test_liveness_finds_an_owned_partition_left_unfetched():
    journals = {"a": [_assign(0.0, 1, (0, 0), (1, 0)), _recs(1.0, 0, 0), _recs(1.0, 1, 0)]
                + [_recs(2.0 + i, 1, i + 1) for i in range(38)]}   # partition 1 flows, partition 0 stalls
    spans = invariants.ownership_intervals(journals, end_of_run=40.0)
    ends = {(T, 0): [(float(i), 5 + i) for i in range(40)], (T, 1): [(float(i), 5 + i) for i in range(40)]}
    found = invariants.liveness(journals, spans, ends, bound=5.0)
    assert len(found) == 1 and found[0].startswith("t-0: a owned it with records waiting")
    # the same stall while the partition's leader was down, or the member paused, is no violation
    assert invariants.liveness(journals, spans, ends, bound=5.0, leader_down={(T, 0): [(0.0, 40.0)]}) == []
    assert invariants.liveness(journals, spans, ends, bound=5.0, member_paused={"a": [(0.0, 40.0)]}) == []


def test_duplicates_count_extra_deliveries_and_those_to_the_same_member():
    journals = {"a": [_recs(1.0, 0, 0, 1, 2), _recs(2.0, 0, 1, 2)], "b": [_recs(3.0, 0, 2, 3)]}
    assert invariants.duplicates(journals) == {"records": 4, "deliveries": 7, "extra": 3, "same_member": 2}


def test_committed_at_log_end():
    assert invariants.committed_at_log_end({(T, 0): 5, (T, 1): 3}, {(T, 0): 5, (T, 1): 4, (T, 2): 0}) == [
        "t-1: committed 3, log end 4"]


def test_kafka_members_callbacks_give_ownership_eager_and_incremental():
    """An eager member's assign replaces what it holds and its revoke ends all of it; a
    cooperative member's assign adds partitions and its revoke/lost end only those named."""
    journals = {
        "eager": [{"ts": 1.0, "ev": "assign", "gen": None, "incremental": False, "parts": [[T, 0, -1], [T, 1, -1]]},
                  {"ts": 4.0, "ev": "revoke", "incremental": False, "parts": [[T, 0], [T, 1]]},
                  {"ts": 5.0, "ev": "assign", "gen": None, "incremental": False, "parts": [[T, 1, -1]]}],
        "coop": [{"ts": 2.0, "ev": "assign", "gen": None, "incremental": True, "parts": [[T, 2, -1], [T, 3, -1]]},
                 {"ts": 3.0, "ev": "assign", "gen": None, "incremental": True, "parts": [[T, 4, -1]]},
                 {"ts": 6.0, "ev": "revoke", "incremental": True, "parts": [[T, 3]]},
                 {"ts": 7.0, "ev": "lost", "parts": [[T, 2]]}],
    }
    spans = invariants.ownership_intervals(journals, end_of_run=10.0)
    assert spans[(T, 0)] == [(1.0, 4.0, "eager")]
    assert spans[(T, 1)] == [(1.0, 4.0, "eager"), (5.0, 10.0, "eager")]
    assert spans[(T, 2)] == [(2.0, 7.0, "coop")]
    assert spans[(T, 3)] == [(2.0, 6.0, "coop")]
    assert spans[(T, 4)] == [(3.0, 10.0, "coop")]
    # a thin member taking t-3 at 6.5 overlaps nobody; at 5.5 it overlaps the cooperative member
    thin = {"ts": 6.5, "ev": "assign", "gen": 3, "parts": [[T, 3, 0]]}
    assert invariants.one_owner_at_a_time(invariants.ownership_intervals(dict(journals, thin=[thin]), end_of_run=10)) == []
    early = dict(thin, ts=5.5)
    found = invariants.one_owner_at_a_time(invariants.ownership_intervals(dict(journals, thin=[early]), end_of_run=10))
    assert len(found) == 1 and "t-3 owned by coop" in found[0]
    # assignments without a generation (Kafka members) are not grouped by generation
    assert invariants.assignments_by_generation(dict(journals, thin=[thin])) == {3: {"thin": {(T, 3)}}}


def test_duplicates_by_member_blames_the_member_that_got_the_record_again():
    journals = {"a": [_recs(1.0, 0, 0, 1, 2), _recs(5.0, 0, 1, 2)], "b": [_recs(3.0, 0, 2, 3)], "c": []}
    assert invariants.duplicates_by_member(journals) == {
        "a": {"records": 3, "extra": 2, "same_member": 2},
        "b": {"records": 2, "extra": 1, "same_member": 0},
        "c": {"records": 0, "extra": 0, "same_member": 0}}


def test_an_unleased_member_overlaps_only_where_it_delivered():
    """A Kafka member paused past its session journals ``lost`` only once it runs again: its
    ownership overlaps the next owner's, which counts only if it delivered meanwhile."""
    quiet = {"k": [{"ts": 1.0, "ev": "assign", "gen": None, "incremental": False, "parts": [[T, 0, -1]]},
                   _recs(2.0, 0, 0, 1), {"ts": 9.0, "ev": "lost", "parts": [[T, 0]]}],
             "thin": [_assign(6.0, 2, (0, 2))]}
    spans = invariants.ownership_intervals(quiet, end_of_run=12)
    assert len(invariants.one_owner_at_a_time(spans)) == 1
    assert invariants.one_owner_at_a_time(spans, unleased=["k"], journals=quiet) == []
    zombie = dict(quiet, k=quiet["k"][:2] + [_recs(7.0, 0, 2)] + quiet["k"][2:])
    spans = invariants.ownership_intervals(zombie, end_of_run=12)
    assert len(invariants.one_owner_at_a_time(spans, unleased=["k"], journals=zombie)) == 1


def test_a_kafka_member_resumed_past_its_session_may_hand_out_what_it_fetched_before_the_pause():
    """Delivery inside a zombie window (a pause past the session, until the member learnt the loss)
    is Kafka's own guarantee, not an overlap; the same delivery outside such a window is one."""
    journals = {"k": [{"ts": 1.0, "ev": "assign", "gen": None, "incremental": False, "parts": [[T, 0, -1]]},
                      _recs(8.9, 0, 2), {"ts": 9.0, "ev": "lost", "parts": [[T, 0]]}],
                "thin": [_assign(6.0, 2, (0, 2))]}
    spans = invariants.ownership_intervals(journals, end_of_run=12)
    assert len(invariants.one_owner_at_a_time(spans, unleased=["k"], journals=journals)) == 1
    assert invariants.one_owner_at_a_time(spans, unleased=["k"], journals=journals, zombie={"k": [(2.0, 9.0)]}) == []
    assert len(invariants.one_owner_at_a_time(spans, unleased=["k"], journals=journals,
                                              zombie={"k": [(2.0, 8.0)]})) == 1
