"""The ZooKeeper ensemble and the membership faults of a nemesis run (``testkit.nemesis``).

``start_zookeeper`` starts the run's ZooKeeper: one standalone server in namespace ``zk``
(``zk_nodes=1``), or a real quorum of ``zk_nodes`` servers (``QuorumPeerMain``) in namespaces
``zk0``, ``zk1``, ... each bound to its namespace's address (client port 2181, quorum port
2888, election port 3888): the brokers and the run's clients get the full connect string.

The fault kinds here (``NemesisRun._server_fault`` dispatches to them):

- ``zk_split``: the ensemble split into a majority and a minority of one
  server, with a broker on each side.  Only ZooKeeper-to-ZooKeeper and broker-to-ZooKeeper
  links are cut: members and the producer still reach every broker.  Usually the group's
  coordinator is on the minority side: its server stops serving, the coordinator's session
  expires, a majority broker is elected and the members move there.  Mirrored (chance
  ``1 - zk_split_coordinator_minority``): the coordinator is with the majority and another
  broker with the minority; the coordinator must stay.  The coordinators read from ZooKeeper
  before and during the split, and how long the ensemble took to rejoin after the heal, go to
  the fault's detail and to ``NemesisRun.zk_splits``.
- ``broker_add``: a broker with a new id started in a new namespace; it registers in
  ``/brokers/ids`` and, as every broker, stands as a coordinator: it takes its share of the
  coordinator shards (``coordinator.core.shards.place``), so the group's may move to it.
- ``broker_remove``: a broker stopped for good (SIGTERM, never restarted;
  its namespace stays, empty, until the run ends).  Topics have one replica per partition
  (no replication in this product): removing a broker that leads partitions of the run's topic
  would make them unavailable for ever, and the checks would count their records lost.  So the
  run creates its topic with an explicit assignment on the original brokers only
  (``topic_assignment``), and removes only a broker that leads none of its partitions: one
  added by ``broker_add`` or a spare the run starts with (``spare_brokers``) -- the group's
  coordinator when it is one of those.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.chaos import Fault
from testkit.nemesis.netns import Net

#: What the functions here are given: ``faults.NemesisRun`` (not imported: that module imports this one).
NemesisRun = Any

#: Client, quorum and election ports of every ensemble server (each on its own address).
ZK_PORTS = (2181, 2888, 3888)
#: Every broker of a nemesis run listens on this port of its own address.
BROKER_PORT = 9092
ZK_SETTINGS = {"tickTime": 500, "minSessionTimeout": 1000, "maxSessionTimeout": 60000}


def zk_node_names(count: int) -> list[str]:
    """The namespaces of the run's ZooKeeper servers: ``zk`` alone, or ``zk0``, ``zk1``, ..."""
    if count < 1:
        raise ValueError(f"zk_nodes must be at least 1, not {count}")
    return ["zk"] if count == 1 else [f"zk{i}" for i in range(count)]


def start_zookeeper(net: "Net", names: list[str], data_dir: Path):
    """Start the run's ZooKeeper in the namespaces ``names`` (``zk_node_names``); returns the
    ``EmbeddedZooKeeper`` or ``EmbeddedEnsemble`` (``connect_string``, ``stop()``)."""
    from spark_coord.zk.embedded import EmbeddedEnsemble, EmbeddedZooKeeper

    if len(names) == 1:
        zk = EmbeddedZooKeeper(port=ZK_PORTS[0], data_dir=data_dir,
                               settings={**ZK_SETTINGS, "clientPortAddress": net[names[0]].addr})
        net.call(names[0], zk.start, timeout=60)
        return zk
    ensemble = EmbeddedEnsemble(len(names), data_dir, ZK_SETTINGS, hosts=[net[n].addr for n in names],
                                ports=ZK_PORTS, launch=lambda i, start: net.call(names[i], start))
    return ensemble.start(timeout=90)


def zk_servers(names: list[str], zookeeper) -> dict[str, Any]:
    """Namespace -> its ``EmbeddedZooKeeper``."""
    return dict(zip(names, getattr(zookeeper, "members", [zookeeper]), strict=True))


def topic_assignment(partitions: int, brokers: list[int]) -> list[dict]:
    """CreateTopics assignments putting partition p on ``brokers[p % len(brokers)]`` (one replica)."""
    return [{"partition_index": p, "broker_ids": [brokers[p % len(brokers)]]} for p in range(partitions)]


def create_topic(bootstrap: str, topic: str, assignments: list[dict], timeout: float = 30.0) -> None:
    """Create ``topic`` with explicit ``assignments``; raises KafkaError with the broker's code.  A broker
    that has not yet seen every other one registered answers INVALID_REPLICA_ASSIGNMENT: asked again."""
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.errors import ErrorCode, KafkaError
    from spark_coord.wire.registry import ApiKey

    body = {"topics": [{"name": topic, "num_partitions": -1, "replication_factor": -1,
                        "assignments": assignments, "configs": []}],
            "timeout_ms": 30000, "validate_only": False}
    deadline = time.monotonic() + timeout
    with ClusterClient(bootstrap) as cc:
        while True:
            result = cc.request_any(ApiKey.CREATE_TOPICS, body)["topics"][0]
            code = result["error_code"]
            if code != ErrorCode.INVALID_REPLICA_ASSIGNMENT or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        if code:
            raise KafkaError(code, result.get("error_message") or f"creating topic {topic!r}")
        cc.topic(topic, refresh=True, wait=timeout)


# ====================================================================== the split
@dataclass
class SplitPlan:
    """The two sides of a ``zk_split``: node names (ZooKeeper servers and brokers)."""
    minority: list[str]
    majority: list[str]
    coordinator: int
    coordinator_on_minority: bool

    @property
    def minority_broker(self) -> int:
        return next(int(n[1:]) for n in self.minority if n.startswith("b"))

    @property
    def minority_zk(self) -> str:
        return next(n for n in self.minority if n.startswith("zk"))

    def cuts(self) -> list[tuple[str, str]]:
        """Every ZooKeeper-to-ZooKeeper and broker-to-ZooKeeper link across the sides (no
        broker-to-broker link: the brokers still reach each other, their clients every broker)."""
        return [(a, b) for a in self.minority for b in self.majority
                if a.startswith("zk") or b.startswith("zk")]

    def describe(self) -> str:
        return f"minority {'+'.join(self.minority)} | majority {'+'.join(self.majority)}"


def plan_split(zk_nodes: list[str], brokers: list[int], coordinator: int, coordinator_on_minority: bool,
               rng: random.Random) -> SplitPlan:
    """A minority of one ZooKeeper server with one broker -- the coordinator, or (mirrored) another
    broker -- and a majority of the other servers with the other brokers."""
    if len(zk_nodes) < 3:
        raise ValueError(f"a split needs an ensemble of at least 3 servers, not {len(zk_nodes)}")
    if coordinator not in brokers or len(brokers) < 2:
        raise ValueError(f"a split needs the coordinator {coordinator} among at least 2 brokers {brokers}")
    lone_zk = rng.choice(zk_nodes)
    lone_broker = coordinator if coordinator_on_minority else rng.choice([b for b in brokers if b != coordinator])
    minority = [lone_zk, f"b{lone_broker}"]
    majority = [n for n in zk_nodes if n != lone_zk] + [f"b{b}" for b in brokers if b != lone_broker]
    return SplitPlan(minority, majority, coordinator, coordinator_on_minority)


def zk_split(run: "NemesisRun", coordinator: int) -> Fault | None:
    """Inject a ``zk_split`` (see the module docstring); None when the ensemble is too small."""
    s, net = run.s, run.net
    if len(run.zk_nodes) < 3:
        run.note_skipped(f"zk_split: needs zk_nodes >= 3 (the run has {len(run.zk_nodes)})")
        return None
    on_minority = run.rng.random() < s.zk_split_coordinator_minority
    plan = plan_split(run.zk_nodes, sorted(run.cluster.ports), coordinator, on_minority, run.rng)
    fault = Fault(time.time(), "zk_split", str(plan.minority_broker))
    record: dict[str, Any] = {"minority": plan.minority, "majority": plan.majority,
                              "coordinator_on_minority": on_minority, "coordinator_before": coordinator,
                              "coordinators_during": [], "minority_stopped_serving": False, "rejoined_s": None}
    run.zk_splits.append(record)
    cuts = plan.cuts()
    for a, b in cuts:
        net.cut(a, b)
    run._touch(fault, {f"b{plan.minority_broker}", *run.zk_nodes})
    zk_session_s = s.broker_zk_session_ms / 1000
    hold = run.rng.uniform(*s.cut_s)
    healed = threading.Event()

    def detail() -> str:
        during = "+".join(f"b{c}" for c in record["coordinators_during"]) or "none read"
        moved = "moved" if any(c != coordinator for c in record["coordinators_during"]) else "stayed"
        rejoined = "-" if record["rejoined_s"] is None else f"{record['rejoined_s']:.1f} s"
        stopped = "stopped serving" if record["minority_stopped_serving"] else "kept serving"
        return (f"{plan.describe()}; coordinator b{coordinator} before, {during} during ({moved}); "
                f"{plan.minority_zk} {stopped}; ensemble rejoined in {rejoined}")

    def watch() -> None:
        """The group's coordinator, as ZooKeeper says, all along the split; and whether the lone
        server stopped serving (``srvr`` unanswered: it has no quorum)."""
        lone = run.zk_servers[plan.minority_zk]
        while not healed.is_set():
            c = run._coordinator()
            if c is not None and (not record["coordinators_during"] or record["coordinators_during"][-1] != c):
                record["coordinators_during"].append(c)
            if not record["minority_stopped_serving"] and lone.mode() is None and not healed.is_set():
                record["minority_stopped_serving"] = True
            healed.wait(0.2)

    def heal() -> None:
        for a, b in cuts:
            net.heal(a, b)
        t = time.monotonic()
        lone = run.zk_servers[plan.minority_zk]
        deadline = t + 60
        while time.monotonic() < deadline:
            if lone.mode() in ("leader", "follower"):
                record["rejoined_s"] = round(time.monotonic() - t, 2)
                break
            time.sleep(0.2)
        run.details[id(fault)] = detail()

    def hold_then_heal() -> None:
        end = time.monotonic() + hold
        if on_minority:
            # the cut lasts until the coordinator left the minority (bounded), so the move is seen
            limit = time.monotonic() + 4 * zk_session_s + 20
            while time.monotonic() < limit and not any(c != coordinator for c in record["coordinators_during"]):
                time.sleep(0.2)
            end = max(end, time.monotonic() + 1.0)
        time.sleep(max(0.0, end - time.monotonic()))
        healed.set()
        watcher.join(5)
        run._end(fault, heal, True)

    run.details[id(fault)] = detail()
    watcher = threading.Thread(target=watch, daemon=True, name="zk-split-watch")
    watcher.start()
    t = threading.Thread(target=hold_then_heal, daemon=True, name="zk-split")
    t.start()
    run._recoveries.append(t)
    return fault


# ====================================================================== membership
def broker_add(run: "NemesisRun") -> Fault | None:
    """Start a broker with a new id in a new namespace; the fault ends once it serves."""
    running = len(run.cluster.ports)
    if running >= run.s.max_brokers:
        run.note_skipped(f"broker_add: {running} brokers run already (max_brokers {run.s.max_brokers})")
        return None
    new = run.next_broker_id
    run.next_broker_id += 1
    node = f"b{new}"
    fault = Fault(time.time(), "broker_add", str(new))
    run.host_ns.call(run.net.add, node)
    run.cluster.ports[new] = BROKER_PORT
    try:
        run.cluster.start_broker(new)
    except Exception:
        # not one of the cluster's brokers then: no later fault may pick it
        if new in run.cluster.procs:
            run.cluster.kill_broker(new)
        del run.cluster.ports[new]
        raise
    finally:
        run._end(fault, lambda: None, True)
    run.added_brokers.append(new)
    run._touch(fault, {node})
    run.details[id(fault)] = f"{node} at {run.net[node].addr}, registered in /brokers/ids"
    return fault


def removable_brokers(leaders: dict[int, int], brokers: list[int]) -> list[int]:
    """The brokers leading none of the run's partitions (single replica: only these may go for good)."""
    leading = set(leaders.values())
    return [b for b in sorted(brokers) if b not in leading]


def broker_remove(run: "NemesisRun", coordinator: int) -> Fault | None:
    """Stop for good a broker that leads no partition (the coordinator when it is one); the fault
    ends once it is gone from ``/brokers/ids`` and the group has a live coordinator."""
    from spark_coord.zk import paths

    removable = removable_brokers(run.leaders, list(run.cluster.ports))
    if not removable:
        run.note_skipped("broker_remove: every broker leads partitions (single replica); add one or start a spare")
        return None
    victim = coordinator if coordinator in removable else run.rng.choice(removable)
    fault = Fault(time.time(), "broker_remove", str(victim))
    run._touch(fault, {f"b{victim}"})
    run.cluster.kill_broker(victim, signal.SIGTERM)
    del run.cluster.ports[victim]
    run.removed_brokers.append(victim)
    record: dict[str, Any] = {"broker": victim, "was_coordinator": victim == coordinator, "coordinator_after": None,
                              "gone": False}
    run.removals.append(record)

    def settled() -> None:
        deadline = time.monotonic() + 4 * run.s.broker_zk_session_ms / 1000 + 30
        while time.monotonic() < deadline:
            try:
                ids = {int(i) for i in run.zk.get_children(paths.BROKER_IDS)}
            except Exception:  # noqa: BLE001 -- the run's session reconnecting
                ids = set()
            c = run._coordinator()
            if ids and victim not in ids and c is not None and c in ids:
                record.update(gone=True, coordinator_after=c)
                break
            time.sleep(0.2)
        run.details[id(fault)] = (f"b{victim}{' (the coordinator)' if record['was_coordinator'] else ''} removed; "
                                  + (f"coordinator b{record['coordinator_after']} after" if record["gone"]
                                     else "not settled in time"))
    run._end(fault, settled, True)
    return fault
