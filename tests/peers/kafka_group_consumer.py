"""A Kafka-client group consumer as a test process: ``python kafka_group_consumer.py
{confluent|kafka-python} BOOTSTRAP GROUP TOPIC CLIENT_ID SESSION_MS [STRATEGY]``.

It subscribes (Kafka's classic group protocol) with the assignment strategy STRATEGY
(the client's default eager assignors when absent, ``cooperative-sticky`` for KIP-429);
STRATEGY ``consumer`` (confluent-kafka only) is Kafka 4's consumer group protocol
instead (``group.protocol=consumer``, KIP-848: the coordinator sets the session and
heartbeat interval and assigns, so neither is configured).  With GROUP_INSTANCE_ID in
the environment it is a static member (``group.instance.id``, KIP-345).  It
reads with auto-commit every 200 ms and prints one JSON line per event on stdout:
``assigned`` / ``revoked`` / ``lost`` (the partitions each callback received, with
the time), ``records`` (partition -> offsets of what one poll returned) and ``read``
(records so far), until SIGTERM (then it closes: commit and LeaveGroup) or SIGKILL.
A record's offset becomes committable only after its ``records`` line is written
(librdkafka: offsets stored by hand; kafka-python commits in the next poll), so a
SIGKILL never commits a record this process did not report.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def emit(**event) -> None:
    print(json.dumps({"ts": time.time(), **event}), flush=True)


def main() -> None:
    kind, bootstrap, group, topic, client_id, session = sys.argv[1:7]
    strategy = sys.argv[7] if len(sys.argv) > 7 else None
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    read, last = 0, 0.0
    pending: dict[int, list[int]] = {}

    def flush(force: bool = False) -> None:
        nonlocal last
        if pending:
            emit(event="records", offsets={str(p): offs for p, offs in sorted(pending.items())})
            pending.clear()
        if force or time.monotonic() - last > 0.5:
            emit(event="read", count=read)
            last = time.monotonic()

    if kind == "confluent":
        from confluent_kafka import Consumer, KafkaException

        conf = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                "auto.offset.reset": "earliest", "enable.auto.commit": True, "auto.commit.interval.ms": 200,
                "enable.auto.offset.store": False}
        if os.environ.get("PEER_DEBUG"):  # librdkafka's debug contexts, into the peer's stderr file
            conf["debug"] = os.environ["PEER_DEBUG"]
        if os.environ.get("GROUP_INSTANCE_ID"):
            conf["group.instance.id"] = os.environ["GROUP_INSTANCE_ID"]
        if strategy == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"session.timeout.ms": int(session), "heartbeat.interval.ms": 300})
            if strategy:
                conf["partition.assignment.strategy"] = strategy
        c = Consumer(conf)
        c.subscribe([topic],
                    on_assign=lambda _c, ps: emit(event="assigned", partitions=sorted(p.partition for p in ps),
                                                  member=c.memberid()),
                    on_revoke=lambda _c, ps: emit(event="revoked", partitions=sorted(p.partition for p in ps)),
                    on_lost=lambda _c, ps: emit(event="lost", partitions=sorted(p.partition for p in ps)))
        while not stop:
            got = [m for m in c.consume(500, 0.2) if m.error() is None]
            for m in got:
                read += 1
                pending.setdefault(m.partition(), []).append(m.offset())
            flush()
            for m in got:
                try:
                    c.store_offsets(message=m)
                except KafkaException:  # revoked meanwhile: not ours to commit any more
                    pass
        flush(force=True)
        c.close()
    else:
        from kafka import ConsumerRebalanceListener, KafkaConsumer

        class Listener(ConsumerRebalanceListener):
            def on_partitions_assigned(self, assigned):
                emit(event="assigned", partitions=sorted(p.partition for p in assigned))

            def on_partitions_revoked(self, revoked):
                emit(event="revoked", partitions=sorted(p.partition for p in revoked))

            def on_partitions_lost(self, lost):
                emit(event="lost", partitions=sorted(p.partition for p in lost))

        options = {}
        if strategy == "cooperative-sticky":
            from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor

            options["partition_assignment_strategy"] = [CooperativeStickyAssignor]
        c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
                          auto_offset_reset="earliest", enable_auto_commit=True, auto_commit_interval_ms=200,
                          session_timeout_ms=int(session), heartbeat_interval_ms=300, **options)
        c.subscribe([topic], listener=Listener())
        while not stop:
            for tp, records in c.poll(200).items():
                read += len(records)
                pending.setdefault(tp.partition, []).extend(r.offset for r in records)
            flush()
        flush(force=True)
        c.close()
    emit(event="closed", count=read)


if __name__ == "__main__":
    main()
