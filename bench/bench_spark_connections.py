"""What keeping connections between tasks buys: small micro-batches over SASL_SSL and PLAINTEXT.

A local one-broker cluster with a PLAINTEXT and a SASL_SSL listener (SCRAM-SHA-512, a
throw-away CA).  A 4-partition topic holds ``--records`` 100-byte records; each query
reads it from earliest with ``Trigger.AvailableNow`` and ``maxOffsetsPerTrigger``
``--per-batch`` into the ``noop`` sink, so it runs records / per-batch small
micro-batches of 4 tasks each.  Per listener, ``--runs`` times and interleaved:

* **kept**: the default, ``kafka.connections.max.idle.ms`` 9 minutes: each Spark Python
  worker keeps its connections (and their TLS session and SASL log-in) for its next task;
* **per task**: ``kafka.connections.max.idle.ms=0``: every task connects, and over
  SASL_SSL shakes hands and logs in, again (as every task did before connections were kept).

A warm-up query comes first (Python workers, the JVM); the two modes alternate which goes
first.  Each query gets a client id of its own, so its first batch finds no connection kept
by an earlier query (as in a fresh worker).  Printed: the first batch's duration and the
median of the later batches' (Spark's ``addBatch``: planning aside, the batch's job),
and beside them what one connection costs: TCP + TLS + SCRAM log-in + ApiVersions from
Python (median of 20).

    ./spark-submit.sh bench/bench_spark_connections.py
    ./spark-submit.sh bench/bench_spark_connections.py --records 8000 --per-batch 400 --runs 5
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

log = logging.getLogger("bench.spark_connections")

USER, PASSWORD = "bench", "bench-s3cret-pw"


def start_cluster(tmp: Path):
    """A one-broker LocalCluster with PLAINTEXT and SASL_SSL listeners; (cluster, plaintext, sasl_ssl, ca)."""
    from spark_coord.cluster import LocalCluster
    from spark_coord.net import free_port
    from testkit.tls import TestPki

    pki = TestPki(tmp / "pki")
    plain, secure = free_port(), free_port()
    cluster = LocalCluster(1, tmp / "cluster", base_port=plain, overrides={
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{secure}",
        "ssl.keystore.location": str(pki.server().keystore), "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "num.partitions": 4})
    cluster.start()
    from spark_coord.security.credentials import UserStore
    from spark_coord.zk.client import close, connect

    zk = connect(cluster.zk_connect)
    try:
        UserStore(zk).set_password(USER, PASSWORD)
    finally:
        close(zk)
    return cluster, f"127.0.0.1:{plain}", f"127.0.0.1:{secure}", str(pki.ca_path)


def security_options(ca: str) -> dict[str, str]:
    return {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.username": USER, "kafka.sasl.password": PASSWORD, "kafka.ssl.ca.location": ca}


def connect_cost(bootstrap: str, options: dict[str, str], n: int = 20) -> float:
    """Median seconds to open one connection (TCP, TLS and SASL as ``options`` say, ApiVersions)."""
    from spark_coord.client.connection import BrokerConnection
    from spark_coord.client.metadata import parse_bootstrap
    from spark_coord.security.client import ClientSecurity

    security = ClientSecurity.from_settings(options, prefix="kafka.") if options else None
    host, port = parse_bootstrap(bootstrap)[0]
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        BrokerConnection(host, port, security=security).close()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def produce(bootstrap: str, topic: str, records: int) -> None:
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer

    with ClusterClient(bootstrap) as cc:
        AdminClient(cc).create_topic(topic, 4)
        producer = Producer(cc, acks=-1, batch_size=65536)
        for i in range(records):
            producer.send(topic, b"%012d" % i + b"x" * 88, partition=i % 4)
        producer.flush()


def batch_times(spark, bootstrap: str, topic: str, options: dict[str, str], per_batch: int, records: int
                ) -> list[float]:
    """Seconds of each micro-batch (addBatch) of one AvailableNow query."""
    reader = (spark.readStream.format("coordkafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", per_batch).option("kafka.client.id", f"bench-{uuid.uuid4().hex[:8]}"))
    for k, v in options.items():
        reader = reader.option(k, v)
    ckpt = tempfile.mkdtemp(prefix="bench-ckpt-")
    query = reader.load().writeStream.format("noop").option("checkpointLocation", ckpt) \
        .trigger(availableNow=True).start()
    query.awaitTermination()
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    if sum(p["numInputRows"] for p in progress) != records:
        raise RuntimeError(f"read {sum(p['numInputRows'] for p in progress)} rows, expected {records}")
    return [p["durationMs"]["addBatch"] / 1000 for p in progress]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=4000)
    p.add_argument("--per-batch", type=int, default=200, help="maxOffsetsPerTrigger")
    p.add_argument("--runs", type=int, default=3, help="queries per listener and mode")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from pyspark.sql import SparkSession

    results: dict[tuple[str, str], list[list[float]]] = {}
    costs = {}
    with tempfile.TemporaryDirectory(prefix="spark-coord-bench-") as tmp:
        cluster, plain, secure, ca = start_cluster(Path(tmp))
        try:
            topic = f"small-{uuid.uuid4().hex[:6]}"
            produce(plain, topic, args.records)
            listeners = {"SASL_SSL": (secure, security_options(ca)), "PLAINTEXT": (plain, {})}
            for name, (bootstrap, options) in listeners.items():
                costs[name] = connect_cost(bootstrap, options)
            spark = SparkSession.builder.appName("bench-coordkafka-connections").getOrCreate()
            try:
                batch_times(spark, plain, topic, {}, args.per_batch, args.records)  # warm-up: workers, JVM
                modes = [("kept", "540000"), ("per task", "0")]
                for run in range(args.runs):
                    for name, (bootstrap, options) in listeners.items():
                        for mode, idle in modes if run % 2 == 0 else modes[::-1]:
                            times = batch_times(spark, bootstrap, topic, {**options,
                                                "kafka.connections.max.idle.ms": idle}, args.per_batch, args.records)
                            log.info("%s, %s, run %d: first batch %.3f s, later median %.3f s", name, mode, run + 1,
                                     times[0], statistics.median(times[1:]))
                            results.setdefault((name, mode), []).append(times)
            finally:
                spark.stop()
        finally:
            cluster.stop()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{args.records:,} records of 100 bytes in 4 partitions, micro-batches of {args.per_batch} "
          f"(4 tasks each), {args.runs} queries per listener and mode; load average {load:.2f} at the end")
    print(f"{'listener':<11}{'connections':<13}{'first batch (s)':>17}{'later batches (s)':>19}"
          f"{'one connection (ms)':>21}")
    for (name, mode), runs in results.items():
        first = statistics.median(t[0] for t in runs)
        later = statistics.median(x for t in runs for x in t[1:])
        print(f"{name:<11}{mode:<13}{first:>17.3f}{later:>19.3f}{costs[name] * 1000:>21.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
