"""A share group's own ``share.delivery.count.limit`` and ``share.partition.max.record.locks``
(set with Kafka's AdminClient, incrementalAlterConfigs on the GROUP resource) take effect, also
on share partitions already loaded when they change -- judged by confluent-kafka
``ShareConsumer``s (librdkafka) on a broker whose own group.share.* values differ."""

from __future__ import annotations

from collections import Counter

from helpers import wait_until
from share_support import SHARE_OVERRIDES, ShareReader, produce, set_group_config

BROKER_LIMIT = SHARE_OVERRIDES["group.share.delivery.count.limit"]  # 3


def _broker(broker_factory, topic: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = broker_factory(0, **SHARE_OVERRIDES)
    bootstrap = "%s:%d" % broker.address
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(timeout=30)
    return bootstrap


def test_a_groups_delivery_count_limit_set_while_its_partition_is_loaded_bounds_every_delivery(broker_factory):
    group, topic, n = "sg-own-limit", "share-own-limit", 30
    bootstrap = _broker(broker_factory, topic)
    set_group_config(bootstrap, group, share_auto_offset_reset="earliest")
    produce(bootstrap, topic, [(0, b"first", b"v")])
    first = ShareReader("first", bootstrap, group, [topic])
    first.start()
    try:
        wait_until(lambda: (0, 0) in first.seen(), timeout=60, message="the first record (the partition loaded)")
    finally:
        first.stop()
    set_group_config(bootstrap, group, share_delivery_count_limit="2")
    produce(bootstrap, topic, [(0, f"k{i}".encode(), b"v") for i in range(n)], batch=10)
    releaser = ShareReader("releaser", bootstrap, group, [topic], policy=lambda m: "release")
    releaser.start()
    try:
        counts = lambda: Counter(d.offset for d in releaser.deliveries if d.offset > 0)  # noqa: E731
        wait_until(lambda: len(counts()) == n and min(counts().values()) >= 2, timeout=60,
                   message=lambda: f"every record delivered twice: {dict(counts())}")
        # a record produced after them is delivered once all of them are ARCHIVED (the start moved
        # past them): by then any third delivery would have been made
        produce(bootstrap, topic, [(0, b"last", b"v")])
        wait_until(lambda: (0, n + 1) in releaser.seen(), timeout=60, message="the record after them")
    finally:
        releaser.stop()
    got = Counter(d.offset for d in releaser.deliveries if 0 < d.offset <= n)
    assert set(got.values()) == {2}, f"deliveries per offset, group limit 2, broker's {BROKER_LIMIT}: {dict(got)}"
    assert max(d.count for d in releaser.deliveries) == 2


def test_a_groups_max_record_locks_bounds_what_one_consumer_can_hold(broker_factory):
    from confluent_kafka import ShareConsumer

    group, topic, n, locks = "sg-own-locks", "share-own-locks", 300, 100
    bootstrap = _broker(broker_factory, topic)
    set_group_config(bootstrap, group, share_auto_offset_reset="earliest",
                     share_partition_max_record_locks=str(locks))
    produce(bootstrap, topic, [(0, f"k{i}".encode(), b"v") for i in range(n)], batch=n)
    holder = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "holder",
                            "share.acknowledgement.mode": "explicit"})
    holder.subscribe([topic])
    held: set[int] = set()
    try:
        def hold() -> bool:
            held.update(m.offset() for m in holder.poll(0.5) if m.error() is None)
            return bool(held)

        wait_until(hold, timeout=60, message="records for the holder")
        assert held == set(range(locks)), \
            f"held {len(held)} records ({min(held)}-{max(held)}); the group allows {locks}"
    finally:
        holder.close()
