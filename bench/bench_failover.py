"""Coordinator failover after SIGKILL of the coordinator's broker: time to a new election.

Run:  .venv/bin/python bench/bench_failover.py [--session-ms 6000] [--runs 3] [--tick-ms 2000]

A real ZooKeeper (tickTime --tick-ms, as in conf/zookeeper.properties) and three
broker processes with zookeeper.session.timeout.ms = --session-ms and one
coordinator shard (coordinator.shards=1).  Each run SIGKILLs the broker that
coordinates and measures the time from the SIGKILL to a new
/coordinators/shards/0/leader node (a new epoch):

- baseline "not restarted": the dead broker stays down, so its election node lives
  until ZooKeeper expires its session (session timeout, checked once per tick),
  then another broker is elected;
- "restarted at once": the dead broker is started again right after the SIGKILL
  (as a supervisor would); it replaces its own previous run's election node when
  it stands for election, without waiting for the old session to expire.  The
  process start (Python imports, log recovery, ZooKeeper connect) is included.

Prints every measure, the medians and the ratio restarted / baseline.  The machine
is shared and noisy: read the medians and the ratio.
"""

from __future__ import annotations

import argparse
import logging
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_coord.cluster import LocalCluster  # noqa: E402
from spark_coord.zk import client as zkclient  # noqa: E402
from spark_coord.zk import paths  # noqa: E402
from spark_coord.zk.embedded import EmbeddedZooKeeper  # noqa: E402


class ElectionClock:
    """Notes the monotonic time at which each new election node appears (a DataWatch)."""

    def __init__(self, zk):
        self.changed = threading.Condition()
        self.current: tuple[int, int] | None = None  # (czxid, broker id)
        self.seen_at: dict[int, float] = {}
        zk.DataWatch(paths.shard_leader(0), self._on_node)

    def _on_node(self, data, stat) -> None:
        with self.changed:
            if stat is not None:
                self.seen_at.setdefault(stat.czxid, time.monotonic())
                self.current = (stat.czxid, int(data))
            else:
                self.current = None
            self.changed.notify_all()

    def wait_new(self, than: int, timeout: float) -> tuple[int, int, float]:
        """(epoch, broker id, time seen) of the first election after epoch ``than``."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while self.current is None or self.current[0] == than:
                if not self.changed.wait(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"no new coordinator within {timeout} s")
            epoch, broker = self.current
            return epoch, broker, self.seen_at[epoch]


def one_run(cluster: LocalCluster, clock: ElectionClock, restart: bool, timeout: float) -> tuple[float, int]:
    with clock.changed:
        epoch, victim = clock.current
    t_kill = time.monotonic()
    cluster.kill_broker(victim, signal.SIGKILL)
    if restart:
        cluster.start_broker(victim)
    _, winner, seen = clock.wait_new(epoch, timeout)
    if not restart:
        cluster.start_broker(victim)
    return seen - t_kill, winner


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--session-ms", type=int, default=6000, help="brokers' zookeeper.session.timeout.ms")
    ap.add_argument("--tick-ms", type=int, default=2000, help="ZooKeeper's tickTime")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="bench-failover-") as tmp:
        zk_server = EmbeddedZooKeeper(data_dir=Path(tmp) / "zk", settings={"tickTime": args.tick_ms,
                                                                            "minSessionTimeout": 1000})
        zk_server.start(timeout=60)
        cluster = LocalCluster(3, Path(tmp) / "cluster", zk_connect=zk_server.connect_string,
                               overrides={"zookeeper.session.timeout.ms": args.session_ms, "coordinator.shards": 1})
        zk = zkclient.connect(zk_server.connect_string)
        try:
            cluster.start()
            clock = ElectionClock(zk)
            clock.wait_new(-1, 30)
            timeout = args.session_ms / 1000 * 3 + 30
            results: dict[str, list[float]] = {"not restarted": [], "restarted at once": []}
            for i in range(args.runs):
                for name, restart in (("not restarted", False), ("restarted at once", True)):
                    took, winner = one_run(cluster, clock, restart, timeout)
                    results[name].append(took)
                    print(f"run {i + 1}: {name:18s} new coordinator broker {winner} after {took:6.2f} s", flush=True)
            base = statistics.median(results["not restarted"])
            fast = statistics.median(results["restarted at once"])
            print(f"\nsession {args.session_ms} ms, tick {args.tick_ms} ms, {args.runs} runs (medians):")
            print(f"  not restarted (baseline): {base:6.2f} s")
            print(f"  restarted at once:        {fast:6.2f} s   ratio {fast / base:.2f}")
        finally:
            zkclient.close(zk)
            cluster.stop()
            zk_server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
