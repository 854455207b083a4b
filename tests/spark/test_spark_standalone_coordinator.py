"""A Spark query and ``spark-coord consume`` in one group through a standalone coordinator over
Tansu (a Kafka-compatible broker nobody here wrote): partitions shared disjointly, every record
read once, the group's offsets in the coordinator's ZooKeeper and mirrored into Tansu, where
Kafka's AdminClient reads the query's lag."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid

from helpers import group_offsets, wait_until

from testkit.coordinator_process import CoordinatorProcess

PARTITIONS = 4


def _produce(bootstrap: str, topic: str, n: int, start: int = 0) -> None:
    from confluent_kafka import Producer

    # one record per batch: Tansu's ListOffsets (which Spark's planning uses) answers the base offset
    # of the last batch + 1 as the log end, right only when every batch holds one record
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(start, start + n):
        p.produce(topic, f"v{i}".encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0


def test_query_and_cli_member_share_a_group_through_a_standalone_coordinator(spark, tansu, zk_connect, tmp_path):
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient, NewTopic

    topic, group = f"ss-{uuid.uuid4().hex[:6]}", f"ssg-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(timeout=30)
    coordinator = CoordinatorProcess(1010, tansu.bootstrap, zk_connect, tmp_path,
                                     **{"coordinator.offsets.mirror": True}).wait_listening()
    cli = subprocess.Popen([sys.executable, "-m", "spark_coord.cli", "consume", "-b", tansu.bootstrap,
                            "--coordinator", coordinator.address, "--group", group, "--topic", topic,
                            "--from-beginning", "--override", "session.timeout.ms=6000"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cli_lines: list[str] = []
    reader = threading.Thread(target=lambda: cli_lines.extend(iter(cli.stdout.readline, "")), daemon=True)
    reader.start()
    rows: dict[int, list] = {}

    def collect(df, batch_id):
        rows[batch_id] = [(r.partition, r.offset) for r in df.collect()]

    query = (spark.readStream.format("coordkafka").option("bootstrap.brokers", tansu.bootstrap)
             .option("coordinator.bootstrap", coordinator.address).option("subscribe", topic)
             .option("group.id", group).option("startingOffsets", "earliest").option("session.timeout.ms", "6000")
             .load().writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        def owners():
            from spark_coord.zk import paths
            from spark_coord.zk.client import close, connect

            zk = connect(zk_connect)
            try:
                base = paths.topic_owners(group, topic)
                return {int(p): zk.get(f"{base}/{p}")[0].decode() for p in zk.get_children(base)} \
                    if zk.exists(base) else {}
            finally:
                close(zk)

        wait_until(lambda: len(owners()) == PARTITIONS and len({o.rsplit("-", 1)[0] for o in owners().values()}) == 2,
                   timeout=120, message=lambda: f"the query and the CLI member owning the partitions: {owners()}")
        _produce(tansu.bootstrap, topic, 80)

        def spark_read():
            return [r for b in sorted(rows) for r in rows[b]]

        wait_until(lambda: len(spark_read()) + len(cli_lines) >= 80, timeout=120,
                   message=lambda: f"80 records between the query ({len(spark_read())}) and the CLI ({len(cli_lines)})")
        assert spark_read() and cli_lines, "both members read"
        assert sorted(line.strip() for line in cli_lines) == sorted(set(line.strip() for line in cli_lines))
        spark_parts = {p for p, _ in spark_read()}
        assert len(spark_read()) + len(cli_lines) == 80 and len(spark_parts) == 2
        query.processAllAvailable()
        wait_until(lambda: sum(group_offsets(zk_connect, group, topic).values()) == 80, timeout=60,
                   message=lambda: f"group offsets in ZooKeeper {group_offsets(zk_connect, group, topic)}")

        def mirrored():
            [future] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
            return {tp.partition: tp.offset for tp in future.result(timeout=20).topic_partitions if tp.offset >= 0}

        wait_until(lambda: mirrored() == {p: 20 for p in range(PARTITIONS)}, timeout=60,
                   message=lambda: f"offsets mirrored into Tansu {mirrored()}")
    finally:
        query.stop()
        cli.terminate()
        cli.wait(30)
        coordinator.stop()
