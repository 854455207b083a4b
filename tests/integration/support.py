"""Helpers for the integration tests: topics, log ends, leaders, a background producer,
and waits on the members' journals."""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger(__name__)


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc:
        AdminClient(cc).create_topic(name, partitions)


def log_end(bootstrap: str, topic: str) -> dict[tuple[str, int], int]:
    from spark_coord.client.admin import LATEST, AdminClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc:
        cc.topic(topic, refresh=True, wait=30)  # a broker just restarted: wait until every partition has a leader
        return {(topic, p): o for p, o in AdminClient(cc).list_offsets(topic, None, LATEST).items()}


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """partition -> leader broker id."""
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc:
        return {p: info.leader for p, info in cc.topic(topic, refresh=True, wait=10).partitions.items()}


class BackgroundProducer(threading.Thread):
    """Produces ``batch`` records to each allowed partition every ``interval`` s until stopped.

    ``allowed`` (a set of partitions, changeable while running) keeps it away from
    partitions whose leader is down.  ``produced_after(ts)`` says which partitions
    got acknowledged records in rounds that started after a point in time (for "records
    produced after the fault reach the consumers"; rounds run one after another, so
    once one that started after ``ts`` is acknowledged, every earlier one is too)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, batch: int = 5, interval: float = 0.05):
        super().__init__(name=f"producer-{topic}", daemon=True)
        from spark_coord.client.metadata import ClusterClient
        from spark_coord.client.producer import Producer

        self.cluster = ClusterClient(bootstrap, timeout=5.0)
        self.producer = Producer(self.cluster, acks=1, retries=3)
        self.topic = topic
        self.allowed = set(range(partitions))
        self.batch = batch
        self.interval = interval
        self.sent = 0
        self.errors = 0
        self.rounds: list[tuple[float, frozenset[int]]] = []  # (time the round started, partitions), once acknowledged
        self._stop_event = threading.Event()
        self._paused = threading.Event()

    def run(self) -> None:
        from spark_coord.errors import KafkaError

        while not self._stop_event.is_set():
            if self._paused.is_set():
                self._stop_event.wait(self.interval)
                continue
            started, parts = time.time(), frozenset(self.allowed)
            try:
                for p in sorted(parts):
                    for _ in range(self.batch):
                        self.producer.send(self.topic, f"r{self.sent}".encode(), partition=p)
                        self.sent += 1
                self.producer.flush()
                self.rounds.append((started, parts))
            except (KafkaError, OSError, ValueError) as e:
                self.errors += 1
                log.info("background producer: %s", e)
                self.producer._builders.clear()
                self.producer._counts.clear()
            self._stop_event.wait(self.interval)

    def pause(self) -> None:
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(30)
        self.cluster.close()

    def produced_after(self, ts: float) -> set[int]:
        return set().union(*(parts for t, parts in self.rounds if t > ts)) if self.rounds else set()




def assignment_state(members) -> tuple[set[int], dict[str, set[tuple[str, int]]]]:
    """(generations of the members' current assignments, member -> partitions) from their journals."""
    gens, owned = set(), {}
    for m in members:
        a = m.last_assignment()
        gens.add(a["gen"] if a else None)
        owned[m.name] = {(t, p) for t, p, _ in a["parts"]} if a else set()
    return gens, owned


def balanced(members, partitions: set[tuple[str, int]], above: int = -1):
    """(generation, member -> partitions) when every member runs the same generation (> ``above``)
    and their partitions are disjoint and cover ``partitions`` exactly; else None."""
    gens, owned = assignment_state(members)
    if len(gens) != 1 or None in gens:
        return None
    gen = next(iter(gens))
    if gen <= above:
        return None
    union: set = set()
    for tps in owned.values():
        if union & tps:
            return None
        union |= tps
    return (gen, owned) if union == partitions else None


def wait_balanced(members, partitions, above: int = -1, timeout: float = 30.0):
    from helpers import wait_until

    return wait_until(lambda: balanced(members, partitions, above), timeout=timeout, interval=0.1,
                      message=lambda: f"a balanced assignment of {len(partitions)} partitions above generation "
                                      f"{above}; now {assignment_state(members)}")


def committed(zk, group: str) -> dict[tuple[str, int], int]:
    from testkit.zk_history import read_partitions

    return read_partitions(zk, group, "offsets")  # type: ignore[return-value]


def wait_caught_up(zk, group: str, ends: dict[tuple[str, int], int], timeout: float = 30.0) -> None:
    """Wait until the group's committed offsets in ZooKeeper reached ``ends``."""
    from helpers import wait_until

    def behind():
        c = committed(zk, group)
        return {tp: (c.get(tp), end) for tp, end in ends.items() if c.get(tp, 0 if end == 0 else None) != end}

    wait_until(lambda: not behind(), timeout=timeout, interval=0.1,
               message=lambda: f"committed offsets to reach the log end; behind: {behind()}")


def topic_partitions(topic: str, n: int) -> set[tuple[str, int]]:
    return {(topic, p) for p in range(n)}


def log_end_of(bootstrap: str, topic: str, partitions) -> dict[tuple[str, int], int]:
    """Log end offsets of some partitions only (their leaders must be up)."""
    from spark_coord.client.admin import LATEST, AdminClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap, timeout=5.0) as cc:
        return {(topic, p): o for p, o in AdminClient(cc).list_offsets(topic, sorted(partitions), LATEST).items()}


def consumed_up_to(members, ends: dict[tuple[str, int], int]) -> dict[tuple[str, int], tuple[int, int]]:
    """Partitions whose records below ``ends`` were not all consumed yet -> (highest consumed + 1, end)."""
    top: dict[tuple[str, int], int] = {}
    for m in members:
        for t, p, o in m.records():
            if o + 1 > top.get((t, p), 0):
                top[(t, p)] = o + 1
    return {tp: (top.get(tp, 0), end) for tp, end in ends.items() if top.get(tp, 0) < end}


def broker_log_has(cluster, broker_id: int, text: str) -> bool:
    try:
        return text in cluster.log_path(broker_id).read_text(errors="replace")
    except OSError:
        return False


# Timeouts are short so faults resolve fast: brokers hold 3 s ZooKeeper sessions,
# members 2 s coordinator sessions, offsets are committed every 200 ms.
BROKER_ZK_SESSION_MS = 3000
MEMBER_SESSION_MS = 2000
BROKER_OVERRIDES = {
    "zookeeper.session.timeout.ms": BROKER_ZK_SESSION_MS,
    "coordinator.offsets.commit.interval.ms": 200,
    "coordinator.rebalance.backoff.ms": 200,
    "coordinator.min.session.timeout.ms": 1000,
    "num.partitions": 3,
    # Kafka 4's consumer group protocol (KIP-848): the coordinator sets these for its members
    "group.consumer.heartbeat.interval.ms": 500,
    "group.consumer.session.timeout.ms": 6000,
    # One coordinator shard: these tests fault "the" coordinator of their groups and follow it
    # (test_coordinator_shards.py runs the cluster's groups over many shards).
    "coordinator.shards": 1,
}

