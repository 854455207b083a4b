"""Thin consumers of Kafka 4's consumer group protocol (``Consumer(group_protocol="consumer")``) as
the KIP-848 tests drive them: each reads on a thread of its own and keeps what it read and every
assignment it held; and a producer of numbered records."""

from __future__ import annotations

import threading


class ThinReader(threading.Thread):
    """Reads ``consumer.messages()`` until ``stop()``; ``records``: (partition, offset) in order;
    ``assignments``: every distinct assignment it held, in order."""

    def __init__(self, consumer, name: str):
        super().__init__(name=f"reader-{name}", daemon=True)
        self.consumer = consumer
        self.records: list[tuple[int, int]] = []
        self.assignments: list[frozenset[int]] = []
        self.error: BaseException | None = None
        self.closed = False
        self._stop_event = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                self._note_assignment()
                for r in self.consumer.messages(timeout=0.1):
                    with self._lock:
                        self.records.append((r.partition, r.offset))
                    if self._stop_event.is_set():
                        break
                    self._note_assignment()
        except BaseException as e:  # noqa: BLE001 -- the test asserts on it
            self.error = e

    def _note_assignment(self) -> None:
        now = frozenset(p for _, p in self.consumer.assignment())
        with self._lock:
            if not self.assignments or self.assignments[-1] != now:
                self.assignments.append(now)

    def owned(self) -> set[int]:
        with self._lock:
            return set(self.assignments[-1]) if self.assignments else set()

    def read(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(self.records)

    def stop(self, close: bool = True) -> None:
        """Stop reading; then close the consumer (commit and leave)."""
        self._stop_event.set()
        self.join(10)
        if close:
            self.closed = True
            self.consumer.close()


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, start: int = 0) -> None:
    """``per_partition`` records to every partition, values ``v<start + i>``."""
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer

    with ClusterClient(bootstrap) as cc:
        producer = Producer(cc, acks=-1)
        n = start
        for p in range(partitions):
            for _ in range(per_partition):
                producer.send(topic, f"v{n}".encode(), partition=p)
                n += 1
        producer.flush()


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, ``{(topic, partition): offset}``."""
    from spark_coord.client.groups import GroupClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc, GroupClient(cc) as gc:
        return {tp: c.offset for tp, c in gc.fetch_offsets(group).items()}
