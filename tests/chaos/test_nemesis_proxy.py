"""A short run of the link faults (``testkit.nemesis`` ``PROXY_KINDS``): every client connection to a
broker goes through a ``testkit.linkproxy`` in the broker's namespace, which is made to stall, to
delay and to throttle.

Four faults on a 3-broker cluster with a thin consumer, a confluent-kafka eager member and the
acknowledging producer: the coordinator's broker's links stall (no byte passes, no connection
closes: the thin member's channel to the coordinator, the Kafka member's group requests, the
producer's requests to the partitions it leads), then its open links stick while new ones pass
(clients must give them up by their own timeouts and connect again), then a broker's links are
delayed by 100-800 ms, then narrowed to 8-64 KB/s.  The stall really held bytes on the coordinator's proxy, nothing is
lost, the offsets are consistent, no partition has two owners at once and the run's invariants
hold.  Skipped, with the reason, where network namespaces cannot be made (not root, no ``ip``).
"""

from __future__ import annotations

import pytest

from testkit import nemesis
from testkit.nemesis import netns

REASON = nemesis.unavailable_reason()


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.skipif(REASON is not None, reason=f"no network namespaces here: {REASON}")
def test_stalled_slow_and_throttled_links_lose_nothing_and_keep_one_owner(tmp_path):
    schedule = [(0.0, "stall_broker"), (10.0, "stuck_links"), (31.0, "slow_broker"), (43.0, "throttle_broker")]
    settings = nemesis.NemesisSettings(
        kinds=("thin", "eager"), members=2, partitions=6, duration_s=62, warmup_s=8, cooldown_s=10,
        faults=len(schedule), schedule=schedule, seed=5, cut_s=(6.0, 7.0), combine=0.0, diagnose_after_s=0,
        zk_nodes=1, proxied=True)
    run = nemesis.NemesisRun(settings, tmp_path)
    report = run.run()
    print("\n" + report.summary())
    assert [f["kind"] for f in report.faults] == [k for _, k in schedule], report.faults
    # the faults happened: the stall held bytes read from open links, the others set their mode
    by_kind = {fault.kind: (fault, before, during) for fault, before, during in run.proxy_stats}
    assert set(by_kind) == set(nemesis.PROXY_KINDS), run.proxy_stats
    _, before, during = by_kind["stall_broker"]
    assert during["mode"] == "stall" and during["open"] > 0, during
    assert during["stalled_bytes"] > before["stalled_bytes"], (before, during)
    # the coordinator's broker's open links stuck (bytes read on them held), the links made since passing:
    # the members and the producer connected again and went on (every invariant below)
    _, before, during = by_kind["stuck_links"]
    assert during["mode"] == "stall_open" and during["stuck"] > 0, during
    assert during["stalled_bytes"] > before["stalled_bytes"], (before, during)
    assert during["accepted"] > before["accepted"], (before, during)
    assert by_kind["slow_broker"][2]["mode"].startswith("delay ")
    assert by_kind["throttle_broker"][2]["mode"].startswith("bandwidth ")
    chaos, jepsen = report.chaos, report.jepsen
    assert chaos.acked > 1000 and not chaos.lost
    assert not jepsen["lost_write"], jepsen["lost_write"][:10]
    assert not jepsen["inconsistent_offsets"], jepsen["inconsistent_offsets"][:10]
    assert not chaos.overlaps, chaos.overlaps[:10]
    assert not report.violations, "\n".join(report.violations[:40])
    # the proxies are gone with the run, and nothing of its network is left
    assert not any(p.alive() for p in run.cluster.proxies.values())
    assert not [line for line in netns._ip("netns", "list").stdout.splitlines()
                if line.startswith(report.prefix + "-")]
