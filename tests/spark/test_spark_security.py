"""A Spark query over SASL_SSL: coordkafka with Kafka's client keys under Spark's ``kafka.`` prefix
reads a topic through a group (members, executors' fetches and commits all authenticated), and the
sink writes over the same listener."""

from __future__ import annotations

import uuid

import pytest
from helpers import group_offsets, wait_until

PASSWORD = "spark-s3cret-pw"


@pytest.fixture
def sasl_broker(broker_factory, pki, zk):
    from spark_coord.security.credentials import UserStore

    UserStore(zk).set_password("spark", PASSWORD)
    return broker_factory(0, **{"listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                                "ssl.keystore.location": str(pki.server().keystore),
                                "sasl.enabled.mechanisms": "SCRAM-SHA-512", "num.partitions": 2})


def test_query_reads_and_writes_over_sasl_ssl(spark, sasl_broker, pki, zk_connect, tmp_path):
    bootstrap = f"127.0.0.1:{sasl_broker.broker.bound_ports['SASL_SSL']}"
    security = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
                "kafka.sasl.username": "spark", "kafka.sasl.password": PASSWORD,
                "kafka.ssl.ca.location": str(pki.ca_path)}
    source, target, group = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("src", "dst", "sg"))
    rows = [(f"k{i}", f"v{i}") for i in range(50)]
    df = spark.createDataFrame(rows, ["key", "value"])
    writer = df.write.mode("append").format("coordkafka").option("bootstrap.brokers", bootstrap).option("topic", source)
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.security.client import ClientSecurity

    with ClusterClient(bootstrap, security=ClientSecurity.from_settings(security, prefix="kafka.")) as cc:
        AdminClient(cc).create_topic(source, 2)
        AdminClient(cc).create_topic(target, 2)
    for k, v in security.items():
        writer = writer.option(k, v)
    writer.save()

    reader = (spark.readStream.format("coordkafka").option("bootstrap.brokers", bootstrap)
              .option("subscribe", source).option("group.id", group).option("startingOffsets", "earliest")
              .option("session.timeout.ms", "6000"))
    for k, v in security.items():
        reader = reader.option(k, v)
    out = reader.load().selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value")
    sink = out.writeStream.format("coordkafka").option("bootstrap.brokers", bootstrap).option("topic", target) \
        .option("checkpointLocation", str(tmp_path / "ckpt"))
    for k, v in security.items():
        sink = sink.option(k, v)
    query = sink.trigger(availableNow=True).start()
    assert query.awaitTermination(180), "the AvailableNow run did not end"

    back = spark.read.format("coordkafka").option("bootstrap.brokers", bootstrap).option("subscribe", target) \
        .option("startingOffsets", "earliest").option("endingOffsets", "latest")
    for k, v in security.items():
        back = back.option(k, v)
    got = sorted((r.key.decode(), r.value.decode()) for r in back.load().collect())
    assert got == sorted(rows)
    wait_until(lambda: sum(group_offsets(zk_connect, group, source).values()) == len(rows), timeout=30,
               message=lambda: f"group offsets {group_offsets(zk_connect, group, source)}")


def _authentications(caplog) -> int:
    return sum("authenticated as User:spark" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("idle_ms", ["540000", "0"])
def test_executors_keep_their_authenticated_connections_between_tasks(spark, sasl_broker, pki, caplog, idle_ms):
    """Each Python worker keeps its SASL_SSL connections for the next task (Kafka's
    connections.max.idle.ms, 9 minutes by default): ten micro-batches of two tasks log in a few
    times, not once per task as with kafka.connections.max.idle.ms=0."""
    from spark_data import produce

    bootstrap = f"127.0.0.1:{sasl_broker.broker.bound_ports['SASL_SSL']}"
    plain = f"127.0.0.1:{sasl_broker.broker.bound_ports['PLAINTEXT']}"
    topic = f"reuse-{idle_ms}-{uuid.uuid4().hex[:6]}"
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(plain) as cc:
        AdminClient(cc).create_topic(topic, 2)
    produce(type("C", (), {"bootstrap": plain}), topic, 40, headers=False)
    reader = (spark.readStream.format("coordkafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 4)
              .option("kafka.security.protocol", "SASL_SSL").option("kafka.sasl.mechanism", "SCRAM-SHA-512")
              .option("kafka.sasl.username", "spark").option("kafka.sasl.password", PASSWORD)
              .option("kafka.ssl.ca.location", str(pki.ca_path)).option("kafka.connections.max.idle.ms", idle_ms))
    caplog.clear()
    query = reader.load().writeStream.format("noop").trigger(availableNow=True).start()
    assert query.awaitTermination(180)
    batches = sum(1 for p in query.recentProgress if p["numInputRows"])
    assert batches == 10 and sum(p["numInputRows"] for p in query.recentProgress) == 40
    logins = _authentications(caplog)
    if idle_ms == "0":
        assert logins >= 2 * batches  # every task logs in again
    else:
        assert logins <= 6, f"{logins} log-ins for {2 * batches} tasks"  # two workers and the driver
