"""The coordinator's metrics: its events counted through its observer, and its state read at
scrape time (the hand-driven clock and in-memory store of the other coordinator tests)."""

from __future__ import annotations

from coord_harness import PING, STOP, Harness, async_test
from prometheus_client import CollectorRegistry

from spark_coord.coordinator.core.group import LEASE_MARGIN_MS
from spark_coord.coordinator.core.metrics import (
    CLASSIC_PROTOCOL,
    COORDINATOR_PROTOCOL,
    NO_METRICS,
    SPARK_PROTOCOL,
    PrometheusCoordinatorMetrics,
    member_protocol,
    partitions_moved,
)
from spark_coord.coordinator.doors.classic import ClassicMember
from spark_coord.metrics.lag import snapshot_coordinator


def metered(h: Harness) -> CollectorRegistry:
    """Give the harness's coordinator Prometheus metrics (and a timed store); returns their registry."""
    registry = CollectorRegistry()
    metrics = PrometheusCoordinatorMetrics(registry)
    h.coord.metrics = metrics
    h.coord.store = metrics.timed(h.store)
    return registry


def value(registry: CollectorRegistry, name: str, **labels) -> float:
    v = registry.get_sample_value(name, labels)
    return 0.0 if v is None else v


def test_a_coordinator_without_metrics_has_the_no_op_observer():
    assert Harness().coord.metrics is NO_METRICS
    assert NO_METRICS.timed(store := object()) is store


@async_test
async def test_election_rebalance_moves_and_offsets_are_counted():
    h = Harness({"t": 12})
    registry = metered(h)
    await h.start()
    assert value(registry, "spark_coord_coordinator_elections_won_total") == 1
    a, _ = h.register("a")
    await h.settle()
    assert value(registry, "spark_coord_coordinator_rebalances_started_total") == 1
    assert value(registry, "spark_coord_coordinator_rebalances_completed_total") == 1
    assert value(registry, "spark_coord_coordinator_rebalance_partitions_moved_sum") == 12  # all new to a
    b, _ = h.register("b")
    await h.settle()
    assert value(registry, "spark_coord_coordinator_rebalances_completed_total") == 2
    # range over a-0, b-0: b takes 6..11 from a, a keeps 0..5
    assert value(registry, "spark_coord_coordinator_rebalance_partitions_moved_sum") == 12 + 6
    assert value(registry, "spark_coord_coordinator_rebalance_partitions_moved_bucket", le="5.0") == 0
    assert value(registry, "spark_coord_coordinator_rebalance_partitions_moved_bucket", le="10.0") == 1
    assert value(registry, "spark_coord_coordinator_rebalance_duration_seconds_count") == 2
    assert value(registry, "spark_coord_coordinator_rebalances_failed_total") == 0
    writes = value(registry, "spark_coord_coordinator_zookeeper_write_duration_seconds_count")
    assert writes >= 4  # members saved, generations, owners
    committed = value(registry, "spark_coord_coordinator_offsets_committed_total")  # StopFetcher answers' offsets
    a.consume(5)
    await a.commit()
    assert value(registry, "spark_coord_coordinator_offsets_committed_total") == committed + 6  # a's six partitions
    assert value(registry, "spark_coord_coordinator_zookeeper_write_duration_seconds_count") == writes + 1
    assert value(registry, "spark_coord_coordinator_zookeeper_write_errors_total") == 0


@async_test
async def test_pings_sent_expired_and_a_failed_member_are_counted():
    h = Harness({"t": 4}, max_ping_retries=1)
    registry = metered(h)
    await h.start()
    ms = [h.register(f"c{i}", session=3000)[0] for i in (1, 2)]
    await h.settle()
    await h.advance(1000)
    assert value(registry, "spark_coord_coordinator_pings_sent_total") == 2
    assert value(registry, "spark_coord_coordinator_pings_expired_total") == 0
    ms[1].muted = True
    await h.advance(5000)  # c2's pings at 2000 and 4000 expire (at 4000 and 6000): failed
    assert ms[1].channel.closed
    assert value(registry, "spark_coord_coordinator_pings_expired_total") == 2
    assert value(registry, "spark_coord_coordinator_members_failed_total") == 1
    assert value(registry, "spark_coord_coordinator_pings_sent_total") == sum(len(m.channel.requests(PING)) for m in ms)
    await h.advance(3000 + LEASE_MARGIN_MS)  # its lease ran out: the survivor takes everything
    assert value(registry, "spark_coord_coordinator_rebalance_partitions_moved_sum") == 4 + 2


@async_test
async def test_a_failed_round_is_counted_and_the_retry_completes():
    h = Harness({"t": 2}, rebalance_backoff_ms=100)
    registry = metered(h)
    await h.start()
    m, _ = h.register("c1")
    await h.settle()
    assert value(registry, "spark_coord_coordinator_rebalances_completed_total") == 1
    m.auto, m.stop_error = False, 1
    h.register("c2")  # c1 must give up a partition: it is sent a StopFetcher
    await h.settle()
    m.answer(STOP)  # answered with an error: the attempt fails
    await h.settle()
    assert value(registry, "spark_coord_coordinator_rebalances_failed_total") == 1
    assert value(registry, "spark_coord_coordinator_rebalances_completed_total") == 1
    m.stop_error, m.auto = 0, True
    await h.advance(100)  # the backoff: a new attempt, answered by itself
    await h.settle()
    assert value(registry, "spark_coord_coordinator_rebalances_completed_total") == 2
    assert value(registry, "spark_coord_coordinator_rebalances_started_total") == 2


def test_member_protocol_comes_from_the_channel_and_the_consumer_id():
    kafka = ClassicMember.__new__(ClassicMember)  # its type is what counts
    assert member_protocol(kafka, "rdkafka-1") == CLASSIC_PROTOCOL
    assert member_protocol(object(), "coordkafka-host-1-ab-executor-0") == SPARK_PROTOCOL
    assert member_protocol(object(), "host-1-ab") == COORDINATOR_PROTOCOL
    assert member_protocol(None, "coordkafka-x") == SPARK_PROTOCOL  # absent: from its id


def test_partitions_moved_compares_owning_members_not_threads():
    before = {("t", 0): "a-0", ("t", 1): "a-1", ("t", 2): "b-0"}
    after = {("t", 0): "a-1", ("t", 1): "b-0", ("t", 2): "b-0", ("t", 3): "a-0"}
    assert partitions_moved(before, after) == 2  # t-1 to b, t-3 new; t-0 stays with a
    assert partitions_moved({}, {}) == 0


@async_test
async def test_snapshot_copies_groups_members_partitions_and_offsets():
    h = await Harness({"t": 4}).start()
    assert snapshot_coordinator(None) == (False, -1, (), {})
    a, _ = h.register("coordkafka-q-executor-0")
    b, _ = h.register("plain")
    await h.settle()
    a.consume(3)
    await a.commit()
    active, epoch, groups, topics = snapshot_coordinator(h.coord)
    assert active and epoch == 7 and topics == {"t": 4}
    [g] = groups
    assert (g.group_id, g.state, g.generation) == ("g", "Stable", 1)  # both joined before the first round
    by_id = {m.consumer_id: m for m in g.members}
    assert by_id["coordkafka-q-executor-0"].protocol == SPARK_PROTOCOL
    assert by_id["plain"].protocol == COORDINATOR_PROTOCOL
    assert (sorted(by_id["coordkafka-q-executor-0"].partitions + by_id["plain"].partitions)
            == [("t", p) for p in range(4)])
    assert g.offsets == {tp: 3 for tp in by_id["coordkafka-q-executor-0"].partitions}
    h.group().offsets[("t", 9)] = 1  # a copy: later changes do not reach it
    assert ("t", 9) not in g.offsets
