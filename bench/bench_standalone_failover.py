"""Standalone coordinator failover: SIGKILL of the elected ``spark-coord coordinator`` under load.

Run:  .venv/bin/python bench/bench_standalone_failover.py [--runs 5] [--session-ms 4000]

A real ZooKeeper, one of our brokers as the data cluster (coordinator.enable=false), two
coordinator processes (zookeeper.session.timeout.ms = --session-ms) and two thin-consumer
members (session 10 s, coordinator.bootstrap = both coordinators) reading a topic a
producer writes to every 20 ms.  Each run SIGKILLs the elected coordinator, then starts
it again once the other took over, and measures:

- read latency of records produced after the kill (produce -> delivery to a member),
  against the same latency in a quiet second before the kill (the baseline): members keep
  fetching under their lease while they find the next coordinator, so consumption should
  not stop;
- time from the SIGKILL to a new election, and to both members registered with it.

Prints every run, the medians and the ratio of the latencies.  The machine is shared and
noisy: read the medians and the ratio.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_coord.client.admin import AdminClient  # noqa: E402
from spark_coord.client.metadata import ClusterClient  # noqa: E402
from spark_coord.client.producer import Producer  # noqa: E402
from spark_coord.cluster import LocalCluster  # noqa: E402
from spark_coord.consumer import Consumer  # noqa: E402
from spark_coord.zk import client as zkclient  # noqa: E402
from spark_coord.zk.embedded import EmbeddedZooKeeper  # noqa: E402
from testkit.coordinator_process import CoordinatorProcess  # noqa: E402
from testkit.zk_history import read_coordinator  # noqa: E402

PARTITIONS = 4


class Load:
    """Produces a timestamped record every 20 ms; members record each record's read latency."""

    def __init__(self, bootstrap: str, topic: str, members: list[Consumer]):
        self.topic = topic
        self.members = members
        self.cluster = ClusterClient(bootstrap)
        self.producer = Producer(self.cluster, acks=1)
        self.reads: list[tuple[float, float]] = []  # (produced at, latency)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._produce, daemon=True)] + \
            [threading.Thread(target=self._read, args=(m,), daemon=True) for m in members]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _produce(self) -> None:
        i = 0
        while not self.stop.is_set():
            try:
                self.producer.send(self.topic, repr(time.time()).encode(), partition=i % PARTITIONS)
                self.producer.flush()
            except Exception as e:  # noqa: BLE001 -- the data cluster is not faulted; log and go on
                logging.warning("produce: %s", e)
            i += 1
            self.stop.wait(0.02)

    def _read(self, member: Consumer) -> None:
        while not self.stop.is_set():
            for record in member.messages(timeout=0.2):
                now = time.time()
                sent = float(record.value.decode())
                with self.lock:
                    self.reads.append((sent, now - sent))

    def latencies(self, start: float, end: float) -> list[float]:
        with self.lock:
            return [lat for sent, lat in self.reads if start <= sent < end]

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(5)
        self.cluster.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--session-ms", type=int, default=4000, help="coordinators' zookeeper.session.timeout.ms")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rows = []
    with tempfile.TemporaryDirectory(prefix="spark-coord-bench-") as tmp:
        work = Path(tmp)
        zookeeper = EmbeddedZooKeeper(data_dir=work / "zk", settings={"tickTime": 500}).start()
        try:
            zk_connect = f"{zookeeper.connect_string}/coordinators"
            zkclient.ensure_chroot(zk_connect)
            zkclient.ensure_chroot(f"{zookeeper.connect_string}/data")
            with LocalCluster(1, work / "data", zk_connect=f"{zookeeper.connect_string}/data",
                              overrides={"coordinator.enable": False}) as data:
                with ClusterClient(data.bootstrap) as cc:
                    AdminClient(cc).create_topic("failover", PARTITIONS)
                overrides = {"zookeeper.session.timeout.ms": args.session_ms}
                coordinators = {cid: CoordinatorProcess(cid, data.bootstrap, zk_connect, work, **overrides)
                                .wait_listening() for cid in (1001, 1002)}
                both = ",".join(c.address for c in coordinators.values())
                members = [Consumer(data.bootstrap, "bench", topics=["failover"], session_timeout_ms=10000,
                                    coordinator_bootstrap=both) for _ in range(2)]
                zk = zkclient.connect(zk_connect)
                load = Load(data.bootstrap, "failover", members)
                load.start()
                try:
                    time.sleep(5)  # settle
                    for run in range(args.runs):
                        active = read_coordinator(zk, "bench")
                        quiet_end = time.time()
                        baseline = load.latencies(quiet_end - 1.0, quiet_end)
                        killed = time.time()
                        coordinators[active].kill()
                        while (c := read_coordinator(zk, "bench")) is None or c == active:
                            time.sleep(0.02)
                        elected = time.time() - killed
                        while not all(m.connector.registered.is_set() and m.connector.coordinator is not None
                                      and m.connector.coordinator.coordinator_id == c for m in members):
                            time.sleep(0.02)
                        registered = time.time() - killed
                        time.sleep(1.0)
                        after = load.latencies(killed, killed + registered)
                        coordinators[active].stop()
                        coordinators[active] = CoordinatorProcess(active, data.bootstrap, zk_connect, work,
                                                                  port=coordinators[active].port,
                                                                  **overrides).wait_listening()
                        rows.append((statistics.median(baseline), max(after) if after else float("nan"),
                                     statistics.median(after) if after else float("nan"), elected, registered))
                        print(f"run {run + 1}: quiet read latency median {rows[-1][0] * 1000:.0f} ms; records "
                              f"produced between the kill and re-registration: {len(after)}, read latency median "
                              f"{rows[-1][2] * 1000:.0f} ms, max {rows[-1][1] * 1000:.0f} ms; new election "
                              f"{elected:.2f} s, members registered {registered:.2f} s after the SIGKILL")
                        time.sleep(3)
                finally:
                    load.close()
                    for m in members:
                        m.close()
                    zkclient.close(zk)
                    for c in coordinators.values():
                        c.stop()
        finally:
            zookeeper.stop()
    med = [statistics.median(r[i] for r in rows) for i in range(5)]
    print(f"\nmedians over {len(rows)} runs: read latency quiet {med[0] * 1000:.0f} ms, during failover "
          f"{med[2] * 1000:.0f} ms (max {med[1] * 1000:.0f} ms; ratio {med[2] / med[0]:.2f}); new election "
          f"{med[3]:.2f} s, members with it {med[4]:.2f} s after the SIGKILL "
          f"(coordinators' ZooKeeper session {args.session_ms} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
