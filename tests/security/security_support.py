"""Helpers of the security tests: broker settings for TLS and SASL listeners, raw SASL frames."""

from __future__ import annotations

from spark_coord.security.client import ClientSecurity

PASSWORDS = {"alice": "alice-s3cret-pw", "bob": "bob-s3cret-pw", "admin": "admin-s3cret-pw"}


def tls_overrides(server_cert, listeners: str = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", **extra) -> dict:
    """Broker settings for ``listeners`` with the test broker certificate."""
    return {"listeners": listeners, "ssl.keystore.location": str(server_cert.keystore), **extra}


def sasl_overrides(server_cert, **extra) -> dict:
    """A broker with PLAINTEXT, SASL_PLAINTEXT and SASL_SSL listeners and every mechanism enabled."""
    return tls_overrides(server_cert, "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                         **{"sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN", **extra})


def add_users(zk, *names: str) -> None:
    from spark_coord.security.credentials import UserStore

    store = UserStore(zk)
    for name in names:
        store.set_password(name, PASSWORDS[name])


def sasl_ssl(pki, user: str = "alice", mechanism: str = "SCRAM-SHA-512", password: str | None = None,
             protocol: str = "SASL_SSL") -> ClientSecurity:
    from spark_coord.secret import Password

    return ClientSecurity(protocol=protocol, mechanism=mechanism, username=user,
                          password=Password(password if password is not None else PASSWORDS[user]),
                          ca_location=str(pki.ca_path) if protocol == "SASL_SSL" else None)


#: The brokers' own SCRAM user on a SASL inter-broker listener (``add_users(zk, "admin")``), as a JAAS line.
INTER_BROKER_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="{}";'


def sasl_ssl_inter_broker(server_cert, pki) -> dict:
    """Broker settings for a SASL_SSL listener (SCRAM-SHA-256 and -512) that is also the inter-broker one: each
    broker authenticates to the others as ``admin`` with SCRAM-SHA-512 (``sasl.mechanism.inter.broker.protocol``
    and the listener's ``listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config``, Kafka's keys) and checks their
    certificate with the test CA (``ssl.truststore.location``).  ``listeners`` is the caller's."""
    return {"ssl.keystore.location": str(server_cert.keystore), "ssl.truststore.location": str(pki.ca_path),
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": INTER_BROKER_JAAS.format(PASSWORDS["admin"])}


def sasl_ssl_client(bootstrap: str, pki, user: str = "alice") -> dict:
    """confluent-kafka's settings for ``user`` on SASL_SSL listeners (SCRAM-SHA-512, the test CA)."""
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user, "sasl.password": PASSWORDS[user], "ssl.ca.location": str(pki.ca_path)}


def create_split_topic(addresses: list[tuple[str, int]], pki, topic: str) -> None:
    """``topic`` with partition i led by the broker at ``addresses[i]`` (broker i), created over SASL_SSL as
    alice; returns once every one of those brokers' Metadata names all its partitions."""
    from helpers import wait_until

    from spark_coord.client.connection import BrokerConnection
    from spark_coord.errors import ErrorCode
    from spark_coord.wire.registry import ApiKey

    with BrokerConnection(*addresses[0], timeout=10, security=sasl_ssl(pki, "alice")) as conn:
        r = conn.request(ApiKey.CREATE_TOPICS, {"timeout_ms": 30000, "validate_only": False, "topics": [
            {"name": topic, "num_partitions": -1, "replication_factor": -1, "configs": [],
             "assignments": [{"partition_index": i, "broker_ids": [i]} for i in range(len(addresses))]}]})
        assert r["topics"][0]["error_code"] == ErrorCode.NONE, r
    for address in addresses:
        with BrokerConnection(*address, timeout=10, security=sasl_ssl(pki, "alice")) as conn:
            wait_until(lambda: all(t["error_code"] == ErrorCode.NONE and len(t["partitions"]) == len(addresses)
                                   for t in conn.request(ApiKey.METADATA, {"topics": [{"name": topic}]})["topics"]),
                       timeout=20, message=f"broker at {address} knows {topic}")
