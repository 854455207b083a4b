"""The coordinator's broker is SIGKILLed and restarted at once (as a supervisor would).

Its previous run's ZooKeeper session lives on until it expires (20 s here), and with it
the election node holding the broker's id.  The restarted broker replaces that node
when it stands for election, so the group has a coordinator again long before the old
session expires, under a new epoch, and consumes again.  (bench/bench_failover.py
measures the times.)
"""

from __future__ import annotations

import time

import pytest
from helpers import wait_until
from support import BackgroundProducer, create_topic, log_end, topic_partitions, wait_balanced, wait_caught_up

from spark_coord.zk import paths

OLD_SESSION_MS = 20000


@pytest.mark.parametrize("cluster", [{"zookeeper.session.timeout.ms": OLD_SESSION_MS}], indirect=True)
def test_restarted_coordinator_broker_does_not_wait_for_its_old_session(cluster, czk, members):
    create_topic(cluster.bootstrap, "rs", 3)
    parts = topic_partitions("rs", 3)
    ms = [members(f"r{i}", "g-rs", topics=["rs"]) for i in range(2)]
    gen, _ = wait_balanced(ms, parts)
    data, stat = czk.get(paths.shard_leader(0))
    victim, epoch = int(data), stat.czxid

    t_kill = time.monotonic()
    cluster.kill_broker(victim)
    cluster.start_broker(victim)

    def new_election():
        try:
            data, stat = czk.get(paths.shard_leader(0))
        except Exception:  # noqa: BLE001 - between two elections
            return None
        return (int(data), stat.czxid) if stat.czxid != epoch else None

    winner, new_epoch = wait_until(new_election, OLD_SESSION_MS / 1000, 0.05, message="a new election")
    took = time.monotonic() - t_kill
    print(f"\ncoordinator broker {victim} SIGKILLed and restarted: broker {winner} coordinates after {took:.2f} s "
          f"(old session {OLD_SESSION_MS} ms)")
    assert took < OLD_SESSION_MS / 1000 / 2, "the election waited for the dead run's session"
    assert winner == victim and new_epoch > epoch
    assert czk.exists(paths.broker(victim)) is not None
    # the members are taken back into their generation by the new term (nobody restarted)
    wait_until(lambda: all(any(e["epoch"] == new_epoch for e in m.events() if e["ev"] in ("assign", "resume"))
                           or m.last_assignment() is not None for m in ms), 30,
               message="the members fetching again")
    wait_balanced(ms, parts, above=gen - 1, timeout=30)
    producer = BackgroundProducer(cluster.bootstrap, "rs", 3)
    producer.start()
    wait_until(lambda: producer.sent >= 60, 20, message="records produced after the restart")
    producer.stop()
    wait_caught_up(czk, "g-rs", log_end(cluster.bootstrap, "rs"))
