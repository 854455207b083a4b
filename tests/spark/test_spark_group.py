"""coordkafka with group.id: the query's members join the coordinator's group.

Partitions the coordinator assigns become the query's input partitions; committed
micro-batches flow back as ping offsets into ZooKeeper; two queries (or a plain
Consumer and a query) in one group share the partitions disjointly and hand them
over when one leaves.
"""

from __future__ import annotations

import threading

from chispa import assert_df_equality
from helpers import wait_until
from spark_data import expected_df, new_topic, produce

PARTITIONS = 4


def group_reader(spark, cluster, topic, group, **options):
    r = (spark.readStream.format("coordkafka").option("bootstrap.brokers", cluster.bootstrap)
         .option("subscribe", topic).option("group.id", group).option("session.timeout.ms", "3000")
         .option("startingOffsets", "earliest"))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


class Collect:
    """A foreachBatch sink keyed by batch id (idempotent: a replayed batch replaces itself)."""

    def __init__(self):
        self.batches: dict[int, list] = {}
        self.lock = threading.Lock()

    def __call__(self, df, batch_id):
        rows = [(r.topic, r.partition, r.offset, bytes(r.value)) for r in df.collect()]
        with self.lock:
            self.batches[batch_id] = rows

    def rows(self):
        with self.lock:
            return [r for b in sorted(self.batches) for r in self.batches[b]]


def zk_offsets(cluster, group, topic):
    from spark_coord.zk import paths
    from spark_coord.zk.client import connect

    zk = connect(cluster.zk_connect)
    try:
        base = paths.topic_offsets(group, topic)
        if not zk.exists(base):
            return {}
        return {int(p): int(zk.get(f"{base}/{p}")[0]) for p in zk.get_children(base)}
    finally:
        zk.stop()
        zk.close()


def test_group_query_reads_assigned_partitions_and_commits_to_zookeeper(spark, cluster, tmp_path):
    topic = new_topic(cluster, PARTITIONS)
    rows = produce(cluster, topic, 80, partitions=PARTITIONS)
    df = group_reader(spark, cluster, topic, "spark-g1", includeHeaders="true")
    query = (df.writeStream.format("memory").queryName("group_mem")
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="200 milliseconds").start())
    try:
        rows += produce(cluster, topic, 40, partitions=PARTITIONS, start=80)
        wait_until(lambda: spark.table("group_mem").count() >= 120, timeout=90, message="120 rows via the group")
        query.processAllAvailable()
        assert_df_equality(spark.table("group_mem"), expected_df(spark, rows, True), ignore_row_order=True,
                           ignore_nullable=True)
        # the sink's committed end offsets reach ZooKeeper within a ping interval plus a commit interval
        wait_until(lambda: zk_offsets(cluster, "spark-g1", topic) == {p: 30 for p in range(PARTITIONS)},
                   timeout=30, message=lambda: f"ZooKeeper offsets {zk_offsets(cluster, 'spark-g1', topic)}")
    finally:
        query.stop()


def zk_owners(cluster, group, topic):
    from spark_coord.zk import paths
    from spark_coord.zk.client import connect

    zk = connect(cluster.zk_connect)
    try:
        base = paths.topic_owners(group, topic)
        if not zk.exists(base):
            return {}
        return {int(p): zk.get(f"{base}/{p}")[0].decode() for p in zk.get_children(base)}
    finally:
        zk.stop()
        zk.close()


def test_two_queries_share_a_group_and_hand_over_partitions(spark, cluster, tmp_path):
    topic = new_topic(cluster, PARTITIONS)
    sinks, queries = [Collect(), Collect()], []
    for i in range(2):
        df = group_reader(spark, cluster, topic, "spark-g2")
        queries.append(df.writeStream.foreachBatch(sinks[i]).option("checkpointLocation", str(tmp_path / f"c{i}"))
                       .trigger(processingTime="200 milliseconds").start())
    try:
        # the group settles with both queries' members owning partitions
        wait_until(lambda: len(set(zk_owners(cluster, "spark-g2", topic).values())) == 2
                   and len(zk_owners(cluster, "spark-g2", topic)) == PARTITIONS, timeout=90,
                   message=lambda: f"two owners of {PARTITIONS} partitions: {zk_owners(cluster, 'spark-g2', topic)}")
        produced = {(r[2], r[3], r[4]) for r in produce(cluster, topic, 40, partitions=PARTITIONS, headers=False)}

        def union():
            return [(t, p, o) for s in sinks for t, p, o, _ in s.rows()]

        wait_until(lambda: set(union()) >= produced, timeout=90, message="all 40 records read by the two queries")
        parts = [{(t, p) for t, p, _, _ in s.rows()} for s in sinks]
        assert parts[0] and parts[1], f"one query got no partitions: {parts}"
        assert not parts[0] & parts[1], f"partitions read by both queries: {parts[0] & parts[1]}"
        queries[1].stop()
        produced |= {(r[2], r[3], r[4]) for r in produce(cluster, topic, 40, partitions=PARTITIONS, start=40,
                                                         headers=False)}
        # the survivor takes over every partition from the group's committed offsets
        wait_until(lambda: set(union()) >= produced, timeout=90,
                   message="records produced after the hand-over reach the remaining query")
        got = union()
        assert set(got) == produced
        # Spark stops a query's source process without calling stop(), so the group only knows the
        # offsets its last ping answer carried: a re-read (at least once) is confined to partitions
        # the stopped query owned, and to records it had read (an idempotent sink absorbs them)
        twice = {r for r in got if got.count(r) > 1}
        stopped_query_reads = {(t, p, o) for t, p, o, _ in sinks[1].rows()}
        assert twice <= stopped_query_reads, f"re-read records the stopped query never had: {twice - stopped_query_reads}"
        assert all(got.count(r) <= 2 for r in twice)
    finally:
        for q in queries:
            q.stop()


def test_plain_consumer_and_query_in_one_group(spark, cluster, tmp_path):
    from spark_coord.consumer import Consumer

    topic = new_topic(cluster, PARTITIONS)
    consumer = Consumer(cluster.bootstrap, "spark-g3", topics=[topic], session_timeout_ms=3000,
                        auto_offset_reset="smallest")
    got_consumer, stop = [], threading.Event()

    def drain():
        while not stop.is_set():
            for b in consumer.batches(timeout=0.2):
                d = b.to_pydict()
                got_consumer.extend(zip(d["topic"], d["partition"], d["offset"]))

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    sink = Collect()
    query = (group_reader(spark, cluster, topic, "spark-g3").writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "c")).trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: len(set(zk_owners(cluster, "spark-g3", topic).values())) == 2
                   and len(zk_owners(cluster, "spark-g3", topic)) == PARTITIONS, timeout=90,
                   message=lambda: f"two owners of {PARTITIONS} partitions: {zk_owners(cluster, 'spark-g3', topic)}")
        produced = {(r[2], r[3], r[4]) for r in produce(cluster, topic, 40, partitions=PARTITIONS, headers=False)}
        wait_until(lambda: set(got_consumer) | {(a, b, c) for a, b, c, _ in sink.rows()} >= produced, timeout=90,
                   message="the consumer and the query together read everything")
        spark_parts = {(a, b) for a, b, _, _ in sink.rows()}
        consumer_parts = {(a, b) for a, b, _ in got_consumer}
        assert spark_parts and consumer_parts, "one side got no partitions"
        assert not spark_parts & consumer_parts, f"partitions read by both: {spark_parts & consumer_parts}"
        assert len(got_consumer) + len(sink.rows()) == len(produced)
    finally:
        query.stop()
        stop.set()
        t.join(5)
        consumer.close()
