"""A chaos run in the suite: about 4 minutes of member SIGKILL/SIGSTOP, coordinator SIGKILL,
broker SIGKILL and coordinator ZooKeeper session expiry (a pause past its session) on a
3-broker cluster with 4 journaling members and a live producer.

Every invariant is asserted (``testkit.chaos`` / ``testkit.invariants``): nothing
acknowledged lost, every record consumed, committed offsets never backwards, one owner
per partition at a time, no delivery outside ownership, no owned partition with records
waiting left unfetched for the liveness bound, final offsets at the log end after the
clean close.  Duplicates and the stalls after coordinator SIGKILLs are printed (speed is
measured in ``bench/chaos.py``, not asserted here).

A second, shorter run (under a minute) puts two confluent-kafka ShareConsumers of a share
group (KIP-932) beside a thin consumer, and asserts the share group's checks too.
"""

from __future__ import annotations

import uuid

import pytest

from testkit.chaos import ChaosRun, ChaosSettings, write_report


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_chaos_keeps_every_invariant(zookeeper, tmp_path):
    from spark_coord.zk.client import ensure_chroot

    connect = f"{zookeeper.connect_string}/chaos-{uuid.uuid4().hex[:8]}"
    ensure_chroot(connect, connection_timeout_ms=10000)
    settings = ChaosSettings(duration_s=150, faults=14, seed=20261123)
    report = ChaosRun(settings, tmp_path, connect).run()
    write_report(report, tmp_path / "chaos-report.json")
    print("\n" + report.summary())
    assert report.faults and report.acked > 1000
    assert not report.violations, "\n".join(report.violations[:40])


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_chaos_with_a_share_group_beside_the_consumer_group(zookeeper, tmp_path):
    """A short run (under a minute) with two confluent-kafka ShareConsumers of one share group beside
    a thin consumer: member SIGKILL/SIGSTOP and broker SIGKILLs hit them too.  Every record in the
    log is delivered to the share group, no record has two lock holders, none whose acceptance the
    broker confirmed is acquired again, every redelivery is explained -- and the consumer group's
    invariants hold as before."""
    from spark_coord.zk.client import ensure_chroot

    connect = f"{zookeeper.connect_string}/chaos-share-{uuid.uuid4().hex[:8]}"
    ensure_chroot(connect, connection_timeout_ms=10000)
    settings = ChaosSettings(kinds=("thin", "share", "share"), duration_s=36, faults=4, seed=5, warmup_s=8,
                             cooldown_s=10, share_lock_ms=4000, share_hold_s=0.3,
                             weights={"member_kill": 2, "member_stop": 1, "coordinator_kill": 1, "broker_kill": 2,
                                      "coordinator_expiry": 0})
    report = ChaosRun(settings, tmp_path, connect).run()
    write_report(report, tmp_path / "chaos-report.json")
    print("\n" + report.summary())
    assert report.faults and report.acked > 1000
    sh = report.share
    assert sh["records"] == sh["expected"] >= report.acked and sh["confirmed"] > sh["expected"] // 2
    assert not report.violations, "\n".join(report.violations[:40])
