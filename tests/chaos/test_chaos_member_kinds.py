"""A chaos run with a thin consumer, a KIP-848 confluent-kafka consumer and a Spark query in one group.

The run (``testkit.chaos``, loopback, one broker) SIGKILLs the KIP-848 member and the
Spark member (its driver, JVM and Python workers) once each; both are restarted, the
Spark one on its checkpoint.  Every invariant is asserted -- nothing acknowledged lost,
every record consumed, one owner per partition at a time, no delivery outside
ownership, committed offsets never backwards and at the log end after the clean close
-- and what each kind journaled: the KIP-848 member its incremental assignments and
records, the Spark member its coordinator's assignments (through the source's testing
hook) and the records of its micro-batches, with the values the producer wrote.
"""

from __future__ import annotations

import uuid

import pytest

from testkit.chaos import ChaosRun, ChaosSettings, write_report

#: Only member SIGKILLs; with this seed the first hits the Spark member (slot 2), the second the
#: KIP-848 member (slot 1) -- asserted below, so a change of the draw fails loudly.
ONLY_MEMBER_KILLS = {"member_kill": 1, "member_stop": 0, "coordinator_kill": 0, "broker_kill": 0,
                     "coordinator_expiry": 0}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_chaos_with_thin_kip848_and_spark_members(zookeeper, tmp_path):
    from spark_coord.zk.client import ensure_chroot

    connect = f"{zookeeper.connect_string}/chaos-kinds-{uuid.uuid4().hex[:8]}"
    ensure_chroot(connect, connection_timeout_ms=10000)
    settings = ChaosSettings(brokers=1, partitions=6, kinds=("thin", "kip848", "spark"), duration_s=50, faults=2,
                             seed=3, warmup_s=8, cooldown_s=20, weights=dict(ONLY_MEMBER_KILLS))
    run = ChaosRun(settings, tmp_path, connect)
    report = run.run()
    write_report(report, tmp_path / "chaos-report.json")
    print("\n" + report.summary())

    assert sorted((f["kind"], f["target"]) for f in report.faults) == [("member_kill", "m1"), ("member_kill", "m2")]
    assert report.acked > 500 and not report.lost and not report.not_consumed
    assert not report.overlaps and not report.outside_ownership
    assert not report.violations, "\n".join(report.violations[:40])

    journals = {name: m.events() for name, m in run.members.items()}
    kinds = {name: run._kind_of(name) for name in run.members}
    assert sorted(kinds.items()) == [("m0", "thin"), ("m1", "kip848"), ("m1.1", "kip848"), ("m2", "spark"),
                                     ("m2.1", "spark")]
    for name, kind in kinds.items():
        events = journals[name]
        assigned = {(t, p) for e in events if e["ev"] == "assign" for t, p, _ in e["parts"]}
        recs = [e for e in events if e["ev"] == "recs"]
        assert assigned and recs, f"{name} ({kind}): assigned {assigned}, {len(recs)} recs lines"
        if kind == "kip848":
            assert all(e["incremental"] for e in events if e["ev"] == "assign")
        if kind == "spark":
            # the producer's values are "<partition>:<sequence>"
            assert all(v.split(":")[0] == str(e["p"]) for e in recs for v in e["vals"])
            assert all(len(e["vals"]) == len(e["offs"]) for e in recs)
            assert any(e["ev"] == "commit" for e in events)


def test_a_replayed_batch_below_the_handed_out_offset_is_not_committed():
    """What the run above found: a Spark member restarted on its checkpoint replays the batch its killed
    predecessor planned; when the coordinator hands the partition to it at a later offset (another
    member read on meanwhile), before or after the replay, committing the replayed batch's end (or
    reporting it in a Ping answer) would move the group's offset back."""
    from spark_coord.spark.group import GroupPartitionSource
    from spark_coord.spark.options import parse_source_options

    source = GroupPartitionSource(parse_source_options(
        {"bootstrap.brokers": "127.0.0.1:9", "subscribe": "t", "group.id": "g"}, streaming=True))
    source.members[0].owned = {("t", 0): 4320, ("t", 1): None}
    source.on_batch_committed({("t", 0): 2795, ("t", 1): 80})
    assert source.committed == {("t", 1): 80}
    source.on_batch_committed({("t", 0): 4460})
    assert source.committed == {("t", 0): 4460, ("t", 1): 80}
    # replayed before the partition came back, at a later offset: forgotten when it comes back
    source.on_batch_committed({("t", 2): 2630})
    member = source.members[0]
    member.start_fetchers(12, {("t", 0): 4460, ("t", 1): 80, ("t", 2): 4720}, {}, {})
    assert source.committed == {("t", 0): 4460, ("t", 1): 80}
    assert {o["partition"] for o in member.report_offsets()} == {0, 1}
