"""coordkafka on a Spark standalone cluster, submitted as docs/spark/clusters.md, "Running on a cluster", says:
a master and two workers on loopback (the pyspark wheel's own launcher), the executors'
Python shipped as ``env.tar.gz`` built by scripts/pack-env.sh, the job submitted with
``PYSPARK_PYTHON=./env/bin/python ./spark-submit.sh --master spark://... --archives
env.tar.gz#env``.  Checks: the Parquet sink holds every record exactly once, the group's offsets in ZooKeeper
reach the log end while the query runs, the executors of both workers ran with the
packed environment, and the job stops cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from helpers import group_offsets, wait_until
from standalone import StandaloneSpark, cluster_env

from spark_coord.client.admin import LATEST, AdminClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.producer import Producer

#: Building the packed environment and two JVMs per worker take minutes on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).resolve().parent / "standalone_job.py"
TOPIC, GROUP, PARTITIONS, RECORDS = "standalone", "standalone-g", 4, 1200


@pytest.fixture(scope="module")
def packed_env(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pack") / "env.tar.gz"
    proc = subprocess.run([str(ROOT / "scripts" / "pack-env.sh"), str(out)], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def committed_rows(out: Path) -> list[dict]:
    """Rows of the files the file sink's ``_spark_metadata`` log lists (committed batches only)."""
    import pyarrow.parquet as pq

    files = []
    logs = [p for p in (out / "_spark_metadata").iterdir() if p.name.split(".")[0].isdigit()]  # not .crc files
    for entry in sorted(logs, key=lambda p: int(p.name.split(".")[0])):
        for line in entry.read_text().splitlines()[1:]:  # first line: the log version
            record = json.loads(line)
            if record.get("action", "add") == "add":
                files.append(Path(unquote(urlparse(record["path"]).path)))
    return [row for f in files for row in pq.read_table(f).to_pylist()]


def test_group_query_on_a_standalone_cluster_exactly_once(cluster, packed_env, tmp_path):
    with ClusterClient(cluster.bootstrap) as cc:
        AdminClient(cc).create_topic(TOPIC, PARTITIONS)
        producer = Producer(cc)
        for i in range(RECORDS):
            producer.send(TOPIC, f"v{i}".encode(), key=f"k{i}".encode())
        producer.flush()
        ends = AdminClient(cc).list_offsets(TOPIC, None, LATEST)
    assert sum(ends.values()) == RECORDS

    (tmp_path / "env.tar.gz").symlink_to(packed_env)
    out, checkpoint, stop = tmp_path / "out", tmp_path / "checkpoint", tmp_path / "stop"
    with StandaloneSpark(tmp_path / "spark", workers=2) as spark:
        env = cluster_env()
        env["PYSPARK_PYTHON"] = "./env/bin/python"
        submit = [str(ROOT / "spark-submit.sh"), "--master", spark.master_url, "--archives", "env.tar.gz#env",
                  "--driver-memory", "1g", "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=2",
                  str(JOB), "--bootstrap", cluster.bootstrap, "--topic", TOPIC, "--group", GROUP, "--members", "2",
                  "--out", str(out), "--checkpoint", str(checkpoint), "--stop-file", str(stop)]
        job_log = tmp_path / "job.log"
        with open(job_log, "wb") as log:
            job = subprocess.Popen(submit, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            def progress():
                assert job.poll() is None, f"the job exited {job.returncode}:\n{StandaloneSpark.tail(job_log, 60)}"
                return group_offsets(cluster.zk_connect, GROUP, TOPIC) == ends and len(committed_rows(out)) >= RECORDS

            wait_until(progress, timeout=400, interval=1, message=lambda: (
                f"all {RECORDS} records in the sink and group offsets {ends}; offsets now "
                f"{group_offsets(cluster.zk_connect, GROUP, TOPIC)}\n{StandaloneSpark.tail(job_log)}"))
            stop.touch()
            assert job.wait(120) == 0, StandaloneSpark.tail(job_log, 60)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait(30)
        assert f"master {spark.master_url}" in job_log.read_text(errors="replace")

        # each worker ran an executor of the job, with the shipped environment unpacked beside it
        for i in range(2):
            executors = list(spark.work_dir(i).glob("app-*/*"))
            assert executors, f"no executor on worker {i}"
            assert all((e / "env" / "bin" / "python").exists() for e in executors), executors

    rows = committed_rows(out)
    seen = [(r["partition"], r["offset"]) for r in rows]
    assert len(seen) == len(set(seen)) == RECORDS, f"{len(seen)} rows, {len(set(seen))} distinct"
    assert {p: max(o for q, o in seen if q == p) + 1 for p, _ in seen} == ends
    assert sorted(r["value"] for r in rows) == sorted(f"v{i}" for i in range(RECORDS))
    assert group_offsets(cluster.zk_connect, GROUP, TOPIC) == ends
