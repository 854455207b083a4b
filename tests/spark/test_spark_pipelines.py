"""The Spark Declarative Pipeline of jobs/pipeline, run as docs/spark/pipelines.md says
(``./spark-pipelines.sh run --spec jobs/pipeline/spark-pipeline.yml``) against a local cluster.

- A run completes; the streaming table ``clicks_raw`` holds every record of the topic and the
  materialized view ``clicks_per_key`` counts them.
- After more records, the next run appends only those (the table's checkpoint in the
  pipeline's storage): no record twice.
- ``--full-refresh-all`` resets the table and its checkpoint: without a group the table is
  read again from the topic's start (``startingOffsets`` earliest); with ``group.id`` the
  group's committed offsets decide, so the rebuilt table starts where the group got to.
- A run's local Connect server takes a port of its own: a run while Spark's default Connect
  port (15002) is taken (by a Spark Connect server, another pipeline) completes.

The tables are read from their Parquet files in the state directory's warehouse.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from helpers import group_offsets
from spark_data import new_topic, produce

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "jobs" / "pipeline" / "spark-pipeline.yml"

#: each run starts Spark (a Connect server in the pipeline's process): about 30 s
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def run_pipeline(cluster, state: Path, topic: str, *extra: str, group: str | None = None) -> str:
    """``./spark-pipelines.sh --state STATE --conf spark.coordkafka.clicks.topic=TOPIC run --spec ...``,
    the broker from CLICKS_BOOTSTRAP (both ways of setting the pipeline's source)."""
    import os

    env = dict(os.environ, CLICKS_BOOTSTRAP=cluster.bootstrap)
    env.pop("CLICKS_GROUP", None)
    if group:
        env["CLICKS_GROUP"] = group
    cmd = [str(ROOT / "spark-pipelines.sh"), "--state", str(state), "--conf", f"spark.coordkafka.clicks.topic={topic}",
           "run", "--spec", str(SPEC), *extra]
    proc = subprocess.run(cmd, cwd=state.parent, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Run is COMPLETED" in out, out[-5000:]
    return out


@contextlib.contextmanager
def connect_port_taken():
    """Spark's default Connect port (15002) held by a listener that never answers, for the block;
    where something else already holds it, it is taken all the same."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", 15002))
            s.listen()
        except OSError:
            pass
        yield


def table(state: Path, name: str) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(state / "warehouse" / name).to_pylist()


def raw(state: Path) -> list[tuple]:
    """clicks_raw as sorted (value, partition, offset)."""
    return sorted((r["value"], r["partition"], r["offset"]) for r in table(state, "clicks_raw"))


def per_key(state: Path) -> dict:
    return {r["key"]: r["count"] for r in table(state, "clicks_per_key")}


def expected(rows: list[tuple]) -> list[tuple]:
    return sorted((r[1].decode(), r[3], r[4]) for r in rows)


def expected_counts(rows: list[tuple]) -> dict:
    return dict(Counter(None if r[0] is None else r[0].decode() for r in rows))


def test_pipeline_runs_incrementally_and_full_refresh_rereads_the_topic(cluster, tmp_path):
    topic = new_topic(cluster)
    state = tmp_path / "state"
    first = produce(cluster, topic, 20)
    run_pipeline(cluster, state, topic)
    assert raw(state) == expected(first)
    assert per_key(state) == expected_counts(first)
    assert (state / "coordkafka_clicks" / "_checkpoints").is_dir()  # the spec's relative storage

    more = produce(cluster, topic, 10, start=20)
    run_pipeline(cluster, state, topic)
    assert raw(state) == expected(first + more)  # the new records once, nothing read twice
    assert per_key(state) == expected_counts(first + more)

    run_pipeline(cluster, state, topic, "--full-refresh-all")
    assert raw(state) == expected(first + more)  # rebuilt from the topic's start
    assert per_key(state) == expected_counts(first + more)


def test_full_refresh_with_a_group_starts_at_the_groups_offsets(cluster, tmp_path):
    topic = new_topic(cluster)
    group = f"pipeline-{topic}"
    state = tmp_path / "state"
    first = produce(cluster, topic, 20)
    run_pipeline(cluster, state, topic, group=group)
    assert raw(state) == expected(first)
    assert group_offsets(cluster.zk_connect, group, topic) == {0: 10, 1: 10}

    more = produce(cluster, topic, 10, start=20)
    with connect_port_taken():
        run_pipeline(cluster, state, topic, "--full-refresh-all", group=group)
    # the table and its checkpoint were reset, but the group had committed up to the first run's end
    assert raw(state) == expected(more)
    assert per_key(state) == expected_counts(more)
    assert group_offsets(cluster.zk_connect, group, topic) == {0: 15, 1: 15}
