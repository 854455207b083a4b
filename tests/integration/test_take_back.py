"""A thin consumer taken back after a coordinator failover, in a group it shares with a
Kafka member (the take-back of DESIGN.md "Taken back after a failover").

The consumer runs in this process and commits actively after every batch, as an
application does.  SIGKILL of the coordinator's broker; once the successor takes the
consumer back (its claim fits), the consumer must be what the coordinator counts:
registered on its side too, answering pings, its commits landing in ZooKeeper.  A
member registered on one side only would have its commits refused ("not registered
with a coordinator right now"), be failed by pings, join again as a new member and
restart its partitions from the offsets ZooKeeper had at the failover (invariant 7).
"""

from __future__ import annotations

import signal
import threading
import time

import pytest
from helpers import wait_until
from support import BROKER_ZK_SESSION_MS, committed, leaders, topic_partitions

from testkit.kafka_member import KafkaMemberProcess
from testkit.zk_history import read_coordinator

N_PARTITIONS = 6
#: Members' sessions: one that outlasts the brokers' ZooKeeper session plus an election (nobody's
#: lease runs out meanwhile), and one that does not (the consumer stops, then resumes when taken back).
RIDE_THROUGH_MS = BROKER_ZK_SESSION_MS + 4000
LEASE_RUNS_OUT_MS = 2000


class CommittingApp(threading.Thread):
    """Takes batches and commits each one at once (``Consumer.commit``), noting every outcome."""

    def __init__(self, consumer):
        super().__init__(name="committing-app", daemon=True)
        self.consumer = consumer
        self.outcomes: list[tuple[float, str]] = []   # (monotonic time, "ok" or the failure)
        self.taken: dict[tuple[str, int], int] = {}   # next offset after what the app took
        self.again: list[tuple[float, tuple[str, int], int]] = []  # (time, partition, records) read again
        self._halt = threading.Event()

    def run(self) -> None:
        from spark_coord.consumer.consumer import CommitFailed

        while not self._halt.is_set():
            for batch in self.consumer.batches(timeout=0.2):
                cols = batch.select(["topic", "partition", "offset"]).to_pydict()
                if not cols["offset"]:
                    continue
                tp = (cols["topic"][0], cols["partition"][0])
                if cols["offset"][0] < self.taken.get(tp, 0):
                    self.again.append((time.monotonic(), tp, self.taken[tp] - cols["offset"][0]))
                self.taken[tp] = max(self.taken.get(tp, 0), cols["offset"][-1] + 1)
                try:
                    codes = self.consumer.commit({tp: self.taken[tp]}, timeout=2.0)
                    self.outcomes.append((time.monotonic(), "ok" if not codes.get(tp) else f"code {codes[tp]}"))
                except CommitFailed as e:
                    self.outcomes.append((time.monotonic(), str(e)))
                if self._halt.is_set():
                    break

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


@pytest.mark.parametrize("session_ms", [RIDE_THROUGH_MS, LEASE_RUNS_OUT_MS], ids=["ride-through", "lease-runs-out"])
def test_taken_back_thin_consumer_stays_registered_and_its_commits_land(cluster, czk, producer_factory, create,
                                                                       tmp_path, session_ms):
    from spark_coord.consumer.consumer import Consumer

    group, topic = "g-take-back", "take-back"
    create(topic, N_PARTITIONS)
    parts = topic_partitions(topic, N_PARTITIONS)
    producer = producer_factory(topic, N_PARTITIONS)
    workdir = tmp_path / "members"
    workdir.mkdir()
    kafka = KafkaMemberProcess("eager", workdir, cluster.bootstrap, group, topics=[topic], strategy="eager",
                               session_timeout_ms=session_ms)
    consumer = Consumer(cluster.bootstrap, group, topics=[topic], consumer_id="thin", session_timeout_ms=session_ms,
                        auto_commit=False, auto_offset_reset="smallest")
    app = CommittingApp(consumer)
    app.start()
    try:
        wait_until(lambda: consumer.assignment() and kafka.owned()
                   and set(consumer.assignment()) | kafka.owned() == parts, timeout=60, interval=0.2,
                   message=lambda: f"thin and eager to share the partitions: {consumer.assignment()} {kafka.owned()}")
        wait_until(lambda: any(o == "ok" for _, o in app.outcomes), timeout=30, message="a first commit")
        victim = read_coordinator(czk)
        led = {p for p, b in leaders(cluster.bootstrap, topic).items() if b == victim}
        live = {(topic, p) for p in range(N_PARTITIONS)} - {(topic, p) for p in led}
        producer.allowed = {p for _, p in live}
        time.sleep(0.5)

        cluster.kill_broker(victim, signal.SIGKILL)
        t_kill = time.monotonic()
        successor = wait_until(lambda: (c := read_coordinator(czk)) is not None and c != victim and (c,),
                               timeout=30, message="another broker to become coordinator")[0]
        log = cluster.log_path(successor)
        wait_until(lambda: "consumer thin is back" in log.read_text(errors="replace"), timeout=30,
                   message="the successor to take the thin consumer back")
        wait_until(consumer.connector.registered.is_set, timeout=5,
                   message="the consumer to count itself registered once taken back")
        t_back = time.monotonic()
        mine = set(consumer.assignment()) & live
        taken_at_back = {tp: app.taken.get(tp, 0) for tp in mine}

        # two sessions after the take-back: still registered throughout, every commit lands
        unregistered = []
        while time.monotonic() < t_back + 2 * session_ms / 1000:
            if not consumer.connector.registered.is_set():
                unregistered.append(round(time.monotonic() - t_back, 2))
            time.sleep(0.05)
        text = log.read_text(errors="replace")
        assert not unregistered, f"taken back, then not registered on its own side at +{unregistered[:5]} s"
        assert "consumer thin did not answer ping" not in text and "consumer thin failed" not in text
        assert "consumer thin claims generation" not in text, "the thin consumer had to join again as a new member"
        after = [o for t, o in app.outcomes if t > t_back]
        assert after and all(o == "ok" for o in after), \
            f"commits after the take-back failed: {[o for o in after if o != 'ok'][:5]} ({len(after)} in all)"
        assert not app.again, f"records read again after the take-back: {app.again[:5]}"
        # what it consumed after the take-back is in ZooKeeper (invariant 7), not only in its memory
        wait_until(lambda: all(committed(czk, group).get(tp, -1) > taken_at_back[tp] for tp in mine),
                   timeout=10, message=lambda: f"offsets committed past the take-back: "
                                               f"{ {tp: committed(czk, group).get(tp) for tp in mine} } vs "
                                               f"{taken_at_back}")
        print(f"\nthin consumer taken back {t_back - t_kill:.2f} s after SIGKILL of coordinator broker {victim}; "
              f"{len(after)} commits after it, all confirmed")
    finally:
        app.stop()
        consumer.close()
        if kafka.alive():
            kafka.stop(30)
