"""The executor read path (``spark.partition.read_partition``) on a real broker, without Spark:
many pipelined, prefetched fetches give every record once and in order, also when the
connection is cut in the middle of a range."""

from __future__ import annotations

import socket

from spark_data import new_topic, produce


def _partition(cluster, topic: str, until: int, **kw):
    from spark_coord.spark.partition import KafkaInputPartition

    return KafkaInputPartition(topic=topic, partition=0, from_offset=3, until_offset=until,
                               bootstrap=cluster.bootstrap, include_headers=True, **kw)


def _rows(batches):
    return [(r["offset"], r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]])
            for b in batches for r in b.to_pylist()]


def _expected(rows, until: int):
    return [(r[4], None if r[0] is None else bytes(r[0]), bytes(r[1]),
             [(k, None if v is None else bytes(v)) for k, v in r[7]]) for r in rows if 3 <= r[4] < until]


def test_many_small_fetches_read_every_record_once(cluster):
    from spark_coord.spark.partition import _RangeReader

    topic = new_topic(cluster, partitions=1)
    rows = []
    for i in range(6):  # separate produce calls: several batches
        rows += produce(cluster, topic, 50, partitions=1, start=50 * i, value_size=200)
    reader = _RangeReader(_partition(cluster, topic, 290, max_partition_fetch_bytes=4096))
    try:
        batches = list(reader.batches())
        buffers = [id(b) for b in reader._buffers]
    finally:
        reader.close()
    assert len(batches) > 4  # the range took many fetches
    assert _rows(batches) == _expected(rows, 290)
    assert len(set(buffers)) == 2


def test_cut_connection_mid_range_is_retried_without_gaps_or_duplicates(cluster):
    from spark_coord.spark.partition import _RangeReader

    topic = new_topic(cluster, partitions=1)
    rows = []
    for i in range(4):
        rows += produce(cluster, topic, 40, partitions=1, start=40 * i, value_size=300)
    reader = _RangeReader(_partition(cluster, topic, 160, max_partition_fetch_bytes=4096))
    try:
        got, cut = [], []
        for i, rb in enumerate(reader.batches()):
            got.append(rb)
            if i in (1, 3):  # a prefetch may be in flight now: cut the socket under it
                cut.append(reader.conn)
                reader.conn._sock.shutdown(socket.SHUT_RDWR)
    finally:
        reader.close()
    assert _rows(got) == _expected(rows, 160)
    assert len(set(map(id, cut))) == 2 and all(c.closed for c in cut)  # each cut forced a new connection
