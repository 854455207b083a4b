"""Spark reads a share group (``kafka.share.group.id``): a query beside librdkafka's ShareConsumers,
acceptance only after Spark commits, poison records released by a foreachBatch helper until the
delivery limit archives them, and refused batch reads."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from helpers import local_cluster, wait_until  # noqa: E402
from share_support import SHARE_OVERRIDES, ShareReader, produce, set_group_config  # noqa: E402
from spark_data import new_topic  # noqa: E402

LIMIT = SHARE_OVERRIDES["group.share.delivery.count.limit"]


@pytest.fixture(scope="module")
def share_cluster(zookeeper, tmp_path_factory, request):
    settings = {"zookeeper.session.timeout.ms": 6000, "num.partitions": 2, **SHARE_OVERRIDES}
    with local_cluster(zookeeper, tmp_path_factory.mktemp("cluster"), 1, "s-share", settings) as c:
        yield c


def share_stream(spark, cluster, topic, group, **options):
    r = (spark.readStream.format("coordkafka").option("kafka.bootstrap.servers", cluster.bootstrap)
         .option("subscribe", topic).option("kafka.share.group.id", group))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


class Sink:
    """A foreachBatch function keeping every batch's rows and how many tasks held rows."""

    def __init__(self, before=None):
        self.batches: dict[int, list[tuple]] = {}
        self.tasks: dict[int, int] = {}
        self.lock = threading.Lock()
        self.before = before

    def __call__(self, df, batch_id):
        from pyspark.sql.functions import spark_partition_id

        if self.before is not None:
            self.before(df, batch_id)
        rows = df.select("partition", "offset", "key", "deliveryCount", spark_partition_id().alias("task")).collect()
        with self.lock:
            self.batches[batch_id] = [(r.partition, r.offset, bytes(r.key or b""), r.deliveryCount) for r in rows]
            self.tasks[batch_id] = len({r.task for r in rows})

    def rows(self) -> list[tuple]:
        with self.lock:
            return [r for b in sorted(self.batches) for r in self.batches[b]]

    def seen(self) -> set[tuple[int, int]]:
        return {(p, o) for p, o, _, _ in self.rows()}


def test_batch_read_of_a_share_group_is_refused_with_the_reason(spark, share_cluster):
    df = (spark.read.format("coordkafka").option("kafka.bootstrap.servers", share_cluster.bootstrap)
          .option("subscribe", "anything").option("kafka.share.group.id", "g"))
    with pytest.raises(Exception, match="a share group is a queue, read by spark.readStream only"):
        df.load().collect()


@pytest.mark.parametrize("extra, message", [
    ({"group.id": "g2"}, "either group.id"),
    ({"startingOffsets": "earliest"}, "share.auto.offset.reset"),
    ({"kafka.share.parallelism": "0"}, "at least 1"),
])
def test_share_options_that_cannot_be_met_are_refused_at_load(spark, share_cluster, extra, message):
    r = (spark.readStream.format("coordkafka").option("kafka.bootstrap.servers", share_cluster.bootstrap)
         .option("subscribe", "t").option("kafka.share.group.id", "g"))
    for k, v in extra.items():
        r = r.option(k, v)
    with pytest.raises(Exception, match=message):
        r.load()


def test_query_beside_two_share_consumers_every_record_once_eight_tasks_per_batch(spark, share_cluster, tmp_path):
    cluster = share_cluster
    group, topic = "sg-spark", new_topic(cluster, 2, prefix="share")
    # locks and sessions far longer than a batch takes on a loaded machine: every record once is
    # then this test's claim, not a race with the clock (locks running out have tests of their own)
    set_group_config(cluster.bootstrap, group, share_auto_offset_reset="earliest",
                     share_record_lock_duration_ms="30000", share_session_timeout_ms="30000")
    n = 0

    def more(k: int) -> None:
        nonlocal n
        produce(cluster.bootstrap, topic, [(i % 2, f"k{n + i}".encode(), b"v" * 20) for i in range(k)], batch=50)
        n += k

    more(6000)
    peers = [ShareReader(f"c{i}", cluster.bootstrap, group, [topic], pace=0.05) for i in range(2)]
    sink = Sink()
    df = share_stream(spark, cluster, topic, group, **{"kafka.share.parallelism": "8"})
    query = (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: sink.rows(), timeout=90, message="the query's first batch")
        for r in peers:  # the ShareConsumers join a group whose records the query is reading
            r.start()
        deadline = time.time() + 90
        while not (all(r.deliveries for r in peers) and len(sink.batches) >= 4):  # each of the three has records
            assert time.time() < deadline, (len(sink.rows()), [len(r.deliveries) for r in peers])
            more(200)
            time.sleep(0.3)
        every = {(i % 2, (i // 2)) for i in range(n)}  # offsets: round robin over 2 partitions
        wait_until(lambda: set().union(sink.seen(), *(r.seen() for r in peers)) >= every, timeout=90,
                   message=lambda: f"every record read: {len(set().union(sink.seen(), *(r.seen() for r in peers)))}"
                                   f" of {n}")
    finally:
        query.stop()
        for r in peers:
            r.stop()
    assert query.exception() is None
    assert not any(r.errors for r in peers), [r.errors for r in peers]
    # The query's last batch may not be accepted when the stop comes (cut short, or committed and
    # accepted only when the next batch is planned): the stop released its records at once, and
    # a ShareConsumer, still reading, may have them again (delivery count 2; 3 and on if one that
    # stopped first let them go again).
    last = max(sink.batches)
    spark_rows = Counter((p, o) for b, rows in sink.batches.items() if b != last for p, o, _, _ in rows)
    assert spark_rows and all(r.deliveries for r in peers), "every reader got records"
    in_last = {(p, o) for p, o, _, _ in sink.batches[last]}
    again = [d for r in peers for d in r.deliveries if (d.partition, d.offset) in in_last]
    assert all(d.count >= 2 for d in again), [(d.consumer, d.partition, d.offset, d.count) for d in again
                                              if d.count < 2][:5]
    # nothing else was released or failed: each record went to one reader, once
    everyone = spark_rows + Counter(d for r in peers for d in ((x.partition, x.offset) for x in r.deliveries)
                                    if d not in in_last)
    assert set(everyone) | in_last == every
    twice = [k for k, c in everyone.items() if c > 1]
    assert not twice, [(k, [(b, dc) for b, rows in sink.batches.items() for p, o, _, dc in rows if (p, o) == k],
                        [(d.consumer, d.count) for r in peers for d in r.deliveries
                         if (d.partition, d.offset) == k]) for k in twice[:5]]
    assert {dc for _, _, _, dc in sink.rows()} == {1}
    # parallelism 8 over a 2-partition topic: every batch of 8 records or more is read by eight tasks
    sizes = {b: len(rows) for b, rows in sink.batches.items()}
    assert max(sizes.values()) >= 1000, sizes  # the first batch took what the group let it hold
    assert all(sink.tasks[b] == 8 for b in sizes if sizes[b] >= 8), {b: (sizes[b], sink.tasks[b]) for b in sizes}


def _driver_member(cluster, group: str, lock_ms: int, records: int):
    """The query's share-group member (as the reader's driver side hosts it) on a fresh 2-partition
    topic of ``records`` records, read from the start with ``lock_ms`` locks; once it holds both
    partitions."""
    from spark_coord.spark.options import parse_source_options
    from spark_coord.spark.share import _DriverMember

    topic = new_topic(cluster, 2, prefix="share")
    set_group_config(cluster.bootstrap, group, share_auto_offset_reset="earliest",
                     share_record_lock_duration_ms=str(lock_ms), share_session_timeout_ms="30000")
    produce(cluster.bootstrap, topic, [(i % 2, f"k{i}".encode(), b"v") for i in range(records)], batch=50)
    opts = parse_source_options({"kafka.bootstrap.servers": cluster.bootstrap, "subscribe": topic,
                                 "kafka.share.group.id": group}, streaming=True)
    member = _DriverMember(opts)
    c = member.consumer
    try:
        wait_until(lambda: c.joined.is_set() and len(c.assignment) == 2, timeout=30, message="both partitions assigned")
    except BaseException:
        member.close()
        raise
    return member


def test_an_assignment_change_between_rounds_does_not_release_what_the_batch_acquired(share_cluster):
    """The query's member acquires a batch in several ShareFetch rounds.  Seen from outside (CI,
    twice): a ShareConsumer joined while the query planned a batch, the query's member lost a
    partition between two rounds, the next round left that partition out of its share session, and
    the broker released what the first round had acquired there for this very batch: a
    ShareConsumer got those records too (delivery count 2) and the query's acceptance was refused
    with INVALID_RECORD_STATE.  Every round of one acquisition asks for the partitions assigned
    when it began."""
    member = _driver_member(share_cluster, "sg-rounds", lock_ms=30000, records=400)
    try:
        c = member.consumer
        real, rounds = c.fetch_round, []

        def fetch_round(wait_ms):
            out = real(wait_ms)
            rounds.append(out)
            if len(rounds) == 1:  # between the rounds, partition 1 goes to a member that joined
                with c._lock:
                    c.assignment = {tp for tp in c.assignment if tp[1] != 1}
            return out

        c.fetch_round = fetch_round
        ranges = member.acquire(None, 2000)
        c.fetch_round = real
        assert len(rounds) >= 2 and any(p == 1 for (_, p) in ranges), (rounds, ranges)
        for tp, rs in ranges.items():
            for a, b, _ in rs:
                member.acknowledge(tp, a, b, "accept")
        with member._io:
            results = c.commit()
        assert results and set(results.values()) == {0}, results
    finally:
        member.close()


def test_a_batch_whose_acceptance_is_queued_keeps_its_locks_until_it_is_sent(share_cluster):
    """Found in review: the reader took a committed batch as settled the moment it queued the
    batch's acceptance, which goes out with the next fetch; its locks were no longer renewed, so a
    late trigger or a failed fetch let them run out first: the records went back to the group (a
    ShareConsumer could take them) and the acceptance was refused.  Now they are renewed until
    the acceptance is sent, and it is taken after several lock durations."""
    lock_ms = 2000
    member = _driver_member(share_cluster, "sg-queued", lock_ms=lock_ms, records=100)
    try:
        c = member.consumer
        ranges = wait_until(lambda: member.acquire(None, 2000), timeout=30, message="a batch acquired")
        member.holding(1, ranges)
        for tp, rs in ranges.items():  # batch 1 committed: its acceptance queued for the next fetch ...
            for a, b, _ in rs:
                member.acknowledge(tp, a, b, "accept")
        member.settled(1)
        before = member.renewals  # ... which comes late: more than a lock duration passes
        wait_until(lambda: member.renewals >= before + 4, timeout=4 * lock_ms / 1000 + 15,
                   message="the queued batch's locks renewed while its acceptance waits")
        with member._io:
            results = c.commit()
        assert results and set(results.values()) == {0}, results
    finally:
        member.close()


def test_a_batch_longer_than_its_locks_keeps_them_renewed_and_is_accepted_once(spark, share_cluster, tmp_path):
    """A batch running for several lock durations (its foreachBatch sleeps) keeps its records: the
    query renews their locks (ShareAcknowledge v2, Renew) until the batch commits, a ShareConsumer
    beside it never gets them, and the batch's acceptance is taken (seen from outside: records of a
    batch that ran 23 s came to a ShareConsumer again while the query also committed them)."""
    cluster = share_cluster
    group, topic = "sg-renew", new_topic(cluster, 2, prefix="share")
    lock_ms = 2000
    set_group_config(cluster.bootstrap, group, share_auto_offset_reset="earliest",
                     share_record_lock_duration_ms=str(lock_ms), share_session_timeout_ms="30000")
    produce(cluster.bootstrap, topic, [(i % 2, f"k{i}".encode(), b"v") for i in range(400)], batch=50)
    slept: list[int] = []

    def slow_first(df, batch_id):
        if not slept:
            slept.append(batch_id)
            time.sleep(3.5 * lock_ms / 1000)  # several lock durations: renewed about every lock / 3

    sink = Sink(before=slow_first)
    peer = ShareReader("c0", cluster.bootstrap, group, [topic])
    df = share_stream(spark, cluster, topic, group)
    query = (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: slept, timeout=90, message="the query's first batch")
        peer.start()  # joins while the first batch sleeps on its records
        wait_until(lambda: len(sink.batches) >= 1, timeout=60, message="the first batch to finish")
        first = {(p, o) for p, o, _, _ in sink.batches[slept[0]]}
        produce(cluster.bootstrap, topic, [(i % 2, f"m{i}".encode(), b"v") for i in range(100)], batch=50)
        every = {(i % 2, i // 2) for i in range(500)}
        wait_until(lambda: sink.seen() | peer.seen() >= every, timeout=90,
                   message=lambda: f"every record read: {len(sink.seen() | peer.seen())} of 500")
        query.processAllAvailable()
    finally:
        query.stop()
        peer.stop()
    assert first, "the slow batch held records"
    again = sorted(k for k in first if k in peer.seen())
    assert not again, f"records of the slow batch went to the ShareConsumer too: {again[:10]}"
    assert all(dc == 1 for _, _, _, dc in sink.batches[slept[0]])


def test_a_record_that_fails_every_time_is_archived_at_the_delivery_limit_and_the_query_goes_on(
        spark, share_cluster, tmp_path):
    from spark_coord.spark.share_acks import foreach_record

    cluster = share_cluster
    group, topic = "sg-poison", new_topic(cluster, 1, prefix="poison")
    set_group_config(cluster.bootstrap, group, share_auto_offset_reset="earliest")
    produce(cluster.bootstrap, topic, [(0, f"k{i}".encode(), b"v") for i in range(20)] + [(0, b"poison", b"v")]
            + [(0, f"k{i}".encode(), b"v") for i in range(20, 40)], batch=7)
    processed: list[tuple[bytes, int]] = []

    def handle(row):
        if row.key == b"poison":
            raise ValueError("cannot process this record")
        processed.append((bytes(row.key), row.deliveryCount))

    acks = str(tmp_path / "acks")
    sink = Sink(before=lambda df, batch_id: foreach_record(df, handle, group, path=acks))
    df = share_stream(spark, cluster, topic, group, **{"kafka.share.acknowledgements.path": acks})
    query = (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="100 milliseconds").start())
    try:
        wait_until(lambda: len([r for r in sink.rows() if r[2] == b"poison"]) >= LIMIT
                   and len(processed) >= 40, timeout=90,
                   message=lambda: f"poison seen {[r for r in sink.rows() if r[2] == b'poison']}, {len(processed)}")
        produce(cluster.bootstrap, topic, [(0, b"after", b"v")])
        wait_until(lambda: any(k == b"after" for k, _ in processed), timeout=60, message="the query went on")
        time.sleep(SHARE_OVERRIDES["group.share.record.lock.duration.ms"] / 1000 + 1)  # nothing more may come back
    finally:
        query.stop()
    assert query.exception() is None
    poison = [dc for _, _, k, dc in sink.rows() if k == b"poison"]
    assert poison == list(range(1, LIMIT + 1)), poison  # released each time, then archived
    assert Counter(k for k, _ in processed) == Counter([f"k{i}".encode() for i in range(40)] + [b"after"])
    assert {dc for _, dc in processed} == {1}


@pytest.mark.timeout(400)
def test_sigkill_in_a_batch_its_records_come_back_counted_and_committed_ones_never(spark, share_cluster, tmp_path):
    """A query (local[4], parallelism 8) is SIGKILLed while batch 2 is in its sink but not in its commit
    log; restarted from its checkpoint, it plans that batch empty.  Every record of batch 2 comes back
    with delivery count 2 -- to the restarted query or to the ShareConsumer beside it -- and no record
    accepted by a committed batch is read again."""
    import json

    from test_spark_kill import START_TIMEOUT, Job

    cluster = share_cluster
    group, topic = "sg-kill", new_topic(cluster, 2, prefix="share-kill")
    set_group_config(cluster.bootstrap, group, share_auto_offset_reset="earliest")
    total = 1200
    produce(cluster.bootstrap, topic, [(i % 2, f"k{i}".encode(), f"v{i}".encode()) for i in range(total)], batch=20)
    out, markers, ckpt = tmp_path / "out", tmp_path / "markers", tmp_path / "ckpt"
    markers.mkdir()
    args = ["--bootstrap", cluster.bootstrap, "--topic", topic, "--checkpoint", str(ckpt), "--sink", "files",
            "--out", str(out), "--share-group", group, "--parallelism", "8", "--master", "local[4]",
            "--max-offsets", "200", "--trigger-ms", "100"]
    job = Job(args + ["--hold-after-batch", "2", "--marker-dir", str(markers)], tmp_path / "run1.log")
    try:
        wait_until(lambda: (markers / "written-2").exists() or not job.alive(), timeout=START_TIMEOUT,
                   message="batch 2 written")
        assert job.alive(), job.tail()
    finally:
        job.kill()

    def batch_rows(n: int) -> list:
        f = out / f"{n}.json"
        return json.loads(f.read_text()) if f.exists() else []

    committed = {(p, o) for b in (0, 1) for p, o, *_ in batch_rows(b)}
    in_flight = {(p, o) for p, o, *_ in batch_rows(2)}
    assert committed and in_flight and not committed & in_flight
    assert {r[3] for b in (0, 1, 2) for r in batch_rows(b)} == {1}

    (out / "2.json").unlink()  # the uncommitted batch's file: the restarted query's replay writes it again
    peer = ShareReader("peer", cluster.bootstrap, group, [topic], pace=0.2, config={"max.poll.records": 20})
    job = Job(args, tmp_path / "run2.log")
    every = {(i % 2, i // 2) for i in range(total)}
    try:
        wait_until(lambda: (ckpt / "commits" / "2").exists() or not job.alive(), timeout=START_TIMEOUT,
                   message="the restarted query replayed batch 2")
        peer.start()  # a ShareConsumer joins the group beside the restarted query
        def everything() -> set:
            rows = {(p, o) for f in out.glob("*.json") for p, o, *_ in json.loads(f.read_text())}
            return rows | peer.seen()
        wait_until(lambda: ((ckpt / "commits" / "2").exists() and everything() >= every) or not job.alive(),
                   timeout=START_TIMEOUT + 60, message=lambda: f"{len(everything())} of {total} read")
        assert job.alive(), job.tail()
    finally:
        job.kill()
        peer.stop()
    assert (out / "2.json").exists() and batch_rows(2) == [], "the killed run's batch was replayed empty"
    spark_rows = [(p, o, dc) for f in sorted(out.glob("*.json")) for p, o, _, dc, _ in json.loads(f.read_text())]
    peer_rows = [(d.partition, d.offset, d.count) for d in peer.deliveries]
    seen = Counter((p, o) for p, o, _ in spark_rows + peer_rows)
    assert set(seen) == every
    assert max(seen.values()) == 1, [k for k, c in seen.items() if c > 1][:10]  # nothing read twice
    again = {(p, o): dc for p, o, dc in spark_rows + peer_rows if (p, o) in in_flight}
    assert set(again) == in_flight and set(again.values()) == {2}, again   # batch 2's records came back, counted
    assert all(dc == 1 for p, o, dc in spark_rows + peer_rows if (p, o) not in in_flight)
    restarted = [r for b in range(3, 1000) for r in batch_rows(b)]
    assert restarted and peer_rows, "the restarted query and the ShareConsumer both read"


def test_available_now_reads_until_the_group_has_nothing_more_and_accepts_it(spark, share_cluster, tmp_path):
    cluster = share_cluster
    group, topic = "sg-now", new_topic(cluster, 2, prefix="share-now")
    set_group_config(cluster.bootstrap, group, share_auto_offset_reset="earliest")
    produce(cluster.bootstrap, topic, [(i % 2, f"k{i}".encode(), b"v") for i in range(3000)], batch=100)
    sink = Sink()
    query = (share_stream(spark, cluster, topic, group, maxOffsetsPerTrigger="1000").writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    assert query.awaitTermination(120), "the AvailableNow run ended"
    assert query.exception() is None
    assert Counter((p, o) for p, o, _, _ in sink.rows()) == Counter({(i % 2, i // 2): 1 for i in range(3000)})
    assert len([b for b, rows in sink.batches.items() if rows]) >= 3  # maxOffsetsPerTrigger held
    # everything was accepted: a share consumer of the group finds nothing, not even after a lock period
    peer = ShareReader("after", cluster.bootstrap, group, [topic])
    peer.start()
    try:
        time.sleep(SHARE_OVERRIDES["group.share.record.lock.duration.ms"] / 1000 + 2)
        produce(cluster.bootstrap, topic, [(0, b"later", b"v")])  # the peer does read what is new
        wait_until(lambda: peer.deliveries, timeout=30, message="the peer reads a new record")
    finally:
        peer.stop()
    assert [(d.key, d.count) for d in peer.deliveries] == [(b"later", 1)]


def test_a_query_stopped_in_a_batch_releases_its_records_at_once(spark, share_cluster, tmp_path):
    """The group's locks last 20 s; the query is stopped while its second batch runs: the batch's
    records reach a ShareConsumer, counted twice, long before a lock could have run out."""
    cluster = share_cluster
    group, topic = "sg-stop", new_topic(cluster, 1, prefix="share-stop")
    set_group_config(cluster.bootstrap, group, share_auto_offset_reset="earliest",
                     share_record_lock_duration_ms="20000")
    produce(cluster.bootstrap, topic, [(0, f"k{i}".encode(), b"v") for i in range(400)], batch=50)
    inside = threading.Event()

    def slow_second(df, batch_id):
        if batch_id == 1:
            inside.set()
            time.sleep(8)  # the query is stopped meanwhile; this batch never commits
    sink = Sink(before=slow_second)
    query = (share_stream(spark, cluster, topic, group, maxOffsetsPerTrigger="100").writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="100 milliseconds").start())
    peer = ShareReader("peer", cluster.bootstrap, group, [topic])
    try:
        assert inside.wait(90), "the second batch started"
        held = {o for p, o, _, _ in sink.batches[0]}
        query.stop()
        stopped = time.time()
        peer.start()
        wait_until(lambda: len(peer.seen()) >= 400 - len(held), timeout=30,
                   message=lambda: f"{len(peer.seen())} of {400 - len(held)} records at the peer")
        took = time.time() - stopped
    finally:
        query.stop()
        peer.stop()
    assert {o for _, o in peer.seen()} == set(range(400)) - held  # batch 0 was accepted, never again
    counts = {d.offset: d.count for d in peer.deliveries}
    assert 2 in counts.values()  # the stopped batch's records came back, counted
    assert took < 15, took  # released by the stop, not by a lock running out (20 s)


@pytest.mark.timeout(400)
def test_local4_query_with_eight_tasks_beside_two_share_consumers(share_cluster, tmp_path):
    """The issue's set-up as its own Spark application: local[4], kafka.share.parallelism 8, a 2-partition
    topic, two librdkafka ShareConsumers in the group.  Every record reaches one reader once; every
    committed batch of 8 records or more was read by eight tasks, each with records."""
    import json

    from test_spark_kill import START_TIMEOUT, Job

    cluster = share_cluster
    group, topic = "sg-local4", new_topic(cluster, 2, prefix="share-l4")
    set_group_config(cluster.bootstrap, group, share_auto_offset_reset="earliest")
    n = 0

    def more(k: int) -> None:
        nonlocal n
        produce(cluster.bootstrap, topic, [((n + i) % 2, f"k{n + i}".encode(), b"v") for i in range(k)], batch=50)
        n += k

    more(4000)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    job = Job(["--bootstrap", cluster.bootstrap, "--topic", topic, "--checkpoint", str(ckpt), "--sink", "files",
               "--out", str(out), "--share-group", group, "--parallelism", "8", "--master", "local[4]",
               "--max-offsets", "2000", "--trigger-ms", "100"], tmp_path / "run.log")
    peers = [ShareReader(f"c{i}", cluster.bootstrap, group, [topic], pace=0.05) for i in range(2)]

    def committed() -> dict[int, list]:
        return {int(f.stem): json.loads(f.read_text()) for f in out.glob("*.json")
                if (ckpt / "commits" / f.stem).exists()}
    try:
        wait_until(lambda: committed() or not job.alive(), timeout=START_TIMEOUT, message="the first batch")
        assert job.alive(), job.tail()
        for r in peers:
            r.start()
        deadline = time.time() + 90
        while not (all(r.deliveries for r in peers) and len(committed()) >= 4):
            assert time.time() < deadline and job.alive(), job.tail()
            more(200)
            time.sleep(0.3)
        every = {(i % 2, i // 2) for i in range(n)}

        def seen() -> set:
            return {(p, o) for rows in committed().values() for p, o, *_ in rows}.union(*(r.seen() for r in peers))
        wait_until(lambda: seen() >= every, timeout=90, message=lambda: f"{len(seen())} of {n} read")
    finally:
        job.kill()
        for r in peers:
            r.stop()
    assert not any(r.errors for r in peers), [r.errors for r in peers]
    batches = committed()
    reads = Counter((p, o) for rows in batches.values() for p, o, *_ in rows)
    reads += Counter((d.partition, d.offset) for r in peers for d in r.deliveries)
    assert set(reads) == every and max(reads.values()) == 1, [k for k, c in reads.items() if c > 1][:10]
    assert all(r.deliveries for r in peers) and any(batches.values())
    sizes = {b: len(rows) for b, rows in batches.items()}
    assert max(sizes.values()) >= 1000, sizes
    tasks = {b: len({row[4] for row in rows}) for b, rows in batches.items()}
    assert all(tasks[b] == 8 for b in sizes if sizes[b] >= 8), {b: (sizes[b], tasks[b]) for b in sizes}
