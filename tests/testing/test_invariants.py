"""The invariant checks themselves, on hand-made journals: each one finds what it is for."""

from __future__ import annotations

from testkit import invariants

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


def test_liveness_ends_an_ownership_left_open_with_the_samples():
    """A member that journaled no close owns its partitions to the end of the run (end_of_run
    defaults to infinity): the check walks them only as far as the log-end samples go, and still
    finds a stall before that.  It walked such an ownership a second at a time, forever."""
    journals = {"a": [_assign(0.0, 1, (0, 0)), _recs(1.0, 0, 0)]}
    spans = invariants.ownership_intervals(journals)
    assert spans[(T, 0)] == [(0.0, float("inf"), "a")]
    ends = {(T, 0): [(float(i), 5 + i) for i in range(40)]}
    found = invariants.liveness(journals, spans, ends, bound=5.0)
    assert len(found) == 1 and found[0].startswith("t-0: a owned it with records waiting")
    flowing = {"a": [_assign(0.0, 1, (0, 0))] + [_recs(float(i), 0, 5 + i - 1) for i in range(1, 40)]}
    assert invariants.liveness(flowing, invariants.ownership_intervals(flowing), ends, bound=5.0) == []


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
    assert invariants.one_owner_at_a_time(invariants.ownership_intervals(dict(journals, thin=[thin]),
                                                                         end_of_run=10)) == []
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


def test_redelivery_times_are_when_a_record_came_again_in_time_order_across_members():
    journals = {"a": [_recs(1.0, 0, 0, 1, 2), _recs(5.0, 0, 1, 2)], "b": [_recs(3.0, 0, 2, 3), _recs(4.0, 1, 0)],
                "c": [_recs(2.0, 1, 0)]}
    # b's offset 2 at 3.0 (a had it at 1.0), a's 1 and 2 again at 5.0, partition 1's 0 at 4.0 (c had it at 2.0)
    assert invariants.redelivery_times(journals) == [3.0, 4.0, 5.0, 5.0]
    assert len(invariants.redelivery_times(journals)) == invariants.duplicates(journals)["extra"]


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


def _commit(ts, p, off, code=0):
    return {"ts": ts, "ev": "commit" if code == 0 else "commit_failed", "t": T, "p": p, "off": off, "code": code}


def test_a_fenced_kafka_member_delivering_before_it_heard_so_is_a_zombie_not_a_second_owner():
    """k's last accepted commit is at 3.0; the partition goes to the thin member at 6.0; k delivers at 7.0,
    its commits are refused (UNKNOWN_MEMBER_ID) and it hears of the loss at 8.0: a fenced zombie.  Had
    a commit of k been accepted at 6.5, the coordinator still counted k as a member: an overlap."""
    def journals(*extra):
        k = [{"ts": 1.0, "ev": "assign", "gen": None, "incremental": False, "parts": [[T, 0, -1]]},
             _commit(2.0, 0, 5), _commit(3.0, 0, 9), *extra, _recs(7.0, 0, 9, 10),
             _commit(7.9, 0, 11, code=25), {"ts": 8.0, "ev": "lost", "parts": [[T, 0]]}]
        return {"k": sorted(k, key=lambda e: e["ts"]), "thin": [_assign(6.0, 2, (0, 9))]}

    fenced = journals()
    assert invariants.fenced_windows(fenced, ["k"]) == {"k": [(3.0, 8.0)]}
    spans = invariants.ownership_intervals(fenced, end_of_run=12)
    assert len(invariants.one_owner_at_a_time(spans, unleased=["k"], journals=fenced)) == 1
    assert invariants.one_owner_at_a_time(spans, unleased=["k"], journals=fenced,
                                          fenced=invariants.fenced_windows(fenced, ["k"])) == []
    accepted = journals(_commit(6.5, 0, 10))
    assert invariants.fenced_windows(accepted, ["k"]) == {"k": [(6.5, 8.0)]}
    spans = invariants.ownership_intervals(accepted, end_of_run=12)
    assert len(invariants.one_owner_at_a_time(spans, unleased=["k"], journals=accepted,
                                              fenced=invariants.fenced_windows(accepted, ["k"]))) == 1
    # a revocation (not a loss) makes no window
    revoked = {"k": [e if e["ev"] != "lost" else dict(e, ev="revoke") for e in fenced["k"]]}
    assert invariants.fenced_windows(revoked, ["k"]) == {}


def test_an_owner_never_starts_below_a_commit_acknowledged_before_it_took_the_partition():
    """Seeds 24 and 30 of the nemesis: a commit answered NONE, its offset never stored, and the next
    owner read from below it.  A zombie that goes on delivering what it fetched before the commit
    (it took the partition earlier) is not one; nor is an owner that starts at the commit."""
    def journals(new_owner_from):
        return {"old": [_assign(1.0, 1, (0, 0)), _recs(2.0, 0, 0, 1, 2), _commit(2.1, 0, 3),
                        _recs(3.0, 0, 3, 4), _commit(3.1, 0, 5), {"ts": 4.0, "ev": "lost", "parts": [[T, 0]]}],
                "new": [_assign(5.0, 2, (0, -1)), _recs(5.1, 0, *range(new_owner_from, 7))]}

    assert invariants.acknowledged_commits_kept(
        journals(5), invariants.ownership_intervals(journals(5), end_of_run=9)) == []
    lost = journals(3)
    bad = invariants.acknowledged_commits_kept(lost, invariants.ownership_intervals(lost, end_of_run=9))
    assert len(bad) == 1 and "new took it at 5.000 and read from 3" in bad[0] and "below offset 5" in bad[0]
    # a zombie still delivering after the new owner's commit: its ownership began before it
    zombie = {"zombie": [_assign(1.0, 1, (0, 0)), _recs(1.5, 0, 0), _recs(6.0, 0, 1, 2)],
              "new": [_assign(3.0, 2, (0, 0)), _recs(3.1, 0, 0, 1, 2, 3), _commit(3.2, 0, 4)]}
    assert invariants.acknowledged_commits_kept(zombie, invariants.ownership_intervals(zombie, end_of_run=9)) == []
    # a refused commit does not count
    refused = journals(3)
    refused["old"][4] = dict(refused["old"][4], code=25)
    assert invariants.acknowledged_commits_kept(
        refused, invariants.ownership_intervals(refused, end_of_run=9)) == []


def test_each_repeated_delivery_has_a_cause():
    """Read again with no commit past it acknowledged (at-least-once); by a zombie whose ownership
    began before the commit past it; by an owner that began after it (a lost commit)."""
    journals = {"a": [_assign(1.0, 1, (0, 0)), _recs(2.0, 0, 0, 1), _commit(2.1, 0, 2), _recs(3.0, 0, 2, 3),
                      _recs(5.0, 0, 4)],
                "b": [_assign(4.0, 2, (0, 2)), _recs(4.1, 0, 2, 3, 4), _commit(4.2, 0, 5)],
                "c": [_assign(6.0, 3, (0, 0)), _recs(6.1, 0, 1)]}
    spans = invariants.ownership_intervals(journals, end_of_run=9)
    # b re-reads 2, 3 (a never committed past them); a, still delivering after b's commit of 5,
    # hands out 4 again (zombie); c starts at 1, below the acknowledged 5 (and 2)
    assert invariants.duplicate_causes(journals, spans) == {"unacknowledged": 2, "zombie": 1, "acknowledged": 1,
                                                            "replayed": 0, "outside": 0}
    # a restarted Spark member replaying its predecessor's batch from the checkpoint
    journals["c"][1] = dict(journals["c"][1], replay=True)
    assert invariants.duplicate_causes(journals, spans) == {"unacknowledged": 2, "zombie": 1, "acknowledged": 0,
                                                            "replayed": 1, "outside": 0}
    # a member delivering it while it owns the partition at no moment near then
    journals["d"] = [_recs(7.0, 0, 3)]
    assert invariants.duplicate_causes(journals, spans)["outside"] == 1


# ------------------------------------------------------------------ share groups


def _start(ts):
    return {"ts": ts, "ev": "start", "kind": "share"}


def _srecs(ts, p, *offs_counts):
    """A share member's ``recs`` line: (offset, delivery count) pairs."""
    return {"ts": ts, "ev": "recs", "t": T, "p": p, "offs": [o for o, _ in offs_counts],
            "counts": [c for _, c in offs_counts], "gen": None}


def _ack(ts, p, *offs, code=0, sent=None):
    return {"ts": ts, "ev": "ack", "t": T, "p": p, "offs": list(offs), "code": code,
            "sent": ts - 0.01 if sent is None else sent}


def test_share_deliveries_are_in_acquisition_order_and_may_have_been_acquired_since_the_previous_poll():
    """Ordered by delivery count, then time: a member paused between the acquisition and its poll
    journals the record after the next holder, yet its delivery came first."""
    journals = {"a": [_start(0.0), _srecs(1.0, 0, (0, 1)), _srecs(1.0, 1, (0, 1)), _ack(1.1, 0, 0),
                      _srecs(9.0, 0, (1, 1))],
                "b": [_start(0.5), _srecs(7.0, 0, (1, 2))]}
    ds = invariants.share_deliveries(journals, slack=0.5)
    assert [(d.member, d.count) for d in ds[(T, 0, 1)]] == [("a", 1), ("b", 2)]
    # a's first poll may hold records acquired since its start; its next ones since the first poll
    assert ds[(T, 0, 0)][0].lo == ds[(T, 1, 0)][0].lo == -0.5
    assert ds[(T, 0, 1)][0].lo == 0.5 and ds[(T, 0, 1)][1].lo == 0.0


def test_share_at_least_once_names_what_never_came():
    journals = {"a": [_srecs(1.0, 0, (0, 1), (1, 1)), _srecs(2.0, 1, (0, 1))], "b": [_srecs(2.0, 0, (3, 1))]}
    assert invariants.share_at_least_once(journals, {(T, 0): range(5), (T, 1): [0]}) == [
        "share group: t-0: 2 of 5 records never delivered (offsets 2, 4)"]


def test_share_lock_overlaps_same_count_twice_or_a_later_one_within_the_lock_without_a_release():
    twice = {"a": [_start(0.0), _srecs(1.0, 0, (0, 1))], "b": [_start(0.0), _srecs(1.2, 0, (0, 1))]}
    found = invariants.share_lock_overlaps(twice, 5.0, slack=0.5)
    assert len(found) == 1 and "acquired twice with delivery count 1" in found[0]
    # unless the leader crashed in between: the acquisition's count was not written yet
    assert invariants.share_lock_overlaps(twice, 5.0, slack=0.5, leader_lost={(T, 0): [1.1]}) == []
    early = {"a": [_start(0.0), _srecs(1.0, 0, (0, 1))], "b": [_start(0.0), _srecs(3.0, 0, (0, 2))]}
    found = invariants.share_lock_overlaps(early, 5.0, slack=0.5)
    assert len(found) == 1 and "while a at 1.000 (count 1) still held it" in found[0]
    assert invariants.share_lock_overlaps(early, 5.0, slack=0.5, released={"a": [2.0]}) == []      # a killed
    assert invariants.share_lock_overlaps(early, 5.0, slack=0.5, leader_lost={(T, 0): [2.0]}) == []
    assert invariants.share_lock_overlaps(early, 5.0, slack=0.5, reassigned=[(2.5, 4.0)]) == []
    assert invariants.share_lock_overlaps(early, 5.0, slack=0.5, released={"a": [3.5]}) != []      # too late
    # after the lock ran out (counted from the earliest the record may have been acquired)
    late = {"a": [_start(0.0), _srecs(1.0, 0, (0, 1))], "b": [_start(0.0), _srecs(5.6, 0, (0, 2))]}
    assert invariants.share_lock_overlaps(late, 5.0, slack=0.5) == []


def test_share_confirmed_again_after_the_confirmation_or_a_stale_acknowledgement_accepted():
    again = {"a": [_start(0.0), _srecs(1.0, 0, (0, 1)), _ack(1.1, 0, 0)], "b": [_start(0.0), _srecs(9.0, 0, (0, 2))]}
    found = invariants.share_confirmed_again(again, slack=0.5)
    assert len(found) == 1 and "after the broker confirmed a's acceptance" in found[0]
    stale = {"a": [_start(0.0), _srecs(1.0, 0, (0, 1)), _ack(8.0, 0, 0, sent=7.9)],
             "b": [_start(0.0), _srecs(6.5, 0, (0, 2))]}
    found = invariants.share_confirmed_again(stale, slack=0.5)
    assert len(found) == 1 and "although b at 6.500 (count 2) had acquired it since" in found[0]
    # a refused acknowledgement, and a zombie hand-out of an older acquisition, are no violation
    refused = {"a": [_start(0.0), _srecs(1.0, 0, (0, 1)), _ack(8.0, 0, 0, code=121)],
               "b": [_start(0.0), _srecs(6.5, 0, (0, 2)), _ack(6.6, 0, 0)]}
    assert invariants.share_confirmed_again(refused, slack=0.5) == []
    zombie = {"a": [_start(0.0), _srecs(0.5, 0, (9, 1)), _srecs(8.0, 0, (0, 1))],
              "b": [_start(0.0), _srecs(6.5, 0, (0, 2)), _ack(6.6, 0, 0)]}
    assert invariants.share_confirmed_again(zombie, slack=0.5) == []


def test_share_redeliveries_are_explained_by_the_holder_the_leader_a_reassignment_or_not_at_all():
    """p0's first holder a was killed, p1's leader restarted, p2 read while the group was reassigned;
    p3's redelivery has no explanation (its leader's fault came after it)."""
    first = {p: name for p, name in enumerate("acde")}
    journals = {name: [_start(0.0), _srecs(10.0, p, (0, 1))] for p, name in first.items()}
    journals["b"] = [_start(0.0)] + [_srecs(16.0, p, (0, 2)) for p in range(4)]
    out = invariants.share_redeliveries(journals, 5.0, 1.0, holder_faults={"a": [(10.5, 12.0)], "b": [(1.0, 2.0)]},
                                        leader_faults={(T, 1): [(11.0, 13.0)], (T, 3): [(30.0, 31.0)]},
                                        slack=0.5)
    assert {k: out[k] for k in ("redeliveries", "records", "holder", "leader", "reassigned", "unexplained")} == {
        "redeliveries": 4, "records": 4, "holder": 1, "leader": 1, "reassigned": 0, "unexplained": 2}
    assert [v.split(":")[0] for v in out["violations"]] == ["t-2 offset 0", "t-3 offset 0"]
    assert "delivered again to b at 16.000 (count 2) after e at 10.000 (count 1)" in out["violations"][1]
    # a reassignment between the two deliveries explains what no fault does
    out = invariants.share_redeliveries(journals, 5.0, 1.0, holder_faults={"a": [(10.5, 12.0)]},
                                        leader_faults={(T, 1): [(11.0, 13.0)]}, reassigned=[(14.0, 15.0)], slack=0.5)
    assert (out["holder"], out["leader"], out["reassigned"], out["unexplained"]) == (1, 1, 2, 0)
    # a fault long after the earlier delivery (more than the lock and the margin) explains nothing
    out = invariants.share_redeliveries(journals, 5.0, 1.0, holder_faults={"a": [(17.0, 18.0)]}, slack=0.5)
    assert out["holder"] == 0 and out["unexplained"] == 4
