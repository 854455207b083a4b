"""A nemesis run on a three-server ZooKeeper ensemble (real quorum, one namespace per server), with
the ensemble split under the coordinator and the brokers' membership changed (``testkit.nemesis.zk``).

The scheduled run: ``zk_split`` with the group's coordinator on the minority side (its ZooKeeper
server stops serving, its session expires, a broker of the majority is elected), then
``broker_add`` (a broker with a new id in a new namespace) and ``broker_remove`` (a broker leading
no partition stopped for good: the coordinator when it is one).  Nothing is lost, no offset is
inconsistent, no partition has two owners; the coordinator left the minority during the split,
the ensemble rejoined after it, the removed broker left ``/brokers/ids`` and the group has a live
coordinator.  The unit tests check the split's sides, the topic's assignment and which brokers
may be removed.  Skipped, with the reason, where network namespaces cannot be made.
"""

from __future__ import annotations

import random

import pytest

from spark_coord.zk.embedded import EmbeddedEnsemble
from testkit import nemesis
from testkit.nemesis import netns
from testkit.nemesis import zk as nemesis_zk

REASON = nemesis.unavailable_reason()


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.skipif(REASON is not None, reason=f"no network namespaces here: {REASON}")
def test_zk_split_and_broker_membership_lose_nothing_and_move_the_coordinator(tmp_path):
    schedule = [(0.0, "zk_split"), (16.0, "broker_add"), (24.0, "broker_remove")]
    settings = nemesis.NemesisSettings(
        kinds=("thin", "cooperative"), partitions=6, duration_s=58, warmup_s=8, cooldown_s=12,
        faults=len(schedule), schedule=schedule, seed=5, cut_s=(3.0, 4.0), combine=0.0, diagnose_after_s=0,
        zk_nodes=3, zk_split_coordinator_minority=1.0)
    run = nemesis.NemesisRun(settings, tmp_path)
    report = run.run()
    print("\n" + report.summary())
    assert [f["kind"] for f in report.faults] == [k for _, k in schedule], (report.faults, report.skipped)
    chaos, jepsen = report.chaos, report.jepsen
    assert chaos.acked > 500 and not chaos.lost
    assert not jepsen["lost_write"], jepsen["lost_write"][:10]
    assert not jepsen["inconsistent_offsets"], jepsen["inconsistent_offsets"][:10]
    assert not chaos.overlaps, chaos.overlaps[:10]
    assert not report.violations, "\n".join(report.violations[:40])

    # the split: the coordinator with the minority server; a majority broker took over; the ensemble rejoined
    [split] = run.zk_splits
    before = split["coordinator_before"]
    assert split["coordinator_on_minority"] and f"b{before}" in split["minority"]
    assert [n for n in split["minority"] if n.startswith("zk")] and len(split["minority"]) == 2
    moved = [c for c in split["coordinators_during"] if c != before]
    assert moved and f"b{moved[0]}" in split["majority"], split
    assert split["minority_stopped_serving"] and split["rejoined_s"] is not None, split

    # the added broker stood with the others; the removed one (leading no partition) is gone for good
    [added] = run.added_brokers
    [removal] = run.removals
    assert removal["broker"] == added and added not in run.leaders.values()
    assert removal["gone"] and removal["coordinator_after"] not in (None, removal["broker"]), removal
    assert report.by_kind.keys() >= {"zk_split", "broker_add", "broker_remove"}, report.by_kind

    # nothing of the run's network is left
    assert not [line for line in netns._ip("netns", "list").stdout.splitlines()
                if line.startswith(report.prefix + "-")]
    assert report.prefix not in netns._ip("-o", "link", "show").stdout


# ---------------------------------------------------------------------- units
ZK = ["zk0", "zk1", "zk2"]


def test_split_puts_the_coordinator_with_the_lone_server_and_cuts_only_zookeeper_links():
    plan = nemesis_zk.plan_split(ZK, [0, 1, 2], coordinator=1, coordinator_on_minority=True, rng=random.Random(3))
    assert plan.minority_broker == 1 and plan.minority_zk in ZK and len(plan.minority) == 2
    assert sorted(plan.minority + plan.majority) == sorted(ZK + ["b0", "b1", "b2"])
    majority_zk = [z for z in ZK if z != plan.minority_zk]
    cuts = set(plan.cuts())
    expected = ({(plan.minority_zk, z) for z in majority_zk} | {("b1", z) for z in majority_zk}
                | {(plan.minority_zk, b) for b in ("b0", "b2")})
    assert cuts == expected
    assert not [c for c in cuts if c[0].startswith("b") and c[1].startswith("b")]


def test_mirrored_split_keeps_the_coordinator_with_the_majority():
    for seed in range(20):
        plan = nemesis_zk.plan_split(ZK, [0, 1, 2, 3], coordinator=2, coordinator_on_minority=False,
                                     rng=random.Random(seed))
        assert plan.minority_broker != 2 and "b2" in plan.majority
        assert len([n for n in plan.majority if n.startswith("zk")]) == 2


def test_split_needs_three_servers_and_two_brokers():
    with pytest.raises(ValueError):
        nemesis_zk.plan_split(["zk"], [0, 1], 0, True, random.Random(1))
    with pytest.raises(ValueError):
        nemesis_zk.plan_split(ZK, [0], 0, True, random.Random(1))


def test_the_topic_stays_on_the_original_brokers_and_only_the_others_are_removable():
    assignment = nemesis_zk.topic_assignment(6, [0, 1, 2])
    assert [a["broker_ids"] for a in assignment] == [[0], [1], [2], [0], [1], [2]]
    leaders = {a["partition_index"]: a["broker_ids"][0] for a in assignment}
    assert nemesis_zk.removable_brokers(leaders, [0, 1, 2, 3, 5]) == [3, 5]
    assert nemesis_zk.removable_brokers(leaders, [0, 1, 2]) == []


def test_zk_node_names_keep_one_server_in_zk():
    assert nemesis_zk.zk_node_names(1) == ["zk"]
    assert nemesis_zk.zk_node_names(3) == ZK
    with pytest.raises(ValueError):
        nemesis_zk.zk_node_names(0)


def test_ensemble_with_fixed_ports_needs_one_distinct_host_per_member():
    with pytest.raises(ValueError):
        EmbeddedEnsemble(3, hosts=["10.0.0.1", "10.0.0.2"])
    with pytest.raises(ValueError):
        EmbeddedEnsemble(3, ports=(2181, 2888, 3888))
    with pytest.raises(ValueError):
        EmbeddedEnsemble(2, hosts=["10.0.0.1", "10.0.0.1"], ports=(2181, 2888, 3888))


@pytest.mark.skipif(REASON is not None, reason=f"no network namespaces here: {REASON}")
def test_a_zookeeper_cut_cuts_the_broker_from_every_server(tmp_path):
    run = nemesis.NemesisRun(nemesis.NemesisSettings(zk_nodes=3), tmp_path)
    with nemesis.Net() as net:
        run.net = net
        for name in run.zk_nodes + ["b0", "b1"]:
            net.add(name)
        run._cut_zk("b0")
        assert net.cuts() == {pair for z in ZK for pair in (("b0", z), (z, "b0"))}
        assert run._server_nodes("zk") == ZK and run._server_nodes("b1") == ["b1"]
        run._heal_zk("b0")
        assert not net.cuts()
