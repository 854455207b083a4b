"""Produce throughput in transactions against idempotent produce, on Apache Kafka 4.2 and on our broker.

Run:  .venv/bin/python bench/bench_transactions.py [--records 200000] [--per-txn 1000 10000] [--runs 3]

In one run, against one Apache Kafka 4.2 node (KRaft, from its jars) and one broker of ours (with its
ZooKeeper), each on a topic of 6 partitions, with two clients:
- librdkafka (confluent-kafka's Producer, acks=all, linger 5 ms): idempotent, and transactional with
  a commit every ``--per-txn`` records (begin, produce, commit_transaction);
- our Python client (``client.producer.Producer`` idempotent, ``client.transactions.
  TransactionalProducer`` committing every ``--per-txn`` records).
Each figure is records/s until the last record is acknowledged (and, transactional, its transaction
committed); medians over ``--runs``, the targets and clients taken in alternating order.  The ratio
is transactional / idempotent on the same broker with the same client: what a transaction per
micro-batch task costs (the exactly-once sink's goal is 0.8 at one transaction per batch per task).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from spark_coord.cluster import LocalCluster  # noqa: E402

RECORD_SIZE = 100
PARTITIONS = 6


def new_topic(bootstrap: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"txn-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer: its handle serves the future
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    return name


def librdkafka(bootstrap: str, n: int, per_txn: int | None) -> float:
    """records/s of confluent-kafka's producer: idempotent (``per_txn`` None) or a transaction per ``per_txn``."""
    from confluent_kafka import Producer

    topic = new_topic(bootstrap)
    # a queue that holds every record: the idempotent run never blocks on a full queue, as the
    # transactional ones never do (each commit empties it), so the two differ only by transactions
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            "queue.buffering.max.messages": max(100_000, n + 1), "queue.buffering.max.kbytes": 2_097_151}
    if per_txn:
        conf["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    producer = Producer(conf)
    value = b"x" * RECORD_SIZE
    failed: list = []

    def report(err, _msg) -> None:
        if err:
            failed.append(err)

    if per_txn:
        producer.init_transactions(60)
    start = time.perf_counter()
    for i in range(n):
        if per_txn and i % per_txn == 0:
            if i:
                producer.commit_transaction(60)
            producer.begin_transaction()
        while True:
            try:
                producer.produce(topic, value, partition=i % PARTITIONS, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    if per_txn:
        producer.commit_transaction(60)
    else:
        producer.flush(60)
    took = time.perf_counter() - start
    assert not failed, failed[:3]
    return n / took


def ours_client(bootstrap: str, n: int, per_txn: int | None) -> float:
    """records/s of our Python client: ``Producer`` idempotent, or ``TransactionalProducer``."""
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer
    from spark_coord.client.transactions import TransactionalProducer

    topic = new_topic(bootstrap)
    value = b"x" * RECORD_SIZE
    with ClusterClient(bootstrap) as cc:
        cc.topic(topic, refresh=True, wait=30)
        if per_txn:
            producer = TransactionalProducer(cc, f"bench-{uuid.uuid4().hex[:8]}", batch_size=65536)
            producer.init_transactions()
        else:
            producer = Producer(cc, acks=-1, idempotence=True, batch_size=65536)
        start = time.perf_counter()
        for i in range(n):
            if per_txn and i % per_txn == 0:
                if i:
                    producer.commit_transaction()
                producer.begin_transaction()
            producer.send(topic, value, partition=i % PARTITIONS)
        if per_txn:
            producer.commit_transaction()
        else:
            producer.flush()
        return n / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--per-txn", type=int, nargs="+", default=[1000, 10000],
                   help="records per transaction (one row per value)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--no-kafka", action="store_true", help="only our broker")
    args = p.parse_args(argv)
    clients = {"librdkafka": librdkafka, "ours (Python)": ours_client}
    modes: list[int | None] = [None, *args.per_txn]
    samples: dict[tuple[str, str, int | None], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-txn-") as tmp:
        tmp_path = Path(tmp)
        targets: dict[str, str] = {}
        kafka = None
        if not args.no_kafka:
            from peers.apache_kafka import ApacheKafkaCluster, kafka_jars

            kafka = ApacheKafkaCluster(tmp_path / "kafka", jars=kafka_jars())
            kafka.__enter__()
            targets["Apache Kafka 4.2"] = kafka.bootstrap
        try:
            with LocalCluster(1, tmp_path / "ours") as ours:
                targets["ours"] = ours.bootstrap
                print(f"{args.records:,} records of {RECORD_SIZE} B, {PARTITIONS} partitions, {args.runs} run(s): "
                      + ", ".join(f"{k} at {v}" for k, v in targets.items()), flush=True)
                for run in range(args.runs):
                    names = list(targets) if run % 2 == 0 else list(reversed(targets))
                    for target in names:
                        for client, measure in clients.items():
                            for mode in modes:
                                rate = measure(targets[target], args.records, mode)
                                samples.setdefault((target, client, mode), []).append(rate)
                                print(f"  run {run + 1}: {target}, {client}, "
                                      f"{'idempotent' if mode is None else f'{mode} per transaction'}: "
                                      f"{rate:,.0f} records/s", flush=True)
        finally:
            if kafka is not None:
                kafka.__exit__(None, None, None)
    rows = []
    print()
    print("| broker | client | records per transaction | records/s | idempotent records/s | ratio |")
    print("|---|---|---:|---:|---:|---:|")
    for target in targets:
        for client in clients:
            base = statistics.median(samples[(target, client, None)])
            for mode in args.per_txn:
                rate = statistics.median(samples[(target, client, mode)])
                rows.append({"broker": target, "client": client, "per_txn": mode, "records_s": rate,
                             "idempotent_records_s": base, "ratio": rate / base})
                print(f"| {target} | {client} | {mode:,} | {rate:,.0f} | {base:,.0f} | {rate / base:.2f} |")
    import figures

    figures.write("transactions", {"records": args.records, "runs": args.runs, "record_size": RECORD_SIZE,
                                   "partitions": PARTITIONS, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
