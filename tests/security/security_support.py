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


def inter_broker_overrides(server_cert, pki, protocol: str = "SASL_SSL") -> dict:
    """Broker settings for a ``protocol`` listener that is also the inter-broker one.  Over SASL (SCRAM-SHA-256
    and -512 enabled) each broker authenticates to the others as ``admin`` with SCRAM-SHA-512
    (``sasl.mechanism.inter.broker.protocol`` and the listener's
    ``listener.name.<listener>.scram-sha-512.sasl.jaas.config``, Kafka's keys); over TLS it checks their
    certificate with the test CA (``ssl.truststore.location``).  ``listeners`` is the caller's."""
    out: dict = {}
    if protocol in ("SSL", "SASL_SSL"):
        out.update({"ssl.keystore.location": str(server_cert.keystore), "ssl.truststore.location": str(pki.ca_path)})
    if protocol.startswith("SASL"):
        out.update({"sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
                    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                    f"listener.name.{protocol.lower()}.scram-sha-512.sasl.jaas.config":
                        INTER_BROKER_JAAS.format(PASSWORDS["admin"])})
    return out


def client_security(pki, protocol: str = "SASL_SSL", user: str = "alice") -> ClientSecurity:
    """``user`` on a ``protocol`` listener: SCRAM-SHA-512 over SASL, the test CA over TLS."""
    if protocol == "SSL":
        return ClientSecurity(protocol="SSL", ca_location=str(pki.ca_path))
    return sasl_ssl(pki, user, protocol=protocol)


def client_settings(bootstrap: str, pki, protocol: str = "SASL_SSL", user: str = "alice") -> dict:
    """confluent-kafka's settings for ``user`` on ``protocol`` listeners (``client_security``'s)."""
    return {"bootstrap.servers": bootstrap, **client_security(pki, protocol, user).librdkafka_config()}


def create_split_topic(addresses: list[tuple[str, int]], security: ClientSecurity, topic: str) -> None:
    """``topic`` with partition i led by the broker at ``addresses[i]`` (broker i), created with ``security``;
    returns once every one of those brokers' Metadata names all its partitions."""
    from helpers import wait_until

    from spark_coord.client.connection import BrokerConnection
    from spark_coord.errors import ErrorCode
    from spark_coord.wire.registry import ApiKey

    with BrokerConnection(*addresses[0], timeout=10, security=security) as conn:
        r = conn.request(ApiKey.CREATE_TOPICS, {"timeout_ms": 30000, "validate_only": False, "topics": [
            {"name": topic, "num_partitions": -1, "replication_factor": -1, "configs": [],
             "assignments": [{"partition_index": i, "broker_ids": [i]} for i in range(len(addresses))]}]})
        assert r["topics"][0]["error_code"] == ErrorCode.NONE, r
    for address in addresses:
        with BrokerConnection(*address, timeout=10, security=security) as conn:
            wait_until(lambda: all(t["error_code"] == ErrorCode.NONE and len(t["partitions"]) == len(addresses)
                                   for t in conn.request(ApiKey.METADATA, {"topics": [{"name": topic}]})["topics"]),
                       timeout=20, message=f"broker at {address} knows {topic}")
