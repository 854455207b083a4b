"""A short network-fault run in the suite (``testkit.nemesis``): every process in a network namespace
of its own on one bridge, and real cuts (blackhole routes on both sides).

Four faults on a 3-broker cluster with a thin consumer, a confluent-kafka eager and a cooperative
member and the acknowledging producer: the group's coordinator cut from ZooKeeper past its session
(its members still reach it), a member cut from its coordinator (it still reaches the other brokers),
an isolated broker, and -- with libfaketime -- a member restarted with its clock a minute ahead.  The
Jepsen-named checks (``testkit.jepsen_checks``) find no lost write and no inconsistent offset, and the
run's invariants hold: no two owners of a partition at once, committed offsets never backwards, every
record consumed.  Skipped, with the reason, where network namespaces cannot be made (not root, no ``ip``).
"""

from __future__ import annotations

import pytest

from testkit import nemesis
from testkit.nemesis import netns

REASON = nemesis.unavailable_reason()


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.skipif(REASON is not None, reason=f"no network namespaces here: {REASON}")
def test_network_faults_lose_nothing_and_keep_one_owner(tmp_path):
    schedule = [(0.0, "coordinator_zk_cut"), (12.0, "member_coordinator_cut"), (24.0, "isolate_broker")]
    if nemesis.faketime_lib() is not None:
        schedule.append((34.0, "clock_member_offset"))
    settings = nemesis.NemesisSettings(
        kinds=("thin", "eager", "cooperative"), members=3, partitions=6, duration_s=70, warmup_s=10,
        cooldown_s=10, faults=len(schedule), schedule=schedule, seed=11, cut_s=(6.0, 7.0), clock_s=(8.0, 9.0),
        combine=0.0, diagnose_after_s=0)
    report = nemesis.NemesisRun(settings, tmp_path).run()
    print("\n" + report.summary())
    assert [f["kind"] for f in report.faults] == [k for _, k in schedule], report.faults
    chaos, jepsen = report.chaos, report.jepsen
    assert chaos.acked > 1000 and not chaos.lost
    assert not jepsen["lost_write"], jepsen["lost_write"][:10]
    assert not jepsen["inconsistent_offsets"], jepsen["inconsistent_offsets"][:10]
    assert not chaos.overlaps, chaos.overlaps[:10]
    assert not report.violations, "\n".join(report.violations[:40])
    # nothing of the run's network is left
    assert not [line for line in netns._ip("netns", "list").stdout.splitlines()
                if line.startswith(report.prefix + "-")]
    assert report.prefix not in netns._ip("-o", "link", "show").stdout


def _connects(net: nemesis.Net, src: str, dst: str, port: int) -> bool:
    import socket

    def attempt() -> bool:
        try:
            with socket.create_connection((net[dst].addr, port), timeout=1.0):
                return True
        except OSError:
            return False
    return net.call(src, attempt)


@pytest.mark.skipif(REASON is not None, reason=f"no network namespaces here: {REASON}")
def test_a_cut_is_a_blackhole_on_both_sides_and_cleanup_leaves_nothing():
    import socket

    with nemesis.Net() as net:
        for name in ("a", "b", "c"):
            net.add(name)

        def listen() -> socket.socket:
            s = socket.socket()
            s.bind((net["b"].addr, 7000))
            s.listen(8)
            return s
        server = net.call("b", listen)
        try:
            assert _connects(net, "a", "b", 7000) and _connects(net, "c", "b", 7000)
            net.cut("a", "b")
            assert not _connects(net, "a", "b", 7000) and _connects(net, "c", "b", 7000)
            assert ("a", "b") in net.cuts() and ("b", "a") in net.cuts()
            net.heal("a", "b")
            assert _connects(net, "a", "b", 7000)
            net.isolate("b")
            assert not _connects(net, "a", "b", 7000) and not _connects(net, "c", "b", 7000)
            net.heal_all()
            assert _connects(net, "c", "b", 7000) and not net.cuts()
        finally:
            server.close()
        prefix = net.prefix
    assert not [line for line in netns._ip("netns", "list").stdout.splitlines() if line.startswith(prefix + "-")]
    assert prefix not in netns._ip("-o", "link", "show").stdout


@pytest.mark.skipif(REASON is not None, reason=f"no network namespaces here: {REASON}")
def test_cleanup_removes_what_a_dead_run_left():
    net = nemesis.Net()
    net.add("x")
    net._closed = True          # as if its process had died: nothing removed it
    assert nemesis.cleanup(net.prefix)
    assert net.prefix not in netns._ip("-o", "link", "show").stdout
    assert not [line for line in netns._ip("netns", "list").stdout.splitlines() if line.startswith(net.prefix)]
