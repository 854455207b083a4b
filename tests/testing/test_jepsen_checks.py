"""Jepsen's Kafka anomalies (``testkit.jepsen_checks``) on hand-made histories: each one found, a clean
history passes."""

from __future__ import annotations

from testkit import jepsen_checks as jc

TP = ("t", 0)


def _log(n: int) -> dict:
    return {TP: {o: f"0:{o}".encode() for o in range(n)}}


def _acked(n: int) -> dict:
    return {TP: {f"0:{o}".encode() for o in range(n)}}


def _journal(*polls, assign_at: float = 0.0) -> list[dict]:
    events = [{"ts": assign_at, "ev": "assign", "parts": [["t", 0, polls[0][0] if polls and polls[0] else 0]]}]
    for i, offs in enumerate(polls):
        events.append({"ts": assign_at + 1 + i, "ev": "recs", "t": "t", "p": 0, "offs": list(offs)})
    return events


def test_a_clean_history_passes():
    journals = {"m0": _journal([0, 1, 2], [3, 4]), "m1": [{"ts": 10, "ev": "assign", "parts": [["t", 0, 5]]},
                                                          {"ts": 11, "ev": "recs", "t": "t", "p": 0, "offs": [5]}]}
    seen = {TP: [(0, b"0:0"), (1, b"0:1")]}
    r = jc.check(_acked(6), _log(6), journals, seen, {TP: [(0.5, 3), (1.5, 6)]})
    assert r.violations == [] and r.duplicate == []
    assert r.worst_realtime_lag_s == 9.5   # offset 5 appeared at 1.5, first polled at 11


def test_lost_write_is_found_when_missing_from_the_log_and_when_skipped_by_every_poll():
    log = _log(5)
    del log[TP][4]
    r = jc.check(_acked(5), log, {"m0": _journal([0], [2, 3])})
    assert any("not in the log" in v for v in r.lost_write)
    assert any("b'0:1' at offset 1 was never polled" in v for v in r.lost_write)


def test_unseen_at_the_end():
    r = jc.check(_acked(5), _log(5), {"m0": _journal([0, 1, 2])})
    assert r.unseen == ["t-0: 2 acknowledged values never polled, offsets 3..4 (highest polled 2)"]
    assert r.lost_write == []


def test_duplicate_value_at_two_offsets():
    log = _log(3)
    log[TP][3] = b"0:1"
    r = jc.check(_acked(3), log, {"m0": _journal([0, 1, 2, 3])})
    assert r.duplicate == ["t-0: value b'0:1' at offsets [1, 3]"]
    assert r.violations == []   # at-least-once allows it; it is counted


def test_inconsistent_offsets_between_a_read_during_the_run_and_the_log():
    seen = {TP: [(0, b"0:0"), (1, b"0:1"), (2, b"0:2")]}
    log = {TP: {0: b"0:0", 1: b"0:1", 2: b"0:9"}}
    r = jc.check({}, log, {}, seen)
    assert r.inconsistent_offsets == ["t-0: offset 2 held b'0:2' then b'0:9'"]


def test_nonmonotonic_poll_within_one_assignment_but_not_across_assignments():
    r = jc.check(_acked(5), _log(5), {"m0": _journal([0, 1, 2], [1, 2, 3, 4])})
    assert r.nonmonotonic_poll and "polled 1..4 after 2" in r.nonmonotonic_poll[0]
    # a new assignment (a rebalance) may start again from the committed offset
    again = _journal([0, 1, 2]) + [{"ts": 5, "ev": "assign", "parts": [["t", 0, 1]]},
                                   {"ts": 6, "ev": "recs", "t": "t", "p": 0, "offs": [1, 2, 3, 4]}]
    assert jc.check(_acked(5), _log(5), {"m0": again}).violations == []


def test_poll_skip_between_polls_and_within_a_poll():
    r = jc.check(_acked(8), _log(8), {"m0": _journal([0, 1], [4, 5]), "m1": _journal([0, 1, 3, 4, 5, 6, 7])})
    assert any("m0 polled 4 right after 1, skipping 2 offsets" in v for v in r.poll_skip)
    assert any("m1's poll 0..7 skipped [2]" in v for v in r.poll_skip)


def test_a_lost_assignment_starts_the_poll_order_over():
    events = _journal([0, 1, 2]) + [{"ts": 5, "ev": "lost"}, {"ts": 6, "ev": "resume", "parts": [["t", 0, 1]]},
                                    {"ts": 7, "ev": "recs", "t": "t", "p": 0, "offs": [1, 2]}]
    assert jc.nonmonotonic_polls({"m0": events}) == []


def test_a_replayed_spark_batch_is_not_a_poll_of_the_assignment_that_follows_it():
    """Seed 36 (every member kind): a restarted Spark query replayed its killed run's last batch
    (9085..9109) and then read from the group's offset, 10910 (another member had read 9110..10909
    and committed meanwhile): the checks read that as one assignment skipping 1,800 offsets."""
    events = [{"ts": 0, "ev": "assign", "parts": [["t", 0, 6]]},
              {"ts": 1, "ev": "recs", "t": "t", "p": 0, "offs": [2, 3], "replay": True},
              {"ts": 2, "ev": "recs", "t": "t", "p": 0, "offs": [6, 7]}]
    r = jc.check(_acked(8), _log(8), {"m0": events, "m1": _journal([0, 1, 2, 3, 4, 5])})
    assert r.poll_skip == [] and r.nonmonotonic_poll == []
    # a skip after the replay, within the new assignment, is still one
    skip = events + [{"ts": 3, "ev": "recs", "t": "t", "p": 0, "offs": [9]}]
    r = jc.check(_acked(10), _log(10), {"m0": skip, "m1": _journal(list(range(10)))})
    assert any("m0 polled 9 right after 7, skipping 1 offsets" in v for v in r.poll_skip)


def test_a_member_under_a_false_clock_has_its_journal_mapped_back_to_real_time(tmp_path):
    """``NemesisRun._journals``: a member started at real time S under ``FAKETIME`` with offset O and rate R
    journals fake times S + O + (t - S) * R; the checks read real times."""
    from testkit.nemesis import NemesisRun, NemesisSettings

    class Fake:
        kind = "thin"

        def __init__(self, events):
            self._events = events

        def events(self):
            return self._events

    run = NemesisRun(NemesisSettings(kinds=("thin",)), tmp_path)
    start = 1000.0
    run.members = {"m0": Fake([{"ts": 1000.5, "ev": "recs"}]),
                   "m0.1": Fake([{"ts": start + 60 + 2 * 5.0, "ev": "lost", "lease_end": start + 60 + 2 * 4.0}])}
    run.clocks = {"m0.1": (start, 60.0, 2.0)}
    journals = run._journals()
    assert journals["m0"] == [{"ts": 1000.5, "ev": "recs"}]
    assert journals["m0.1"] == [{"ts": 1005.0, "ev": "lost", "lease_end": 1004.0}]


def test_the_reachable_lag_leaves_out_the_time_the_leader_could_not_be_reached():
    journals = {"m0": _journal([0, 1, 2], [3, 4]), "m1": [{"ts": 10, "ev": "assign", "parts": [["t", 0, 5]]},
                                                          {"ts": 11, "ev": "recs", "t": "t", "p": 0, "offs": [5]}]}
    log_ends = {TP: [(0.5, 3), (1.5, 6)]}
    # the leader was away from 3 to 7 and (overlapping) 6 to 9: 6 of offset 5's 9.5 s of wait
    r = jc.check(_acked(6), _log(6), journals, None, log_ends, unreachable={TP: [(3.0, 7.0), (6.0, 9.0)]})
    assert r.worst_realtime_lag_s == 9.5
    assert r.worst_reachable_lag_s == 3.5
    # windows of another partition change nothing
    r = jc.check(_acked(6), _log(6), journals, None, log_ends, unreachable={("t", 1): [(0.0, 20.0)]})
    assert r.worst_reachable_lag_s == 9.5
