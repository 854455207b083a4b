"""Coordinator shards on real broker processes: spread, routing, failure isolation, handover, migration.

The cluster runs the default 50 shards (``coordinator.shards``).  Where each group is
coordinated is read from ZooKeeper (``/coordinators/shards/<n>/leader``) and compared
with what Kafka clients (confluent-kafka's FindCoordinator) and our members
(ClusterMetadata v1) are told.
"""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest
from helpers import wait_until
from support import (
    BROKER_OVERRIDES,
    BROKER_ZK_SESSION_MS,
    broker_log_has,
    consumed_up_to,
    leaders,
    log_end,
    log_end_of,
    topic_partitions,
    wait_balanced,
    wait_caught_up,
)

from spark_coord.consumer.cli import describe_groups
from spark_coord.coordinator.core.shards import place, shard_of
from testkit.zk_history import read_shard_count, read_shard_holders

SHARDS = 50
SHARDED = dict(BROKER_OVERRIDES, **{"coordinator.shards": SHARDS})
#: Members' session: outlasts the brokers' ZooKeeper session plus an election (they ride a failover through).
RIDE_THROUGH_SESSION_MS = BROKER_ZK_SESSION_MS + 4000
GROUPS = [f"orders-{i}" for i in range(60)]
#: Seconds of the quiet baseline of fetch gaps before the fault.
QUIET_S = 4.0

pytestmark = pytest.mark.parametrize("cluster", [SHARDED], indirect=True)


def _settled(czk, live: set[int]) -> dict[int, int] | None:
    """Every shard held by a live broker and the loads within one of each other; else None."""
    holders = read_shard_holders(czk)
    if len(holders) != SHARDS or any(h not in live for h in holders.values()):
        return None
    loads = Counter(holders.values())
    if set(loads) != live or max(loads.values()) - min(loads.values()) > 1:
        return None
    return holders


def wait_settled(czk, live: set[int], timeout: float = 60.0) -> dict[int, int]:
    return wait_until(lambda: _settled(czk, live), timeout=timeout, interval=0.2,
                      message=lambda: f"every shard held, balanced over {sorted(live)}: "
                                      f"{Counter(read_shard_holders(czk).values())}")


def coordinator_of(holders: dict[int, int], group: str) -> int:
    return holders[shard_of(group, SHARDS)]


#: Errors a group's coordinator answers while it moves or loads; a Kafka client asks again.
_MOVING = ("COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR")


def kafka_coordinator(admin, group: str) -> int | None:
    """The coordinator confluent-kafka's DescribeConsumerGroups names for ``group``; None while the
    shard moves or loads (librdkafka hands those answers to the caller, Kafka's Java admin retries)."""
    from confluent_kafka import KafkaException

    try:
        return admin.describe_consumer_groups([group], request_timeout=10)[group].result(10).coordinator.id
    except KafkaException as e:
        if e.args[0].name() in _MOVING:
            return None
        raise


def our_coordinator(bootstrap: str, group: str) -> int:
    """The coordinator our members are sent to (ClusterMetadata v1 naming the group)."""
    from spark_coord.client.metadata import parse_bootstrap
    from spark_coord.consumer.discovery import Discovery

    view = Discovery(parse_bootstrap(bootstrap), "shard-test", 5.0, group_id=group).one_round()
    assert view is not None
    return view.coordinator_id


def test_groups_spread_over_the_brokers_and_every_client_is_routed_as_zookeeper_says(cluster, czk):
    from confluent_kafka.admin import AdminClient

    holders = wait_settled(czk, {0, 1, 2})
    assert read_shard_count(czk) == SHARDS
    per_broker = Counter(coordinator_of(holders, g) for g in GROUPS)
    shares = {b: n / len(GROUPS) for b, n in sorted(per_broker.items())}
    print(f"\n{len(GROUPS)} groups over {SHARDS} shards: shards per broker {dict(Counter(holders.values()))}, "
          f"groups per broker {dict(sorted(per_broker.items()))}")
    # Which broker takes which shard is the election's race, so a broker's share of the groups is not
    # fixed; what is: the shards are balanced (wait_settled), the groups spread over the shards by
    # their hash, and so every broker coordinates some of them.
    per_shard = Counter(shard_of(g, SHARDS) for g in GROUPS)
    assert len(per_shard) >= 40 and max(per_shard.values()) <= 4, per_shard
    assert set(shares) == {0, 1, 2}

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def named(g: str) -> int:  # broker 0 is falsy: wait on a one-element list
        return wait_until(lambda: [c for c in [kafka_coordinator(admin, g)] if c is not None], timeout=30,
                          message=f"DescribeConsumerGroups to name {g}'s coordinator")[0]
    kafka_says = {g: named(g) for g in GROUPS}
    assert kafka_says == {g: coordinator_of(holders, g) for g in GROUPS}
    ours = {g: our_coordinator(cluster.bootstrap, g) for g in GROUPS}
    assert ours == {g: coordinator_of(holders, g) for g in GROUPS}


def _spawn(members, topic, group, n=2):
    return [members(f"{group}-m{i}", group, topics=[topic], session_timeout_ms=RIDE_THROUGH_SESSION_MS)
            for i in range(n)]


def _moved_events(ms, since: float) -> dict[str, list]:
    """What each member saw since ``since``: StopFetcher, lost connections, new assignments."""
    return {m.name: [e for e in m.events() if e["ev"] in ("stop", "lost", "assign", "resume") and e["ts"] >= since]
            for m in ms}


def _registrations(m, since: float = 0.0) -> list[str]:
    """The member's "registered" log lines stamped at ``since`` or later (its log's asctime, local time)."""
    out = []
    for line in m.log_path.read_text(errors="replace").splitlines():
        if f"registered {m.consumer_id} in group" in line:
            stamp = time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")) + int(line[20:23]) / 1000
            if stamp >= since - 1.0:  # a second's slack: the stamp is the member's, the kill time ours
                out.append(line)
    return out


def _fetch_gap(ms, start: float, end: float) -> float:
    """The longest time within [start, end] in which no member of the group got records."""
    times = sorted(e["ts"] for m in ms for e in m.events("recs") if start <= e["ts"] <= end)
    edges = [start, *times, end]
    return max(b - a for a, b in zip(edges, edges[1:], strict=False))


def _recs_until(ms, ts: float) -> bool:
    return any(e["ts"] >= ts for m in ms for e in m.events("recs"))


def test_sigkill_of_one_coordinator_fails_over_only_its_shards(cluster, czk, members, create, producer_factory):
    holders = wait_settled(czk, {0, 1, 2})
    victim = 2
    on_victim = [g for g in GROUPS if coordinator_of(holders, g) == victim][:2]
    elsewhere = [g for g in GROUPS if coordinator_of(holders, g) != victim][:3]
    topic = "iso"
    create(topic, 6)
    parts = topic_partitions(topic, 6)
    live = {p for p, b in leaders(cluster.bootstrap, topic).items() if b != victim}  # data is not the fault here
    producer = producer_factory(topic, 6)
    producer.allowed = set(live)
    groups = {g: _spawn(members, topic, g) for g in on_victim + elsewhere}
    gens = {g: wait_balanced(ms, parts, timeout=60)[0] for g, ms in groups.items()}
    # spark-coord groups: every group listed, with the coordinator ZooKeeper says holds it
    listed = {g["group_id"]: (g["coordinator_id"], g["coordinator"])
              for g in describe_groups(cluster.bootstrap, with_lag=False)}
    assert listed == {g: (coordinator_of(holders, g), "%s:%d" % cluster.brokers[coordinator_of(holders, g)])
                      for g in groups}
    # the quiet baseline: every group reading, QUIET_S seconds of it
    ends = log_end_of(cluster.bootstrap, topic, live)
    for g, ms in groups.items():
        wait_until(lambda ms=ms: not consumed_up_to(ms, ends), timeout=60, message=f"{g} reading the records")
    quiet_from = time.time()
    wait_until(lambda: all(_recs_until(ms, quiet_from + QUIET_S) for ms in groups.values()), timeout=60,
               message="the quiet baseline")
    wall_kill = time.time()
    cluster.kill_broker(victim, signal.SIGKILL)
    survivors = wait_settled(czk, {0, 1}, timeout=BROKER_ZK_SESSION_MS / 1000 + 30)
    for g in on_victim:
        successor = coordinator_of(survivors, g)
        wait_until(lambda g=g, successor=successor: all(
                       broker_log_has(cluster, successor, f"group {g}: consumer {m.consumer_id} is back")
                       for m in groups[g]), timeout=60,
                   message=f"the members of {g} taken back by coordinator {successor}")
        assert wait_balanced(groups[g], parts)[0] == gens[g]
    settled = time.time()
    wait_until(lambda: all(_recs_until(ms, settled + 1.0) for ms in groups.values()), timeout=60,
               message="every group reading after the failover")
    quiet = {g: _fetch_gap(ms, quiet_from, wall_kill) for g, ms in groups.items()}
    after = {g: _fetch_gap(ms, wall_kill, settled + 1.0) for g, ms in groups.items()}
    seen = {g: _moved_events(ms, wall_kill) for g, ms in groups.items()}
    print(f"\nSIGKILL of broker {victim}: its groups {on_victim} -> "
          f"{ {g: coordinator_of(survivors, g) for g in on_victim} }, failover settled after "
          f"{settled - wall_kill:.2f} s; longest fetch gap per group, quiet {QUIET_S:.0f} s before -> from the kill "
          f"until settled: " + ", ".join(f"{g} {quiet[g]:.2f} -> {after[g]:.2f} s" for g in groups)
          + f"; what the members saw: {seen}")
    for g in on_victim:  # taken back: nothing stopped, nothing reassigned
        for name, evs in seen[g].items():
            assert [e["ev"] for e in evs if e["ev"] != "lost"] in ([], ["resume"]), (name, evs)
    for g in elsewhere:  # nothing at all
        assert all(evs == [] for evs in seen[g].values()), (g, seen[g])
        again = {m.name: _registrations(m, wall_kill) for m in groups[g]}
        assert all(lines == [] for lines in again.values()), (g, again)
        assert coordinator_of(survivors, g) == coordinator_of(holders, g)
        # no fetch gap beyond the quiet baseline (a coordinator's failover would show seconds: its
        # members' leases, the ZooKeeper session, an election)
        assert after[g] <= max(2 * quiet[g], quiet[g] + 1.0), (g, quiet[g], after[g])


def test_a_coordinator_joining_takes_only_its_share_and_members_are_taken_back(cluster, czk, members, create,
                                                                              producer_factory):
    before = wait_settled(czk, {0, 1, 2})
    topic = "join"
    create(topic, 4)
    parts = topic_partitions(topic, 4)
    producer = producer_factory(topic, 4)
    planned = place(SHARDS, [0, 1, 2, 3], before)  # where the shards will be once broker 3 joined
    leaving = [g for g in GROUPS if planned[shard_of(g, SHARDS)] == 3][:3]
    staying = [g for g in GROUPS if planned[shard_of(g, SHARDS)] != 3][:2]
    groups = {g: _spawn(members, topic, g) for g in leaving + staying}
    gens = {g: wait_balanced(ms, parts, timeout=60)[0] for g, ms in groups.items()}
    wall_join = time.time()
    newcomer = cluster.add_broker()
    after = wait_settled(czk, {0, 1, 2, newcomer})
    moved = {s for s in range(SHARDS) if after[s] != before[s]}
    moved_groups = [g for g in groups if shard_of(g, SHARDS) in moved]
    print(f"\nbroker {newcomer} joined: {len(moved)} of {SHARDS} shards moved, all to it; groups handed over: "
          f"{moved_groups}")
    assert all(after[s] == newcomer for s in moved)
    assert len(moved) == SHARDS // 4  # 17/17/16 -> 13/13/12/12: the newcomer's share, nothing else
    assert after == planned and moved_groups == leaving
    for g, ms in groups.items():
        if g in moved_groups:
            wait_until(lambda g=g, ms=ms: all(
                           broker_log_has(cluster, newcomer, f"group {g}: consumer {m.consumer_id} is back")
                           for m in ms), timeout=60, message=f"the members of {g} taken back by {newcomer}")
        assert wait_balanced(ms, parts)[0] == gens[g]
        for m in ms:
            stops = [e for e in m.events() if e["ev"] in ("stop", "assign") and e["ts"] >= wall_join]
            assert not stops, (m.name, stops)
    # no record lost: every group reads and commits up to the log end
    producer.stop()
    ends = log_end(cluster.bootstrap, topic)
    for g, ms in groups.items():
        wait_caught_up(czk, g, ends, timeout=60)
        assert not consumed_up_to(ms, ends), g


def test_kafka_members_ride_a_planned_handover(cluster, czk, members, create, producer_factory, tmp_path):
    """A group of a thin member, an eager and a cooperative confluent-kafka member (Kafka's classic
    protocol) and a KIP-848 one (``group.protocol=consumer``), whose shard a joining broker takes:
    the old coordinator commits and hands the group over, and every member, of every protocol,
    goes on reading from the new one.  What each client saw is asserted."""
    from confluent_kafka.admin import AdminClient
    from peers.group_peers import KafkaPeer

    from testkit import invariants
    from testkit.kafka_member import KafkaMemberProcess

    before = wait_settled(czk, {0, 1, 2})
    topic = "handover-kafka"
    create(topic, 8)
    parts = topic_partitions(topic, 8)
    producer = producer_factory(topic, 8)
    planned = place(SHARDS, [0, 1, 2, 3], before)
    group = next(g for g in (f"kafka-handover-{i}" for i in range(1000)) if planned[shard_of(g, SHARDS)] == 3)
    thin = members("thin", group, topics=[topic], session_timeout_ms=RIDE_THROUGH_SESSION_MS)
    workdir = tmp_path / "kafka-members"
    workdir.mkdir()
    kafka = [KafkaMemberProcess(kind, workdir, cluster.bootstrap, group, topics=[topic], strategy=kind,
                                session_timeout_ms=RIDE_THROUGH_SESSION_MS) for kind in ("eager", "cooperative")]
    kip848 = KafkaPeer("confluent", cluster.bootstrap, group, topic, "kip848", workdir, strategy="consumer")
    everyone = [thin, *kafka]

    def kip848_owned() -> set[tuple[str, int]]:
        return {(topic, p) for p in kip848.owned()}
    try:
        def shared() -> bool:
            owned = [m.owned() for m in everyone] + [kip848_owned()]
            return all(owned) and set().union(*owned) == parts and sum(map(len, owned)) == len(parts)
        wait_until(shared, timeout=90, interval=0.2,
                   message=lambda: f"the four members to share the partitions: "
                                   f"{[m.owned() for m in everyone] + [kip848_owned()]}")
        held_before = {m.name: m.owned() for m in everyone} | {"kip848": kip848_owned()}
        wall_join = time.time()
        newcomer = cluster.add_broker()
        after = wait_settled(czk, {0, 1, 2, newcomer})
        assert after[shard_of(group, SHARDS)] == newcomer
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        wait_until(lambda: kafka_coordinator(admin, group) == newcomer, timeout=30,
                   message="FindCoordinator to name the new holder")
        wait_until(lambda: all(any(e["ts"] > wall_join + 1 for e in m.events("recs")) for m in everyone)
                   and any(e["event"] == "records" and e["ts"] > wall_join + 1 for e in kip848.events()),
            timeout=90, interval=0.5, message="every member reading again after the handover")
        producer.stop()
        ends = log_end(cluster.bootstrap, topic)

        def never_read() -> dict[int, int]:  # partition -> records no member read
            got = set(invariants.consumed({m.name: m.events() for m in everyone})) | {
                (topic, p, o) for p, o in kip848.records()}
            return {p: n for (t, p), end in ends.items() if (n := sum((t, p, o) not in got for o in range(end)))}
        wait_until(lambda: not never_read(), timeout=90, interval=0.5,
                   message=lambda: f"every record read by some member; never read, per partition: {never_read()}")
        wait_caught_up(czk, group, ends, timeout=60)
        journals = {m.name: m.events() for m in everyone}
        spans = invariants.ownership_intervals(journals)
        assert invariants.one_owner_at_a_time(spans) == []
        assert invariants.delivered_outside_ownership(journals, spans) == []
        seen = {m.name: [(e["ev"], sorted(tuple(p[:2]) for p in e.get("parts", [])))
                         for e in journals[m.name] if e["ev"] in ("assign", "revoke", "lost", "stop")
                         and e["ts"] >= wall_join] for m in everyone}
        seen["kip848"] = [(what, sorted(ps)) for ts, what, ps in kip848.callbacks() if ts >= wall_join]
        failed = {m.name: sum(1 for e in journals[m.name] if e["ev"] == "commit_failed" and e["ts"] >= wall_join)
                  for m in kafka}
        print(f"\ngroup {group} handed over to broker {newcomer}; held before {held_before}; callbacks since: "
              f"{seen}; commits refused since (retried): {failed}")
        # nobody was stopped, revoked, lost or given anything: the handover is invisible to the clients
        assert seen == {name: [] for name in held_before}, seen
        assert {m.name: m.owned() for m in everyone} | {"kip848": kip848_owned()} == held_before
        assert wait_until(lambda: broker_log_has(cluster, newcomer, f"group {group}: consumer {thin.consumer_id} "
                                                                    f"is back"), timeout=30)
    finally:
        kip848.stop()
        for m in kafka:
            if m.alive():
                m.stop(30)
