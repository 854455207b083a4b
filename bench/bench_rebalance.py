"""A member joins a 1,000-member group: who is stopped, how soon the newcomer is started, and
whether members whose partitions stay put notice anything.

Run:  .venv/bin/python bench/bench_rebalance.py [--members 1000] [--partitions 2000] [--real 4]
      (about 2 minutes on 2 cores; add --register-version 1 to see members that hand over by
      stopping everything they hold, --strategy range for an assignment that moves most partitions)

Set-up: one broker and an embedded ZooKeeper (``LocalCluster``), a topic of
``--partitions`` partitions, one group of ``--members`` light simulated members
(``bench/coord_sim.py``: one real TCP connection each, our wire codec, every
coordinator request answered at once) and ``--real`` real thin consumers
(``spark_coord.consumer.Consumer`` in this process, fetching from the broker), all
with 30 s session timeouts.  A producer writes one record to each partition the real
consumers hold every 20 ms, and each real consumer records when it is handed a batch.

Measured:

* members stopped: how many members received a StopFetcher because of the join,
  against how many lost a partition (the sticky assignment moves as few as balance
  needs) and how many were started (every member touched gets its new assignment);
* join -> the newcomer's StartFetcher: from just before it connects until its
  StartFetcher arrived (it fetches from then on); and until the group is Stable;
* the real consumers' delivery gap: per real consumer, the longest time between two
  batches handed to the application, over a quiet window of the same length
  (the baseline, measured first in the same run) and over the join (from the join
  until the group is Stable plus 2 s).  A member whose partitions did not move must
  show no gap beyond the baseline.
"""

from __future__ import annotations

import argparse
import logging
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_coordinator import Simulator, admin_request  # noqa: E402

from spark_coord.client.admin import AdminClient  # noqa: E402
from spark_coord.client.metadata import ClusterClient  # noqa: E402
from spark_coord.client.producer import Producer  # noqa: E402
from spark_coord.cluster import LocalCluster  # noqa: E402
from spark_coord.consumer.consumer import Consumer  # noqa: E402
from spark_coord.wire import coordinator as api  # noqa: E402

log = logging.getLogger("bench_rebalance")

GROUP, TOPIC = "bench-rebalance", "bench-rebalance"
SESSION_MS = 30000


class BenchError(RuntimeError):
    pass


class RealMember:
    """A thin consumer reading in a thread, recording when each batch is handed out."""

    def __init__(self, bootstrap: str, name: str):
        self.consumer = Consumer(bootstrap, GROUP, topics=[TOPIC], consumer_id=name, session_timeout_ms=SESSION_MS,
                                 auto_offset_reset="largest")
        self.name = name
        self.deliveries: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name=f"read-{name}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            for _ in self.consumer.batches(timeout=0.2):
                self.deliveries.append(time.monotonic())
                if self._stop.is_set():
                    break

    def longest_gap(self, a: float, b: float) -> float:
        """The longest time without a delivery within [a, b]."""
        ts = [a] + [t for t in self.deliveries if a <= t <= b] + [b]
        return max(y - x for x, y in zip(ts, ts[1:], strict=False))

    def close(self) -> None:
        self._stop.set()
        self.consumer.close(10)
        self._thread.join(5)


class Feeder(threading.Thread):
    """One record to each partition the real members hold, every ``interval`` seconds."""

    def __init__(self, bootstrap: str, members: list[RealMember], interval: float = 0.02):
        super().__init__(name="feeder", daemon=True)
        self.cluster = ClusterClient(bootstrap)
        self.producer = Producer(self.cluster, acks=1)
        self.members = members
        self.interval = interval
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            parts = sorted({p for m in self.members for _, p in m.consumer.assignment()})
            for p in parts:
                self.producer.send(TOPIC, b"x", partition=p)
            if parts:
                self.producer.flush()
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
        self.cluster.close()


def _stable(host: str, port: int, size: int) -> bool:
    resp = admin_request(host, port, api.DESCRIBE_GROUPS, {"group_ids": [GROUP]})
    groups = {g["group_id"]: g for g in resp["groups"]}
    g = groups.get(GROUP)
    return g is not None and g["state"] == "Stable" and len(g["members"]) == size


def _wait(what: str, predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise BenchError(f"{what} not reached within {timeout:.0f} s")
        time.sleep(0.2)


def run(args: argparse.Namespace, tmp: str) -> dict:
    api.REGISTER_VERSION = args.register_version  # the real members' RegisterConsumer version
    with LocalCluster(1, tmp, overrides={"coordinator.min.session.timeout.ms": 1000,
                                         "coordinator.partition.assignment.strategy": args.strategy}) as cluster:
        host, port = next(iter(cluster.brokers.values()))
        with ClusterClient(cluster.bootstrap) as c:
            AdminClient(c).create_topic(TOPIC, args.partitions)
        _wait("a coordinator", lambda: admin_request(host, port, api.CLUSTER_METADATA, {})["coordinator_id"] >= 0, 30)
        sim = Simulator(Path(tmp) / "simulator.log")
        reals: list[RealMember] = []
        feeder = None
        try:
            specs = [{"group": GROUP, "consumer": f"m{i:05d}", "topic": TOPIC, "version": args.register_version}
                     for i in range(args.members)]
            sim.call("add", host=host, port=port, session_ms=SESSION_MS, rate=10.0, concurrency=64, members=specs)
            reals = [RealMember(cluster.bootstrap, f"real-{i}") for i in range(args.real)]
            size = args.members + args.real
            _wait("the group Stable with every member", lambda: _stable(host, port, size)
                  and sim.call("groups")["groups"][GROUP]["settled"], args.settle_timeout)
            _wait("the real members holding partitions", lambda: all(m.consumer.assignment() for m in reals), 60)
            feeder = Feeder(cluster.bootstrap, reals)
            feeder.start()
            _wait("deliveries to every real member", lambda: all(len(m.deliveries) > 20 for m in reals), 60)
            q0 = time.monotonic()
            time.sleep(args.window)  # the quiet window itself, the baseline
            q1 = time.monotonic()
            quiet = [m.longest_gap(q0, q1) for m in reals]
            held_before = {m.name: set(m.consumer.assignment()) for m in reals}

            sim.call("mark", group=GROUP)
            t0 = time.monotonic()
            sim.call("add", host=host, port=port, session_ms=SESSION_MS, rate=10.0, concurrency=1,
                     members=[{"group": GROUP, "consumer": "joiner", "topic": TOPIC, "version": args.register_version}])
            _wait("the newcomer's StartFetcher and a Stable group",
                  lambda: any(e[0] == "start" for e in sim.call("events", group=GROUP)["events"].get("joiner", []))
                  and _stable(host, port, size + 1), args.settle_timeout)
            stable = time.monotonic()
            time.sleep(2.0)  # deliveries just after Stable are part of the join's effect
            t1 = time.monotonic()
            reply = sim.call("events", group=GROUP)
            events = reply["events"]
            joined = min(e[1] for e in events["joiner"] if e[0] == "start")
            during = [m.longest_gap(t0, t1) for m in reals]
            moved_real = [m.name for m in reals if set(m.consumer.assignment()) != held_before[m.name]]
            return {
                "members": size, "partitions": args.partitions, "register_version": args.register_version,
                "stopped": sum(1 for evs in events.values() if any(e[0] == "stop" for e in evs)),
                "lost": sum(1 for n in reply["lost"].values() if n) + len(moved_real),
                "started": sum(1 for evs in events.values() if any(e[0] == "start" for e in evs)),
                "new_member_start_s": joined - t0, "stable_s": stable - t0,
                "quiet_gap_ms": [round(g * 1000) for g in quiet], "join_gap_ms": [round(g * 1000) for g in during],
                "real_members_moved": moved_real,
            }
        finally:
            if feeder is not None:
                feeder.stop()
            for m in reals:
                m.close()
            sim.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=1000, help="simulated members in the group")
    ap.add_argument("--partitions", type=int, default=2000)
    ap.add_argument("--real", type=int, default=4, help="real thin consumers in the group")
    ap.add_argument("--window", type=float, default=15.0, help="seconds of the quiet window (the baseline)")
    ap.add_argument("--register-version", type=int, default=api.REGISTER_VERSION, choices=(1, 2),
                    help="RegisterConsumer version of every member (1: stops everything at each change)")
    ap.add_argument("--strategy", default="sticky", choices=("sticky", "range", "roundrobin"),
                    help="coordinator.partition.assignment.strategy (range: the assignment before incremental "
                         "rebalancing, which moves most partitions when a member joins)")
    ap.add_argument("--settle-timeout", type=float, default=240.0)
    ap.add_argument("--keep", action="store_true", help="keep the data directory (broker and simulator logs)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    for name in ("spark_coord.consumer", "spark_coord.client"):
        logging.getLogger(name).setLevel(logging.WARNING)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * args.members + 4 * args.partitions + 1024
    if soft < min(hard, need):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, need), hard))
    tmp = tempfile.mkdtemp(prefix="spark-coord-bench-rebalance-")
    try:
        r = run(args, tmp)
    except BenchError as e:
        log.error("benchmark stopped: %s (logs in %s)", e, tmp)
        return 1
    med = statistics.median
    print(f"\nrebalance benchmark ({args.strategy} assignment): one member joins a group of {r['members']:,} members "
          f"({args.real} real thin consumers), {r['partitions']:,} partitions, "
          f"RegisterConsumer v{r['register_version']}")
    print(f"  members stopped (StopFetcher):            {r['stopped']:,}")
    print(f"  members that lost a partition:            {r['lost']:,}")
    print(f"  members started (StartFetcher):           {r['started']:,}")
    print(f"  join -> newcomer's StartFetcher:          {r['new_member_start_s']:.2f} s")
    print(f"  join -> group Stable:                     {r['stable_s']:.2f} s")
    print(f"  real members' longest delivery gap, quiet window (ms): {r['quiet_gap_ms']} "
          f"(median {med(r['quiet_gap_ms'])})")
    print(f"  real members' longest delivery gap, join (ms):         {r['join_gap_ms']} "
          f"(median {med(r['join_gap_ms'])})")
    print(f"  join / quiet (median):                    "
          f"{med(r['join_gap_ms']) / max(1, med(r['quiet_gap_ms'])):.2f}")
    print(f"  real members whose partitions moved:      {r['real_members_moved'] or 'none'}")
    import figures  # bench/figures.py: the figures as JSON for the docs' plots
    label = args.strategy if (args.members, args.partitions) == (1000, 2000) else \
        f"{args.strategy}, {args.members} members"
    figures.write("rebalance", {k: r[k] for k in ("members", "partitions", "register_version", "stopped", "lost",
                                                  "started", "new_member_start_s", "stable_s", "quiet_gap_ms",
                                                  "join_gap_ms") if k in r}, label=label)
    if args.keep:
        log.info("logs kept in %s", tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
