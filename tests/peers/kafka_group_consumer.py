"""A Kafka-client group consumer as a test process: ``python kafka_group_consumer.py
{confluent|kafka-python} BOOTSTRAP GROUP TOPIC CLIENT_ID SESSION_MS``.

It subscribes (Kafka's group protocol), reads with auto-commit every 200 ms and prints
one JSON line per event on stdout: ``assigned`` / ``revoked`` (partitions) and ``read``
(records so far), until SIGTERM (then it closes: commit and LeaveGroup) or SIGKILL.
"""

from __future__ import annotations

import json
import signal
import sys
import time


def emit(**event) -> None:
    print(json.dumps(event), flush=True)


def main() -> None:
    kind, bootstrap, group, topic, client_id, session = sys.argv[1:7]
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    read, last = 0, 0.0
    if kind == "confluent":
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                      "auto.offset.reset": "earliest", "enable.auto.commit": True, "auto.commit.interval.ms": 200,
                      "session.timeout.ms": int(session), "heartbeat.interval.ms": 300})
        c.subscribe([topic],
                    on_assign=lambda _c, ps: emit(event="assigned", partitions=sorted(p.partition for p in ps)),
                    on_revoke=lambda _c, ps: emit(event="revoked", partitions=sorted(p.partition for p in ps)))
        while not stop:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                read += 1
            if time.monotonic() - last > 0.5:
                emit(event="read", count=read)
                last = time.monotonic()
        c.close()
    else:
        from kafka import ConsumerRebalanceListener, KafkaConsumer

        class Listener(ConsumerRebalanceListener):
            def on_partitions_assigned(self, assigned):
                emit(event="assigned", partitions=sorted(p.partition for p in assigned))

            def on_partitions_revoked(self, revoked):
                emit(event="revoked", partitions=sorted(p.partition for p in revoked))

        c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
                          auto_offset_reset="earliest", enable_auto_commit=True, auto_commit_interval_ms=200,
                          session_timeout_ms=int(session), heartbeat_interval_ms=300)
        c.subscribe([topic], listener=Listener())
        while not stop:
            for records in c.poll(200).values():
                read += len(records)
            if time.monotonic() - last > 0.5:
                emit(event="read", count=read)
                last = time.monotonic()
        c.close()
    emit(event="closed", count=read)


if __name__ == "__main__":
    main()
