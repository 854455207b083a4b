"""Helpers for the Spark tests: produce known records and build the rows Spark must return."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

BASE_TS_MS = 1_700_000_000_000


def new_topic(cluster, partitions: int = 2, prefix: str = "t") -> str:
    from helpers import wait_until

    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.errors import ErrorCode, KafkaError

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"

    def created() -> bool:  # a cluster just started may not list its own brokers yet: no live brokers
        try:
            with ClusterClient(cluster.bootstrap) as cc:
                AdminClient(cc).create_topic(name, partitions)
        except KafkaError as e:
            if e.code != ErrorCode.BROKER_NOT_AVAILABLE:
                raise
            return False
        return True
    wait_until(created, timeout=30, interval=0.2, message=f"topic {name} created")
    return name


def produce(cluster, topic: str, n: int, partitions: int = 2, start: int = 0, headers: bool = True,
            value_size: int = 0) -> list[tuple]:
    """Produce ``n`` records round-robin over ``partitions``, with fixed timestamps; returns the
    expected rows ``(key, value, topic, partition, offset, timestamp, timestampType, headers)``
    assuming partition ``p`` already holds ``start // partitions`` records from earlier calls."""
    from spark_coord.client.admin import LATEST, AdminClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer

    rows = []
    with ClusterClient(cluster.bootstrap) as cc:
        next_offset = AdminClient(cc).list_offsets(topic, list(range(partitions)), LATEST)
        producer = Producer(cc, acks=-1)
        for i in range(start, start + n):
            p = i % partitions
            key = None if i % 7 == 3 else f"key-{i}".encode()
            value = f"value-{i}".encode().ljust(value_size, b".")
            hdrs = [("i", str(i).encode()), ("none", None)] if headers and i % 2 == 0 else []
            ts = BASE_TS_MS + i
            producer.send(topic, value, key=key, headers=hdrs, partition=p, timestamp_ms=ts)
            rows.append((None if key is None else bytearray(key), bytearray(value), topic, p, next_offset[p],
                         datetime.fromtimestamp(ts / 1000, tz=timezone.utc), 0,
                         [(k, None if v is None else bytearray(v)) for k, v in hdrs]))
            next_offset[p] += 1
        producer.flush()
    return rows


def expected_df(spark, rows: list[tuple], include_headers: bool):
    from spark_coord.spark.schema import source_ddl

    data = rows if include_headers else [r[:7] for r in rows]
    return spark.createDataFrame(data, schema=source_ddl(include_headers))


def reader(spark, cluster, topic: str, streaming: bool = False, **options):
    r = (spark.readStream if streaming else spark.read).format("coordkafka")
    r = r.option("bootstrap.brokers", cluster.bootstrap).option("subscribe", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()
