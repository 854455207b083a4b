"""Prometheus (the real server) scrapes a three-broker cluster while a Spark query and a confluent-kafka
consumer share a group: kafka_exporter's metrics count the group's members, its lag is positive while
records wait for a commit and 0 once they are committed, and exactly one broker exports it."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from helpers import fresh_chroot, wait_until
from metrics_support import PrometheusServer, require

PARTITIONS = 6
GROUP = "g"


def group_reader(spark, bootstrap: str, topic: str, group: str, **options):
    r = (spark.readStream.format("coordkafka").option("bootstrap.brokers", bootstrap).option("subscribe", topic)
         .option("group.id", group).option("session.timeout.ms", "3000").option("startingOffsets", "earliest"))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


class HeldCommits(threading.Thread):
    """A confluent-kafka group consumer that polls all the time and commits only while ``committing``."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(name="confluent-consumer", daemon=True)
        from confluent_kafka import Consumer

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": "confluent",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
        self.consumer.subscribe([topic])
        self.committing = threading.Event()
        self.stop_event = threading.Event()
        self.consumed = 0

    def run(self) -> None:
        from confluent_kafka import KafkaException

        while not self.stop_event.is_set():
            msg = self.consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                self.consumed += 1
            if self.committing.is_set():
                try:
                    self.consumer.commit(asynchronous=False)
                except KafkaException:
                    pass  # nothing new to commit
        self.consumer.close()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)


def test_prometheus_sees_a_groups_members_and_lag_across_three_brokers(spark, zookeeper, tmp_path):
    require("prometheus", "prometheus")
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer
    from spark_coord.cluster import LocalCluster
    from spark_coord.coordinator.core.assignors import thread_owner
    from spark_coord.zk.client import close, connect
    from testkit.zk_history import read_partitions

    overrides = {"zookeeper.session.timeout.ms": 6000, "coordinator.offsets.commit.interval.ms": 200,
                 "metrics.lag.sample.ms": 1000}
    with LocalCluster(3, tmp_path / "cluster", zk_connect=fresh_chroot(zookeeper, "spark-metrics"),
                      overrides=overrides, metrics_port=0) as cluster:
        targets = [f"127.0.0.1:{port}" for port in cluster.metrics_ports.values()]
        with PrometheusServer(tmp_path / "prometheus", targets, interval="1s") as prom:
            wait_until(lambda: sorted(v for _, v in prom.query("up")) == [1.0] * 3, timeout=30,
                       message=lambda: f"Prometheus scraping all three brokers: {prom.query('up')}")
            topic = "pclicks"
            with ClusterClient(cluster.bootstrap) as cc:
                AdminClient(cc).create_topic(topic, PARTITIONS)
            zk = connect(cluster.zk_connect)
            kafka = HeldCommits(cluster.bootstrap, topic)
            kafka.start()
            query = (group_reader(spark, cluster.bootstrap, topic, GROUP, members="2").writeStream
                     .foreachBatch(lambda df, batch_id: df.count())
                     .option("checkpointLocation", str(tmp_path / "checkpoint"))
                     .trigger(processingTime="200 milliseconds").start())

            def produce(per_partition: int) -> None:
                with ClusterClient(cluster.bootstrap) as cc:
                    producer = Producer(cc, acks=-1)
                    for p in range(PARTITIONS):
                        for i in range(per_partition):
                            producer.send(topic, b"click-%d" % i, partition=p)
                    producer.flush()

            def lag() -> float | None:
                return prom.value(f'sum(kafka_consumergroup_lag{{consumergroup="{GROUP}"}})')

            def committed() -> float | None:
                return prom.value(f'sum(kafka_consumergroup_current_offset{{consumergroup="{GROUP}"}})')

            try:
                # members: the query's two and the Kafka consumer, by the protocol each came through
                wait_until(lambda: prom.value(f'sum(kafka_consumergroup_members{{consumergroup="{GROUP}"}})') == 3
                           and prom.value('sum(spark_coord_coordinator_members{protocol="spark"})') == 2
                           and prom.value('sum(spark_coord_coordinator_members{protocol="classic"})') == 1,
                           timeout=120, message=lambda: "Prometheus counting 3 members (2 spark, 1 classic): "
                                                        f"{prom.query('spark_coord_coordinator_members')}")
                def kafka_held() -> int:
                    return sum(1 for v in read_partitions(zk, GROUP, "owners").values() if v.startswith("confluent"))

                # all three members own partitions (the query's second member may join after the first)
                wait_until(lambda: (o := read_partitions(zk, GROUP, "owners")) and len(o) == PARTITIONS
                           and len({thread_owner(v) for v in o.values()}) == 3
                           and {v.startswith("confluent") for v in o.values()} == {True, False},
                           timeout=60, message="the query's two members and the Kafka consumer owning every partition")
                kafka.committing.set()
                produce(10)
                wait_until(lambda: committed() == 10 * PARTITIONS and lag() == 0, timeout=60,
                           message=lambda: f"every partition committed at 10 (lag {lag()}, committed {committed()})")
                # the Kafka consumer holds its commits back: its partitions lag, the query's do not
                kafka.committing.clear()
                produce(100)
                wait_until(lambda: (lag() or 0) > 0, timeout=60, message="a positive lag")
                held_lag = wait_until(lambda: (x := lag()) == 100 * kafka_held() and x, timeout=60,
                                      message=lambda: f"lag {lag()} of the Kafka consumer's {kafka_held()} "
                                                      f"partitions only")
                assert prom.value(f'count(count by (instance) (kafka_consumergroup_lag{{consumergroup="{GROUP}"}}))') \
                    == 1  # exported by the coordinator alone: a sum counts the group once
                assert prom.value(f'sum(kafka_consumergroup_lag_sum{{consumergroup="{GROUP}"}})') == held_lag
                kafka.committing.set()
                wait_until(lambda: lag() == 0 and committed() == 110 * PARTITIONS, timeout=60,
                           message=lambda: f"lag 0 once consumption caught up (lag {lag()}, committed {committed()})")
                assert prom.value('sum(kafka_topic_partition_current_offset{topic="pclicks"})') == 110 * PARTITIONS
                assert prom.value('sum(kafka_topic_partitions{topic="pclicks"})') == PARTITIONS
                assert prom.value("sum(spark_coord_coordinator_rebalances_completed_total)") >= 1
                assert prom.value('sum(kafka_server_brokertopicmetrics_messagesin_total{topic="pclicks"})') \
                    == 110 * PARTITIONS
                # every query of the Grafana dashboard is valid PromQL here, and the group's panels have data
                dashboard = json.loads((Path(__file__).resolve().parents[2] / "conf/grafana/spark-coord-dashboard.json")
                                       .read_text())
                for panel in dashboard["panels"]:
                    for target in panel.get("targets", []):
                        result = prom.query(target["expr"].replace("$group", ".*"))
                        if panel["title"] in ("Lag per group", "Members per group", "Members by protocol"):
                            assert result, f"no data for {panel['title']}: {target['expr']}"
            finally:
                query.stop()
                kafka.stop()
                close(zk)
