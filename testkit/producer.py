"""A producer that journals what the cluster acknowledged, and readers of what the log holds.

- ``AckingProducer``: a thread producing ``batch`` records to every allowed partition
  every ``interval`` seconds (acks=1); each record's value is ``<partition>:<seq>``, and
  a round whose flush succeeded is journaled as acknowledged.  ``allowed`` keeps it
  away from partitions whose leader is down (one replica per partition).
- ``LogEndSampler``: samples every partition's log end offset (ListOffsets) every
  ``interval`` seconds, skipping partitions whose leader does not answer: what
  records were waiting at a given moment (the liveness check).
- ``read_values``: every record value of a topic, read back with Fetch at the end of a
  run, to check that nothing acknowledged was lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict

from spark_coord.common import TopicPartition

log = logging.getLogger(__name__)


class AckingProducer(threading.Thread):
    """Produces to the allowed partitions until stopped; ``acked`` holds (partition, seq) acknowledged."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, batch: int = 5, interval: float = 0.1):
        super().__init__(name=f"producer-{topic}", daemon=True)
        from spark_coord.client.metadata import ClusterClient
        from spark_coord.client.producer import Producer

        self.cluster = ClusterClient(bootstrap, timeout=3.0)
        self.producer = Producer(self.cluster, acks=1, retries=2, timeout_ms=3000)
        self.topic = topic
        self.allowed = set(range(partitions))
        self.batch = batch
        self.interval = interval
        self.acked: set[tuple[int, int]] = set()
        self.sent = 0
        self.errors = 0
        self._seq: dict[int, int] = defaultdict(int)
        self._stop_event = threading.Event()

    def run(self) -> None:
        from spark_coord.errors import KafkaError

        while not self._stop_event.is_set():
            parts = sorted(self.allowed)
            pending = []
            try:
                for p in parts:
                    for _ in range(self.batch):
                        n = self._seq[p]
                        self._seq[p] += 1
                        self.producer.send(self.topic, f"{p}:{n}".encode(), partition=p)
                        pending.append((p, n))
                        self.sent += 1
                self.producer.flush()
                self.acked.update(pending)
            except (KafkaError, OSError, ValueError) as e:
                self.errors += 1
                log.info("producer: %s (this round is not counted as acknowledged)", e)
                self.producer._builders.clear()
                self.producer._counts.clear()
                try:
                    self.cluster.refresh([self.topic])
                except (KafkaError, OSError) as e2:
                    log.debug("producer: metadata refresh failed: %s", e2)
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(30)
        self.cluster.close()


class LogEndSampler(threading.Thread):
    """Log end offsets over time: ``samples[(topic, p)] = [(ts, end), ...]``."""

    def __init__(self, bootstrap: str, topic: str, interval: float = 0.5):
        super().__init__(name=f"log-end-{topic}", daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.interval = interval
        self.samples: dict[TopicPartition, list[tuple[float, int]]] = defaultdict(list)
        self._stop_event = threading.Event()

    def run(self) -> None:
        from spark_coord.client.admin import LATEST, AdminClient
        from spark_coord.client.metadata import ClusterClient
        from spark_coord.errors import KafkaError

        with ClusterClient(self.bootstrap, timeout=2.0) as cc:
            admin = AdminClient(cc)
            while not self._stop_event.is_set():
                try:
                    info = cc.topic(self.topic, refresh=True)
                    by_leader: dict[int, list[int]] = defaultdict(list)
                    for p, part in info.partitions.items():
                        by_leader[part.leader].append(p)
                    for leader, parts in by_leader.items():
                        try:
                            ends = admin.list_offsets(self.topic, sorted(parts), LATEST)
                        except (KafkaError, OSError) as e:
                            log.debug("log ends of %s led by %d: %s", parts, leader, e)
                            continue
                        now = time.time()
                        for p, end in ends.items():
                            self.samples[(self.topic, p)].append((now, end))
                except (KafkaError, OSError) as e:
                    log.debug("log end sample failed: %s", e)
                self._stop_event.wait(self.interval)

    def stop(self) -> dict[TopicPartition, list[tuple[float, int]]]:
        self._stop_event.set()
        self.join(10)
        return dict(self.samples)


def read_values(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    """partition -> every record value in its log, in offset order."""
    from spark_coord.client.admin import EARLIEST, LATEST, AdminClient
    from spark_coord.client.fetcher import fetch
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.errors import KafkaError
    from spark_coord.records.reader import iter_records

    out: dict[int, list[bytes]] = defaultdict(list)
    with ClusterClient(bootstrap, timeout=10.0) as cc:
        admin = AdminClient(cc)
        info = cc.topic(topic, refresh=True, wait=10.0)
        parts = sorted(info.partitions)
        positions = admin.list_offsets(topic, parts, EARLIEST)
        ends = admin.list_offsets(topic, parts, LATEST)
        while any(positions[p] < ends[p] for p in parts):
            for p in parts:
                if positions[p] >= ends[p]:
                    continue
                for pd in fetch(cc.connection(cc.leader(topic, p)), {(topic, p): positions[p]}, max_wait_ms=100):
                    if pd.error:
                        raise KafkaError(pd.error, f"{topic}-{p}")
                    for rec in iter_records(pd.records or b"", min_offset=positions[p]):
                        if rec.offset >= ends[p]:
                            break
                        out[p].append(rec.value or b"")
                        positions[p] = rec.offset + 1
    return dict(out)
