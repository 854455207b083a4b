"""``share.isolation.level`` on Apache Kafka 4.2 (one node), the reference for
``tests/share/test_share_read_committed.py``: the same pattern of records -- plain ones, an aborted
transaction interleaved with a committed one, and a transaction left open with a plain record after
it -- written by confluent-kafka's transactional producers (Kafka's transaction coordinator writes
the markers), read by confluent-kafka ``ShareConsumer``s.  A group with ``read_committed`` gets the
same records as on our brokers: the committed and plain ones below the last stable offset, each
once, and the rest once the open transaction commits; a read_uncommitted group gets every data
record."""

from __future__ import annotations

import uuid

import pytest
from helpers import wait_until

pytestmark = pytest.mark.slow

#: The values our brokers' test expects (tests/share/test_share_read_committed.py), by offset there.
PLAIN_AND_COMMITTED = {"p0", "p1", "c0", "p2"}
AFTER_COMMIT = {"o0", "p3"}
EVERY_DATA_RECORD = {"p0", "p1", "a0", "a1", "c0", "a2", "p2", "o0", "p3"}
#: Kafka must not abort the open transaction while the test reads (librdkafka's default is 60 s).
OPEN_TIMEOUT_MS = 900_000


def _set_group_config(bootstrap: str, group: str, **configs: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer (its handle answers it)
    futures = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                              incremental_configs=entries)])
    for f in futures.values():
        f.result(timeout=30)


class _Reader:
    def __init__(self, bootstrap: str, group: str, topic: str):
        from confluent_kafka import ShareConsumer

        self.group = group
        self.consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": group})
        self.consumer.subscribe([topic])
        self.deliveries: list[tuple[str, int]] = []

    def poll(self) -> None:
        for m in self.consumer.poll(0.2):
            assert m.error() is None, m.error()
            self.deliveries.append((m.value().decode(), m.delivery_count()))

    def values(self) -> set[str]:
        return {v for v, _ in self.deliveries}

    def __repr__(self) -> str:
        return f"{self.group}: {self.deliveries}"


def _read_until(readers: dict[_Reader, set[str]], rounds_after: int = 10) -> None:
    """Poll until each reader saw its values; then ``rounds_after`` more polls, in which nothing more
    comes; each value came once, with delivery count 1."""
    def done() -> bool:
        for r in readers:
            r.poll()
        return all(r.values() == want for r, want in readers.items())
    wait_until(done, 90, interval=0, message=lambda: f"{list(readers)}, wanted {list(readers.values())}")
    for _ in range(rounds_after):
        for r in readers:
            r.poll()
    for r, want in readers.items():
        assert sorted(v for v, _ in r.deliveries) == sorted(want), r
        assert {c for _, c in r.deliveries} == {1}, r


def test_share_groups_read_committed_and_uncommitted_on_kafka(apache_kafka):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = apache_kafka.bootstrap
    topic = f"rc-share-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)

    def transactional(name: str, timeout_ms: int = 60_000) -> Producer:
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{name}-{topic}", "linger.ms": 0,
                      "transaction.timeout.ms": timeout_ms})
        p.init_transactions(60)
        return p

    def send(producer: Producer, *values: str) -> None:
        failed: list = []
        for v in values:
            producer.produce(topic, v.encode(), v.encode(), partition=0,
                             on_delivery=lambda err, _m: failed.append(err) if err else None)
            assert producer.flush(60) == 0 and not failed, failed

    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    a, c, o = transactional("a"), transactional("c"), transactional("o", OPEN_TIMEOUT_MS)
    send(plain, "p0", "p1")
    a.begin_transaction()
    c.begin_transaction()
    send(a, "a0", "a1")
    send(c, "c0")
    send(a, "a2")
    a.abort_transaction(60)
    c.commit_transaction(60)
    send(plain, "p2")
    o.begin_transaction()
    send(o, "o0")
    send(plain, "p3")
    groups = {"rc": "read_committed", "ru": "read_uncommitted"}
    for name, level in groups.items():
        _set_group_config(bootstrap, f"{name}-{topic}", share_auto_offset_reset="earliest",
                          share_isolation_level=level)
    readers = {name: _Reader(bootstrap, f"{name}-{topic}", topic) for name in groups}
    try:
        _read_until({readers["rc"]: PLAIN_AND_COMMITTED, readers["ru"]: EVERY_DATA_RECORD})
        o.commit_transaction(60)
        _read_until({readers["rc"]: PLAIN_AND_COMMITTED | AFTER_COMMIT, readers["ru"]: EVERY_DATA_RECORD})
    finally:
        for r in readers.values():
            r.consumer.close()
