"""The nemesis's schedule (every kind drawn once per run, then by weight) and the aggregation of many
runs into the per-kind table and the bar of ten runs (``testkit.nemesis``), on hand-made reports."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from testkit import nemesis


def _settings(**kw) -> nemesis.NemesisSettings:
    base = dict(faults=60, duration_s=700, warmup_s=20, cooldown_s=40, seed=1)
    base.update(kw)
    return nemesis.NemesisSettings(**base)


def test_every_kind_of_weight_above_zero_is_drawn_at_least_once():
    s = _settings()
    kinds = {k for k, w in s.weights.items() if w > 0}
    for seed in range(20):
        plan = nemesis.plan(s, random.Random(seed))
        assert len(plan) == 60
        drawn = Counter(k for _, k in plan)
        assert set(drawn) == kinds, kinds - set(drawn)
        times = [t for t, _ in plan]
        assert times == sorted(times) and s.warmup_s <= times[0] and times[-1] <= s.duration_s - s.cooldown_s


def test_kinds_of_weight_zero_are_never_drawn_and_fewer_faults_than_kinds_draw_by_weight():
    s = _settings(faults=3, weights={"flap": 1, "bridge": 1, "isolate_member": 1, "member_kill": 0, "zk": 0})
    plan = nemesis.plan(s, random.Random(3))
    assert len(plan) == 3 and {k for _, k in plan} <= {"flap", "bridge", "isolate_member"}
    s = _settings(faults=2, weights={"flap": 1, "bridge": 1, "isolate_member": 1})
    assert len(nemesis.plan(s, random.Random(3))) == 2
    s = _settings(faults=50, every_kind=False, weights={"flap": 1, "bridge": 0})
    assert {k for _, k in nemesis.plan(s, random.Random(3))} == {"flap"}


def _run(seed: int, by_kind: dict, *, dup=0.05, lag=12.0, reachable=8.0, lost=(), overlaps=()) -> dict:
    return {"by_kind": by_kind, "faults": [{}] * sum(d["injected"] for d in by_kind.values()),
            "chaos": {"acked": 1000, "overlaps": list(overlaps), "duplicate_pct": dup},
            "jepsen": {"lost_write": list(lost), "inconsistent_offsets": [], "worst_realtime_lag_s": lag,
                       "worst_reachable_lag_s": reachable},
            "settings": {"seed": seed, "session_ms": 6000}, "violations": list(lost) + list(overlaps)}


def _kind(injected: int, stall, alone=None, anomalies=0) -> dict:
    return {"injected": injected, "stall_max_s": stall, "alone_max_s": alone, "anomalies": anomalies}


def test_aggregate_sums_injections_keeps_the_longest_stall_and_judges_the_bar():
    runs = [_run(1, {"flap": _kind(2, 1.5, 1.0), "bridge": _kind(1, None)}),
            _run(2, {"flap": _kind(3, 0.5, 2.5), "isolate_member": _kind(1, 4.0, anomalies=0)}, reachable=15.9)]
    agg = nemesis.aggregate(runs)
    assert agg["by_kind"]["flap"] == {"injected": 5, "runs": 2, "stall_max_s": 1.5, "alone_max_s": 2.5,
                                      "anomalies": 0}
    assert agg["by_kind"]["bridge"]["stall_max_s"] is None
    v = agg["verdict"]
    assert v["runs"] == 2 and v["faults"] == 7 and v["records"] == 2000 and v["passed"]
    text = nemesis.aggregate_tables(agg)
    assert "| flap " in text and "5 (2)" in text and "passed" in text and "NOT" not in text


def test_the_bar_fails_on_a_lost_write_two_owners_duplicates_or_lag():
    ok = {"flap": _kind(1, 1.0)}
    assert not nemesis.aggregate([_run(1, ok), _run(2, ok, lost=["lost"])])["verdict"]["passed"]
    assert not nemesis.aggregate([_run(1, ok, overlaps=["two owners"])])["verdict"]["passed"]
    assert not nemesis.aggregate([_run(1, ok, dup=0.1)])["verdict"]["passed"]
    over = nemesis.aggregate([_run(1, ok, lag=40.0, reachable=16.5)])["verdict"]
    assert not over["passed"] and over["runs_over_lag_bar"] == 1
    # the realtime lag alone (leaders unreachable) does not fail it
    assert nemesis.aggregate([_run(1, ok, lag=40.0, reachable=15.0)])["verdict"]["passed"]
    assert "NOT passed" in nemesis.aggregate_tables(nemesis.aggregate([_run(1, ok, dup=0.5)]))


def test_a_redelivery_goes_to_the_fault_begun_last_whose_window_still_covers_it():
    # windows (start, end) in the order the faults were injected; the second begins inside the first
    windows = [(10.0, 40.0), (20.0, 30.0), (50.0, 60.0)]
    counts, outside = nemesis.attribute_to_faults([5.0, 12.0, 20.0, 25.0, 35.0, 45.0, 50.0, 61.0], windows)
    # 12 -> first; 20 and 25 -> second (begun last); 35 -> first again (the second's window is over);
    # 50 -> third; 5, 45 and 61 -> no window
    assert counts == [2, 2, 1] and outside == 3
    assert nemesis.attribute_to_faults([], windows) == ([0, 0, 0], 0)
    assert nemesis.attribute_to_faults([1.0], []) == ([], 1)


def test_aggregate_sums_redeliveries_per_injection_and_reads_reports_without_them():
    flap = dict(_kind(2, 1.0), redelivered=300)
    runs = [_run(1, {"flap": flap}), _run(2, {"flap": _kind(3, 1.0)}),
            _run(3, {"flap": dict(_kind(1, 1.0), redelivered=0)})]
    d = nemesis.aggregate(runs)["by_kind"]["flap"]
    assert d["injected"] == 6 and d["redelivered"] == 300 and d["redelivered_injected"] == 3
    assert "| 300 (100 each)" in nemesis.aggregate_tables(nemesis.aggregate(runs))
    assert "redelivered" not in nemesis.aggregate([_run(2, {"flap": _kind(3, 1.0)})])["by_kind"]["flap"]


@pytest.mark.skipif(nemesis.faketime_lib() is None, reason="libfaketime is not installed (Debian package faketime)")
@pytest.mark.parametrize("kind", ["clock_member_fast", "clock_member_offset"])
def test_a_false_clock_is_what_the_fault_says_and_maps_back_to_real_time(kind):
    """A child started as the clock faults start members reads the clock the fault names (a fast one
    runs fast: a bare FAKETIME="x2" did not), and ``real_time`` maps its readings back to real time."""
    import subprocess
    import sys
    import time

    run = nemesis.NemesisRun.__new__(nemesis.NemesisRun)
    run.s = nemesis.NemesisSettings()
    clock = run._clock(kind)
    offset, _, speed = clock.partition(" ")
    offset, rate = float(offset.rstrip("s")), float(speed[1:]) if speed else 1.0
    code = "import sys, time\nfor _ in sys.stdin:\n    print(time.time(), flush=True)\n"
    with nemesis.spawn_env(clock):
        child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)
    try:
        start = nemesis.process_start(child.pid)
        readings = []
        for _ in range(2):
            child.stdin.write("\n")
            child.stdin.flush()
            readings.append((time.time(), float(child.stdout.readline())))
            time.sleep(1.0)   # the interval measured, not a wait for something
    finally:
        child.kill()
        child.wait()
    (real0, fake0), (real1, fake1) = readings
    assert (fake1 - fake0) / (real1 - real0) == pytest.approx(rate, rel=0.15)
    for real, fake in readings:
        assert fake == pytest.approx(start + offset + (real - start) * rate, abs=0.3)
        assert nemesis.real_time(fake, start, offset, rate) == pytest.approx(real, abs=0.3)


def test_every_member_waits_out_a_stuck_link_and_kafka_members_a_coordinator_fault():
    """Seen in a nemesis run: a thin member's fetch link to a partition's leader was stuck (open,
    passing nothing) and it delivered nothing from that partition for 17 s, until its request timed
    out and it connected again -- flagged as a liveness violation although a Kafka member in its place
    was exempt.  A stuck link is waited out by every member; a coordinator fault by Kafka members."""
    from types import SimpleNamespace

    from testkit.chaos import Fault

    run = nemesis.NemesisRun.__new__(nemesis.NemesisRun)
    run.member_paused = {"m0": [(1.0, 2.0)]}
    run.members = {"m0": SimpleNamespace(kind="thin"), "m1": SimpleNamespace(kind="eager")}
    run.faults = [Fault(100.0, "stuck_links", "1", 130.0), Fault(200.0, "coordinator_zk_cut", "1", 210.0)]
    waiting = run._waiting_members()
    assert waiting["m0"] == [(1.0, 2.0), (100.0, 145.0)]
    assert sorted(waiting["m1"]) == [(100.0, 145.0), (200.0, 225.0)]


def test_a_spark_member_waits_from_its_start_until_its_first_batch_and_one_that_never_delivers_does_not():
    """A cold Spark query (its JVM, Python workers, first reads) took 27 s from its first assignment to
    its first batch on a loaded 2-core machine: the liveness check counted that as an owner not
    delivering. Its start to its first batch is a wait; a member with no batch at all is not excused."""
    from types import SimpleNamespace

    run = nemesis.NemesisRun.__new__(nemesis.NemesisRun)
    run.member_paused, run.faults = {}, []
    run.members = {"m2": SimpleNamespace(kind="spark"), "m2.1": SimpleNamespace(kind="spark"),
                   "m0": SimpleNamespace(kind="thin")}
    journals = {"m2": [{"ev": "start", "ts": 10.0}, {"ev": "assign", "ts": 12.0}, {"ev": "recs", "ts": 39.0},
                       {"ev": "recs", "ts": 41.0}],
                "m2.1": [{"ev": "start", "ts": 50.0}, {"ev": "assign", "ts": 52.0}],
                "m0": [{"ev": "start", "ts": 1.0}, {"ev": "recs", "ts": 30.0}]}
    waiting = run._waiting_members(journals)
    assert waiting["m2"] == [(10.0, 39.0)]
    assert not waiting.get("m2.1") and not waiting.get("m0")


@pytest.mark.parametrize("heal_first", [False, True], ids=["kill-restart-first", "clock-heal-first"])
def test_a_clock_fault_and_a_kill_of_one_member_leave_one_incarnation_whichever_ends_first(heal_first):
    """Seed 36 run again: a Spark member restarted under a false clock (``clock_member_offset``) was
    killed; the kill's restart started one incarnation and the clock fault's heal, 4 s later,
    another, so two queries ran on one checkpoint (Spark failed them with
    CONCURRENT_STREAM_LOG_UPDATE, again and again) and each wrote batches of partitions the group
    had given the other.  Whichever of the two comes second now finds the member replaced and
    starts nothing."""
    import random
    from types import SimpleNamespace

    from testkit.chaos import ChaosRun

    class Incarnation:
        def __init__(self, name):
            self.name, self.up = name, True

        def alive(self):
            return self.up

        def kill(self):
            self.up = False

    run = nemesis.NemesisRun.__new__(nemesis.NemesisRun)
    run.s, run.rng, run.net = _settings(), random.Random(1), SimpleNamespace()
    run.current, run.deaths, run.details, run._next_clock, run.member_paused = {}, {}, {}, {}, {}
    born: list[Incarnation] = []

    def member(slot):
        inc = Incarnation(f"m{slot}" + (f".{len(born)}" if born else ""))
        born.append(inc)
        run.current[slot] = inc
        return inc

    later = []
    run._member, run._touch = member, lambda fault, nodes: None
    run._later = lambda delay, fn, *args: later.append((fn, args))
    member(0)
    assert run._member_fault("clock_member_offset") is not None    # m0 -> m0.1 under a false clock
    heal = later.pop()
    assert ChaosRun._inject(run, "member_kill").target == "m0.1"   # m0.1 killed, its restart due
    restart = later.pop()
    for fn, args in ([heal, restart] if heal_first else [restart, heal]):
        fn(*args)
    assert [m.name for m in born if m.alive()] == ["m0.2"], [(m.name, m.alive()) for m in born]
