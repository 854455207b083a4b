"""Transactions are not supported, and a transactional producer learns it at once: FindCoordinator for
a transaction key and InitProducerId with a transactional id answer TRANSACTIONAL_ID_AUTHORIZATION_FAILED
(fatal in every client) instead of a retriable code that would keep ``init_transactions()`` retrying
until its timeout (10 s and more before)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, Producer

from spark_coord.client.connection import BrokerConnection
from spark_coord.errors import ErrorCode
from spark_coord.wire.registry import ApiKey

TIMEOUT_S = 10


@pytest.fixture
def broker(broker_factory):
    b = broker_factory(0)
    with BrokerConnection(*b.address, timeout=10) as conn:  # a coordinator must hold the shards first
        from helpers import wait_until

        wait_until(lambda: conn.request(ApiKey.FIND_COORDINATOR, {"key": "g", "key_type": 0}, version=3)
                   ["error_code"] == ErrorCode.NONE, timeout=30, message="a coordinator")
    return b


def test_confluent_kafka_init_transactions_fails_fast(broker):
    host, port = broker.address
    producer = Producer({"bootstrap.servers": f"{host}:{port}", "transactional.id": "txn-ck"})
    started = time.monotonic()
    with pytest.raises(KafkaException) as e:
        producer.init_transactions(TIMEOUT_S)
    elapsed = time.monotonic() - started
    error = e.value.args[0]
    assert elapsed < 3, f"init_transactions took {elapsed:.1f} s"
    assert error.code() == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert error.fatal() and not error.retriable()
    assert "transactions are not supported" in error.str()


def test_kafka_python_init_transactions_fails_fast(broker):
    from kafka import KafkaProducer
    from kafka.errors import TransactionalIdAuthorizationFailedError

    host, port = broker.address
    started = time.monotonic()
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        producer = KafkaProducer(bootstrap_servers=f"{host}:{port}", transactional_id="txn-kp",
                                 max_block_ms=TIMEOUT_S * 1000)
        try:
            producer.init_transactions()
        finally:
            producer.close(timeout=2)
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("version", [1, 3, 4, 6])
def test_find_coordinator_transaction_key_is_refused_with_a_message(broker, version):
    with BrokerConnection(*broker.address, timeout=10) as conn:
        if version >= 4:
            answer = conn.request(ApiKey.FIND_COORDINATOR, {"coordinator_keys": ["t"], "key_type": 1},
                                  version=version)["coordinators"][0]
        else:
            answer = conn.request(ApiKey.FIND_COORDINATOR, {"key": "t", "key_type": 1}, version=version)
        assert answer["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert "transactions are not supported" in answer["error_message"]
        # the connection keeps serving: an idempotent producer id is still handed out
        pid = conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 60000})
        assert pid["error_code"] == ErrorCode.NONE and pid["producer_id"] >= 0
        txn = conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": "t", "transaction_timeout_ms": 60000})
        assert txn["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
