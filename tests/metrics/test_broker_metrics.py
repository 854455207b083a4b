"""What brokers export: requests, errors, bytes, connections, authentication, their logs; and group
lag from the elected coordinator only, with log ends of partitions other brokers lead."""

from __future__ import annotations

import json
import urllib.request

from helpers import wait_until
from kafka_io import connect, is_closed, roundtrip
from prometheus_client.parser import text_string_to_metric_families

from spark_coord.client.admin import AdminClient
from spark_coord.client.connection import BrokerConnection
from spark_coord.client.fetcher import fetch
from spark_coord.client.groups import GroupClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.producer import Producer
from spark_coord.errors import ErrorCode
from spark_coord.wire.registry import ApiKey

#: Group lag and the cluster view are sampled every 100 ms here: what a scrape shows is that recent.
METRICS = {"metrics.port": 0, "metrics.lag.sample.ms": 100}


def scrape(broker) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"{broker.broker.metrics.url}/metrics", timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def series(found: dict, name: str) -> dict[tuple, float]:
    return {labels: v for (n, labels), v in found.items() if n == name}


def test_requests_errors_bytes_connections_and_logs(broker_factory):
    b = broker_factory(0, **METRICS)
    bootstrap = f"127.0.0.1:{b.port}"
    with ClusterClient(bootstrap) as cc:
        AdminClient(cc).create_topic("t", 2)
        producer = Producer(cc)
        for i in range(10):
            producer.send("t", b"value-%d" % i, partition=0)
        producer.flush()
        got = fetch(cc.connection(cc.leader("t", 0)), {("t", 0): 0}, max_wait_ms=100)
        assert got[0].error == 0
        missing = cc.request_any(ApiKey.METADATA, {"topics": [{"name": "nope"}], "allow_auto_topic_creation": False})
        assert missing["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        found = opened = scrape(b)  # this client's connections are open
    size = found[("kafka_log_log_size", (("partition", "0"), ("topic", "t")))]
    assert size > 10 * len(b"value-0")
    assert found[("kafka_server_brokertopicmetrics_bytesin_total", (("topic", "t"),))] == size
    assert found[("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "t"),))] == 10
    assert found[("kafka_server_brokertopicmetrics_bytesout_total", (("topic", "t"),))] == size
    assert found[("kafka_topic_partition_current_offset", (("partition", "0"), ("topic", "t")))] == 10
    assert found[("kafka_topic_partition_current_offset", (("partition", "1"), ("topic", "t")))] == 0
    assert found[("kafka_topic_partition_oldest_offset", (("partition", "0"), ("topic", "t")))] == 0
    found = wait_until(lambda: (f := scrape(b)).get(("kafka_topic_partitions", (("topic", "t"),))) == 2 and f,
                       timeout=10, message="the controller exporting the topic")  # from the latest sample
    assert found[("kafka_brokers", ())] == 1
    errors = series(found, "kafka_network_requestmetrics_errors_total")
    assert errors[(("error", "UNKNOWN_TOPIC_OR_PARTITION"), ("request", "Metadata"))] >= 1
    assert errors[(("error", "NONE"), ("request", "Produce"))] >= 1
    requests = series(found, "kafka_network_requestmetrics_requests_total")
    assert sum(v for labels, v in requests.items() if ("request", "Produce") in labels) >= 1
    latency = series(found, "spark_coord_broker_request_duration_seconds_count")
    assert latency[(("request", "Fetch"),)] >= 1
    assert opened[("kafka_server_socket_server_metrics_connection_count", (("listener", "PLAINTEXT"),))] >= 1
    assert opened[("kafka_server_socket_server_metrics_connection_creation_total", (("listener", "PLAINTEXT"),))] >= 1
    wait_until(lambda: scrape(b)[("kafka_server_socket_server_metrics_connection_count",
                                  (("listener", "PLAINTEXT"),))] == 0,
               timeout=10, message="the connection gauge back to 0 once the client closed")


def test_sasl_authentication_outcomes_are_counted_per_listener(broker_factory, zk):
    from spark_coord.security.credentials import UserStore

    UserStore(zk).set_password("alice", "alice-s3cret-pw")
    b = broker_factory(0, **METRICS, **{"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                                         "sasl.enabled.mechanisms": "PLAIN"})
    address = ("127.0.0.1", b.broker.bound_ports["SASL_PLAINTEXT"])
    for password, code in ((b"wrong", ErrorCode.SASL_AUTHENTICATION_FAILED), (b"alice-s3cret-pw", ErrorCode.NONE)):
        s = connect(address)
        assert roundtrip(s, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        answer = roundtrip(s, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0" + password}, correlation_id=8)
        assert answer["error_code"] == code
        if code:
            assert is_closed(s)
        s.close()
    found = scrape(b)
    assert found[("kafka_server_socket_server_metrics_failed_authentication_total",
                  (("listener", "SASL_PLAINTEXT"),))] == 1
    assert found[("kafka_server_socket_server_metrics_successful_authentication_total",
                  (("listener", "SASL_PLAINTEXT"),))] == 1


def test_group_lag_comes_from_the_coordinator_only_with_every_brokers_log_ends(broker_factory):
    # one coordinator shard: one broker coordinates, the other none
    brokers = [broker_factory(i, **METRICS, **{"coordinator.shards": 1}) for i in (0, 1)]
    bootstrap = ",".join(f"127.0.0.1:{b.port}" for b in brokers)
    with ClusterClient(bootstrap) as cc:
        AdminClient(cc).create_topic("t", 4)
        leaders = {p: cc.leader("t", p) for p in range(4)}
        assert set(leaders.values()) == {0, 1}  # both brokers lead some
        producer = Producer(cc)
        for p in range(4):
            for _ in range(10 + p):
                producer.send("t", b"x", partition=p)
        producer.flush()
        GroupClient(cc).commit_offsets("g", {("t", p): p for p in range(4)})  # lag 10 on each
    coordinator = next(b for b in brokers if b.broker.coordination.coordinators_active())
    other = next(b for b in brokers if b is not coordinator)
    want = {(("consumergroup", "g"), ("partition", str(p)), ("topic", "t")): 10 for p in range(4)}
    found = wait_until(lambda: series(f := scrape(coordinator), "kafka_consumergroup_lag") == want and f,
                       timeout=10, message=lambda: f"lag {series(scrape(coordinator), 'kafka_consumergroup_lag')}")
    assert found[("kafka_consumergroup_lag_sum", (("consumergroup", "g"), ("topic", "t")))] == 40
    assert found[("kafka_consumergroup_current_offset_sum", (("consumergroup", "g"), ("topic", "t")))] == 0 + 1 + 2 + 3
    assert found[("kafka_consumergroup_members", (("consumergroup", "g"),))] == 0
    assert found[("spark_coord_coordinator_active", ())] == 1
    elsewhere = scrape(other)
    assert not series(elsewhere, "kafka_consumergroup_lag") and elsewhere[("spark_coord_coordinator_active", ())] == 0
    # each broker exports the partitions it leads: summed over the cluster, every partition once
    ends = {}
    for b in brokers:
        ends.update(series(scrape(b), "kafka_topic_partition_current_offset"))
    assert ends == {(("partition", str(p)), ("topic", "t")): 10 + p for p in range(4)}
    doc = json.loads(urllib.request.urlopen(f"{coordinator.broker.metrics.url}/status.json", timeout=10).read())
    [g] = doc["groups"]
    assert g["group"] == "g" and g["lag"] == 40
    assert [(r["partition"], r["committed"], r["log_end"], r["lag"]) for r in g["partitions"]] == \
        [(p, p, 10 + p, 10) for p in range(4)]
    # a broker gone: its partitions' lag is left out (nothing to ask), the others' still exported
    other.stop()
    wait_until(lambda: len(series(scrape(coordinator), "kafka_consumergroup_lag")) == 2, timeout=20,
               message=lambda: f"lag of the live broker's partitions only: "
                               f"{series(scrape(coordinator), 'kafka_consumergroup_lag')}")
    with BrokerConnection("127.0.0.1", coordinator.port, timeout=10) as conn:
        assert conn.request(ApiKey.API_VERSIONS, {})["error_code"] == 0


def test_every_metric_the_grafana_dashboard_queries_is_exported(broker_factory):
    """conf/grafana's dashboard names only metrics a broker (and its coordinator) export."""
    import re
    from pathlib import Path

    from spark_coord.consumer import Consumer

    dashboard_path = Path(__file__).resolve().parents[2] / "conf/grafana/spark-coord-dashboard.json"
    dashboard = json.loads(dashboard_path.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    wanted = {m for e in exprs for m in re.findall(r"\b(?:kafka|spark_coord|process)_[a-z0-9_]+", e)}
    b = broker_factory(0, **METRICS)
    bootstrap = f"127.0.0.1:{b.port}"
    with ClusterClient(bootstrap) as cc:
        AdminClient(cc).create_topic("t", 1)
        producer = Producer(cc)
        producer.send("t", b"x", partition=0)
        producer.flush()

    def exported() -> set[str]:
        text = urllib.request.urlopen(f"{b.broker.metrics.url}/metrics", timeout=10).read().decode()
        names = set()
        for family in text_string_to_metric_families(text):
            names.update({family.name, f"{family.name}_total", f"{family.name}_bucket", f"{family.name}_sum",
                          f"{family.name}_count"})
            names.update(s.name for s in family.samples)
        return names

    with Consumer(bootstrap, "g", topics=["t"], auto_offset_reset="smallest", session_timeout_ms=1500) as c:
        next(c.batches(timeout=30))
        c.commit({("t", 0): 1}, timeout=10)
        assert len(wanted) > 25
        wait_until(lambda: wanted <= exported(), timeout=10,  # group metrics: from the next sample on
                   message=lambda: f"not exported: {sorted(wanted - exported())}")
