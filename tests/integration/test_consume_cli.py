"""``spark-coord consume`` as a process: SIGTERM leaves the group cleanly, and the close is
bounded by the session timeout whatever the cluster does (here: it stops right after)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import wait_until
from support import BackgroundProducer, committed, create_topic, log_end, wait_caught_up

SESSION_MS = 3000


def _consuming(cluster, tmp_path, group: str, topic: str) -> tuple[subprocess.Popen, object]:
    """A topic with records, and ``spark-coord consume`` printing them (the producer stopped)."""
    create_topic(cluster.bootstrap, topic, 3)
    producer = BackgroundProducer(cluster.bootstrap, topic, 3, batch=2)
    producer.start()
    proc, out = _consume(cluster, tmp_path, group, topic)
    try:
        wait_until(lambda: (tmp_path / f"{group}.out").stat().st_size > 1000, timeout=30, message="records printed")
    except AssertionError:
        proc.kill()
        out.close()
        raise
    finally:
        producer.stop()
    return proc, out


def _consume(cluster, tmp_path, group: str, topic: str) -> tuple[subprocess.Popen, object]:
    out = open(tmp_path / f"{group}.out", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "spark_coord.cli", "--log-level", "WARNING", "consume",
                             "-b", cluster.bootstrap, "--group", group, "--topic", topic, "--from-beginning",
                             "--override", f"session.timeout.ms={SESSION_MS}"],
                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    return proc, out


def test_sigterm_commits_the_final_offsets_and_leaves(cluster, czk, tmp_path):
    proc, out = _consuming(cluster, tmp_path, "g-cli", "cli")
    try:
        ends = log_end(cluster.bootstrap, "cli")
        wait_until(lambda: sum(1 for _ in open(tmp_path / "g-cli.out", "rb")) >= sum(ends.values()), timeout=30,
                   message="every record printed")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(SESSION_MS / 1000 + 5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        out.close()
    wait_caught_up(czk, "g-cli", ends, timeout=1)  # committed by the final CommitOffsets, not later
    assert committed(czk, "g-cli") == ends


@pytest.mark.parametrize("how", ["sigkill", "sigterm", "sigstop"])
def test_close_is_bounded_when_the_cluster_stops_right_after_sigterm(cluster, tmp_path, how):
    proc, out = _consuming(cluster, tmp_path, "g-cli2", "cli2")
    try:
        proc.send_signal(signal.SIGTERM)
        for b, p in cluster.procs.items():  # the whole cluster goes away (or hangs) at once
            if how == "sigstop":
                p.send_signal(signal.SIGSTOP)
            else:
                cluster.kill_broker(b, signal.SIGKILL if how == "sigkill" else signal.SIGTERM)
        started = time.monotonic()
        try:
            code = proc.wait(SESSION_MS / 1000 + 2)  # its session timeout, plus the interpreter's exit
        finally:
            print(f"\nconsume exited {time.monotonic() - started:.2f} s after its cluster was killed")
        assert code == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        out.close()
