"""Our group members over SASL and TLS: the thin consumer (ClientSecurity or Kafka's client keys
in its config), ``spark-coord consume`` and ``groups describe`` with ``-X``/``--command-config``,
against a broker with SASL_SSL and SASL_PLAINTEXT listeners only where it matters."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from helpers import group_offsets, wait_until
from security_support import PASSWORDS, add_users, sasl_overrides, sasl_ssl

from spark_coord.client.admin import AdminClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.producer import Producer
from spark_coord.consumer import Consumer

N = 40


@pytest.fixture
def sasl_broker(broker_factory, server_cert, zk):
    add_users(zk, "alice")
    return broker_factory(0, **sasl_overrides(server_cert, **{"num.partitions": 2}))


def _bootstrap(b, listener: str) -> str:
    return f"127.0.0.1:{b.broker.bound_ports[listener]}"


def _topic(b, pki, listener: str) -> str:
    topic = f"cs-{uuid.uuid4().hex[:6]}"
    with ClusterClient(_bootstrap(b, listener), timeout=10, security=sasl_ssl(pki, protocol=listener)) as cc:
        AdminClient(cc).create_topic(topic, 2)
        p = Producer(cc)
        for i in range(N):
            p.send(topic, f"v{i}".encode(), partition=i % 2)
        p.flush()
    return topic


@pytest.mark.parametrize("listener", ["SASL_SSL", "SASL_PLAINTEXT"])
def test_thin_consumer_joins_a_group_over_sasl(sasl_broker, pki, zk_connect, listener):
    topic, group = _topic(sasl_broker, pki, listener), f"g-{uuid.uuid4().hex[:6]}"
    settings = {"security.protocol": listener, "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                "sasl.password": PASSWORDS["alice"]}
    if listener == "SASL_SSL":
        settings["ssl.ca.location"] = str(pki.ca_path)
    with Consumer(_bootstrap(sasl_broker, listener), group, topics=[topic], auto_offset_reset="smallest",
                  session_timeout_ms=6000, config=settings) as c:
        assert "alice-s3cret" not in repr(c.security)
        got = []
        wait_until(lambda: got.extend(r.value for r in c.messages(timeout=0.5)) or len(got) >= N, timeout=60,
                   message=lambda: f"{N} records over {listener}; have {len(got)}")
        c.commit(c.positions(), timeout=10)
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(N))
    assert sum(group_offsets(zk_connect, group, topic).values()) == N
    principals = {str(conn.auth.principal) for conn in sasl_broker.broker.server.connections
                  if conn.auth.listener_name == listener}
    assert principals <= {"User:alice"}


def test_consume_and_groups_cli_over_sasl_ssl(sasl_broker, pki, tmp_path):
    topic, group = _topic(sasl_broker, pki, "SASL_SSL"), f"cli-{uuid.uuid4().hex[:6]}"
    conf = tmp_path / "client.properties"
    conf.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=alice\n"
                    f"ssl.ca.location={pki.ca_path}\n")
    bootstrap = _bootstrap(sasl_broker, "SASL_SSL")
    out = subprocess.run([sys.executable, "-m", "spark_coord.cli", "consume", "-b", bootstrap, "--group", group,
                          "--topic", topic, "--from-beginning", "--count", str(N), "--command-config", str(conf),
                          "-X", f"sasl.password={PASSWORDS['alice']}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert sorted(out.stdout.split()) == sorted(f"v{i}" for i in range(N))
    assert PASSWORDS["alice"] not in out.stdout + out.stderr
    described = subprocess.run([sys.executable, "-m", "spark_coord.cli", "groups", "describe", group, "-b", bootstrap,
                                "--json", "--command-config", str(conf), "-X", f"sasl.password={PASSWORDS['alice']}"],
                               capture_output=True, text=True, timeout=60)
    assert described.returncode == 0, described.stderr[-2000:]
    assert f'"group_id": "{group}"' in described.stdout
    wrong = subprocess.run([sys.executable, "-m", "spark_coord.cli", "groups", "list", "-b", bootstrap,
                            "--command-config", str(conf), "-X", "sasl.password=wrong"],
                           capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 1 and "wrong" not in wrong.stderr
