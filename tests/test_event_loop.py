"""The event loop a broker runs on (``event.loop``, ``spark_coord.event_loop``): uvloop when asked
for and installed, asyncio's own otherwise; a broker on uvloop (no ``loop.sendfile``) still serves
fetches to a real client."""

from __future__ import annotations

import asyncio
import logging
import sys
import time

import pytest

from helpers import local_cluster
from spark_coord import event_loop


async def _loop_class() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_asyncio_by_default():
    assert event_loop.run(_loop_class()).startswith("asyncio")


def test_uvloop_when_asked_for():
    pytest.importorskip("uvloop")
    assert event_loop.run(_loop_class(), "uvloop").startswith("uvloop")


def test_asyncio_with_a_warning_where_uvloop_is_missing(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "uvloop", None)   # import uvloop raises ImportError
    with caplog.at_level(logging.WARNING, logger="spark_coord.event_loop"):
        assert event_loop.run(_loop_class(), "uvloop").startswith("asyncio")
    assert "not installed" in caplog.text


def test_an_unknown_loop_is_refused():
    coro = _loop_class()
    with pytest.raises(ValueError, match="event.loop"):
        event_loop.run(coro, "trio")
    coro.close()


def test_a_broker_on_uvloop_serves_produce_and_fetch(zookeeper, tmp_path):
    pytest.importorskip("uvloop")
    from kafka import KafkaConsumer, KafkaProducer

    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient

    with local_cluster(zookeeper, tmp_path / "cluster", 1, "uvloop-broker", {"event.loop": "uvloop"}) as cluster:
        with ClusterClient(cluster.bootstrap) as cc:
            AdminClient(cc).create_topic("on-uvloop", 1)
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks=1)
        for i in range(100):
            producer.send("on-uvloop", f"record-{i}".encode())
        producer.flush(30)
        producer.close()
        consumer = KafkaConsumer("on-uvloop", bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                                 enable_auto_commit=False, group_id=None, consumer_timeout_ms=1000)
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 100 and time.monotonic() < deadline:
            got.extend(m.value for m in consumer)
        consumer.close()
        assert got == [f"record-{i}".encode() for i in range(100)]
        assert "running on uvloop" in cluster.log_path(0).read_text()
