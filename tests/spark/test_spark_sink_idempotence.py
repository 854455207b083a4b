"""The idempotent sink under real faults: a Produce sent again after its answer was lost, or
after the broker was killed (SIGKILL) and restarted mid-write, is neither stored twice nor out
of order.  With ``kafka.enable.idempotence=false`` the same lost answers store records twice:
the fault is real, and idempotence is what absorbs it.

Rows go through Spark (``df.write.format("coordkafka")``, one task, so each partition's rows
have one order) with a ``partition`` column; every value is its row number, so a partition's
values read back must be exactly the increasing row numbers sent to it.
"""

from __future__ import annotations

import threading

import pytest
from helpers import wait_until
from proxy import AnswerDroppingProxy
from spark_data import new_topic

ROWS = 120_000


def _rows(spark, n: int):
    return (spark.range(n).selectExpr("CAST(id % 2 AS INT) AS partition", "lpad(CAST(id AS STRING), 9, '0') AS value")
            .coalesce(1))


def _write(spark, bootstrap: str, topic: str, n: int, **options) -> None:
    writer = (_rows(spark, n).write.format("coordkafka").mode("append")
              .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
              .option("kafka.batch.size", "16384"))  # many small batches: many requests in flight
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save()


def _values_by_partition(bootstrap: str, topic: str) -> dict[int, list[int]]:
    from spark_coord.client.admin import LATEST, AdminClient
    from spark_coord.client.fetcher import fetch
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.records.reader import iter_records

    out: dict[int, list[int]] = {}
    with ClusterClient(bootstrap) as cc:
        ends = AdminClient(cc).list_offsets(topic, [0, 1], LATEST)
        for p in (0, 1):
            values, offset = out.setdefault(p, []), 0
            while offset < ends[p]:
                part = fetch(cc.connection(cc.leader(topic, p)), {(topic, p): offset}, partition_max_bytes=1 << 22,
                             max_bytes=1 << 22)[0]
                assert part.error == 0
                for rec in iter_records(part.records, min_offset=offset):
                    values.append(int(rec.value))
                    offset = rec.offset + 1
    return out


def _check(values: dict[int, list[int]], n: int) -> None:
    for p in (0, 1):
        got = values[p]
        duplicates = len(got) - len(set(got))
        out_of_order = sum(1 for a, b in zip(got, got[1:], strict=False) if b <= a)
        assert (duplicates, out_of_order) == (0, 0), f"partition {p}: {duplicates} duplicates, {out_of_order} " \
                                                     "values out of order"
        assert got == list(range(p, n, 2))


@pytest.fixture
def proxied(broker_factory):
    """A broker whose clients all go through an ``AnswerDroppingProxy`` (it advertises the proxy)."""
    holder: dict = {}
    proxy = AnswerDroppingProxy(lambda: holder["broker"].address)
    holder["broker"] = broker_factory(0, **{"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}",
                                            "num.partitions": 2})
    try:
        yield proxy, f"127.0.0.1:{proxy.port}"
    finally:
        proxy.close()


def test_lost_answers_store_nothing_twice_and_nothing_out_of_order(spark, proxied):
    proxy, bootstrap = proxied
    topic = new_topic(type("C", (), {"bootstrap": bootstrap}), partitions=2)
    proxy.drop_answer_of(5, 23, 24, 60, 97)
    _write(spark, bootstrap, topic, ROWS)
    assert len(proxy.dropped) >= 3, f"only {proxy.produce_requests} Produce requests went through the proxy"
    _check(_values_by_partition(bootstrap, topic), ROWS)


def test_without_idempotence_the_same_faults_store_records_twice(spark, proxied):
    proxy, bootstrap = proxied
    topic = new_topic(type("C", (), {"bootstrap": bootstrap}), partitions=2)
    proxy.drop_answer_of(5, 23, 60)
    _write(spark, bootstrap, topic, ROWS, **{"kafka.enable.idempotence": "false"})
    assert len(proxy.dropped) >= 2
    values = _values_by_partition(bootstrap, topic)
    assert sum(len(v) for v in values.values()) > ROWS  # the requests whose answers were lost, stored again


@pytest.fixture(scope="module")
def killable(zookeeper, tmp_path_factory, request):
    """One broker process that the test kills and starts again.  It fsyncs every Produce before it
    answers (log.flush.interval.messages=1), so most of the time a request is appended but not yet
    answered: a SIGKILL then leaves in the log batches whose answers never went out."""
    from helpers import local_cluster

    with local_cluster(zookeeper, tmp_path_factory.mktemp("cluster"), 1, "s-" + request.module.__name__,
                       {"zookeeper.session.timeout.ms": 6000, "num.partitions": 2,
                        "log.flush.interval.messages": 1}) as c:
        yield c


def test_a_broker_killed_and_restarted_mid_write_stores_nothing_twice(spark, killable):
    from spark_coord.client.admin import LATEST, AdminClient
    from spark_coord.client.metadata import ClusterClient

    cluster, n = killable, 600_000
    topic = new_topic(cluster, partitions=2)
    outcome: list = []

    def written() -> int:
        with ClusterClient(cluster.bootstrap, timeout=5) as cc:
            return sum(AdminClient(cc).list_offsets(topic, [0, 1], LATEST).values())

    def kill_mid_write() -> None:  # the write runs on the test's thread (Spark finds the source there)
        try:
            wait_until(lambda: written() > 50_000, timeout=120, interval=0.01, message="the write under way")
            outcome.append(written())
            cluster.kill_broker(0)  # SIGKILL: requests in flight lose their answers; what was appended stays
            cluster.start_broker(0)
        except BaseException as e:  # noqa: BLE001 -- whatever stops this thread is reported by the test's thread
            outcome.append(e)

    killer = threading.Thread(target=kill_mid_write, name="broker-killer")
    killer.start()
    _write(spark, cluster.bootstrap, topic, n, **{"kafka.retries": "30"})
    killer.join(120)
    assert len(outcome) == 1 and isinstance(outcome[0], int), outcome
    assert outcome[0] < n, "the broker was killed after the write ended"
    _check(_values_by_partition(cluster.bootstrap, topic), n)
