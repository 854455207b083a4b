"""Lag on a cluster whose only listener, and so the inter-broker one, is SASL_SSL, SSL or SASL_PLAINTEXT:
two broker processes, each reaching the other with its own credentials for that listener as the
transaction markers do (over SASL: SCRAM-SHA-512 as ``admin``, from the listener's
``listener.name.<listener>.scram-sha-512.sasl.jaas.config``; over TLS: the other's certificate checked
with the listener's trust store), a topic with a partition led by each, records produced to both by
confluent-kafka.  Whichever broker coordinates a group, one of the two partitions is led by the
other, and its lag needs that broker's log end, read with ListOffsets over the secured inter-broker
listener:

* the metrics endpoint's ``kafka_consumergroup_lag`` of a consumer group (offsets committed by
  confluent-kafka) covers both partitions with log end - committed offset, from the coordinator only;
* DescribeShareGroupOffsets of a share group (start offsets set by AlterShareGroupOffsets) answers
  each partition's lag, log end - start offset."""

from __future__ import annotations

import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from helpers import fresh_chroot, wait_until
from prometheus_client.parser import text_string_to_metric_families
from security_support import add_users, client_security, client_settings, create_split_topic, inter_broker_overrides

TOPIC = "lag-secured"
#: Records produced to each partition (partition i led by broker i): its log end.
RECORDS = {0: 7, 1: 12}


@pytest.fixture(scope="module", params=["SASL_SSL", "SSL", "SASL_PLAINTEXT"])
def cluster(request, zookeeper, tmp_path_factory, pki, server_cert):
    """Two broker processes whose one listener (and so the inter-broker one) speaks ``request.param``,
    metrics on, lag sampled every 200 ms; ``TOPIC`` with partition i led by broker i and ``RECORDS[i]``
    records.  ``cluster.security``: how clients reach it (alice over SASL)."""
    from spark_coord.cluster import LocalCluster
    from spark_coord.zk.client import close, connect

    protocol = request.param
    zk_connect = fresh_chroot(zookeeper, f"lag-{protocol}")
    zk = connect(zk_connect)
    try:
        add_users(zk, "admin", "alice")
    finally:
        close(zk)
    overrides = {**inter_broker_overrides(server_cert, pki, protocol), "metrics.lag.sample.ms": 200}
    with LocalCluster(2, tmp_path_factory.mktemp(f"lag-{protocol}"), zk_connect=zk_connect, overrides=overrides,
                      metrics_port=0, security=client_security(pki, protocol)) as c:
        # a broker answers Kafka requests before its metrics endpoint listens (it opens that last)
        wait_until(lambda: all(serves(f"http://127.0.0.1:{port}/metrics") for port in c.metrics_ports.values()),
                   timeout=30, message="every broker's metrics endpoint")
        create_split_topic(list(c.brokers.values()), c.security, TOPIC)
        producer = Producer({**client_settings(c.bootstrap, pki, protocol), "linger.ms": 0})
        failed: list = []
        for p, n in RECORDS.items():
            for i in range(n):
                producer.produce(TOPIC, f"r{i}".encode(), partition=p,
                                 on_delivery=lambda err, _msg: failed.append(err) if err else None)
        assert producer.flush(30) == 0 and not failed, failed
        del producer  # its connections closed before the brokers stop
        yield c


def serves(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status == 200
    except OSError:  # not listening yet (URLError is one)
        return False


def group_lag(cluster, group: str) -> dict[int, dict[int, float]]:
    """broker id -> {partition: kafka_consumergroup_lag of ``group``}, for the brokers that export it."""
    out = {}
    for broker_id, port in cluster.metrics_ports.items():
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        lags = {int(s.labels["partition"]): s.value for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "kafka_consumergroup_lag" and s.labels.get("consumergroup") == group
                and s.labels.get("topic") == TOPIC}
        if lags:
            out[broker_id] = lags
    return out


def test_the_group_lag_gauge_covers_the_partition_the_other_broker_leads(cluster, pki):
    group, committed = "lag-secured-consumers", {0: 2, 1: 5}
    consumer = Consumer({**client_settings(cluster.bootstrap, pki, cluster.security.protocol), "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in committed.items()], asynchronous=False)
    finally:
        consumer.close()
    want = {p: RECORDS[p] - committed[p] for p in RECORDS}  # 5 and 7
    # exported by the group's coordinator only, and whichever it is, one partition is the other broker's
    wait_until(lambda: list(group_lag(cluster, group).values()) == [want], timeout=30, interval=0.2,
               message=lambda: f"lag of {group} per exporting broker: {group_lag(cluster, group)} (want {want})")


def test_describe_share_group_offsets_answers_the_lag_of_the_other_brokers_partition(cluster, pki):
    from spark_coord.client.groups import GroupClient
    from spark_coord.client.metadata import ClusterClient

    group, start = "lag-secured-share", {0: 1, 1: 4}
    with ClusterClient(cluster.bootstrap, security=cluster.security) as cc, GroupClient(cc) as gc:
        gc.alter_share_group_offsets(group, {(TOPIC, p): o for p, o in start.items()})
        got = {tp: (o.start_offset, o.lag) for tp, o in gc.share_group_offsets(group).items()}
    # nothing acknowledged yet: the lag is every record from the start offset to the log end
    assert got == {(TOPIC, p): (start[p], RECORDS[p] - start[p]) for p in RECORDS}  # lags 6 and 8
