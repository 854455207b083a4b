"""SCRAM users through Kafka's admin APIs (DescribeUserScramCredentials, AlterUserScramCredentials): the
same ZooKeeper credentials ``spark-coord users`` writes, so a password changed with confluent-kafka's
or kafka-python's admin client is the one SASL/SCRAM logins need from then on, on every broker."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from helpers import wait_until
from security_support import add_users, sasl_overrides, sasl_ssl

from spark_coord.client.connection import BrokerConnection
from spark_coord.client.transport import SaslAuthenticationFailed
from spark_coord.errors import ErrorCode
from spark_coord.security.credentials import UserStore
from spark_coord.wire.registry import ApiKey


@pytest.fixture
def brokers(broker_factory, server_cert, zk):
    add_users(zk, "alice")
    return [broker_factory(i, **sasl_overrides(server_cert)) for i in (0, 1)]


def can_login(b, pki, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> bool:
    try:
        with BrokerConnection("127.0.0.1", b.broker.bound_ports["SASL_SSL"], timeout=10,
                              security=sasl_ssl(pki, user, mechanism, password=password)):
            return True
    except SaslAuthenticationFailed:
        return False


def admin_of(b) -> AdminClient:
    return AdminClient({"bootstrap.servers": f"127.0.0.1:{b.broker.bound_ports['PLAINTEXT']}"})


def upsert(user: str, password: str, mechanism=ScramMechanism.SCRAM_SHA_512, iterations: int = 8192):
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), password.encode())


def test_confluent_kafka_changes_a_password_and_the_new_one_logs_in_everywhere(brokers, pki, zk):
    admin = admin_of(brokers[0])
    admin.alter_user_scram_credentials([upsert("erin", "erin-pw-1"),
                                        upsert("erin", "erin-pw-1", ScramMechanism.SCRAM_SHA_256, 4096)],
                                       request_timeout=15)["erin"].result(20)
    for b in brokers:
        wait_until(lambda b=b: can_login(b, pki, "erin", "erin-pw-1"), timeout=15, message="erin logs in")
    assert can_login(brokers[1], pki, "erin", "erin-pw-1", "SCRAM-SHA-256")
    assert UserStore(zk).users()["erin"] == ["SCRAM-SHA-256", "SCRAM-SHA-512"]  # what `spark-coord users list` shows

    described = admin.describe_user_scram_credentials(["erin"], request_timeout=15)["erin"].result(20)
    assert {(i.mechanism, i.iterations) for i in described.scram_credential_infos} == \
        {(ScramMechanism.SCRAM_SHA_512, 8192), (ScramMechanism.SCRAM_SHA_256, 4096)}
    everyone = admin.describe_user_scram_credentials(request_timeout=15).result(20)
    assert set(everyone) == {"alice", "erin"}

    admin.alter_user_scram_credentials([upsert("erin", "erin-pw-2")], request_timeout=15)["erin"].result(20)
    for b in brokers:
        wait_until(lambda b=b: can_login(b, pki, "erin", "erin-pw-2") and not can_login(b, pki, "erin", "erin-pw-1"),
                   timeout=15, message="the new password replaces the old one")
    assert can_login(brokers[0], pki, "alice", "alice-s3cret-pw")  # other users untouched

    admin.alter_user_scram_credentials([UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_512)],
                                       request_timeout=15)["erin"].result(20)
    wait_until(lambda: not can_login(brokers[1], pki, "erin", "erin-pw-2"), timeout=15, message="512 removed")
    assert can_login(brokers[1], pki, "erin", "erin-pw-1", "SCRAM-SHA-256")  # the other mechanism stays


def test_refusals_name_kafkas_errors_and_change_nothing(brokers, pki, zk):
    admin = admin_of(brokers[0])

    def refused(alterations, user):
        with pytest.raises(KafkaException) as e:
            admin.alter_user_scram_credentials(alterations, request_timeout=15)[user].result(20)
        return e.value.args[0]

    gone = refused([UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256)], "nobody")
    assert gone.code() == KafkaError.RESOURCE_NOT_FOUND
    with pytest.raises(KafkaException) as e:
        admin.describe_user_scram_credentials(["nobody"], request_timeout=15)["nobody"].result(20)
    assert e.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    # too few iterations, and a user altered twice for one mechanism, refuse the whole user
    with BrokerConnection("127.0.0.1", brokers[0].broker.bound_ports["PLAINTEXT"], timeout=10) as conn:
        out = conn.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {"deletions": [], "upsertions": [
            {"name": "alice", "mechanism": 2, "iterations": 1000, "salt": b"s" * 16, "salted_password": b"p" * 64},
            {"name": "bob", "mechanism": 1, "iterations": 4096, "salt": b"s" * 16, "salted_password": b"p" * 32},
            {"name": "bob", "mechanism": 1, "iterations": 4096, "salt": b"s" * 16, "salted_password": b"p" * 32},
            {"name": "carol", "mechanism": 9, "iterations": 4096, "salt": b"s" * 16, "salted_password": b"p" * 32},
            {"name": "", "mechanism": 1, "iterations": 4096, "salt": b"s" * 16, "salted_password": b"p" * 32}]})
        codes = {r["user"]: r["error_code"] for r in out["results"]}
        assert codes == {"alice": ErrorCode.UNACCEPTABLE_CREDENTIAL, "bob": ErrorCode.DUPLICATE_RESOURCE,
                         "carol": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "": ErrorCode.UNACCEPTABLE_CREDENTIAL}
        twice = conn.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": [{"name": "alice"}, {"name": "alice"}]})
        assert [r["error_code"] for r in twice["results"]] == [ErrorCode.DUPLICATE_RESOURCE]
    assert set(UserStore(zk).users()) == {"alice"}
    assert can_login(brokers[0], pki, "alice", "alice-s3cret-pw")


def test_kafka_python_alters_and_describes_users(brokers, pki, zk):
    from kafka.admin import KafkaAdminClient
    from kafka.admin import ScramMechanism as KScram
    from kafka.admin import UserScramCredentialUpsertion as KUpsert

    kp = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{brokers[1].broker.bound_ports['PLAINTEXT']}",
                          request_timeout_ms=20000)
    try:
        result = kp.alter_user_scram_credentials([KUpsert("frank", KScram.SCRAM_SHA_256, "frank-pw", iterations=4096)])
        assert result == {"frank": None}
        wait_until(lambda: can_login(brokers[0], pki, "frank", "frank-pw", "SCRAM-SHA-256"), timeout=15,
                   message="frank logs in")
        described = kp.describe_user_scram_credentials(["frank"])
        assert described["frank"]["error"] is None
        assert [(int(i["mechanism"]), i["iterations"]) for i in described["frank"]["credential_infos"]] == [(1, 4096)]
    finally:
        kp.close()
