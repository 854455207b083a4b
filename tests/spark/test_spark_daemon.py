"""The Python daemon that forks Spark's workers with coordkafka's read path loaded
(``pyspark_coordkafka.daemon``, ``spark.python.daemon.module``).

- Started as Spark starts it (``python -m``, the port on its standard output, its end when its
  standard input closes), it serves with one thread: what it loaded started none, so forking
  from it is as safe as forking from pyspark's own daemon.
- The session of these tests runs it: a task's worker is the child of a daemon that has the
  compiled decoder mapped (numba's ``llvmlite`` library), which pyspark's own daemon never
  loads, and coordkafka reads through it give the records.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import uuid

from spark_session import ROOT, spark_env

from spark_coord.client.admin import AdminClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.producer import Producer


def test_the_daemon_serves_with_one_thread_and_ends_with_its_input():
    spark_env()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("OPENBLAS_NUM_THREADS", None)  # as Spark starts it: the daemon sets its own
    proc = subprocess.Popen([sys.executable, "-m", "pyspark_coordkafka.daemon"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        port_bytes = proc.stdout.read(4)
        assert len(port_bytes) == 4, proc.stderr.read().decode(errors="replace")
        (port,) = struct.unpack(">i", port_bytes)
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass
        threads = os.listdir(f"/proc/{proc.pid}/task")
        assert len(threads) == 1, threads
        with open(f"/proc/{proc.pid}/maps") as f:
            assert "llvmlite" in f.read(), "the compiled decoder is loaded before the daemon forks"
        proc.stdin.close()
        assert proc.wait(timeout=30) is not None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_task_runs_in_a_worker_forked_from_the_preloading_daemon(spark, cluster):
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class ParentReader(DataSourceReader):
        def partitions(self):
            return [InputPartition(0)]

        def read(self, partition):
            import os

            with open(f"/proc/{os.getppid()}/maps") as f:
                preloaded = "llvmlite" in f.read()
            with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
                parent = f.read().replace(b"\0", b" ").decode()
            yield (preloaded, parent)

    class Parent(DataSource):
        @classmethod
        def name(cls):
            return "worker_parent"

        def schema(self):
            return "preloaded boolean, parent string"

        def reader(self, schema):
            return ParentReader()

    spark.dataSource.register(Parent)
    [row] = spark.read.format("worker_parent").load().collect()
    assert "pyspark_coordkafka.daemon" in row.parent and row.preloaded, row

    topic = f"daemon-{uuid.uuid4().hex[:6]}"
    with ClusterClient(cluster.bootstrap) as c:
        AdminClient(c).create_topic(topic, 2)
        producer = Producer(c)
        for i in range(2000):
            producer.send(topic, b"v%d" % i, key=b"k%d" % (i % 7))
        producer.flush()
    df = (spark.read.format("coordkafka").option("bootstrap.brokers", cluster.bootstrap)
          .option("subscribe", topic).load())
    values = sorted(r.value for r in df.select("value").collect())
    assert values == sorted(b"v%d" % i for i in range(2000))
