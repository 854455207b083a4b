"""The chaos run's own helpers, on hand-made journals: member kinds, runs of failed commits,
reading a journal as it grows."""

from __future__ import annotations

import json

import pytest

from testkit.analysis import commit_failure_runs
from testkit.chaos import ChaosSettings, parse_kinds, share_overrides
from testkit.diagnostics import JournalTail


def test_member_kinds_parse_and_default_to_thin_consumers():
    assert parse_kinds("thin, thin,eager,cooperative") == ("thin", "thin", "eager", "cooperative")
    for bad in ("", "thin,sticky", ",,"):
        with pytest.raises(ValueError):
            parse_kinds(bad)
    assert ChaosSettings(members=3).member_kinds() == ("thin", "thin", "thin")
    assert ChaosSettings(members=3, kinds=("eager", "thin")).member_kinds() == ("eager", "thin")


def test_share_members_are_a_kind_of_their_own_with_short_share_timeouts():
    kinds = parse_kinds("thin,eager,cooperative,share,share")
    assert kinds[-2:] == ("share", "share")
    mixed, shares, thin = (ChaosSettings(kinds=kinds), ChaosSettings(kinds=("share",)), ChaosSettings(members=2))
    assert (mixed.has_group(), mixed.has_share()) == (True, True)
    assert (shares.has_group(), shares.has_share()) == (False, True)
    assert (thin.has_group(), thin.has_share()) == (True, False)
    o = share_overrides(ChaosSettings(kinds=kinds, share_lock_ms=4000, member_session_ms=6000))
    assert o["group.share.record.lock.duration.ms"] == 4000 and o["group.share.session.timeout.ms"] == 6000
    assert o["group.share.min.record.lock.duration.ms"] <= 4000 and o["group.share.min.session.timeout.ms"] <= 6000
    from spark_coord import config

    config.load(config.BROKER, None, {k: str(v) for k, v in o.items()})  # keys the broker knows, within bounds


def _ev(ts, ev, **kw):
    return {"ts": ts, "ev": ev, **kw}


def test_commit_failure_runs_are_consecutive_failures_long_enough():
    journals = {
        "a": [_ev(0, "start"), _ev(1, "commit_failed", code=15), _ev(5, "commit_failed", code=15),
              _ev(13, "commit_failed", code=7), _ev(14, "commit"), _ev(20, "commit_failed", code=15),
              _ev(22, "commit")],
        "b": [_ev(2, "commit_failed", code=15), _ev(40, "closed"), _ev(41, "start"),
              _ev(42, "commit_failed", code=15)],
    }
    runs = commit_failure_runs(journals, 10.0)
    assert runs == [{"member": "a", "start": 1, "end": 13, "count": 3, "codes": [15, 7], "messages": {}}]
    assert [(r["member"], r["start"]) for r in commit_failure_runs(journals, 0.0)] == [
        ("a", 1), ("b", 2), ("a", 20), ("b", 42)]


def test_journal_tail_reads_only_complete_new_lines(tmp_path):
    path = tmp_path / "m.jsonl"
    tail = JournalTail(path)
    assert tail.new_events() == []
    with open(path, "w") as f:
        f.write(json.dumps(_ev(1, "start")) + "\n" + '{"ts": 2, "ev": "re')
    assert tail.new_events() == [_ev(1, "start")]
    with open(path, "a") as f:
        f.write('cs"}\n')
    assert tail.new_events() == [{"ts": 2, "ev": "recs"}]
    assert tail.new_events() == []


def test_a_paused_spark_members_batch_in_flight_is_told_apart_from_deliveries_outside_ownership(tmp_path):
    """What a nemesis run saw (seed 42): a Spark member SIGSTOPped for 14.5 s (its session: 10 s) wrote,
    6 s after SIGCONT, the batch it had planned before the pause, when its lease had long run out.  That
    batch -- the first it delivers after SIGCONT -- is a zombie's, as a paused Kafka consumer's; the
    batches after it, and any batch of a member whose pause stayed within its session, still count."""
    from types import SimpleNamespace

    from testkit import invariants
    from testkit.chaos import ChaosRun, Fault

    run = ChaosRun(ChaosSettings(kinds=("thin", "spark"), member_session_ms=10000), tmp_path, "127.0.0.1:1/x")
    run.members = {"m0": SimpleNamespace(kind="thin"), "m1": SimpleNamespace(kind="spark")}
    run.faults = [Fault(100.0, "member_stop", "m1", 114.5)]
    recs = lambda ts, batch, offs: _ev(ts, "recs", t="c", p=3, offs=offs, gen=None, batch=batch)  # noqa: E731
    journals = {"m1": [recs(99.0, 7, [10, 11]), recs(120.5, 8, [12, 13]), recs(121.0, 9, [14])], "m0": []}
    intervals = {("c", 3): [(50.0, 109.9, "m1")]}   # its lease ran out during the pause
    kept = run._without_paused_batches(journals)
    assert [e["batch"] for e in kept["m1"]] == [7, 9]
    assert len(invariants.delivered_outside_ownership(journals, intervals)) == 2
    assert invariants.delivered_outside_ownership(kept, intervals) == [
        "m1 delivered c-3 offsets 14..14 at 121.000 without owning it"]
    run.faults = [Fault(100.0, "member_stop", "m1", 108.0)]   # within its session: nothing set aside
    assert run._without_paused_batches(journals) == journals
