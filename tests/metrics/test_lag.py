"""Group lag as kafka_exporter computes it, the sample cache and its history, and the hand-over from
the event loop, without a broker."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from spark_coord.metrics.exporter import GroupCollector
from spark_coord.metrics.lag import (
    ClusterSnapshot,
    GroupView,
    LagTracker,
    LogEnds,
    MemberView,
    Unavailable,
    compute_lag,
    inter_broker_security,
    on_loop,
)
from spark_coord.security.client import PLAINTEXT


def snapshot(**kw) -> ClusterSnapshot:
    members = (MemberView("a", "coordinator", "h:1", True, (("t", 0), ("t", 1), ("t", 2))),
               MemberView("coordkafka-q-executor-0", "spark", "h:2", True, (("u", 0),)),
               MemberView("gone", "coordinator", "(not connected)", False, ()))
    group = GroupView("g", "Stable", 4, members, {("t", 0): 5, ("t", 1): 12})
    return ClusterSnapshot(coordinating=True, epoch=9, groups=(group,), topics={"t": 4, "u": 1}, **kw)


def scrape(collector) -> dict:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_lag_rows_follow_kafka_exporters_rules():
    [g] = compute_lag(snapshot(), {("t", 0): 10, ("t", 1): 10, ("t", 3): 7, ("u", 0): 3})
    rows = {(r.topic, r.partition): (r.owner, r.committed, r.log_end, r.lag) for r in g.partitions}
    assert rows == {
        ("t", 0): ("a", 5, 10, 5),
        ("t", 1): ("a", 12, 10, 0),            # committed beyond a truncated log: 0, never negative
        ("t", 2): ("a", None, None, None),     # no offset, no log end
        ("t", 3): (None, None, 7, None),       # every partition of a consumed topic, owned or not
        ("u", 0): ("coordkafka-q-executor-0", None, 3, None),  # owned: on the page, not in kafka_exporter's
    }
    assert g.total == 5 and g.consumed_topics == {"t"}


def test_collector_exports_kafka_exporters_series_for_consumed_topics_only():
    tracker = LagTracker(lambda: snapshot(), LogEnds(local=lambda tp: {("t", 0): 10, ("t", 1): 10, ("t", 3): 7,
                                                                     ("u", 0): 3}.get(tp)))
    found = scrape(GroupCollector(tracker))

    def labels(p, **extra):
        return tuple(sorted({"consumergroup": "g", "topic": "t", "partition": str(p), **extra}.items()))

    current = {k[1]: v for k, v in found.items() if k[0] == "kafka_consumergroup_current_offset"}
    assert current == {labels(0): 5, labels(1): 12, labels(2): -1, labels(3): -1}
    lag = {k[1]: v for k, v in found.items() if k[0] == "kafka_consumergroup_lag"}
    assert lag == {labels(0): 5, labels(1): 0, labels(3): -1}  # t-2: log end unknown, left out
    assert found[("kafka_consumergroup_lag_sum", (("consumergroup", "g"), ("topic", "t")))] == 5
    assert found[("kafka_consumergroup_current_offset_sum", (("consumergroup", "g"), ("topic", "t")))] == 17
    assert found[("kafka_consumergroup_members", (("consumergroup", "g"),))] == 3
    assert not [k for k in found if k[0].startswith("kafka_consumergroup") and ("topic", "u") in k[1]]
    assert found[("spark_coord_coordinator_members", (("protocol", "coordinator"),))] == 1
    assert found[("spark_coord_coordinator_members", (("protocol", "spark"),))] == 1
    assert found[("spark_coord_coordinator_members", (("protocol", "classic"),))] == 0
    assert found[("spark_coord_coordinator_members_absent", ())] == 1
    assert found[("spark_coord_coordinator_groups", (("state", "Stable"),))] == 1
    assert found[("spark_coord_coordinator_group_generation", (("consumergroup", "g"),))] == 4
    assert found[("spark_coord_coordinator_epoch", ())] == 9


def test_a_process_that_does_not_coordinate_exports_no_group():
    tracker = LagTracker(lambda: ClusterSnapshot(coordinating=False), LogEnds())
    found = scrape(GroupCollector(tracker))
    assert found == {("spark_coord_coordinator_active", ()): 0, ("spark_coord_coordinator_epoch", ()): -1}


def test_without_remote_reads_only_local_log_ends_are_used_and_it_says_so_once(caplog):
    ends = LogEnds(local=lambda tp: 10, local_id=0, local_only="no credentials for the inter-broker listener")
    leaders = {("t", 0): 0, ("t", 1): 1}
    with caplog.at_level(logging.WARNING):
        assert ends.read([("t", 0), ("t", 1)], leaders, {1: ("127.0.0.1", 1)}) == {("t", 0): 10}
        assert ends.read([("t", 0), ("t", 1)], leaders, {1: ("127.0.0.1", 1)}) == {("t", 0): 10}
    assert sum("no credentials for the inter-broker listener" in r.getMessage() for r in caplog.records) == 1


def test_other_brokers_log_ends_are_read_with_the_brokers_inter_broker_credentials():
    from types import SimpleNamespace

    from spark_coord.security.listeners import Listener, ListenerConfig

    def broker(protocol: str, **config) -> SimpleNamespace:
        listeners = ListenerConfig((Listener(protocol, protocol, "127.0.0.1", 0),), {protocol: (None, None)}, protocol)
        return SimpleNamespace(config=config, security=SimpleNamespace(listener_config=listeners))

    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="pw";'
    security, local_only = inter_broker_security(broker(
        "SASL_SSL", **{"sasl.enabled.mechanisms": ["SCRAM-SHA-512"], "ssl.truststore.location": "/ca.pem",
                       "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas}))
    assert local_only is None
    assert (security.protocol, security.mechanism, security.username, security.ca_location) == \
        ("SASL_SSL", "SCRAM-SHA-512", "admin", "/ca.pem")
    assert inter_broker_security(broker("PLAINTEXT")) == (PLAINTEXT, None)
    # a SASL listener without the broker's credentials: only its own partitions, the missing key named
    security, local_only = inter_broker_security(broker("SASL_PLAINTEXT", **{"sasl.enabled.mechanisms": ["PLAIN"]}))
    assert security is None and "listener.name.sasl_plaintext.plain.sasl.jaas.config" in local_only


def test_an_unreachable_leader_leaves_its_partitions_out(caplog):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    ends = LogEnds(local=lambda tp: 4, local_id=0, timeout=2)
    with caplog.at_level(logging.WARNING):
        got = ends.read([("t", 0), ("t", 1), ("t", 2)], {("t", 0): 0, ("t", 1): 1, ("t", 2): 2},
                        {1: ("127.0.0.1", closed_port)})
    assert got == {("t", 0): 4}
    assert any("broker 1" in r.getMessage() for r in caplog.records)
    assert any("broker 2 has no endpoint" in r.getMessage() for r in caplog.records)


def test_scrapes_share_the_latest_sample_and_history_keeps_its_window():
    calls = []

    def snap():
        calls.append(time.time())
        return snapshot()

    tracker = LagTracker(snap, LogEnds(local=lambda tp: 20), history_ms=1000, sample_ms=100)
    first = tracker.current()
    assert tracker.current() is first and len(calls) == 1       # within two sampling intervals: shared
    assert tracker.current(max_age=0) is not first and len(calls) == 2
    tracker.start()
    try:
        deadline = time.monotonic() + 10
        while len(tracker.history().get("g", [])) < 5:
            assert time.monotonic() < deadline, "the sampler adds a point per sample"
            time.sleep(0.05)
    finally:
        tracker.stop()
    points = tracker.history()["g"]
    assert all(lag == 15 + 8 for _, lag in points)                # (20-5) + (20-12)
    assert points[-1][0] - points[0][0] <= 1.0 + 0.2             # only history_ms of it is kept


def test_on_loop_runs_on_the_loop_and_gives_up_on_a_stuck_or_closed_loop():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        assert on_loop(loop, threading.get_ident) == thread.ident
        loop.call_soon_threadsafe(time.sleep, 1.5)  # a loop stuck in a blocking call
        with pytest.raises(Unavailable, match="did not answer"):
            on_loop(loop, lambda: 1, timeout=0.5)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
    with pytest.raises(Unavailable, match="gone"):
        on_loop(loop, lambda: 1)
