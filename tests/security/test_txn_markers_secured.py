"""Transactions on brokers whose only listener is SASL_SSL (SCRAM-SHA-512 over TLS), so the transaction
coordinator's markers and the leaders' Produce checks go over it: each broker authenticates with the
credentials of its listener's ``listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config`` (Kafka's key,
the mechanism from ``sasl.mechanism.inter.broker.protocol``) and checks the other's certificate with
the listener's trust store.  Two brokers, a topic with a partition led by each: confluent-kafka's
transactional producer commits one transaction and aborts another across both, the coordinator
completes both (every marker taken, over the wire, by the other broker and by itself), and
read_committed reads exactly the committed records, in order.  And the credentials are required:
a SASL inter-broker listener with none is a ConfigError naming the key."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from helpers import wait_until
from security_support import add_users, client_settings, create_split_topic, inter_broker_overrides, sasl_ssl

from spark_coord.client.connection import BrokerConnection
from spark_coord.errors import ErrorCode
from spark_coord.wire.registry import ApiKey

LISTENER = "SASL_SSL"


def _overrides(server_cert, pki) -> dict:
    return {"listeners": "SASL_SSL://127.0.0.1:0", **inter_broker_overrides(server_cert, pki),
            "coordinator.shards": 4, "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200}


def _client(b, pki) -> dict:
    return client_settings(f"127.0.0.1:{b.broker.bound_ports[LISTENER]}", pki)


def _conn(b, pki) -> BrokerConnection:
    return BrokerConnection("127.0.0.1", b.broker.bound_ports[LISTENER], timeout=10, security=sasl_ssl(pki, "alice"))


def test_markers_cross_a_sasl_ssl_inter_broker_listener(broker_factory, server_cert, pki, zk):
    add_users(zk, "admin", "alice")
    brokers = [broker_factory(i, **_overrides(server_cert, pki)) for i in (0, 1)]
    topic, tid = f"sec-{uuid.uuid4().hex[:6]}", f"tx-{uuid.uuid4().hex[:6]}"
    create_split_topic([("127.0.0.1", b.broker.bound_ports[LISTENER]) for b in brokers], sasl_ssl(pki), topic)

    producer = Producer({**_client(brokers[0], pki), "transactional.id": tid, "linger.ms": 0})
    producer.init_transactions(60)
    failed: list = []
    for outcome in ("committed", "aborted", "committed2"):
        producer.begin_transaction()
        for i in range(4):
            producer.produce(topic, f"{outcome}-{i}".encode(), partition=i % 2,
                             on_delivery=lambda err, _msg: failed.append(err) if err else None)
        assert producer.flush(30) == 0 and not failed, failed  # the leaders' Produce checks passed
        if outcome == "aborted":
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)

    def state() -> str:
        for b in brokers:
            with _conn(b, pki) as conn:
                (s,) = conn.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [tid]})["transaction_states"]
            if s["error_code"] == ErrorCode.NONE:
                return s["transaction_state"]
        return "unknown"
    wait_until(lambda: state() == "CompleteCommit", timeout=30, interval=0.2,
               message=lambda: f"the last commit's markers written (the id is {state()})")

    consumer = Consumer({**_client(brokers[1], pki), "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in (0, 1)])
        seen: dict[int, list[str]] = {0: [], 1: []}

        def read_all() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen[msg.partition()].append(msg.value().decode())
            return sum(map(len, seen.values())) >= 8
        wait_until(read_all, timeout=30, interval=0, message=lambda: f"read committed: {seen}")
        assert seen == {p: [f"{o}-{i}" for o in ("committed", "committed2") for i in (p, p + 2)] for p in (0, 1)}
    finally:
        consumer.close()
        producer.flush(5)


def test_a_sasl_inter_broker_listener_without_credentials_is_named():
    from spark_coord.config import ConfigError
    from spark_coord.security.client import inter_broker
    from spark_coord.security.listeners import Listener

    listener = Listener("SASL_SSL", "SASL_SSL", "127.0.0.1", 0)
    config = {"sasl.enabled.mechanisms": ["SCRAM-SHA-256", "PLAIN"]}
    with pytest.raises(ConfigError, match=r"listener\.name\.sasl_ssl\.scram-sha-256\.sasl\.jaas\.config"):
        inter_broker(config, listener)
    plain = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="b" password="pw" user_b="pw";'
    security = inter_broker({**config, "sasl.mechanism.inter.broker.protocol": "PLAIN",
                             "listener.name.sasl_ssl.plain.sasl.jaas.config": plain,
                             "ssl.truststore.location": "/ca.pem"}, listener)
    assert (security.protocol, security.mechanism, security.username, security.ca_location) == \
        ("SASL_SSL", "PLAIN", "b", "/ca.pem")
    assert "pw" not in repr(security)
    assert inter_broker({}, Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 0)).protocol == "PLAINTEXT"
