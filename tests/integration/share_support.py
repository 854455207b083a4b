"""Share consumers for the share-group tests: confluent-kafka ``ShareConsumer`` (librdkafka 2.16,
a client we did not write) in threads, each recording every delivery it saw."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from spark_coord.client.groups import describe_share_group  # noqa: F401 (the tests' import)

#: Broker settings of the share-group tests: short locks, heartbeats and sessions, so faults
#: resolve in seconds (the group.share.min.* bounds let the tests go below Kafka's defaults).
SHARE_OVERRIDES = {
    "group.share.min.record.lock.duration.ms": 1000,
    "group.share.record.lock.duration.ms": 4000,
    "group.share.min.heartbeat.interval.ms": 100,
    "group.share.heartbeat.interval.ms": 500,
    "group.share.min.session.timeout.ms": 1000,
    "group.share.session.timeout.ms": 6000,
    "group.share.delivery.count.limit": 3,
}


@dataclass(frozen=True)
class Delivery:
    consumer: str
    partition: int
    offset: int
    key: bytes | None
    count: int
    at: float
    #: How it was acknowledged ("accept", "release", "reject"; implicit consumers accept).
    ack: str


class ShareReader(threading.Thread):
    """A ShareConsumer polling in a thread until stopped; ``policy(message) -> "accept" |
    "release" | "reject"`` makes it an explicit-mode consumer."""

    def __init__(self, name: str, bootstrap: str, group: str, topics: list[str], policy: Callable | None = None,
                 config: dict | None = None, confirm: bool = False, pace: float = 0.0):
        super().__init__(name=f"share-{name}", daemon=True)
        self.name_ = name
        self.bootstrap, self.group, self.topics = bootstrap, group, topics
        self.policy = policy
        self.config = config or {}
        #: Explicit mode, every record accepted, then ``commit_sync``: ``confirmed`` maps the records
        #: whose acknowledgement the broker answered without error (accepted for good) to when.
        self.confirm = confirm
        if confirm:
            self.policy = policy or (lambda m: "accept")
        self.confirmed: dict[tuple[int, int], float] = {}
        #: Seconds each poll's records are held before they are acknowledged (a slower workload that
        #: always holds records, so a fault lands while records are in flight).
        self.pace = pace
        self.deliveries: list[Delivery] = []
        self.errors: list[str] = []
        self._halt = threading.Event()
        self.closed = threading.Event()

    def run(self) -> None:
        from confluent_kafka import AcknowledgeType, ShareConsumer

        conf = {"bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": self.name_,
                "share.acknowledgement.mode": "explicit" if self.policy else "implicit", **self.config}
        sc = ShareConsumer(conf)
        types = {"accept": AcknowledgeType.ACCEPT, "release": AcknowledgeType.RELEASE,
                 "reject": AcknowledgeType.REJECT}
        try:
            sc.subscribe(self.topics)
            batch: list = []
            while not self._halt.is_set():
                for m in sc.poll(0.2):
                    if m.error():
                        self.errors.append(str(m.error()))
                        continue
                    ack = self.policy(m) if self.policy else "accept"
                    self.deliveries.append(Delivery(self.name_, m.partition(), m.offset(), m.key(),
                                                    m.delivery_count(), time.time(), ack))
                    if self.policy:
                        sc.acknowledge(m, types[ack])
                    batch.append(m)
                if self.pace and batch:
                    self._halt.wait(self.pace)
                if self.confirm and batch:
                    self._commit(sc, batch)
                elif self.policy:
                    sc.commit_async()
                batch = []
        finally:
            sc.close()
            self.closed.set()

    def _commit(self, sc, batch) -> None:
        try:
            results = sc.commit_sync(10)
        except Exception as e:  # noqa: BLE001 -- a broker going away: nothing confirmed
            self.errors.append(f"commit_sync: {e}")
            return
        now = time.time()
        ok = {(tp.topic, tp.partition) for tp, err in (results or {}).items() if err is None}
        for m in batch:
            if (m.topic(), m.partition()) in ok:
                self.confirmed.setdefault((m.partition(), m.offset()), now)

    def stop(self, timeout: float = 30) -> None:
        self._halt.set()
        self.join(timeout)

    def seen(self) -> set[tuple[int, int]]:
        return {(d.partition, d.offset) for d in self.deliveries}


def set_group_config(bootstrap: str, group: str, **configs: str) -> None:
    """Set share-group configs (``share_auto_offset_reset="earliest"`` -> share.auto.offset.reset) the
    way Kafka users do: AdminClient.incremental_alter_configs on the GROUP resource."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    futures = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)])
    for f in futures.values():
        f.result(timeout=30)
    _wait_every_broker_has(bootstrap, group, {k.replace("_", "."): str(v) for k, v in configs.items()})


def _wait_every_broker_has(bootstrap: str, group: str, wanted: dict[str, str]) -> None:
    """Until every broker describes the group with ``wanted``: the broker that took the change has it at
    once, the others when its change notification reaches them -- and a share partition led by one of
    those reads share.auto.offset.reset when its first member fetches."""
    from helpers import wait_until

    from spark_coord.client.metadata import ClusterClient
    from spark_coord.wire.registry import ApiKey

    body = {"resources": [{"resource_type": 32, "resource_name": group, "configuration_keys": sorted(wanted)}],
            "include_synonyms": False, "include_documentation": False}
    with ClusterClient(bootstrap) as cc:
        cc.refresh([])

        def everywhere() -> bool:
            for broker in sorted(cc.brokers):
                result = cc.connection(broker).request(ApiKey.DESCRIBE_CONFIGS, body)["results"][0]
                values = {c["name"]: c["value"] for c in result["configs"]}
                if result["error_code"] or any(values.get(k) != v for k, v in wanted.items()):
                    return False
            return True
        wait_until(everywhere, timeout=30, interval=0.1, message=f"every broker has group {group}'s {wanted}")


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes, bytes]], batch: int | None = None) -> None:
    """(partition, key, value) each, acknowledged by the leader; ``batch``: at most that many records per
    record batch (a share fetch hands out whole batches, so small ones make acquisition fine-grained)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0 if batch else 5})
    for i, (partition, key, value) in enumerate(records, 1):
        p.produce(topic, value=value, key=key, partition=partition)
        if batch and i % batch == 0:
            assert p.flush(30) == 0
    assert p.flush(30) == 0
