"""Share-group locks against a step of the wall clock (an NTP correction), on a broker whose process
sees ``time.time()`` jump while confluent-kafka ``ShareConsumer``s (librdkafka, with clocks of its
own) hold and read records.  Acquisition locks and idle sessions run on the monotonic clock, as
Kafka's timers do: a step forward frees no lock early, a step back keeps no lock past its time."""

from __future__ import annotations

import time

import pytest
from helpers import wait_until
from share_support import SHARE_OVERRIDES, ShareReader, produce, set_group_config

LOCK_S = SHARE_OVERRIDES["group.share.record.lock.duration.ms"] / 1000


@pytest.mark.parametrize("step_s", [300, -3600], ids=["forward-5min", "back-1h"])
def test_a_wall_clock_step_neither_frees_share_locks_early_nor_keeps_them_late(broker_factory, monkeypatch,
                                                                               step_s):
    from confluent_kafka import ShareConsumer
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = broker_factory(0, **SHARE_OVERRIDES)
    bootstrap = "%s:%d" % broker.address
    group, topic, n = f"sg-clock-{step_s}", f"share-clock-{step_s}", 20
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(timeout=30)
    set_group_config(bootstrap, group, share_auto_offset_reset="earliest")
    produce(bootstrap, topic, [(0, f"k{i}".encode(), b"v") for i in range(n)], batch=n)
    holder = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "holder",
                            "share.acknowledgement.mode": "explicit"})
    holder.subscribe([topic])
    held: dict[int, float] = {}  # offset -> when it was handed to the holder (the real wall clock)
    second = None
    try:
        def hold() -> bool:
            for m in holder.poll(0.2):
                assert m.error() is None, m.error()
                held.setdefault(m.offset(), time.time())
            return len(held) == n

        wait_until(hold, timeout=60, message=lambda: f"{n} records held; have {len(held)}")
        acquired_at = max(held.values())
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + step_s)  # the broker's process clock steps
        second = ShareReader("second", bootstrap, group, [topic])
        second.start()
        wait_until(lambda: len(second.seen()) == n, timeout=LOCK_S + 30,
                   message=lambda: f"the held records reach the second consumer once their locks ran out "
                                   f"({len(second.seen())} of {n})")
        first_again = min(d.at for d in second.deliveries) - step_s  # its stamps are of the stepped clock
        assert first_again >= acquired_at + LOCK_S - 0.5, \
            f"handed out again {first_again - acquired_at:.2f} s after the holder got them; the lock is {LOCK_S} s"
        assert {d.count for d in second.deliveries} == {2}
    finally:
        monkeypatch.undo()
        if second is not None:
            second.stop()
        holder.close()
