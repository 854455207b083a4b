"""Shared pieces of the example jobs: a sample click stream, its schema, and a local cluster.

Not a job itself; ``jobs/quickstart.py`` and ``jobs/sessionize_clicks.py`` import it
(spark-submit puts the job's directory on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import tempfile
import threading
import time

log = logging.getLogger("jobs.clicks")

USERS = [f"user-{i}" for i in range(20)]
PAGES = ["/", "/docs", "/pricing", "/blog", "/signup", "/login"]
CLICK_DDL = "user STRING, page STRING, ts TIMESTAMP"


@contextlib.contextmanager
def cluster_or(bootstrap: str | None, partitions: int = 3):
    """Yield a bootstrap string: ``bootstrap`` as given, or a fresh local cluster's (ZooKeeper +
    one broker in a temporary directory), stopped and removed on exit."""
    if bootstrap:
        yield bootstrap
        return
    with tempfile.TemporaryDirectory(prefix="spark-coord-job-") as tmp:
        log.info("starting ZooKeeper and one broker in %s", tmp)
        with _local_cluster(tmp, partitions) as bootstrap:
            log.info("cluster up at %s", bootstrap)
            yield bootstrap


@contextlib.contextmanager
def _local_cluster(data_dir: str, partitions: int):
    """``spark-coord up`` in a child process.

    A child because under spark-submit ``pyspark`` is imported from Spark's
    ``pyspark.zip``, where the embedded ZooKeeper launcher cannot find the
    ZooKeeper jars; the child gets a PYTHONPATH without that zip.
    """
    import os
    import signal
    import subprocess
    import sys

    from spark_coord.client.metadata import ClusterClient
    from spark_coord.net import free_port

    zk_port, port = free_port(), free_port()
    bootstrap = f"127.0.0.1:{port}"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                        if p and not p.endswith(".zip"))
    log_file = open(os.path.join(data_dir, "cluster.log"), "wb")
    proc = subprocess.Popen([sys.executable, "-m", "spark_coord.cli", "up", "--zk-port", str(zk_port), "--port",
                             str(port), "--data-dir", os.path.join(data_dir, "cluster"),
                             "--override", f"num.partitions={partitions}"],
                            stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"spark-coord up exited with {proc.returncode}; see {log_file.name}")
            try:
                with ClusterClient(bootstrap, timeout=2.0) as cc:
                    if cc.refresh(None) is not None and cc.brokers:
                        break
            except Exception:  # noqa: BLE001 -- not up yet, whatever the failure; the deadline decides
                if time.monotonic() > deadline:
                    raise RuntimeError(f"local cluster did not come up in 90 s; see {log_file.name}") from None
            time.sleep(0.3)
        yield bootstrap
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        log_file.close()


def ensure_topic(bootstrap: str, topic: str, partitions: int = 3) -> None:
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc:
        AdminClient(cc).create_topic(topic, partitions, if_not_exists=True)


class ClickProducer(threading.Thread):
    """Background thread producing JSON click events (keyed by user) at about ``rate`` per second."""

    def __init__(self, bootstrap: str, topic: str, rate: float = 200.0, seed: int = 7) -> None:
        super().__init__(name="click-producer", daemon=True)
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.random = random.Random(seed)
        self.stopping = threading.Event()
        self.sent = 0

    def event(self) -> tuple[bytes, bytes]:
        # each user clicks for 15 s of every minute (staggered), so sessions end and can be closed
        now = time.time()
        active = [u for i, u in enumerate(USERS) if (now + 3 * i) % 60 < 15] or USERS
        user = self.random.choice(active)
        # event time lags a little behind wall-clock time, as real clicks arriving late do
        ts = time.time() - self.random.random() * 3
        body = {"user": user, "page": self.random.choice(PAGES),
                "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}Z"}
        return user.encode(), json.dumps(body).encode()

    def run(self) -> None:
        from spark_coord.client.metadata import ClusterClient
        from spark_coord.client.producer import Producer

        with ClusterClient(self.bootstrap) as cc:
            producer = Producer(cc, acks=1)
            tick = 0.1
            while not self.stopping.is_set():
                for _ in range(max(1, int(self.rate * tick))):
                    key, value = self.event()
                    producer.send(self.topic, value, key=key)
                    self.sent += 1
                producer.flush()
                self.stopping.wait(tick)
            producer.flush()

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


def partition_offsets(bootstrap: str, topic: str) -> list[dict]:
    """Earliest and latest offset of each partition of ``topic``."""
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc:
        return AdminClient(cc).describe([topic])


def parsed_clicks(spark, bootstrap: str, topic: str, **options):
    """The click topic as a stream of (user, page, ts) rows plus the Kafka partition and offset."""
    from pyspark.sql import functions as F

    reader = (spark.readStream.format("coordkafka").option("bootstrap.brokers", bootstrap)
              .option("subscribe", topic))
    for k, v in options.items():
        reader = reader.option(k, v)
    raw = reader.load()
    return raw.select(F.from_json(F.col("value").cast("string"), CLICK_DDL).alias("c"), "partition", "offset") \
              .select("c.*", "partition", "offset")
