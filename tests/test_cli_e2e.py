"""The console commands end to end: ``python -m spark_coord.cli ...`` subprocesses against a
LocalCluster (topics, produce, tail and their errors), and ``spark-coord up`` started and
stopped with Ctrl-C."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import local_cluster, wait_until

from spark_coord.records.partitioner import partition_for_key

PARTITIONS = 3
CLI_TIMEOUT = 60


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with local_cluster(zookeeper, tmp_path_factory.mktemp("cli-e2e"), 2, "cli-e2e",
                       {"num.partitions": PARTITIONS}) as c:
        yield c


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """Run ``spark-coord ARGS`` to completion; stdout is bytes, stderr text."""
    proc = subprocess.run([sys.executable, "-m", "spark_coord.cli", *args], input=stdin, capture_output=True,
                          timeout=CLI_TIMEOUT)
    proc.stderr = proc.stderr.decode(errors="replace")
    return proc


def ok(*args: str, stdin: bytes | None = None) -> bytes:
    proc = cli(*args, stdin=stdin)
    assert proc.returncode == 0, f"spark-coord {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}"
    return proc.stdout


def test_topics_create_list_describe_delete(cluster):
    b = ["--bootstrap", cluster.bootstrap]
    ok("topics", *b, "create", "cli-admin", "--partitions", "4")
    ok("topics", *b, "create", "cli-admin-2")
    assert {"cli-admin", "cli-admin-2"} <= set(ok("topics", *b, "list").decode().split())

    again = cli("topics", *b, "create", "cli-admin")
    assert again.returncode == 1 and "cli-admin" in again.stderr
    ok("topics", *b, "create", "cli-admin", "--if-not-exists")

    lines = ok("topics", *b, "describe", "cli-admin").decode().splitlines()
    assert lines[0].split() == ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "EARLIEST", "LATEST"]
    assert set(lines[1]) <= {"-", " "}
    rows = [line.split() for line in lines[2:]]
    assert [r[0] for r in rows] == ["cli-admin"] * 4
    assert [int(r[1]) for r in rows] == [0, 1, 2, 3]
    assert {int(r[2]) for r in rows} == set(cluster.brokers), "partitions not spread over both brokers"
    assert all(r[3] == r[2] and r[4:] == ["0", "0"] for r in rows)
    described = ok("topics", *b, "describe").decode()
    assert "cli-admin-2" in described and described.count("cli-admin ") == 4

    ok("topics", *b, "delete", "cli-admin")
    wait_until(lambda: "cli-admin" not in ok("topics", *b, "list").decode().split(), 20,
               message="deleted topic gone from the listing")
    assert "cli-admin-2" in ok("topics", *b, "list").decode().split()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_file_then_tail_prints_exactly_what_was_produced(cluster, tmp_path, codec):
    b = ["--bootstrap", cluster.bootstrap]
    topic = f"cli-{codec}"
    ok("topics", *b, "create", topic, "--partitions", str(PARTITIONS))
    lines = [f"k{i % 5}:value {i} with: colons \t and tabs é".encode() for i in range(200)]
    lines += [b"no-separator-here", b":empty-key", b"k9:"]
    path = tmp_path / "in.txt"
    path.write_bytes(b"\n".join(lines) + b"\n")
    ok("produce", *b, "--topic", topic, "--file", str(path), "--key-separator", ":", "--compression", codec)

    # keyed lines land where Kafka's partitioner puts them; tail prints key:value for each
    expected: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for line in lines:
        key, sep, value = line.partition(b":")
        if not sep:
            continue  # no key: any partition
        expected[partition_for_key(key, PARTITIONS)].append(line)
    out = ok("tail", *b, "--topic", topic, "--offset", "earliest", "--key-separator", ":")
    assert sorted(out.splitlines()) == sorted([line if b":" in line else b":" + line for line in lines])
    for p in range(PARTITIONS):
        got = ok("tail", *b, "--topic", topic, "--partition", str(p), "--key-separator", ":").splitlines()
        assert [line for line in got if not line.startswith(b":no-separator")] == expected[p], f"partition {p}"

    # --count stops after exactly that many; --offset N starts there; values alone without -K
    first3 = ok("tail", *b, "--topic", topic, "--partition", "0", "--count", "3").splitlines()
    assert first3 == [line.partition(b":")[2] for line in expected[0][:3]]
    from_2 = ok("tail", *b, "--topic", topic, "--partition", "0", "--offset", "2", "-c", "1").splitlines()
    assert from_2 == [expected[0][2].partition(b":")[2]]
    assert ok("tail", *b, "--topic", topic, "--offset", "latest") == b""


def test_bootstrap_after_the_action_as_the_readme_types_it(cluster):
    b = ["-b", cluster.bootstrap]
    ok("topics", "create", "cli-after", "--partitions", "2", *b)
    assert "cli-after" in ok("topics", "list", *b).decode().split()
    described = ok("topics", "describe", "cli-after", *b).decode().splitlines()
    assert [line.split()[:2] for line in described[2:]] == [["cli-after", "0"], ["cli-after", "1"]]
    ok("topics", "delete", "cli-after", *b)
    wait_until(lambda: "cli-after" not in ok("topics", "list", *b).decode().split(), 20,
               message="deleted topic gone from the listing")


def test_produce_from_stdin_and_tail_empty_values(cluster):
    b = ["--bootstrap", cluster.bootstrap]
    ok("topics", *b, "create", "cli-stdin", "--partitions", "1")
    ok("produce", *b, "-t", "cli-stdin", stdin=b"one\r\n\ntwo\n")
    assert ok("tail", *b, "-t", "cli-stdin").splitlines() == [b"one", b"", b"two"]


def test_unknown_topic_is_exit_1_with_a_message_naming_it(cluster):
    b = ["--bootstrap", cluster.bootstrap]
    for args in (["tail", *b, "--topic", "no-such-topic"],
                 ["produce", *b, "--topic", "no-such-topic"],
                 ["topics", *b, "describe", "no-such-topic"]):
        _assert_names_unknown_topic(cli(*args, stdin=b"x\n"), args)


def test_deleting_an_unknown_topic_is_exit_1_naming_it(cluster):
    args = ["topics", "--bootstrap", cluster.bootstrap, "delete", "no-such-topic"]
    _assert_names_unknown_topic(cli(*args), args)


def _assert_names_unknown_topic(proc: subprocess.CompletedProcess, args: list[str]) -> None:
    assert proc.returncode == 1, f"{args}: exit {proc.returncode}\n{proc.stderr}"
    assert "no-such-topic" in proc.stderr, f"{args}: {proc.stderr}"
    assert "Traceback" not in proc.stderr


def test_bad_arguments_are_reported(cluster):
    b = ["--bootstrap", cluster.bootstrap]
    ok("topics", *b, "create", "cli-bad-args", "--partitions", "1")
    proc = cli("tail", *b, "--topic", "cli-bad-args", "--offset", "soon")
    assert proc.returncode == 2 and "--offset" in proc.stderr
    proc = cli("produce", *b, "--topic", "cli-bad-args", "--file", "/nonexistent/input.txt")
    assert proc.returncode != 0 and "input.txt" in proc.stderr and "Traceback" not in proc.stderr
    proc = cli("topics", "--bootstrap", "127.0.0.1:1", "list")
    assert proc.returncode == 1 and "127.0.0.1:1" in proc.stderr and "Traceback" not in proc.stderr


# ---------------------------------------------------------------------- spark-coord up

def _processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text`` (Linux /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next((line for line in (entry / "status").read_text().splitlines()
                          if line.startswith("State:")), "")
        except OSError:
            continue
        if text in cmdline and "zombie" not in state:
            pids.append(int(entry.name))
    return pids


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to look for leftover processes")
def test_up_serves_until_ctrl_c_and_leaves_nothing_behind(tmp_path):
    data_dir = tmp_path / "up-cluster"
    proc = subprocess.Popen([sys.executable, "-m", "spark_coord.cli", "up", "--brokers", "2", "--zk-port", "0",
                             "--port", "0", "--data-dir", str(data_dir)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: queue.Queue[str | None] = queue.Queue()
    seen: list[str] = []

    def pump() -> None:
        for raw in proc.stderr:
            lines.put(raw.decode(errors="replace"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        bootstrap = None
        deadline = time.monotonic() + 90
        while bootstrap is None:
            left = deadline - time.monotonic()
            assert left > 0, "spark-coord up did not log its bootstrap address:\n" + "".join(seen)
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                continue
            assert line is not None, f"spark-coord up exited ({proc.wait()}):\n" + "".join(seen)
            seen.append(line)
            m = re.search(r"bootstrap: (\S+)", line)
            if m:
                bootstrap = m.group(1)
        assert len(bootstrap.split(",")) == 2
        assert any(re.search(r"ZooKeeper at \S+:\d+", s) for s in seen)
        assert _processes_mentioning(str(data_dir)), "no broker or ZooKeeper process found"
        # it serves: both brokers answer
        ok("topics", "--bootstrap", bootstrap, "create", "up-topic", "--partitions", "2")
        assert "up-topic" in ok("topics", "--bootstrap", bootstrap, "list").decode().split()

        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, "".join(seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    wait_until(lambda: not _processes_mentioning(str(data_dir)), 20,
               message=lambda: f"leftover processes {_processes_mentioning(str(data_dir))}")
