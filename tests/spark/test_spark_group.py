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


def drain_in_thread(consumer, got: list, stop: threading.Event) -> threading.Thread:
    """A thread appending (topic, partition, offset) of what ``consumer`` delivers until ``stop``."""
    def drain():
        while not stop.is_set():
            for b in consumer.batches(timeout=0.2):
                d = b.to_pydict()
                got.extend(zip(d["topic"], d["partition"], d["offset"], strict=True))

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    return t


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
        # the batches Spark confirmed reach ZooKeeper (committed actively, not a ping later)
        wait_until(lambda: zk_offsets(cluster, "spark-g2", topic) == {p: 10 for p in range(PARTITIONS)},
                   timeout=30, message=lambda: f"ZooKeeper offsets {zk_offsets(cluster, 'spark-g2', topic)}")
        queries[1].stop()  # leaves with a final commit: the survivor takes over at once, from there
        produced |= {(r[2], r[3], r[4]) for r in produce(cluster, topic, 40, partitions=PARTITIONS, start=40,
                                                         headers=False)}
        wait_until(lambda: set(union()) >= produced, timeout=90,
                   message="records produced after the hand-over reach the remaining query")
        got = union()
        assert set(got) == produced
        twice = {r for r in got if got.count(r) > 1}
        assert not twice, f"records read by both queries across the hand-over: {sorted(twice)[:10]}"
        wait_until(lambda: zk_offsets(cluster, "spark-g2", topic) == {p: 20 for p in range(PARTITIONS)},
                   timeout=30, message=lambda: f"ZooKeeper offsets {zk_offsets(cluster, 'spark-g2', topic)}")
    finally:
        for q in queries:
            q.stop()


def test_plain_consumer_and_query_in_one_group(spark, cluster, tmp_path):
    from spark_coord.consumer import Consumer

    topic = new_topic(cluster, PARTITIONS)
    consumer = Consumer(cluster.bootstrap, "spark-g3", topics=[topic], session_timeout_ms=3000,
                        auto_offset_reset="smallest")
    got_consumer, stop = [], threading.Event()
    t = drain_in_thread(consumer, got_consumer, stop)
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


def _log_end(cluster, topic):
    from spark_coord.client.admin import LATEST, AdminClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(cluster.bootstrap) as cc:
        return AdminClient(cc).list_offsets(topic, None, LATEST)


def test_available_now_run_leaves_the_group_offsets_at_the_log_end(spark, cluster, tmp_path):
    """Spark calls commit() lazily and ends an AvailableNow run's source process with SIGTERM:
    the group's offsets must still equal the log end when the run is over (lag 0)."""
    import time

    topic = new_topic(cluster, PARTITIONS)
    produce(cluster, topic, 2000, partitions=PARTITIONS, headers=False)
    sink = Collect()
    query = (group_reader(spark, cluster, topic, "spark-g4", maxOffsetsPerTrigger="300").writeStream
             .foreachBatch(sink).option("checkpointLocation", str(tmp_path / "c"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180), "the AvailableNow run did not end"
    ended = time.monotonic()
    ends = _log_end(cluster, topic)
    assert len(sink.rows()) == 2000 and len(set(sink.rows())) == 2000
    wait_until(lambda: zk_offsets(cluster, "spark-g4", topic) == ends, timeout=10,
               message=lambda: f"ZooKeeper offsets {zk_offsets(cluster, 'spark-g4', topic)}, log end {ends}")
    print(f"\ngroup offsets at the log end {time.monotonic() - ended:.2f} s after the AvailableNow run ended")


def test_stopped_query_leaves_the_group_with_its_offsets_at_what_it_processed(spark, cluster, tmp_path):
    from spark_coord.consumer.cli import describe_groups

    topic = new_topic(cluster, PARTITIONS)
    produce(cluster, topic, 400, partitions=PARTITIONS, headers=False)
    sink = Collect()
    query = (group_reader(spark, cluster, topic, "spark-g5").writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "c")).trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: len(sink.rows()) >= 400, timeout=90, message="400 rows")
        query.processAllAvailable()
    finally:
        query.stop()
    ends = _log_end(cluster, topic)
    wait_until(lambda: zk_offsets(cluster, "spark-g5", topic) == ends, timeout=15,
               message=lambda: f"ZooKeeper offsets {zk_offsets(cluster, 'spark-g5', topic)}, log end {ends}")
    # it left: no member waits out a lease
    wait_until(lambda: not describe_groups(cluster.bootstrap, ["spark-g5"], with_lag=False)[0]["members"],
               timeout=10, message="the stopped query's members to leave the group")


def test_kafka_client_and_query_in_one_group(spark, cluster, tmp_path):
    """A confluent-kafka consumer (Kafka's group protocol) and a query share a group disjointly;
    when it closes (LeaveGroup) the query takes its partitions over; Kafka's AdminClient reads
    the group's offsets as lag tools do."""
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient as KafkaAdmin

    topic, group = new_topic(cluster, PARTITIONS), "spark-g6"  # a group of its own: no other test's offsets
    kafka = KafkaConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "client.id": "confluent",
                           "auto.offset.reset": "earliest", "enable.auto.commit": True,
                           "auto.commit.interval.ms": 200, "session.timeout.ms": 6000,
                           "heartbeat.interval.ms": 300})
    kafka.subscribe([topic])
    got_kafka, stop = [], threading.Event()

    def drain():
        while not stop.is_set():
            m = kafka.poll(0.2)
            if m is not None and m.error() is None:
                got_kafka.append((m.topic(), m.partition(), m.offset()))
        kafka.close()

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    sink = Collect()
    query = (group_reader(spark, cluster, topic, group).writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "c")).trigger(processingTime="200 milliseconds").start())
    try:
        def two_kinds():
            owners = zk_owners(cluster, group, topic)
            kinds = {o.startswith("confluent") for o in owners.values()}
            return len(owners) == PARTITIONS and kinds == {True, False}

        wait_until(two_kinds, timeout=90, message=lambda: f"the query and the Kafka client owning {PARTITIONS} "
                                                          f"partitions: {zk_owners(cluster, group, topic)}")
        produced = {(r[2], r[3], r[4]) for r in produce(cluster, topic, 40, partitions=PARTITIONS, headers=False)}
        wait_until(lambda: set(got_kafka) | {(a, b, c) for a, b, c, _ in sink.rows()} >= produced, timeout=90,
                   message="the Kafka client and the query together read everything")
        spark_parts = {(a, b) for a, b, _, _ in sink.rows()}
        kafka_parts = {(a, b) for a, b, _ in got_kafka}
        assert spark_parts and kafka_parts, "one side got no partitions"
        assert not spark_parts & kafka_parts, f"partitions read by both: {spark_parts & kafka_parts}"

        stop.set()  # the Kafka client closes: commits, leaves; the query takes everything
        t.join(30)
        produced |= {(r[2], r[3], r[4]) for r in produce(cluster, topic, 40, partitions=PARTITIONS, start=40,
                                                         headers=False)}
        wait_until(lambda: set(got_kafka) | {(a, b, c) for a, b, c, _ in sink.rows()} >= produced, timeout=90,
                   message="records produced after the Kafka client left reach the query")
        wait_until(lambda: zk_offsets(cluster, group, topic) == {p: 20 for p in range(PARTITIONS)}, timeout=30,
                   message=lambda: f"ZooKeeper offsets {zk_offsets(cluster, group, topic)}")
        admin = KafkaAdmin({"bootstrap.servers": cluster.bootstrap})
        [future] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
        assert {(tp.topic, tp.partition): tp.offset for tp in future.result(timeout=20).topic_partitions} == \
            {(topic, p): 20 for p in range(PARTITIONS)}
    finally:
        query.stop()
        stop.set()
        t.join(30)


def test_a_joining_member_takes_only_its_share_from_a_running_query(spark, cluster, tmp_path):
    """A query holds every partition; a thin consumer joins.  The query's member is asked to
    give up only the partitions that move (StopFetcher v1 naming them, as the coordinator's log
    shows), keeps reading the others, and every record is read once: by the query before and on
    its kept partitions, by the consumer on the ones it got."""
    from spark_coord.consumer import Consumer

    topic, group = new_topic(cluster, PARTITIONS), "spark-g7"
    sink = Collect()
    query = (group_reader(spark, cluster, topic, group).writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "c")).trigger(processingTime="200 milliseconds").start())
    consumer = None
    got_consumer, stop = [], threading.Event()
    try:
        wait_until(lambda: len(set(zk_owners(cluster, group, topic).values())) == 1
                   and len(zk_owners(cluster, group, topic)) == PARTITIONS, timeout=90,
                   message=lambda: f"the query owning every partition: {zk_owners(cluster, group, topic)}")
        [query_thread] = set(zk_owners(cluster, group, topic).values())
        produced = {(r[2], r[3], r[4]) for r in produce(cluster, topic, 40, partitions=PARTITIONS, headers=False)}
        wait_until(lambda: {(a, b, c) for a, b, c, _ in sink.rows()} >= produced, timeout=90,
                   message="the query read the first records")
        consumer = Consumer(cluster.bootstrap, group, topics=[topic], session_timeout_ms=3000, consumer_id="joiner",
                            auto_offset_reset="smallest")
        drain_in_thread(consumer, got_consumer, stop)
        wait_until(lambda: len(set(zk_owners(cluster, group, topic).values())) == 2, timeout=60,
                   message=lambda: f"the joiner owning partitions: {zk_owners(cluster, group, topic)}")
        owners = zk_owners(cluster, group, topic)
        moved = sorted(p for p, o in owners.items() if o == "joiner-0")
        kept = sorted(p for p, o in owners.items() if o == query_thread)
        assert len(moved) == len(kept) == PARTITIONS // 2
        member = query_thread.rsplit("-", 1)[0]
        log_text = "\n".join(p.read_text(errors="replace") for p in cluster.data_dir.glob("broker-*.log"))
        stops = [line for line in log_text.splitlines() if f"StopFetcher to {member}:" in line]
        assert len(stops) == 1 and stops[0].endswith(", ".join(f"{topic}-{p}" for p in moved)), stops
        produced |= {(r[2], r[3], r[4]) for r in produce(cluster, topic, 40, partitions=PARTITIONS, start=40,
                                                         headers=False)}
        wait_until(lambda: set(got_consumer) | {(a, b, c) for a, b, c, _ in sink.rows()} >= produced, timeout=90,
                   message="the query and the joiner together read everything")
        late = [(p, o) for _, p, o, _ in sink.rows() if o >= 10]
        assert late and {p for p, _ in late} <= set(kept)  # the query read on, only its own partitions
        assert {p for _, p, _ in got_consumer} <= set(moved)
        assert len(got_consumer) + len(sink.rows()) == len(produced)  # nothing twice
    finally:
        query.stop()
        stop.set()
        if consumer is not None:
            consumer.close()


def wait_everything_read_and_committed(cluster, group: str, topic: str, peers, sink, cli) -> dict[int, int]:
    """With the producer stopped: every record of ``topic`` was read by some member (Kafka peers,
    the query's ``sink``, the ``cli`` consumer), and the group's offsets in ZooKeeper reach the log end,
    which is returned (partition -> offset)."""
    from helpers import wait_until
    from peers.group_peers import topic_index

    index = topic_index(cluster.bootstrap, topic)
    everything = set(index.values())

    def read_by_all() -> set[tuple[int, int]]:
        got = set().union(*(p.records() for p in peers))
        got |= {(p, o) for _, p, o, _ in sink.rows()}
        got |= {index[v] for v in cli.values() if v in index}
        return got

    wait_until(lambda: read_by_all() >= everything, timeout=90, interval=0.5,
               message=lambda: f"every record read; missing {len(everything - read_by_all())}")
    ends: dict[int, int] = {}
    for p, o in everything:
        ends[p] = max(ends.get(p, 0), o + 1)
    wait_until(lambda: zk_offsets(cluster, group, topic) == ends, timeout=60, interval=0.5,
               message=lambda: f"the group's offsets at the log end {ends}; now {zk_offsets(cluster, group, topic)}")
    return ends
