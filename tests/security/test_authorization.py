"""Authorization end to end: a broker with Kafka's AclAuthorizer, SCRAM users over SASL_PLAINTEXT,
ACLs managed with Kafka's AdminClient (CreateAcls/DescribeAcls/DeleteAcls) and `spark-coord acls`,
enforced on the data APIs, on Kafka's group APIs and on the coordinator protocol."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
from helpers import group_offsets, wait_until
from security_support import PASSWORDS, add_users, sasl_overrides, sasl_ssl

from spark_coord.client.admin import AdminClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.producer import Producer
from spark_coord.errors import ErrorCode, KafkaError

LISTENER = "SASL_PLAINTEXT"


@pytest.fixture
def acl_broker(broker_factory, server_cert, zk):
    add_users(zk, "alice", "bob", "admin")
    return broker_factory(0, **sasl_overrides(server_cert, **{
        "num.partitions": 2, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin"}))


def _bootstrap(b) -> str:
    return f"127.0.0.1:{b.broker.bound_ports[LISTENER]}"


def _conf(b, user: str) -> dict:
    return {"bootstrap.servers": _bootstrap(b), "security.protocol": LISTENER, "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user, "sasl.password": PASSWORDS[user]}


def _security(pki, user: str):
    return sasl_ssl(pki, user, protocol=LISTENER)


def _grant(b, *bindings) -> None:
    from confluent_kafka.admin import AdminClient as KafkaAdmin

    admin = KafkaAdmin(_conf(b, "admin"))
    for f in admin.create_acls(list(bindings)).values():
        f.result(timeout=20)


def _acl(resource_type, name, principal, operation):
    from confluent_kafka.admin import AclBinding, AclPermissionType, ResourcePatternType

    return AclBinding(resource_type, name, ResourcePatternType.LITERAL, principal, "*", operation,
                      AclPermissionType.ALLOW)


def _produce(b, pki, user: str, topic: str, n: int = 10) -> None:
    with ClusterClient(_bootstrap(b), timeout=10, security=_security(pki, user)) as cc:
        producer = Producer(cc, acks=-1)
        for i in range(n):
            producer.send(topic, f"{user}-{i}".encode(), partition=i % 2)
        producer.flush()


def test_data_and_group_apis_follow_the_acls(acl_broker, pki, zk_connect):
    from confluent_kafka import Consumer, KafkaException
    from confluent_kafka.admin import AclOperation, ResourceType

    topic, group = f"t-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    with ClusterClient(_bootstrap(acl_broker), timeout=10, security=_security(pki, "admin")) as cc:
        AdminClient(cc).create_topic(topic, 2)  # a super user may do everything
    _produce(acl_broker, pki, "admin", topic)

    # no ACL: alice may not write, and does not even see the topic
    with pytest.raises(KafkaError) as refused:
        _produce(acl_broker, pki, "alice", topic)
    assert refused.value.code in (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    with ClusterClient(_bootstrap(acl_broker), timeout=10, security=_security(pki, "alice")) as cc:
        assert topic not in cc.refresh()

    # ACLs through Kafka's AdminClient: alice writes and reads the topic, reads the group
    _grant(acl_broker, _acl(ResourceType.TOPIC, topic, "User:alice", AclOperation.WRITE),
           _acl(ResourceType.TOPIC, topic, "User:alice", AclOperation.READ),
           _acl(ResourceType.GROUP, group, "User:alice", AclOperation.READ))
    wait_until(lambda: _try_produce(acl_broker, pki, "alice", topic), timeout=20, message="alice may write")

    c = Consumer({**_conf(acl_broker, "alice"), "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000})
    c.subscribe([topic])
    got = []
    try:
        wait_until(lambda: got.extend(m.value() for m in c.consume(50, 0.5) if not m.error()) or len(got) >= 20,
                   timeout=60, message=lambda: f"alice reads the topic in her group; {len(got)} records")
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert sum(group_offsets(zk_connect, group, topic).values()) == len(got)

    # bob: refused by the group APIs with Kafka's code
    errors = []
    bob = Consumer({**_conf(acl_broker, "bob"), "group.id": group, "auto.offset.reset": "earliest",
                    "session.timeout.ms": 6000, "error_cb": lambda e: errors.append(e)})
    bob.subscribe([topic])
    seen = []

    def refused_to_bob():
        try:
            m = bob.poll(0.5)
            if m is not None and m.error():
                seen.append(m.error())
        except KafkaException as e:
            seen.append(e.args[0])
        return any("GROUP_AUTHORIZATION" in str(e.name() if hasattr(e, "name") else e).upper()
                   or getattr(e, "code", lambda: None)() == 30 for e in seen + errors)

    try:
        wait_until(refused_to_bob, timeout=30, message=lambda: f"bob refused by the group; saw {seen + errors}")
    finally:
        bob.close()


def _try_produce(b, pki, user, topic) -> bool:
    try:
        _produce(b, pki, user, topic)
        return True
    except KafkaError:
        return False


def test_coordinator_protocol_needs_read_on_group_and_topics(acl_broker, pki):
    """RegisterConsumer of our thin consumer: refused without Read on the group, then on the topic."""
    from spark_coord.client.connection import BrokerConnection
    from spark_coord.wire import coordinator as api

    topic, group = f"c-{uuid.uuid4().hex[:6]}", f"cg-{uuid.uuid4().hex[:6]}"
    with ClusterClient(_bootstrap(acl_broker), timeout=10, security=_security(pki, "admin")) as cc:
        AdminClient(cc).create_topic(topic, 2)

    def register() -> int:
        with BrokerConnection("127.0.0.1", acl_broker.broker.bound_ports[LISTENER], timeout=10,
                              security=_security(pki, "alice")) as conn:
            return conn.request(api.REGISTER_CONSUMER, {
                "group_id": group, "consumer_id": "alice-1", "topics": [{"topic": topic, "streams": 1}],
                "session_timeout_ms": 6000}, version=1)["error_code"]

    from confluent_kafka.admin import AclOperation, ResourceType

    assert register() == ErrorCode.GROUP_AUTHORIZATION_FAILED
    _grant(acl_broker, _acl(ResourceType.GROUP, group, "User:alice", AclOperation.READ))
    wait_until(lambda: register() == ErrorCode.TOPIC_AUTHORIZATION_FAILED, timeout=20,
               message="group allowed, topic still refused")
    _grant(acl_broker, _acl(ResourceType.TOPIC, topic, "User:alice", AclOperation.READ))
    wait_until(lambda: register() == ErrorCode.NONE, timeout=20, message="alice registers")


def test_acls_cli_adds_lists_and_removes(acl_broker, pki, tmp_path):
    admin_conf = tmp_path / "admin.properties"
    admin_conf.write_text(f"security.protocol={LISTENER}\nsasl.mechanism=SCRAM-SHA-512\n"
                          f"sasl.username=admin\nsasl.password={PASSWORDS['admin']}\n")

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "spark_coord.cli", "acls", *args, "-b", _bootstrap(acl_broker),
                               "--command-config", str(admin_conf)], capture_output=True, text=True, timeout=60)

    # -X takes librdkafka's names as kcat does: sasl.mechanisms is sasl.mechanism
    added = cli("add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "clicks",
                "-X", "sasl.mechanisms=SCRAM-SHA-256")
    assert added.returncode == 0, added.stderr
    refused = cli("list", "-X", "sasl.mechanisms=GSSAPI")
    assert refused.returncode == 2 and "sasl.mechanism: expected one of" in refused.stderr, refused.stderr
    listed = cli("list", "--topic", "clicks")
    assert listed.returncode == 0 and "principal=User:alice" in listed.stdout and "operation=READ" in listed.stdout
    assert PASSWORDS["admin"] not in listed.stdout + listed.stderr
    removed = cli("remove", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "clicks")
    assert removed.returncode == 0, removed.stderr
    deadline = time.monotonic() + 20
    while "User:alice" in cli("list", "--topic", "clicks").stdout and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "User:alice" not in cli("list", "--topic", "clicks").stdout
    # a client that is not allowed to manage ACLs gets Kafka's code, as one line
    alice_conf = tmp_path / "alice.properties"
    alice_conf.write_text(f"security.protocol={LISTENER}\nsasl.mechanism=SCRAM-SHA-512\n"
                          f"sasl.username=alice\nsasl.password={PASSWORDS['alice']}\n")
    denied = subprocess.run([sys.executable, "-m", "spark_coord.cli", "acls", "list", "-b", _bootstrap(acl_broker),
                             "--command-config", str(alice_conf)], capture_output=True, text=True, timeout=60)
    assert denied.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in denied.stderr


def test_fetch_and_join_need_read_on_the_topic(acl_broker, pki):
    """bob may Read the group and Describe the topic, not Read it: Fetch and ListOffsets of
    the topic are refused per partition, and a JoinGroup subscribing to it too."""
    from confluent_kafka.admin import AclOperation, ResourceType

    from spark_coord.client.connection import BrokerConnection
    from spark_coord.wire.consumer_protocol import encode_subscription
    from spark_coord.wire.registry import ApiKey

    topic, group = f"f-{uuid.uuid4().hex[:6]}", f"fg-{uuid.uuid4().hex[:6]}"
    with ClusterClient(_bootstrap(acl_broker), timeout=10, security=_security(pki, "admin")) as cc:
        AdminClient(cc).create_topic(topic, 2)
    _produce(acl_broker, pki, "admin", topic)
    _grant(acl_broker, _acl(ResourceType.GROUP, group, "User:bob", AclOperation.READ),
           _acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.DESCRIBE))
    port = acl_broker.broker.bound_ports[LISTENER]

    def fetch_code() -> int:
        with BrokerConnection("127.0.0.1", port, timeout=10, security=_security(pki, "bob")) as conn:
            out = conn.request(ApiKey.FETCH, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1,
                                              "max_bytes": 1 << 20, "topics": [{"topic": topic, "partitions": [
                                                  {"partition": 0, "fetch_offset": 0,
                                                   "partition_max_bytes": 1 << 20}]}]})
            return out["responses"][0]["partitions"][0]["error_code"]

    wait_until(lambda: fetch_code() == ErrorCode.TOPIC_AUTHORIZATION_FAILED, timeout=20,
               message="bob's Fetch refused with TOPIC_AUTHORIZATION_FAILED")
    with BrokerConnection("127.0.0.1", port, timeout=10, security=_security(pki, "bob")) as conn:
        meta = encode_subscription({"topics": [topic]}, 0)
        joined = conn.request(ApiKey.JOIN_GROUP, {
            "group_id": group, "session_timeout_ms": 6000, "rebalance_timeout_ms": 6000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": meta}]}, version=5)
        assert joined["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    _grant(acl_broker, _acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.READ))
    wait_until(lambda: fetch_code() == ErrorCode.NONE, timeout=20, message="bob may fetch once granted Read")
