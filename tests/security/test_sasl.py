"""SASL listeners: SCRAM-SHA-256/512 and PLAIN for our clients and Kafka's, refusals that close the
connection with nothing served, users changed while brokers run, and passwords kept out of logs."""

from __future__ import annotations

import logging
import os
import shutil
import struct
import subprocess
import sys
import uuid

import pytest
from helpers import wait_until
from kafka_io import connect, is_closed, recv_exactly, roundtrip
from security_support import PASSWORDS, add_users, sasl_overrides, sasl_ssl

from spark_coord.client.admin import AdminClient
from spark_coord.client.connection import BrokerConnection
from spark_coord.client.fetcher import fetch
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.producer import Producer
from spark_coord.client.transport import SaslAuthenticationFailed
from spark_coord.errors import ErrorCode
from spark_coord.records.reader import iter_records
from spark_coord.security.credentials import UserStore
from spark_coord.wire.protocol import encode_request
from spark_coord.wire.registry import ApiKey

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.fixture
def sasl_broker(broker_factory, server_cert, zk):
    add_users(zk, "alice", "bob")
    return broker_factory(0, **sasl_overrides(server_cert, **{"num.partitions": 1}))


def bootstrap(b, listener: str = "SASL_SSL") -> str:
    return f"127.0.0.1:{b.broker.bound_ports[listener]}"


def roundtrip_records(address: str, security, topic: str, n: int = 10) -> list[bytes]:
    with ClusterClient(address, timeout=10, security=security) as cc:
        AdminClient(cc).create_topic(topic, 1)
        producer = Producer(cc, acks=-1)
        for i in range(n):
            producer.send(topic, f"{topic}-{i}".encode(), partition=0)
        producer.flush()
        data = fetch(cc.connection(cc.leader(topic, 0)), {(topic, 0): 0}, max_wait_ms=100)[0]
        return [r.value for r in iter_records(data.records)]


@pytest.mark.parametrize("listener, mechanism", [
    ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    ("SASL_SSL", "PLAIN"),  # PLAIN checked against the SCRAM credentials (no JAAS users configured)
])
def test_our_clients_authenticate_and_are_served(sasl_broker, pki, listener, mechanism):
    topic = f"t-{mechanism.lower()}-{uuid.uuid4().hex[:6]}"
    security = sasl_ssl(pki, "alice", mechanism, protocol=listener)
    assert roundtrip_records(bootstrap(sasl_broker, listener), security, topic) == \
        [f"{topic}-{i}".encode() for i in range(10)]
    port = sasl_broker.broker.bound_ports[listener]
    with BrokerConnection("127.0.0.1", port, timeout=10, security=security) as conn:
        conn.request(ApiKey.METADATA, {"topics": []})
        principals = {str(c.auth.principal) for c in sasl_broker.broker.server.connections
                      if c.auth.listener_name == listener}
    assert principals == {"User:alice"}


def sasl_frames(address, mechanism: str, token: bytes, handshake_version: int = 1):
    """Raw SaslHandshake + one SaslAuthenticate on a plain socket; returns (socket, handshake, authenticate)."""
    s = connect(address)
    hs = roundtrip(s, ApiKey.SASL_HANDSHAKE, handshake_version, {"mechanism": mechanism})
    auth = roundtrip(s, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": token}, correlation_id=8) if not hs["error_code"] \
        else None
    return s, hs, auth


def test_wrong_password_gets_sasl_authentication_failed_and_the_connection_closes(sasl_broker, pki):
    address = ("127.0.0.1", sasl_broker.broker.bound_ports["SASL_PLAINTEXT"])
    s, hs, auth = sasl_frames(address, "PLAIN", b"\0alice\0not-her-password")
    assert hs["error_code"] == 0 and "SCRAM-SHA-512" in hs["mechanisms"]
    assert auth["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "not-her-password" not in (auth["error_message"] or "")
    s.sendall(encode_request(ApiKey.METADATA, 12, 9, "test", {"topics": None}))  # nothing more is served
    assert is_closed(s)
    s.close()
    # our client: a clear error naming the refusal, not a retry on every broker
    with pytest.raises(SaslAuthenticationFailed, match="SASL_AUTHENTICATION_FAILED.*invalid credentials"):
        BrokerConnection("127.0.0.1", sasl_broker.broker.bound_ports["SASL_SSL"], timeout=10,
                         security=sasl_ssl(pki, "alice", password="wrong"))
    with pytest.raises(SaslAuthenticationFailed, match="SASL_AUTHENTICATION_FAILED"):
        BrokerConnection("127.0.0.1", sasl_broker.broker.bound_ports["SASL_SSL"], timeout=10,
                         security=sasl_ssl(pki, "alice", mechanism="SCRAM-SHA-256", password="wrong"))
    with pytest.raises(SaslAuthenticationFailed, match="SASL_AUTHENTICATION_FAILED"):
        BrokerConnection("127.0.0.1", sasl_broker.broker.bound_ports["SASL_SSL"], timeout=10,
                         security=sasl_ssl(pki, "nobody", password="whatever"))


@pytest.mark.parametrize("api_key, version, body", [
    (ApiKey.METADATA, 12, {"topics": None}),
    (ApiKey.PRODUCE, 9, {"acks": 1, "timeout_ms": 1000, "topic_data": []}),
    (ApiKey.FETCH, 12, {"max_wait_ms": 0, "topics": []}),
    (ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": "sneaky", "num_partitions": 1, "replication_factor": 1}]}),
    (1000, 0, {}),  # the coordinator protocol's ClusterMetadata
])
def test_unauthenticated_requests_close_the_connection_unanswered(sasl_broker, api_key, version, body):
    address = ("127.0.0.1", sasl_broker.broker.bound_ports["SASL_PLAINTEXT"])
    s = connect(address)
    assert roundtrip(s, ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})[
        "error_code"] == 0  # allowed before authentication
    s.sendall(encode_request(api_key, version, 11, "test", body))
    assert is_closed(s)
    s.close()
    with ClusterClient(bootstrap(sasl_broker, "PLAINTEXT")) as cc:
        assert "sneaky" not in cc.refresh()


def test_sasl_state_machine_refusals(sasl_broker):
    address = ("127.0.0.1", sasl_broker.broker.bound_ports["SASL_PLAINTEXT"])
    s = connect(address)  # SaslAuthenticate before SaslHandshake
    resp = roundtrip(s, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0x"})
    assert resp["error_code"] == ErrorCode.ILLEGAL_SASL_STATE and is_closed(s)
    s, hs, _ = sasl_frames(address, "GSSAPI", b"")
    assert hs["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert set(hs["mechanisms"]) == {"SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"} and is_closed(s)
    # a frame above sasl.server.max.receive.size before authentication closes at once
    s = connect(address)
    s.sendall(struct.pack(">i", 600_000))
    assert is_closed(s)
    # after all that, a proper client is served
    s, hs, auth = sasl_frames(address, "PLAIN", f"\0bob\0{PASSWORDS['bob']}".encode())
    assert auth["error_code"] == 0
    assert roundtrip(s, ApiKey.METADATA, 12, {"topics": None}, correlation_id=12)["brokers"]
    # a second handshake on an authenticated connection: ILLEGAL_SASL_STATE, the connection stays
    assert roundtrip(s, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}, 13)["error_code"] == \
        ErrorCode.ILLEGAL_SASL_STATE
    assert roundtrip(s, ApiKey.METADATA, 12, {"topics": None}, correlation_id=14)["brokers"]
    s.close()


def raw_token(s, token: bytes) -> bytes:
    s.sendall(struct.pack(">i", len(token)) + token)
    (size,) = struct.unpack(">i", recv_exactly(s, 4))
    return recv_exactly(s, size)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_legacy_handshake_v0_with_raw_tokens(sasl_broker, mechanism):
    from spark_coord.security.sasl import client_tokens

    address = ("127.0.0.1", sasl_broker.broker.bound_ports["SASL_PLAINTEXT"])
    s = connect(address)
    assert roundtrip(s, ApiKey.SASL_HANDSHAKE, 0, {"mechanism": mechanism})["error_code"] == 0
    exchange = client_tokens(mechanism, "bob", PASSWORDS["bob"])
    token = exchange.first()
    while token is not None:
        answer = raw_token(s, token)
        token = None if exchange.done else exchange.respond(answer)
    assert exchange.done
    assert roundtrip(s, ApiKey.METADATA, 12, {"topics": None}, correlation_id=3)["brokers"]
    s.close()
    s = connect(address)  # a wrong password over raw tokens: closed, nothing answered
    assert roundtrip(s, ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == 0
    s.sendall(struct.pack(">i", 10) + b"\0bob\0wrong")
    assert is_closed(s)


def test_plain_users_from_the_listeners_jaas_line(broker_factory, server_cert, pki, zk):
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'user_carol="carol pw \\"quoted\\"" user_dave=dave-pw;')
    b = broker_factory(0, **sasl_overrides(server_cert, **{"listener.name.sasl_ssl.plain.sasl.jaas.config": jaas}))
    port = b.broker.bound_ports["SASL_SSL"]
    with BrokerConnection("127.0.0.1", port, timeout=10,
                          security=sasl_ssl(pki, "carol", "PLAIN", password='carol pw "quoted"')) as conn:
        assert conn.request(ApiKey.METADATA, {"topics": []})["brokers"]
    with pytest.raises(SaslAuthenticationFailed):
        BrokerConnection("127.0.0.1", port, timeout=10, security=sasl_ssl(pki, "dave", "PLAIN", password="nope"))


def test_users_changed_while_brokers_run_take_effect_on_every_broker(broker_factory, server_cert, pki, zk):
    brokers = [broker_factory(i, **sasl_overrides(server_cert)) for i in (0, 1)]
    store = UserStore(zk)

    def login(b, user, password):
        try:
            with BrokerConnection("127.0.0.1", b.broker.bound_ports["SASL_SSL"], timeout=10,
                                  security=sasl_ssl(pki, user, password=password)):
                return True
        except SaslAuthenticationFailed:
            return False

    assert not login(brokers[1], "erin", "erin-pw-1")
    store.set_password("erin", "erin-pw-1")
    for b in brokers:
        wait_until(lambda b=b: login(b, "erin", "erin-pw-1"), timeout=10, message="erin can log in")
    store.set_password("erin", "erin-pw-2", ["SCRAM-SHA-512"])
    for b in brokers:
        wait_until(lambda b=b: login(b, "erin", "erin-pw-2") and not login(b, "erin", "erin-pw-1"), timeout=10,
                   message="the new password replaces the old one")
    assert store.delete("erin")
    for b in brokers:
        wait_until(lambda b=b: not login(b, "erin", "erin-pw-2"), timeout=10, message="erin is gone")
    assert "erin" not in store.users()


def test_users_cli_reads_the_password_from_stdin_and_brokers_pick_it_up(sasl_broker, pki, zk_connect):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    run = lambda *a, stdin="": subprocess.run(  # noqa: E731
        [sys.executable, "-m", "spark_coord.cli", "users", "--zookeeper", zk_connect, *a], input=stdin, text=True,
        capture_output=True, timeout=60, env=env)
    out = run("add", "frank", "--mechanism", "SCRAM-SHA-512", stdin="frank-pw-via-stdin\n")
    assert out.returncode == 0, out.stderr
    assert "frank-pw-via-stdin" not in out.stderr + out.stdout
    listed = run("list")
    assert "frank\tSCRAM-SHA-512" in listed.stdout
    wait_until(lambda: _can_login(sasl_broker, pki, "frank", "frank-pw-via-stdin"), timeout=10,
               message="frank can log in")
    assert run("delete", "frank").returncode == 0
    assert run("delete", "frank").returncode == 1


def _can_login(b, pki, user, password) -> bool:
    try:
        with BrokerConnection("127.0.0.1", b.broker.bound_ports["SASL_SSL"], timeout=10,
                              security=sasl_ssl(pki, user, password=password)):
            return True
    except SaslAuthenticationFailed:
        return False


def test_passwords_never_reach_the_logs(sasl_broker, pki, caplog):
    caplog.set_level(logging.DEBUG)
    for mechanism in ("SCRAM-SHA-512", "PLAIN"):
        with BrokerConnection("127.0.0.1", sasl_broker.broker.bound_ports["SASL_SSL"], timeout=10,
                              security=sasl_ssl(pki, "alice", mechanism)) as conn:
            conn.request(ApiKey.METADATA, {"topics": []})
        with pytest.raises(SaslAuthenticationFailed) as e:
            BrokerConnection("127.0.0.1", sasl_broker.broker.bound_ports["SASL_SSL"], timeout=10,
                             security=sasl_ssl(pki, "alice", mechanism, password="Wr0ng-pa55word"))
        assert "Wr0ng-pa55word" not in str(e.value)
    security = sasl_ssl(pki, "alice")
    logging.getLogger("t").info("client settings: %r %s", security, security)
    logging.getLogger("t").info("broker config: %r", sasl_broker.config)
    text = caplog.text
    assert "alice" in text  # the user name is logged ...
    for secret in (PASSWORDS["alice"], "Wr0ng-pa55word"):
        assert secret not in text  # ... never a password


def test_confluent_kafka_produces_and_consumes_over_sasl_ssl_with_scram_sha_512(sasl_broker, pki):
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka import Producer as CKProducer

    conf = {"bootstrap.servers": bootstrap(sasl_broker), "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": PASSWORDS["alice"],
            "ssl.ca.location": str(sasl_broker_ca(pki))}
    topic = f"ck-sasl-{uuid.uuid4().hex[:6]}"
    with ClusterClient(bootstrap(sasl_broker), security=sasl_ssl(pki)) as cc:
        AdminClient(cc).create_topic(topic, 1)
    p = CKProducer({**conf, "acks": "all"})
    errors = []
    for i in range(40):
        p.produce(topic, f"m{i}".encode(), partition=0, on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(30) == 0 and not errors
    c = Consumer({**conf, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    try:
        wait_until(lambda: got.extend(m.value() for m in c.consume(40, 1.0) if not m.error()) or len(got) >= 40,
                   timeout=30, message="40 records over SASL_SSL")
    finally:
        c.close()
    assert got == [f"m{i}".encode() for i in range(40)]
    # and a wrong password is refused with Kafka's error
    bad = CKProducer({**conf, "sasl.password": "wrong"})
    refused = []
    bad.produce(topic, b"x", partition=0, on_delivery=lambda err, msg: refused.append(err))
    errors_seen = []
    bad2 = CKProducer({**conf, "sasl.password": "wrong", "error_cb": lambda e: errors_seen.append(e)})
    wait_until(lambda: bad2.poll(0.5) is not None and any("Authentication" in str(e) or e.code() == -169
                                                          for e in errors_seen), timeout=30,
               message=lambda: f"an authentication error (got {errors_seen})")
    bad.purge()
    bad2.purge()


def sasl_broker_ca(pki):
    return pki.ca_path


def test_kafka_python_over_sasl_ssl_with_scram_sha_512(sasl_broker, pki):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    common = dict(bootstrap_servers=bootstrap(sasl_broker), security_protocol="SASL_SSL",
                  sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="bob", sasl_plain_password=PASSWORDS["bob"],
                  ssl_cafile=str(pki.ca_path))
    topic = f"kp-sasl-{uuid.uuid4().hex[:6]}"
    with ClusterClient(bootstrap(sasl_broker), security=sasl_ssl(pki, "bob")) as cc:
        AdminClient(cc).create_topic(topic, 1)
    p = KafkaProducer(**common, acks="all")
    for i in range(20):
        p.send(topic, f"k{i}".encode(), partition=0)
    p.flush(30)
    p.close()
    c = KafkaConsumer(**common, enable_auto_commit=False, consumer_timeout_ms=5000)
    c.assign([TopicPartition(topic, 0)])
    c.seek_to_beginning()
    got = [m.value for _, m in zip(range(20), c, strict=False)]
    c.close()
    assert got == [f"k{i}".encode() for i in range(20)]


@pytest.mark.skipif(KCAT is None, reason="kcat is not on PATH (apt-get install kcat)")
def test_kcat_over_sasl_ssl_with_scram_sha_512(sasl_broker, pki):
    topic = f"kcat-sasl-{uuid.uuid4().hex[:6]}"
    with ClusterClient(bootstrap(sasl_broker), security=sasl_ssl(pki)) as cc:
        AdminClient(cc).create_topic(topic, 1)
    common = [KCAT, "-b", bootstrap(sasl_broker), "-X", "security.protocol=SASL_SSL",
              "-X", "sasl.mechanism=SCRAM-SHA-512",
              "-X", "sasl.username=alice", "-X", f"sasl.password={PASSWORDS['alice']}",
              "-X", f"ssl.ca.location={pki.ca_path}", "-X", "log_level=3", "-t", topic]
    lines = "".join(f"sasl line {i}\n" for i in range(25)).encode()
    produced = subprocess.run(common + ["-P", "-p", "0"], input=lines, timeout=60, capture_output=True)
    assert produced.returncode == 0, produced.stderr.decode(errors="replace")
    out = subprocess.run(common + ["-C", "-e", "-o", "beginning", "-f", "%s\n"], timeout=60, capture_output=True)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    assert out.stdout == lines
