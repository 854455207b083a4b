"""Coordinator failover on real processes (the failover and fencing of
DESIGN.md "One holder at a time (invariant 1)", the take-back of DESIGN.md "Taken back after a failover").

- SIGKILL of the coordinator's broker, members whose session outlasts the
  failover: consumption of the live partitions never stops; another broker is
  elected, every member registers again with its claim and is taken back into its
  generation (no rebalance, no re-read), and their offsets keep flowing.
- SIGSTOP of the coordinator's broker past its ZooKeeper session, members whose
  session is shorter than the failover: they stop when their lease runs out and
  resume in their generation once the new coordinator takes them back; after
  SIGCONT the deposed coordinator neither writes to ZooKeeper nor drives members,
  and it stands by.

Partitions have one replica, so those led by the faulted broker are unavailable
while it is down: the producer writes only to partitions of live brokers during
the fault, and the broker is brought back (restart / SIGCONT) before the final
invariant check, which then covers every partition.
"""

from __future__ import annotations

import os
import signal
import time

from helpers import wait_until
from support import (
    BROKER_ZK_SESSION_MS,
    MEMBER_SESSION_MS,
    balanced,
    broker_log_has,
    consumed_up_to,
    leaders,
    log_end,
    log_end_of,
    topic_partitions,
    wait_balanced,
    wait_caught_up,
)

from spark_coord.consumer.channel import CoordinatorChannel
from spark_coord.errors import ErrorCode
from spark_coord.wire import coordinator as api
from testkit import invariants
from testkit.zk_history import ZkHistory, read_coordinator

N_PARTITIONS = 12
#: failure seen (ZK session) + members notice (session) + restore wait (session) + rebalance + margin
OUTAGE_BOUND = BROKER_ZK_SESSION_MS / 1000 + 2 * MEMBER_SESSION_MS / 1000 + 10.0


def _setup(cluster, czk, members, producer_factory, create, group, topic, session_ms=MEMBER_SESSION_MS):
    create(topic, N_PARTITIONS)
    parts = topic_partitions(topic, N_PARTITIONS)
    history = ZkHistory(czk, group)
    history.start()
    producer = producer_factory(topic, N_PARTITIONS)
    ms = [members(f"m{i}", group, topics=[topic], session_timeout_ms=session_ms) for i in range(3)]
    gen, _ = wait_balanced(ms, parts)
    coordinator = wait_until(lambda: (c := read_coordinator(czk)) is not None and (c,), message="a coordinator")[0]
    led = {p for p, b in leaders(cluster.bootstrap, topic).items() if b == coordinator}
    return parts, history, producer, ms, gen, coordinator, led


def _wait_successor(czk, victim: int) -> int:
    def other():
        c = read_coordinator(czk)
        return (c,) if c is not None and c != victim else None

    return wait_until(other, timeout=OUTAGE_BOUND, message="another broker to become coordinator")[0]


def _wait_flowing(cluster, ms, topic, live_partitions, timeout):
    """Wait until the members consumed every record produced so far to the live partitions."""
    from spark_coord.errors import KafkaError

    def ends_now():
        try:  # a broker back from a pause is listed as leader again a moment after it re-registers
            return log_end_of(cluster.bootstrap, topic, live_partitions)
        except KafkaError:
            return None

    ends = wait_until(ends_now, timeout=timeout, interval=0.2, message="log end offsets of the live partitions")
    wait_until(lambda: not consumed_up_to(ms, ends), timeout=timeout, interval=0.1,
               message=lambda: f"records produced after the fault to reach the members: {consumed_up_to(ms, ends)}")


def _final_check(cluster, czk, group, topic, producer, history, ms):
    producer.stop()
    ends = log_end(cluster.bootstrap, topic)
    wait_caught_up(czk, group, ends, timeout=40)
    samples = history.stop()
    violations = invariants.check_all({m.name: m.events() for m in ms}, samples, ends)
    assert not violations, "\n".join(violations)
    return samples


#: Members' session in the SIGKILL test: outlasts the brokers' ZooKeeper session plus an election.
RIDE_THROUGH_SESSION_MS = BROKER_ZK_SESSION_MS + 4000


def test_sigkill_coordinator_broker_consumption_goes_on(cluster, czk, members, producer_factory, create):
    group, topic = "g-failover", "fo"
    parts, history, producer, ms, gen1, victim, led = _setup(cluster, czk, members, producer_factory, create,
                                                             group, topic, session_ms=RIDE_THROUGH_SESSION_MS)
    live = set(range(N_PARTITIONS)) - led
    producer.allowed = set(live)
    t0 = time.time()
    wait_until(lambda: producer.produced_after(t0) == live, timeout=10, message="producing to live partitions only")
    t_kill = time.monotonic()
    cluster.kill_broker(victim, signal.SIGKILL)
    wall_kill = time.time()

    # records produced after the kill reach the members while nobody coordinates yet
    _wait_flowing(cluster, ms, topic, live, timeout=BROKER_ZK_SESSION_MS / 1000)
    flowing = time.monotonic() - t_kill
    successor = _wait_successor(czk, victim)
    t_elected = time.monotonic() - t_kill
    # every member re-registered with its claim and was taken back into generation gen1
    wait_until(lambda: all(broker_log_has(cluster, successor, f"consumer {m.consumer_id} is back") for m in ms),
               timeout=OUTAGE_BOUND, message="every member taken back by the new coordinator")
    t_back = time.monotonic() - t_kill
    assert balanced(ms, parts) and balanced(ms, parts)[0] == gen1
    _wait_flowing(cluster, ms, topic, live, timeout=10)
    print(f"\nSIGKILL of coordinator broker {victim}: records produced after the kill consumed after "
          f"{flowing:.2f} s; broker {successor} elected after {t_elected:.2f} s; every member back in generation "
          f"{gen1} after {t_back:.2f} s")
    for m in ms:
        stopped = [e for e in m.events() if e["ev"] in ("stop", "lost", "assign") and e["ts"] >= wall_kill]
        assert not stopped, f"{m.name} stopped or was re-assigned during the failover: {stopped}"

    cluster.start_broker(victim)  # its partitions come back (one replica); it stands by as coordinator
    producer.allowed = set(range(N_PARTITIONS))
    samples = _final_check(cluster, czk, group, topic, producer, history, ms)
    assert read_coordinator(czk) == successor
    assert {s.generation for s in samples if s.ts >= wall_kill} == {gen1}
    duplicates = [r for r, n in invariants.consumed({m.name: m.events() for m in ms}).items() if n > 1]
    assert not duplicates, f"{len(duplicates)} records read twice across the failover: {sorted(duplicates)[:5]}"


def test_sigstop_coordinator_is_fenced_and_stands_by(cluster, czk, members, producer_factory, create):
    group, topic = "g-fence", "fence"
    parts, history, producer, ms, gen1, victim, led = _setup(cluster, czk, members, producer_factory, create,
                                                             group, topic)
    producer.allowed = set(range(N_PARTITIONS)) - led
    pid = cluster.procs[victim].pid
    t_stop = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    try:
        successor = _wait_successor(czk, victim)
        # the members' 2 s leases ran out before the 3 s ZooKeeper session: they stopped, and resume
        # in their generation once the successor takes them back (or, if they came back after it
        # gave up waiting for them, are started again in a new one)
        epoch1 = max(e["epoch"] for m in ms for e in m.events("assign"))

        def all_under_new_epoch():
            current = [m.last_assignment() for m in ms]
            return all(a is not None and a["epoch"] > epoch1 for a in current)

        wait_until(all_under_new_epoch, timeout=3 * OUTAGE_BOUND,
                   message="every member fetching again under the new coordinator")
        gen2, owned2 = wait_balanced(ms, parts, above=gen1 - 1, timeout=3 * OUTAGE_BOUND)
        takeover = time.monotonic() - t_stop
        epochs = {m.last_assignment()["epoch"] for m in ms}
        assert len(epochs) == 1, epochs
        epoch2 = epochs.pop()
        assert epoch2 > epoch1
        # the new coordinator has written the owners of generation gen2 (the last step of its rebalance)
        expected_owners = {tp: name for name, tps in owned2.items() for tp in tps}
        wait_until(lambda: history.samples and history.samples[-1].generation == gen2 and {
            tp: o.rsplit("-", 1)[0] for tp, o in history.samples[-1].owners.items()} == expected_owners,
            timeout=10, message="owners of the new generation in ZK")
    finally:
        os.kill(pid, signal.SIGCONT)
    wall_cont = time.time()
    print(f"\nSIGSTOP of coordinator broker {victim}: broker {successor} took over and every member was back "
          f"in its generation ({gen1} -> {gen2}) after {takeover:.2f} s")

    # the deposed coordinator notices, drops its state and stands by
    wait_until(lambda: broker_log_has(cluster, victim, "resigns as coordinator")
               or broker_log_has(cluster, victim, "fenced"), timeout=30,
               message="the deposed coordinator to resign")
    from spark_coord.zk import paths

    wait_until(lambda: czk.exists(paths.broker(victim)), timeout=30, message="the broker to register again")
    host, port = cluster.brokers[victim]
    probe = CoordinatorChannel(host, port, "probe", 10.0)
    try:
        seen = []
        wait_until(lambda: seen.append(probe.request(api.CLUSTER_METADATA, {})["coordinator_id"]) or
                   seen[-1] == successor, timeout=10, interval=0.1,
                   message=lambda: f"the deposed broker to name {successor} as coordinator; it says {seen[-3:]}")
        answer = probe.request(api.REGISTER_CONSUMER, {
            "group_id": group, "consumer_id": "probe", "topics": [{"topic": topic, "streams": 1}], "pattern": None,
            "pattern_streams": 1, "auto_commit": True, "auto_offset_reset": "smallest", "session_timeout_ms": 3000})
        assert answer["error_code"] == ErrorCode.NOT_COORDINATOR
    finally:
        probe.close()

    # all partitions back; drain, then check that nothing after the takeover came from the deposed one
    producer.allowed = set(range(N_PARTITIONS))
    _wait_flowing(cluster, ms, topic, set(range(N_PARTITIONS)), timeout=30)
    samples = _final_check(cluster, czk, group, topic, producer, history, ms)
    after = [s for s in samples if s.ts >= wall_cont]
    assert after
    for s in after:
        assert s.coordinator == successor
        assert s.generation == gen2, f"generation changed to {s.generation} after SIGCONT"
        assert {tp: o.rsplit("-", 1)[0] for tp, o in s.owners.items()} == expected_owners
    for m in ms:
        late = [e for e in m.events() if e["ev"] in ("assign", "stop", "lost") and e["ts"] >= wall_cont]
        assert not late, f"{m.name} was driven after SIGCONT: {late}"
        assert m.last_assignment()["gen"] == gen2 and m.last_assignment()["epoch"] == epoch2
    assert read_coordinator(czk) == successor
