"""Transactional ids under Kafka's ACLs (KIP-98): a broker with the AclAuthorizer and SCRAM users over
SASL_PLAINTEXT.  FindCoordinator for a transactional id needs Describe on it, InitProducerId,
AddPartitionsToTxn and EndTxn need Write on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise, fatal
in librdkafka), AddPartitionsToTxn Write on each topic (TOPIC_AUTHORIZATION_FAILED).  Granted, a
transaction commits: the coordinator's markers reach the leader over the inter-broker listener
(PLAINTEXT here, so as User:ANONYMOUS, which is given ClusterAction as a Kafka operator gives the
inter-broker principal)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaException, Producer
from helpers import wait_until
from security_support import add_users, sasl_overrides

from spark_coord.client.connection import BrokerConnection
from spark_coord.errors import ErrorCode
from spark_coord.wire.registry import ApiKey

LISTENER = "SASL_PLAINTEXT"


@pytest.fixture
def acl_broker(broker_factory, server_cert, zk):
    from security_support import PASSWORDS

    add_users(zk, "alice", "admin")
    b = broker_factory(0, **sasl_overrides(server_cert, **{
        "num.partitions": 2, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin"}))
    b.passwords = PASSWORDS
    return b


def _conf(b, user: str) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{b.broker.bound_ports[LISTENER]}", "security.protocol": LISTENER,
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": b.passwords[user]}


def _grant(b, *bindings) -> None:
    from confluent_kafka.admin import AdminClient as KafkaAdmin

    admin = KafkaAdmin(_conf(b, "admin"))
    for f in admin.create_acls(list(bindings)).values():
        f.result(timeout=20)


def _acl(resource_type, name, principal, operation):
    from confluent_kafka.admin import AclBinding, AclPermissionType, ResourcePatternType

    return AclBinding(resource_type, name, ResourcePatternType.LITERAL, principal, "*", operation,
                      AclPermissionType.ALLOW)


def _alice(b, pki) -> BrokerConnection:
    from security_support import sasl_ssl

    return BrokerConnection("127.0.0.1", b.broker.bound_ports[LISTENER], timeout=10,
                            security=sasl_ssl(pki, "alice", protocol=LISTENER))


def test_transactional_ids_follow_the_acls(acl_broker, pki):
    from confluent_kafka.admin import AclOperation, ResourceType

    topic, tid = f"t-{uuid.uuid4().hex[:6]}", f"tx-{uuid.uuid4().hex[:6]}"
    with _alice(acl_broker, pki) as conn:
        r = conn.request(ApiKey.FIND_COORDINATOR, {"key": tid, "key_type": 1}, version=3)
        assert r["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        r = conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": tid, "transaction_timeout_ms": 60000})
        assert r["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED and r["producer_id"] == -1
    with pytest.raises(KafkaException) as e:
        Producer({**_conf(acl_broker, "alice"), "transactional.id": tid}).init_transactions(10)
    assert e.value.args[0].code() == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED and e.value.args[0].fatal()

    from confluent_kafka.admin import AdminClient as KafkaAdmin
    from confluent_kafka.admin import NewTopic

    admin = KafkaAdmin(_conf(acl_broker, "admin"))  # the super user creates the topic
    for f in admin.create_topics([NewTopic(topic, 2)]).values():
        f.result(timeout=20)

    # Describe and Write on the id, but not Write on the topic: AddPartitionsToTxn refuses the topic
    _grant(acl_broker, _acl(ResourceType.TRANSACTIONAL_ID, tid, "User:alice", AclOperation.WRITE),
           _acl(ResourceType.BROKER, "kafka-cluster", "User:ANONYMOUS", AclOperation.CLUSTER_ACTION))
    with _alice(acl_broker, pki) as conn:
        def found():
            r = conn.request(ApiKey.FIND_COORDINATOR, {"key": tid, "key_type": 1}, version=3)
            return r["error_code"] == ErrorCode.NONE
        wait_until(found, timeout=20, message="alice may find the id's coordinator (Write implies Describe)")
        r = wait_until(lambda: (r := conn.request(ApiKey.INIT_PRODUCER_ID, {
            "transactional_id": tid, "transaction_timeout_ms": 60000}))["error_code"] == ErrorCode.NONE and r,
            timeout=20, message="alice may init the id")
        r = conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, {
            "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": r["producer_id"],
            "v3_and_below_producer_epoch": r["producer_epoch"],
            "v3_and_below_topics": [{"name": topic, "partitions": [0, 1]}]}, version=3)
        codes = [p["partition_error_code"] for t in r["results_by_topic_v3_and_below"]
                 for p in t["results_by_partition"]]
        assert codes == [ErrorCode.TOPIC_AUTHORIZATION_FAILED] * 2

    # and with Write on the topic, confluent-kafka commits a transaction
    _grant(acl_broker, _acl(ResourceType.TOPIC, topic, "User:alice", AclOperation.WRITE))
    p = Producer({**_conf(acl_broker, "alice"), "transactional.id": tid})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(4):
        p.produce(topic, b"v%d" % i, partition=i % 2)
    p.commit_transaction(30)
    with BrokerConnection("127.0.0.1", acl_broker.broker.bound_ports["PLAINTEXT"], timeout=10) as conn:
        _grant(acl_broker, _acl(ResourceType.TRANSACTIONAL_ID, tid, "User:ANONYMOUS", AclOperation.DESCRIBE))

        def completed():
            (s,) = conn.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [tid]})["transaction_states"]
            return s["transaction_state"] == "CompleteCommit"
        wait_until(completed, timeout=20, message="the commit's markers written")
