"""Fixtures of Apache Kafka 4.2 as a peer (tests/peers/apache_kafka.py), for every test folder
(a plugin of tests/conftest.py): its jars resolved with mvn into a cache outside the repository
on first use, and clusters of real brokers run from them with java, each shared by a test
module.  Skipped, with the reason, where Maven or Java 17 cannot be had."""

from __future__ import annotations

import pytest


def _available(resolve):
    from peers.apache_kafka import ApacheKafkaUnavailable

    try:
        return resolve()
    except ApacheKafkaUnavailable as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def kafka_jars():
    """The folder of Apache Kafka 4.2's jars (``java -cp '<folder>/*'``)."""
    from peers.apache_kafka import kafka_jars

    return _available(kafka_jars)


@pytest.fixture(scope="session")
def spark_kafka_jars() -> list[str]:
    """The jars Spark's ``format("kafka")`` needs beyond pyspark's own, at pyspark's version:
    ``spark.jars`` is ``",".join(spark_kafka_jars)``."""
    from peers.apache_kafka import spark_kafka_jars

    return [str(jar) for jar in _available(spark_kafka_jars)]


@pytest.fixture(scope="session")
def kafka_tool(kafka_jars):
    """``kafka_tool(main_class, *args, timeout=120, input=None, check=False)``: run one of
    Kafka's command-line tools (``peers.apache_kafka.TOPICS``, ``CONSOLE_PRODUCER``, ...);
    its completed process."""
    from peers.apache_kafka import kafka_tool

    def run(main_class: str, *args: str, **options):
        return kafka_tool(kafka_jars, main_class, *args, **options)

    return run


def _cluster(kafka_jars, workdir, **options):
    from peers.apache_kafka import ApacheKafkaCluster

    return ApacheKafkaCluster(workdir, jars=kafka_jars, **options)


@pytest.fixture(scope="module")
def apache_kafka(kafka_jars, tmp_path_factory):
    """One Apache Kafka node (broker and KRaft controller), PLAINTEXT on loopback."""
    with _cluster(kafka_jars, tmp_path_factory.mktemp("apache-kafka")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def apache_kafka_3(kafka_jars, tmp_path_factory):
    """Three Apache Kafka nodes, each broker and controller: replication factor 3,
    min.insync.replicas 2."""
    with _cluster(kafka_jars, tmp_path_factory.mktemp("apache-kafka-3"), nodes=3) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def apache_kafka_sasl(kafka_jars, pki, tmp_path_factory):
    """One Apache Kafka node whose client listener is SASL_SSL with SCRAM-SHA-512 (users of
    ``peers.apache_kafka.DEFAULT_USERS``; the session's test CA signs its certificate)."""
    with _cluster(kafka_jars, tmp_path_factory.mktemp("apache-kafka-sasl"), security="SASL_SSL",
                  pki=pki) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def apache_kafka_3_sasl(kafka_jars, pki, tmp_path_factory):
    """Three Apache Kafka nodes (replication factor 3, min.insync.replicas 2) whose client
    listener is SASL_SSL with SCRAM-SHA-512, as ``apache_kafka_sasl``."""
    with _cluster(kafka_jars, tmp_path_factory.mktemp("apache-kafka-3-sasl"), nodes=3, security="SASL_SSL",
                  pki=pki) as cluster:
        yield cluster
