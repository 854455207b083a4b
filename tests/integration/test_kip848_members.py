"""Kafka 4's consumer group protocol (KIP-848) through faults, with real confluent-kafka
consumers (``group.protocol=consumer``) on three broker processes.

* SIGKILL of the coordinator's broker: the members find the new coordinator, which
  takes them back in the epochs ZooKeeper holds for them -- no partition moves, no
  revocation callback fires -- and they read on; the group's offsets reach the log end.
* A regex subscription follows topics created later.
* A static member (``group.instance.id``, KIP-345) closed and started again within its
  session timeout gets the same partitions back in the same epoch, and the other
  member's callbacks never fire: no rebalance -- with Kafka 4's protocol and with the
  classic one (cooperative and eager).
"""

from __future__ import annotations

import signal
import time

import pytest
from helpers import wait_until
from peers.group_peers import KafkaPeer
from support import leaders, log_end, topic_partitions, wait_caught_up

from spark_coord.coordinator.core.assignors import thread_owner
from spark_coord.coordinator.core.group import registry_key
from testkit.zk_history import read_coordinator, read_partitions

PARTITIONS = 12


def _owners(czk, group: str, peers: dict[str, KafkaPeer]) -> dict[str, set]:
    """ZooKeeper's owners by peer name (a member id no peer reported stays as it is; a static
    member is known by its instance id)."""
    names = {registry_key(p.instance or p.member_id()): n for n, p in peers.items() if p.instance or p.member_id()}
    out: dict[str, set] = {}
    for tp, thread in read_partitions(czk, group, "owners").items():
        member = thread_owner(str(thread))
        out.setdefault(names.get(member, member), set()).add(tp)
    return out


def _settled(czk, group: str, peers: dict[str, KafkaPeer], parts: set, names: set[str]):
    """Owners by name once exactly ``names`` share ``parts`` evenly and agree with their callbacks."""
    owners = _owners(czk, group, peers)
    if set(owners) != names or set().union(*owners.values()) != parts \
            or {len(tps) for tps in owners.values()} != {len(parts) // len(names)}:
        return None
    if any({p for _, p in owners[n]} != peers[n].owned() for n in names):
        return None
    return owners


def test_consumer_protocol_members_ride_through_a_coordinator_sigkill(cluster, czk, producer_factory, create,
                                                                      tmp_path):
    from spark_coord.coordinator.storage.zk_store import parse_state
    from spark_coord.zk import paths

    group, topic = "g-kip848-failover", "k848fail"
    create(topic, PARTITIONS)
    parts = topic_partitions(topic, PARTITIONS)
    producer = producer_factory(topic, PARTITIONS)
    peers = {n: KafkaPeer("confluent", cluster.bootstrap, group, topic, n, tmp_path, "consumer") for n in ("m1", "m2")}
    try:
        before = wait_until(lambda: _settled(czk, group, peers, parts, set(peers)), timeout=60, interval=0.2,
                            message=lambda: f"both members owning partitions: {_owners(czk, group, peers)}")
        epoch = parse_state(czk.get(paths.group_state(group))[0], group)
        victim = wait_until(lambda: (c := read_coordinator(czk)) is not None and (c,), message="a coordinator")[0]
        led = {p for p, b in leaders(cluster.bootstrap, topic).items() if b == victim}
        producer.allowed -= led
        t_kill = time.time()
        cluster.kill_broker(victim)
        wait_until(lambda: (c := read_coordinator(czk)) is not None and c != victim, timeout=60,
                   message="another broker to become coordinator")
        reads = {n: p.read() for n, p in peers.items()}
        wait_until(lambda: all(p.read() > reads[n] for n, p in peers.items()), timeout=60,
                   message="both members to read on after the failover")
        cluster.start_broker(victim)
        producer.allowed |= led
        producer.stop()
        wait_caught_up(czk, group, log_end(cluster.bootstrap, topic), timeout=60)
        assert parse_state(czk.get(paths.group_state(group))[0], group) == epoch, "the failover rebalanced the group"
        assert _owners(czk, group, peers) == before
        for n, p in peers.items():
            assert p.revoked_after(t_kill) == [], (n, p.callbacks())
    finally:
        for p in peers.values():
            p.stop()


@pytest.mark.parametrize("protocol", ["consumer", "cooperative-sticky", None],
                         ids=["kip848", "classic-cooperative", "classic-eager"])
def test_a_static_member_restarts_without_a_rebalance(protocol, cluster, czk, producer_factory, create, tmp_path):
    from spark_coord.coordinator.storage.zk_store import parse_state
    from spark_coord.zk import paths

    group = topic = f"static-{protocol or 'eager'}"
    create(topic, PARTITIONS)
    parts = topic_partitions(topic, PARTITIONS)
    producer = producer_factory(topic, PARTITIONS)
    peers = {"s": KafkaPeer("confluent", cluster.bootstrap, group, topic, "s", tmp_path, protocol,
                            instance="static-1"),
             "d": KafkaPeer("confluent", cluster.bootstrap, group, topic, "d", tmp_path, protocol)}
    try:
        before = wait_until(lambda: _settled(czk, group, peers, parts, {"s", "d"}), timeout=60, interval=0.2,
                            message=lambda: f"both members owning partitions: {_owners(czk, group, peers)}")
        epoch = parse_state(czk.get(paths.group_state(group))[0], group)
        t_stop = time.time()
        peers["s"].stop()  # closes: a static member's leave (epoch -2; classic: none) keeps its partitions waiting
        peers["s2"] = KafkaPeer("confluent", cluster.bootstrap, group, topic, "s2", tmp_path, protocol,
                                instance="static-1")
        del peers["s"]
        got = wait_until(lambda: _settled(czk, group, peers, parts, {"s2", "d"}), timeout=60, interval=0.2,
                         message=lambda: f"the restarted static member owning partitions: {_owners(czk, group, peers)}")
        assert got["s2"] == before["s"] and got["d"] == before["d"]
        assert parse_state(czk.get(paths.group_state(group))[0], group) == epoch, "the restart rebalanced the group"
        assert [what for ts, what, _ in peers["d"].callbacks() if ts > t_stop] == [], peers["d"].callbacks()
        producer.stop()
        wait_caught_up(czk, group, log_end(cluster.bootstrap, topic), timeout=60)
    finally:
        for p in peers.values():
            p.stop(signal.SIGTERM)


def test_a_regex_subscription_follows_topics_created_later(cluster, create):
    """librdkafka's regex subscription (``^ev-.*``) under KIP-848: the coordinator matches it against
    whole topic names and re-evaluates it when a topic appears; an unmatched topic is never assigned."""
    from confluent_kafka import Consumer

    create("rx-ev-a", 2)
    create("rx-other", 2)
    seen: list[set] = []
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-kip848-regex", "group.protocol": "consumer",
                  "topic.metadata.refresh.interval.ms": 1000, "log_level": 3})
    c.subscribe(["^rx-ev-.*"], on_assign=lambda _c, ps: seen.append({(p.topic, p.partition) for p in ps}))

    def assigned() -> set:
        c.poll(0.2)
        return {(tp.topic, tp.partition) for tp in c.assignment()}

    try:
        wait_until(lambda: assigned() == {("rx-ev-a", 0), ("rx-ev-a", 1)}, timeout=30,
                   message=lambda: f"the matching topic's partitions; callbacks {seen}")
        create("rx-ev-b", 1)
        wait_until(lambda: ("rx-ev-b", 0) in assigned(), timeout=30,
                   message=lambda: f"the new matching topic; callbacks {seen}")
        assert not any(t == "rx-other" for got in seen for t, _ in got)
        assert seen[-1] == {("rx-ev-b", 0)}  # incremental: only what is new
    finally:
        c.close()
