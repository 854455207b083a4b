"""spark_coord.zk.embedded: the real Apache ZooKeeper server process, and its CLI."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import wait_until
from kazoo.client import KazooState

from spark_coord.zk import client as zkclient
from spark_coord.zk import embedded
from spark_coord.zk.embedded import EmbeddedZooKeeper, ZooKeeperError, four_letter_word

ROOT = Path(__file__).resolve().parents[2]


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _port_closed(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return True
    return False


def test_session_server_answers(zookeeper):
    answer = four_letter_word(zookeeper.host, zookeeper.port, "srvr")
    assert "Mode: standalone" in answer
    assert re.search(r"Zookeeper version: 3\.", answer)
    assert zookeeper.is_alive()


def test_start_stop_temp_dir_process_really_gone(tmp_path):
    zk = EmbeddedZooKeeper()
    with pytest.raises(ZooKeeperError):
        zk.connect_string  # noqa: B018 - no port before start
    with zk:
        pid, port, data_dir = zk.pid, zk.port, zk.data_dir
        assert port > 0 and zk.connect_string == f"127.0.0.1:{port}"
        c = zkclient.connect(zk.connect_string, connection_timeout_ms=10000)
        c.create("/hello", b"world")
        assert c.get("/hello")[0] == b"world"
        zkclient.close(c)
        assert (data_dir / "zookeeper.log").exists()
        cfg = (data_dir / "zoo.cfg").read_text()
        assert f"clientPort={port}" in cfg and "admin.enableServer=false" in cfg
    assert _process_gone(pid)
    assert _port_closed(port)
    assert not data_dir.exists()  # temporary data dir removed
    zk.stop()  # idempotent


def test_kill_then_restart_keeps_port_data_and_session(tmp_path):
    # A client that reconnects while the restarted server is still starting may find its connection
    # accepted and never answered (ZooKeeper 3.x logs "ZooKeeperServer not running" and a
    # NullPointerException instead of closing it); kazoo then waits session timeout / hosts for the
    # ConnectResponse before it tries again.  The server is named twice (kazoo waits 20 s at most) and
    # the session is 40 s (tickTime 2000 allows up to 20 ticks), so the session outlives such a wait.
    zk = EmbeddedZooKeeper(data_dir=tmp_path / "zk", settings={"tickTime": 2000})
    zk.start()
    try:
        port = zk.port
        c = zkclient.connect(f"{zk.connect_string},{zk.connect_string}", session_timeout_ms=40000,
                             connection_timeout_ms=10000)
        states: list[str] = []
        c.add_listener(states.append)
        c.create("/durable", b"1")
        session = c.client_id[0]
        old_pid = zk.pid
        zk.kill()
        assert _process_gone(old_pid)
        wait_until(lambda: KazooState.SUSPENDED in states, 10, message="client to notice the crash")
        zk.start()
        assert zk.port == port and zk.pid != old_pid
        wait_until(lambda: c.connected, 35, message="client to reconnect to the restarted server")
        assert c.client_id[0] == session  # sessions survive a restart within their timeout
        assert c.get("/durable")[0] == b"1"
        assert KazooState.LOST not in states
        zkclient.close(c)
    finally:
        zk.stop()
    assert (tmp_path / "zk").exists()  # a given data dir is kept


def test_port_in_use_fails_with_log_tail(tmp_path):
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(1)
        port = blocker.getsockname()[1]
        zk = EmbeddedZooKeeper(port=port, data_dir=tmp_path)
        with pytest.raises(ZooKeeperError) as e:
            zk.start(timeout=30)
        assert "exited with code" in str(e.value)
        assert re.search(r"address already in use|BindException", str(e.value), re.IGNORECASE)
        assert not zk.is_alive()
        zk.stop()


def test_missing_or_old_java_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(embedded, "_java_checked", {})
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(ZooKeeperError, match="JAVA_HOME"):
        EmbeddedZooKeeper().start()

    fake_home = tmp_path / "jdk8"
    (fake_home / "bin").mkdir(parents=True)
    java = fake_home / "bin" / "java"
    java.write_text('#!/bin/sh\necho \'java version "1.8.0_292"\' >&2\n')
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("JAVA_HOME", str(fake_home))
    with pytest.raises(ZooKeeperError, match="Java 8; Java 17 or newer"):
        embedded.find_java()

    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ZooKeeperError, match="java not found"):
        embedded.find_java()


def test_render_cfg_escapes_values_as_java_reads_them():
    from spark_coord.config import parse_properties

    assert "a=true\n" in embedded.render_cfg({"a": True, "b": None})
    tricky = {"dataDir": "/x\nclientPort=1", "note": " lead \u00e9 \\ # ! = :"}
    text = embedded.render_cfg(tricky)
    assert text.isascii()  # ZooKeeper reads zoo.cfg as ISO-8859-1: anything else goes as \\uXXXX
    assert parse_properties(text) == tricky  # read back exactly: no injected clientPort
    with pytest.raises(ValueError, match="setting name"):
        embedded.render_cfg({"a=b": "1"})


def test_bad_port_argument():
    for bad in (-1, 70000, True, "2181"):
        with pytest.raises(ValueError):
            EmbeddedZooKeeper(port=bad)


def _read_lines(stream, out: "queue.Queue[str]") -> None:
    for line in iter(stream.readline, ""):
        out.put(line)


def test_cli_serves_until_sigterm_and_exits_zero(tmp_path):
    data_dir = tmp_path / "zkdata"
    conf = tmp_path / "zookeeper.properties"
    conf.write_text(f"clientPort=0\ndataDir={data_dir}\ntickTime=1000\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "spark_coord.cli", "zookeeper", "--config", str(conf),
                             "--override", "minSessionTimeout=2000"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=_read_lines, args=(proc.stderr, lines), daemon=True).start()
    seen: list[str] = []
    java_pid = None
    try:
        def listening():
            while not lines.empty():
                seen.append(lines.get())
                m = re.search(r"listening on 127\.0\.0\.1:(\d+) \(pid (\d+)\)", seen[-1])
                if m:
                    return int(m.group(1)), int(m.group(2))
            assert proc.poll() is None, f"CLI exited early: {''.join(seen)}"
            return None

        port, java_pid = wait_until(listening, 60, message=lambda: f"the listening line; got {''.join(seen)!r}")
        c = zkclient.connect(f"127.0.0.1:{port}", connection_timeout_ms=10000)
        c.create("/from-cli-test", b"1")
        zkclient.close(c)
        assert "minSessionTimeout=2000" in (data_dir / "zoo.cfg").read_text()

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert _process_gone(java_pid)
        assert _port_closed(port)
        assert proc.stdout.read() == ""  # ZooKeeper's output goes to its log file, not ours
        assert (data_dir / "zookeeper.log").exists()
        assert (data_dir / "version-2").is_dir()  # data persisted where the config said
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if java_pid is not None and not _process_gone(java_pid):
            os.kill(java_pid, signal.SIGKILL)


def test_cli_bad_config_exits_2(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "spark_coord.cli", "zookeeper", "--override", "clientPort=abc"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "clientPort" in proc.stderr


# ------------------------------------------------------------------------ ensemble

def test_myid_comes_from_the_setting_or_the_data_dir_and_must_name_a_server(tmp_path):
    servers = {"server.1": "127.0.0.1:2888:3888", "server.2": "127.0.0.1:2889:3889"}
    assert embedded.ensemble_servers({**servers, "clientPort": 2181}) == {1: "127.0.0.1:2888:3888",
                                                                          2: "127.0.0.1:2889:3889"}
    assert embedded.resolve_myid({**servers, "myid": "2"}, tmp_path) == 2
    with pytest.raises(ZooKeeperError, match="without an id"):
        embedded.resolve_myid(servers, tmp_path)
    (tmp_path / "myid").write_text("1\n")
    assert embedded.resolve_myid(servers, tmp_path) == 1  # as ZooKeeper reads it
    with pytest.raises(ZooKeeperError, match="belongs to server 1"):
        embedded.resolve_myid({**servers, "myid": 2}, tmp_path)
    with pytest.raises(ZooKeeperError, match=r"no server\.3 line"):
        embedded.resolve_myid({**servers, "myid": 3}, tmp_path / "elsewhere")
    with pytest.raises(ZooKeeperError, match="not an integer"):
        embedded.resolve_myid({**servers, "myid": "one"}, tmp_path / "elsewhere")


def test_cli_member_without_an_id_exits_1_naming_myid(tmp_path):
    conf = tmp_path / "zookeeper.properties"
    conf.write_text(f"clientPort=0\ndataDir={tmp_path / 'd'}\nserver.1=127.0.0.1:2888:3888\n"
                    "server.2=127.0.0.1:2889:3889\nserver.3=127.0.0.1:2890:3890\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "spark_coord.cli", "zookeeper", "--config", str(conf)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "myid" in proc.stderr


def test_cli_runs_the_members_of_a_three_server_ensemble(tmp_path):
    from spark_coord.net import free_port

    ports = []
    while len(ports) < 9:
        p = free_port()
        if p not in ports:
            ports.append(p)
    lines = "".join(f"server.{n}=127.0.0.1:{ports[3 + n - 1]}:{ports[6 + n - 1]}\n" for n in (1, 2, 3))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs, outputs, java_pids = [], [], []
    try:
        for n in (1, 2, 3):
            data = tmp_path / f"zk{n}"
            conf = tmp_path / f"zk{n}.properties"
            # Kafka's layout: server lines plus dataDir/myid written beforehand for server 3
            if n == 3:
                data.mkdir()
                (data / "myid").write_text("3\n")
            own = "" if n == 3 else f"myid={n}\n"
            conf.write_text(f"clientPort={ports[n - 1]}\ndataDir={data}\ntickTime=500\n{own}{lines}")
            proc = subprocess.Popen([sys.executable, "-m", "spark_coord.cli", "zookeeper", "--config", str(conf)],
                                    cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True)
            q: "queue.Queue[str]" = queue.Queue()
            threading.Thread(target=_read_lines, args=(proc.stderr, q), daemon=True).start()
            procs.append(proc)
            outputs.append((q, []))

        def modes():
            found = []
            for (q, seen), proc in zip(outputs, procs, strict=True):
                while not q.empty():
                    seen.append(q.get())
                assert proc.poll() is None, f"a member exited early: {''.join(seen)}"
                m = next((re.search(r"\(pid (\d+)\); mode (\w+)", line) for line in seen
                          if re.search(r"\(pid (\d+)\); mode (\w+)", line)), None)
                found.append(m)
            return [(int(m.group(1)), m.group(2)) for m in found] if all(found) else None

        served = wait_until(modes, 90, 0.1, message=lambda: f"three serving members; logs: {[s for _, s in outputs]}")
        java_pids = [pid for pid, _ in served]
        assert sorted(mode for _, mode in served) == ["follower", "follower", "leader"]
        assert (tmp_path / "zk1" / "myid").read_text().strip() == "1"
        assert not any(line.startswith("myid") for line in (tmp_path / "zk1" / "zoo.cfg").read_text().splitlines())
        writer = zkclient.connect(f"127.0.0.1:{ports[0]}", connection_timeout_ms=10000)
        reader = zkclient.connect(f"127.0.0.1:{ports[2]}", connection_timeout_ms=10000)
        try:
            writer.create("/replicated", b"yes")
            reader.sync("/replicated")
            assert reader.get("/replicated")[0] == b"yes"
        finally:
            zkclient.close(writer)
            zkclient.close(reader)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        assert [proc.wait(timeout=30) for proc in procs] == [0, 0, 0]
        assert all(_process_gone(pid) for pid in java_pids)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for pid in java_pids:
            if not _process_gone(pid):
                os.kill(pid, signal.SIGKILL)
