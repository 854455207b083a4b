"""Transactional batches under Kafka's ACLs (KafkaApis' rule for Produce): a broker with the AclAuthorizer
and SCRAM users over SASL_PLAINTEXT.  A Produce holding a transactional batch needs its transactional id
and Write on it: without the id, or without Write on it, every partition of the request answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing is appended, though the principal may Write the
topic; an idempotent (not transactional) batch of the same principal is taken."""

from __future__ import annotations

import uuid

import pytest
from security_support import add_users, sasl_overrides
from test_txn_authorization import LISTENER, _acl, _alice, _conf, _grant

from spark_coord.errors import ErrorCode
from spark_coord.records.builder import BatchBuilder
from spark_coord.wire.registry import ApiKey


@pytest.fixture
def acl_broker(broker_factory, server_cert, zk):
    from security_support import PASSWORDS

    add_users(zk, "alice", "admin")
    b = broker_factory(0, **sasl_overrides(server_cert, **{
        "num.partitions": 2, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin"}))
    b.passwords = PASSWORDS
    return b


def _batch(pid: int, epoch: int, seq: int, transactional: bool) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)
    b.append(b"v")
    return b.build()


def test_a_transactional_batch_needs_its_transactional_id_and_write_on_it(acl_broker, pki):
    from confluent_kafka.admin import AclOperation, NewTopic, ResourceType
    from confluent_kafka.admin import AdminClient as KafkaAdmin

    topic, tid = f"t-{uuid.uuid4().hex[:6]}", f"tx-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdmin(_conf(acl_broker, "admin"))  # the super user creates the topic
    for f in admin.create_topics([NewTopic(topic, 2)]).values():
        f.result(timeout=20)
    _grant(acl_broker, _acl(ResourceType.TOPIC, topic, "User:alice", AclOperation.WRITE))
    assert LISTENER in acl_broker.broker.bound_ports
    with _alice(acl_broker, pki) as conn:
        r = conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 60000})
        assert r["error_code"] == ErrorCode.NONE
        pid, epoch = r["producer_id"], r["producer_epoch"]

        def produce(batch: bytes, transactional_id: str | None) -> list[int]:
            r = conn.request(ApiKey.PRODUCE, {"transactional_id": transactional_id, "acks": -1, "timeout_ms": 5000,
                                              "topic_data": [{"name": topic, "partition_data": [
                                                  {"index": 0, "records": batch},
                                                  {"index": 1, "records": _batch(pid, epoch, 0, False)}]}]},
                             version=9)
            return [p["error_code"] for p in r["responses"][0]["partition_responses"]]

        refused = [ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED] * 2  # the idempotent partition too
        assert produce(_batch(pid, epoch, 0, True), None) == refused
        assert produce(_batch(pid, epoch, 0, True), tid) == refused  # no Write on the id
        assert produce(_batch(pid, epoch, 0, False), None) == [ErrorCode.NONE] * 2  # idempotent: Write on the topic
        r = conn.request(ApiKey.LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": p, "timestamp": -1} for p in (0, 1)]}]}, version=5)
        assert [p["offset"] for p in r["topics"][0]["partitions"]] == [1, 1]  # nothing refused was appended
