"""failOnDataLoss against a broker whose retention removes records (1 KiB segments, 2 KiB kept)."""

from __future__ import annotations

import pytest
from helpers import wait_until
from spark_data import new_topic, produce, reader


@pytest.fixture(scope="module")
def trimmed(small_retention_cluster):
    """A one-partition topic whose first records retention has already deleted: (cluster, topic, earliest, latest)."""
    from spark_coord.client.admin import EARLIEST, LATEST, AdminClient
    from spark_coord.client.metadata import ClusterClient

    cluster = small_retention_cluster
    topic = new_topic(cluster, partitions=1)
    for i in range(8):  # separate produce calls: one batch each, so segments roll
        produce(cluster, topic, 10, partitions=1, start=10 * i, headers=False, value_size=60)
    with ClusterClient(cluster.bootstrap) as cc:
        admin = AdminClient(cc)
        wait_until(lambda: admin.list_offsets(topic, [0], EARLIEST)[0] or None, timeout=30,
                   message="retention to delete the first segment")
        # retention deletes one segment per check: wait until it is done, or a read could lose
        # records in the middle of its range (a gap the tests below would take for a bug)
        seen = []

        def settled():
            seen.append(admin.list_offsets(topic, [0], EARLIEST)[0])
            return len(seen) >= 6 and len(set(seen[-6:])) == 1 and seen[-1]

        earliest = wait_until(settled, timeout=30, interval=0.1, message=lambda: f"log start to settle ({seen})")
        latest = admin.list_offsets(topic, [0], LATEST)[0]
    assert 0 < earliest < latest == 80
    return cluster, topic, earliest, latest


def _partition(cluster, topic, fail: bool):
    from spark_coord.spark.partition import KafkaInputPartition

    return KafkaInputPartition(topic=topic, partition=0, from_offset=0, until_offset=80, bootstrap=cluster.bootstrap,
                               fail_on_data_loss=fail)


def test_executor_read_fails_naming_the_lost_range(trimmed):
    from spark_coord.spark.partition import DataLossError, read_partition

    cluster, topic, earliest, _ = trimmed
    with pytest.raises(DataLossError, match=rf"{topic}-0: offsets 0\.\.\d+ of the planned range \[0, 80\)"):
        list(read_partition(_partition(cluster, topic, fail=True)))


def test_executor_read_skips_lost_records_with_a_warning(trimmed, caplog):
    from spark_coord.spark.partition import read_partition

    cluster, topic, earliest, latest = trimmed
    batches = list(read_partition(_partition(cluster, topic, fail=False)))
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets[0] >= earliest and offsets == list(range(offsets[0], latest))
    assert any("failOnDataLoss=false" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)


def test_stream_with_lost_start_fails_or_skips(spark, trimmed, tmp_path):
    cluster, topic, earliest, latest = trimmed
    starting = f'{{"{topic}": {{"0": 0}}}}'
    failing = (reader(spark, cluster, topic, streaming=True, startingOffsets=starting).writeStream.format("memory")
               .queryName("lost_fail").option("checkpointLocation", str(tmp_path / "c1"))
               .trigger(availableNow=True).start())
    with pytest.raises(Exception, match="failOnDataLoss"):
        failing.awaitTermination(120)

    skipping = (reader(spark, cluster, topic, streaming=True, startingOffsets=starting, failOnDataLoss="false")
                .writeStream.format("memory").queryName("lost_skip")
                .option("checkpointLocation", str(tmp_path / "c2")).trigger(availableNow=True).start())
    assert skipping.awaitTermination(120)
    got = [r.offset for r in spark.table("lost_skip").select("offset").collect()]
    assert sorted(got) == list(range(min(got), latest)) and min(got) >= earliest


def test_batch_read_below_log_start(spark, trimmed):
    cluster, topic, earliest, latest = trimmed
    starting = f'{{"{topic}": {{"0": 0}}}}'
    with pytest.raises(Exception, match="failOnDataLoss"):
        reader(spark, cluster, topic, startingOffsets=starting).collect()
    df = reader(spark, cluster, topic, startingOffsets=starting, failOnDataLoss="false")
    got = sorted(r.offset for r in df.select("offset").collect())
    assert got == list(range(got[0], latest)) and got[0] >= earliest


# ------------------------------------------------- a topic deleted and created again, on the driver

def _recreate(cluster, topic: str, partitions: int = 2) -> None:
    """Delete ``topic`` and create it again (empty) under the same name."""
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.errors import ErrorCode, KafkaError

    with ClusterClient(cluster.bootstrap) as cc:
        admin = AdminClient(cc)
        admin.delete_topic(topic)

        def created():
            try:
                return admin.create_topic(topic, partitions)
            except KafkaError as e:  # the deletion may still be under way
                if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise
                return None

        wait_until(created, timeout=30, interval=0.2, message=f"{topic} created again")


@pytest.mark.parametrize("fail", [True, False])
def test_stream_whose_topic_is_deleted_and_created_again(spark, cluster, fail):
    """Spark's failOnDataLoss on the driver: the query fails naming the topic and partition, or
    (false) warns and reads the new topic from its start."""
    topic = new_topic(cluster)
    produce(cluster, topic, 40)
    name = f"recreated_{'fail' if fail else 'skip'}"
    query = (reader(spark, cluster, topic, streaming=True, startingOffsets="earliest",
                    failOnDataLoss=str(fail).lower())
             .writeStream.format("memory").queryName(name).trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: spark.table(name).count() == 40, timeout=60, message="the first 40 records read")
        query.processAllAvailable()
        _recreate(cluster, topic)
        fresh = produce(cluster, topic, 6, start=1000, headers=False)  # 3 per partition: before offset 20
        if fail:
            with pytest.raises(Exception, match=rf"{topic}-[01]: .*failOnDataLoss=false"):
                query.awaitTermination(120)
            assert not query.isActive
        else:
            wait_until(lambda: spark.table(name).count() == 46, timeout=60,
                       message=lambda: f"the new topic's records read ({spark.table(name).count()} rows)")
            query.processAllAvailable()
            rows = [(r.partition, r.offset, bytes(r.value)) for r in spark.table(name).collect()]
            expected = [(row[3], row[4], bytes(row[1])) for row in fresh]
            assert sorted(r for r in rows if r[2] in {v for _, _, v in expected}) == sorted(expected)
            assert sorted(o for p, o, _ in expected) == [0, 0, 1, 1, 2, 2]  # from the new logs' start
            assert len(rows) == 46
            assert query.isActive and query.exception() is None
    finally:
        query.stop()


def test_stream_whose_topic_is_deleted_fails_naming_the_partition(spark, cluster):
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient

    topic = new_topic(cluster)
    produce(cluster, topic, 10)
    query = (reader(spark, cluster, topic, streaming=True, startingOffsets="earliest").writeStream
             .format("memory").queryName("deleted_fail").trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: spark.table("deleted_fail").count() == 10, timeout=60, message="the records read")
        with ClusterClient(cluster.bootstrap) as cc:
            AdminClient(cc).delete_topic(topic)
        with pytest.raises(Exception, match=rf"{topic}-[01]: the partition is gone .*failOnDataLoss=false"):
            query.awaitTermination(120)
    finally:
        query.stop()
