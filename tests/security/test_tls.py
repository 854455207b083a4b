"""TLS listeners: several listeners per broker, Metadata per listener, our clients and Kafka's over
SSL, mutual TLS, host name checks, bad settings, and garbage on a TLS port."""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import uuid

import pytest
from helpers import wait_until
from security_support import tls_overrides

from spark_coord.client.admin import EARLIEST, AdminClient
from spark_coord.client.connection import BrokerConnection, BrokerConnectionError
from spark_coord.client.fetcher import fetch
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.producer import Producer
from spark_coord.config import ConfigError
from spark_coord.records.reader import iter_records
from spark_coord.security.client import ClientSecurity
from spark_coord.wire.registry import ApiKey
from spark_coord.zk import paths

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


def ssl_client(pki, **kw) -> ClientSecurity:
    return ClientSecurity(protocol="SSL", ca_location=str(pki.ca_path), **kw)


def produce_and_read(bootstrap: str, security: ClientSecurity | None, topic: str, n: int = 20) -> list[bytes]:
    with ClusterClient(bootstrap, timeout=10, security=security) as cc:
        AdminClient(cc).create_topic(topic, 2)
        producer = Producer(cc, acks=-1)
        for i in range(n):
            producer.send(topic, f"v{i}".encode(), partition=i % 2)
        producer.flush()
        got = []
        for p in (0, 1):
            start = AdminClient(cc).list_offsets(topic, [p], EARLIEST)[p]
            data = fetch(cc.connection(cc.leader(topic, p)), {(topic, p): start}, max_wait_ms=100)[0]
            got += [r.value for r in iter_records(data.records)]
        return sorted(got)


def test_broker_serves_plaintext_and_ssl_listeners_and_registers_both(broker_factory, server_cert, pki, zk):
    b = broker_factory(1, **tls_overrides(server_cert))
    ports = b.broker.bound_ports
    assert set(ports) == {"PLAINTEXT", "SSL"} and ports["PLAINTEXT"] != ports["SSL"]
    doc = json.loads(b.broker.zk.get(paths.broker(1))[0])
    assert doc["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}
    assert doc["endpoints"] == [f"PLAINTEXT://127.0.0.1:{ports['PLAINTEXT']}", f"SSL://127.0.0.1:{ports['SSL']}"]
    assert (doc["host"], doc["port"]) == ("127.0.0.1", ports["PLAINTEXT"])

    want = [f"v{i}".encode() for i in range(20)]
    assert produce_and_read(f"127.0.0.1:{ports['SSL']}", ssl_client(pki), "over-tls") == sorted(want)
    assert produce_and_read(f"127.0.0.1:{ports['PLAINTEXT']}", None, "over-plain") == sorted(want)


def test_metadata_advertises_the_listener_the_client_came_in_on(broker_factory, server_cert, pki):
    b = broker_factory(0, **tls_overrides(server_cert))
    ports = b.broker.bound_ports
    with BrokerConnection("127.0.0.1", ports["SSL"], timeout=10, security=ssl_client(pki)) as conn:
        brokers = conn.request(ApiKey.METADATA, {"topics": []})["brokers"]
    assert [(x["host"], x["port"]) for x in brokers] == [("127.0.0.1", ports["SSL"])]
    with BrokerConnection("127.0.0.1", ports["PLAINTEXT"], timeout=10) as conn:
        brokers = conn.request(ApiKey.METADATA, {"topics": []})["brokers"]
    assert [(x["host"], x["port"]) for x in brokers] == [("127.0.0.1", ports["PLAINTEXT"])]


def test_advertised_listeners_and_a_named_listener_mapped_to_ssl(broker_factory, server_cert, pki, zk):
    b = broker_factory(2, **tls_overrides(
        server_cert, "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        **{"listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SSL",
           "advertised.listeners": "EXTERNAL://localhost:0", "inter.broker.listener.name": "INTERNAL"}))
    ports = b.broker.bound_ports
    doc = json.loads(b.broker.zk.get(paths.broker(2))[0])
    assert doc["endpoints"] == [f"INTERNAL://127.0.0.1:{ports['INTERNAL']}", f"EXTERNAL://localhost:{ports['EXTERNAL']}"]
    assert doc["listener_security_protocol_map"] == {"INTERNAL": "PLAINTEXT", "EXTERNAL": "SSL"}
    # the certificate names localhost: a client told "localhost" verifies the host name
    with BrokerConnection("localhost", ports["EXTERNAL"], timeout=10, security=ssl_client(pki)) as conn:
        brokers = conn.request(ApiKey.METADATA, {"topics": []})["brokers"]
    assert [(x["host"], x["port"]) for x in brokers] == [("localhost", ports["EXTERNAL"])]


def test_client_checks_the_brokers_certificate_and_host_name(broker_factory, pki, tmp_path):
    other = pki.server("elsewhere", hosts=("elsewhere.example",))
    b = broker_factory(0, **tls_overrides(other))
    port = b.broker.bound_ports["SSL"]
    with pytest.raises(BrokerConnectionError, match="certificate verify failed|Hostname mismatch|IP address mismatch"):
        BrokerConnection("127.0.0.1", port, timeout=10, security=ssl_client(pki))
    # the chain is still checked without the host name check ...
    with BrokerConnection("127.0.0.1", port, timeout=10, security=ssl_client(pki, check_hostname=False)) as conn:
        assert conn.version_for(ApiKey.METADATA) is not None
    # ... so a CA we do not trust fails either way
    from testkit.tls import TestPki
    stranger = TestPki(tmp_path / "stranger")
    with pytest.raises(BrokerConnectionError, match="certificate verify failed"):
        BrokerConnection("127.0.0.1", port, timeout=10,
                         security=ClientSecurity(protocol="SSL", ca_location=str(stranger.ca_path),
                                                 check_hostname=False))


def test_mutual_tls_requires_a_client_certificate_from_the_trusted_ca(broker_factory, server_cert, pki):
    b = broker_factory(0, **tls_overrides(server_cert, **{"ssl.client.auth": "required",
                                                          "ssl.truststore.location": str(pki.ca_path)}))
    port = b.broker.bound_ports["SSL"]
    with pytest.raises((BrokerConnectionError, OSError)):
        with BrokerConnection("127.0.0.1", port, timeout=10, security=ssl_client(pki)) as conn:
            conn.request(ApiKey.METADATA, {"topics": []})  # TLS 1.3: the refusal arrives with the first read
    client = pki.client("app", organization="example")
    security = ssl_client(pki, certificate_location=str(client.cert), key_location=str(client.key))
    with BrokerConnection("127.0.0.1", port, timeout=10, security=security) as conn:
        conn.request(ApiKey.METADATA, {"topics": []})
        principals = wait_until(lambda: [str(c.auth.principal) for c in b.broker.server.connections
                                         if c.auth.listener_name == "SSL"], message="the SSL connection")
    assert principals == ["User:CN=app,O=example"]


@pytest.mark.parametrize("overrides, fragment", [
    ({"listeners": "SSL://127.0.0.1:0"}, "ssl.keystore.location"),
    ({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": "/nonexistent/broker.pem"}, "no such file"),
    ({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "JKS"}, "only PEM"),
    ({"listeners": "FOO://127.0.0.1:0"}, "listener.security.protocol.map"),
    ({"listeners": "PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0"}, "appears twice"),
    ({"listeners": "PLAINTEXT://127.0.0.1:0", "security.inter.broker.protocol": "SSL"}, "no listener speaks SSL"),
    ({"listeners": "PLAINTEXT://127.0.0.1:0", "advertised.listeners": "SSL://h:1"}, "not one of the listeners"),
])
def test_bad_listener_and_tls_settings_name_the_key(overrides, fragment, tmp_path):
    from spark_coord import config
    from spark_coord.broker.broker import Broker

    with pytest.raises(ConfigError, match=fragment):
        Broker(config.load(config.BROKER, None, {"log.dirs": str(tmp_path), **overrides}))


def test_encrypted_key_needs_its_password(pki, tmp_path):
    from spark_coord import config
    from spark_coord.broker.broker import Broker

    cert = pki.server("locked", key_password="k3y-pass")
    base = {"log.dirs": str(tmp_path), "listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(cert.keystore)}
    with pytest.raises(ConfigError, match="ssl.keystore.location") as e:
        Broker(config.load(config.BROKER, None, base))
    assert "k3y-pass" not in str(e.value)
    Broker(config.load(config.BROKER, None, {**base, "ssl.key.password": "k3y-pass"}))  # loads
    # the same key and chain given as PEM text in the settings, per listener
    per_listener = {"log.dirs": str(tmp_path), "listeners": "SSL://127.0.0.1:0",
                    "listener.name.ssl.ssl.keystore.key": cert.key.read_text(),
                    "listener.name.ssl.ssl.keystore.certificate.chain": cert.cert.read_text(),
                    "listener.name.ssl.ssl.key.password": "k3y-pass"}
    cfg = config.load(config.BROKER, None, per_listener)
    assert "k3y-pass" not in repr(cfg) and "PRIVATE KEY" not in repr(cfg)
    Broker(cfg)


def test_garbage_on_a_tls_listener_leaves_other_clients_served(broker_factory, server_cert, pki):
    b = broker_factory(0, **tls_overrides(server_cert))
    port = b.broker.bound_ports["SSL"]
    with BrokerConnection("127.0.0.1", port, timeout=10, security=ssl_client(pki)) as good:
        junk = [os.urandom(4096), b"\x00\x00\x00\x10" + bytes(16),  # random bytes, a plaintext Kafka frame
                b"\x16\x03\x01\xff\xff" + os.urandom(300),           # a TLS record header announcing too much
                b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"]
        for data in junk:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(data)
                s.settimeout(10)
                try:
                    while s.recv(4096):
                        pass
                except (ConnectionResetError, socket.timeout):
                    pass
        # a client that completes the handshake and then sends garbage inside TLS
        ctx = ssl.create_default_context(cafile=str(pki.ca_path))
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                             server_hostname="127.0.0.1") as s:
            s.sendall(b"\x7f\xff\xff\xff" + b"x" * 64)
            assert s.recv(10) == b""  # oversized frame: the broker closes this connection
        # a client that connects and never finishes its handshake does not hold up the others
        idle = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            for _ in range(3):
                assert good.request(ApiKey.METADATA, {"topics": []})["brokers"]
            with BrokerConnection("127.0.0.1", port, timeout=10, security=ssl_client(pki)) as another:
                assert another.request(ApiKey.METADATA, {"topics": []})["brokers"]
        finally:
            idle.close()


def test_confluent_kafka_produces_and_consumes_over_ssl(broker_factory, server_cert, pki):
    from confluent_kafka import Consumer
    from confluent_kafka import Producer as CKProducer

    b = broker_factory(0, **tls_overrides(server_cert, **{"num.partitions": 1, "auto.create.topics.enable": True}))
    conf = {"bootstrap.servers": f"127.0.0.1:{b.broker.bound_ports['SSL']}", "security.protocol": "ssl",
            "ssl.ca.location": str(pki.ca_path)}
    topic = f"ck-ssl-{uuid.uuid4().hex[:6]}"
    with ClusterClient(f"127.0.0.1:{b.broker.bound_ports['SSL']}", security=ssl_client(pki)) as cc:
        AdminClient(cc).create_topic(topic, 1)
    p = CKProducer({**conf, "acks": "all"})
    errors = []
    for i in range(50):
        p.produce(topic, f"m{i}".encode(), partition=0, on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(30) == 0 and not errors
    c = Consumer({**conf, "group.id": "unused", "enable.auto.commit": False})
    from confluent_kafka import TopicPartition
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    try:
        wait_until(lambda: got.extend(m.value() for m in c.consume(50, 1.0) if not m.error()) or len(got) >= 50,
                   timeout=30, message="50 records over SSL")
    finally:
        c.close()
    assert got == [f"m{i}".encode() for i in range(50)]


@pytest.mark.skipif(KCAT is None, reason="kcat is not on PATH (apt-get install kcat)")
def test_kcat_produces_and_consumes_over_ssl(broker_factory, server_cert, pki):
    b = broker_factory(0, **tls_overrides(server_cert))
    bootstrap = f"127.0.0.1:{b.broker.bound_ports['SSL']}"
    topic = f"kcat-ssl-{uuid.uuid4().hex[:6]}"
    with ClusterClient(bootstrap, security=ssl_client(pki)) as cc:
        AdminClient(cc).create_topic(topic, 1)
    common = [KCAT, "-b", bootstrap, "-X", "security.protocol=ssl", "-X", f"ssl.ca.location={pki.ca_path}",
              "-X", "log_level=3", "-t", topic]
    lines = "".join(f"line {i}\n" for i in range(30)).encode()
    subprocess.run(common + ["-P", "-p", "0"], input=lines, check=True, timeout=60, capture_output=True)
    out = subprocess.run(common + ["-C", "-e", "-o", "beginning", "-f", "%s\n"], check=True, timeout=60,
                         capture_output=True).stdout
    assert out == lines
