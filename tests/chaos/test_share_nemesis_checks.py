"""The share nemesis's checks (``testkit.invariants``, issue 46) on hand-made share journals: each
passes on a clean journal and fails when a violation is planted.  Journals have the format of
``testkit.share_member`` (``recs`` with offsets and delivery counts; ``ack`` / ``reject`` /
``release`` with ``sent`` and ``code``)."""

from __future__ import annotations

from testkit import invariants
from testkit.nemesis.faults import _split_truncated

T = "t"


def recs(ts, p, offs, counts):
    return {"ts": ts, "ev": "recs", "t": T, "p": p, "offs": offs, "counts": counts, "gen": None}


def done(ev, ts, p, offs, code=0):
    return {"ts": ts, "ev": ev, "t": T, "p": p, "offs": offs, "sent": ts - 0.01, "code": code}


def start(ts):
    return {"ts": ts, "ev": "start"}


# ------------------------------------------------------------------ released records and lock holders
def test_a_release_lets_the_next_member_take_the_record_at_once():
    # a's previous poll at 9.9: it acquired offset 5 no earlier than 8.9, its lock runs to 13.9 at the earliest
    journals = {"a": [start(0.0), recs(9.9, 1, [0], [1]), done("ack", 9.95, 1, [0]), recs(10.0, 0, [5], [1]),
                      done("release", 10.2, 0, [5])],
                "b": [start(0.0), recs(9.0, 0, [4], [1]), recs(10.5, 0, [5], [2])]}
    released = invariants.share_released(journals)
    assert released == {(T, 0, 5): [(10.19, "a")]}
    assert invariants.share_lock_overlaps(journals, 5.0, record_released=released) == []
    r = invariants.share_redeliveries(journals, 5.0, 2.0, record_released=released)
    assert r["released"] == 1 and r["unexplained"] == 0
    # without the release (or with one the broker refused), b took it while a held it: two holders
    for j in ({"a": journals["a"][:4], "b": journals["b"]},
              {"a": journals["a"][:4] + [done("release", 10.2, 0, [5], code=83)], "b": journals["b"]}):
        rel = invariants.share_released(j)
        assert len(invariants.share_lock_overlaps(j, 5.0, record_released=rel)) == 1
        assert invariants.share_redeliveries(j, 5.0, 2.0, record_released=rel)["unexplained"] == 1


def test_a_release_by_another_member_does_not_free_the_holders_lock():
    journals = {"a": [start(0.0), recs(9.9, 1, [0], [1]), done("ack", 9.95, 1, [0]), recs(10.0, 0, [5], [1])],
                "b": [start(0.0), recs(9.0, 0, [4], [1]), recs(10.5, 0, [5], [2])],
                "c": [start(0.0), done("release", 10.2, 0, [5])]}
    rel = invariants.share_released(journals)
    assert len(invariants.share_lock_overlaps(journals, 5.0, record_released=rel)) == 1


def test_without_releases_the_existing_checks_answer_as_before():
    journals = {"a": [start(0.0), recs(9.9, 1, [0], [1]), done("ack", 9.95, 1, [0]), recs(10.0, 0, [5], [1])],
                "b": [start(0.0), recs(9.0, 0, [4], [1]), recs(10.5, 0, [5], [2])]}
    assert len(invariants.share_lock_overlaps(journals, 5.0)) == 1
    assert invariants.share_lock_overlaps(journals, 5.0) == invariants.share_lock_overlaps(
        journals, 5.0, record_released=invariants.share_released(journals))
    assert "released" not in invariants.share_redeliveries(journals, 5.0, 2.0)


# ------------------------------------------------------------------ accepted / rejected delivered again
def test_a_rejected_record_delivered_again_is_a_violation():
    clean = {"a": [start(0.0), recs(1.0, 0, [0, 1], [1, 1]), done("reject", 1.2, 0, [0]), done("ack", 1.2, 0, [1])]}
    assert invariants.share_rejected_again(clean) == []
    planted = dict(clean, b=[start(0.0), recs(0.5, 0, [7], [1]), recs(3.0, 0, [0], [2])])
    bad = invariants.share_rejected_again(planted)
    assert len(bad) == 1 and "offset 0" in bad[0] and "rejection" in bad[0]
    assert invariants.share_confirmed_again(planted) == []   # the acceptance of offset 1 stands


def test_an_accepted_record_delivered_again_is_a_violation():
    journals = {"a": [start(0.0), recs(1.0, 0, [3], [1]), done("ack", 1.3, 0, [3])],
                "b": [start(0.0), recs(0.5, 0, [9], [1]), recs(4.0, 0, [3], [2])]}
    assert len(invariants.share_confirmed_again(journals)) == 1


# ------------------------------------------------------------------ the delivery count limit
def test_no_delivery_beyond_the_count_limit():
    journals = {"a": [start(0.0), recs(1.0, 0, [0], [1]), done("release", 1.1, 0, [0]), recs(2.0, 0, [0], [2]),
                      done("release", 2.1, 0, [0]), recs(3.0, 0, [0], [3]), done("release", 3.1, 0, [0])]}
    assert invariants.share_count_limit(journals, 3) == []
    journals["a"] += [recs(4.0, 0, [0], [4])]
    bad = invariants.share_count_limit(journals, 3)
    assert len(bad) == 1 and "count 4" in bad[0] and "limit 3" in bad[0]


# ------------------------------------------------------------------ every record accepted or archived
def test_every_record_ends_accepted_or_archived_by_the_journals():
    journals = {"a": [start(0.0), recs(1.0, 0, [0, 1, 2, 3], [1, 1, 1, 1]), done("ack", 1.1, 0, [0]),
                      done("reject", 1.1, 0, [1]), done("release", 1.1, 0, [2, 3]),
                      recs(2.0, 0, [2, 3], [2, 2]), done("release", 2.1, 0, [2]), done("ack", 2.1, 0, [3], None),
                      recs(3.0, 0, [2], [3]), done("release", 3.1, 0, [2])]}
    # 0 accepted, 1 rejected, 2 released at the limit (archived), 3 accepted without an answer
    assert invariants.share_settled(journals, {(T, 0): range(4)}, 3) == []
    # offset 4 never delivered, and 2 released below the limit: neither accepted nor archived
    assert len(invariants.share_settled(journals, {(T, 0): range(5)}, 3)) == 1
    assert "4" in invariants.share_settled(journals, {(T, 0): range(5)}, 3)[0]
    assert invariants.share_settled(journals, {(T, 0): range(4)}, 4)   # limit 4: 2 is available again


def test_the_final_state_has_every_record_accepted_or_archived():
    ends = {(T, 0): 10, (T, 1): 5, (T, 2): 0}
    clean = {(T, 0): {"start": 10, "ranges": []}, (T, 1): {"start": 2, "ranges": [[2, 3, 2, 1], [4, 4, 4, 3]]},
             (T, 2): None}
    assert invariants.share_final_state(clean, ends) == []
    for planted, what in (({(T, 0): {"start": 8, "ranges": []}}, "offsets 8-9"),
                          ({(T, 1): {"start": 2, "ranges": [[2, 3, 2, 1], [4, 4, 0, 2]]}}, "state 0"),
                          ({(T, 1): {"start": 2, "ranges": [[2, 2, 2, 1], [4, 4, 4, 1]]}}, "offsets 3-3"),
                          ({(T, 0): {"start": 12, "ranges": []}}, "past the log end"),
                          ({(T, 0): None}, "no stored state")):
        bad = invariants.share_final_state({**clean, **planted}, ends)
        assert len(bad) == 1 and what in bad[0], (planted, bad)


def test_the_start_offset_never_past_the_log_end():
    ends = {(T, 0): [(1.0, 10), (2.0, 20), (3.0, 30)]}
    starts = {(T, 0): [(0.5, 5, 1), (1.5, 18, 2), (2.9, 30, 3)]}
    assert invariants.share_start_within_log(starts, ends) == []
    planted = {(T, 0): starts[(T, 0)] + [(3.5, 31, 4)]}
    bad = invariants.share_start_within_log(planted, ends)
    assert len(bad) == 1 and "start offset 31" in bad[0]
    # a truncated log: the end drops to 12; the stored start 30 (version 3) is stale until its leader
    # loads it again (and clips it); a start past it written since is a violation
    ends[(T, 0)].append((4.0, 12))
    after = {(T, 0): [(4.2, 30, 3)]}
    assert invariants.share_start_within_log(after, ends, stale={(T, 0): {3}}) == []
    assert len(invariants.share_start_within_log({(T, 0): [(4.2, 30, 5)]}, ends, stale={(T, 0): {3}})) == 1


# ------------------------------------------------------------------ a truncated log's records are other records
def test_lines_of_records_a_truncation_cut_off_move_to_a_topic_of_their_own():
    e = recs(5.0, 2, [8, 9, 10, 11], [1, 2, 1, 1])
    out = _split_truncated(e, T, 2, 10, 6.0, "t~0")
    assert [(x["t"], x["offs"], x["counts"]) for x in out] == [(T, [8, 9], [1, 2]), ("t~0", [10, 11], [1, 1])]
    assert _split_truncated(e, T, 2, 10, 4.0, "t~0") == [e]       # written after the restart: the new records
    assert _split_truncated(e, T, 3, 10, 6.0, "t~0") == [e]       # another partition
    ack = done("ack", 6.5, 2, [10])                                # sent before the restart at 6.6
    assert _split_truncated(ack, T, 2, 10, 6.6, "t~0")[0]["t"] == "t~0"


def test_a_start_read_before_a_truncation_is_not_compared_with_the_log_end_after_it():
    ends = {(T, 0): [(1.0, 40), (9.0, 12)]}       # the leader killed at 5.0, its log cut back to 12
    starts = {(T, 0): [(4.0, 30, 7)]}               # read before the kill, when the log reached 40
    assert len(invariants.share_start_within_log(starts, ends)) == 1
    assert invariants.share_start_within_log(starts, ends, cuts={(T, 0): [5.0]}) == []


def test_an_acknowledgement_answered_with_an_error_may_have_settled_the_record():
    journals = {"a": [start(0.0), recs(1.0, 0, [0, 1], [1, 1]), done("ack", 6.0, 0, [0], code=7),
                      done("reject", 6.0, 0, [1], code=-195)]}
    assert invariants.share_settled(journals, {(T, 0): range(2)}, 3) == []
