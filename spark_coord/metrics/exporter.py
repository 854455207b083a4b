"""Prometheus collectors that read state at scrape time (prometheus_client custom collectors).

``GroupCollector`` -- the elected coordinator's groups, with kafka_exporter's names and
labels, so its Grafana dashboards and alerts work unchanged:

* ``kafka_consumergroup_members{consumergroup}``
* ``kafka_consumergroup_current_offset{consumergroup,topic,partition}`` (-1: no committed offset)
* ``kafka_consumergroup_current_offset_sum{consumergroup,topic}``
* ``kafka_consumergroup_lag{consumergroup,topic,partition}`` (-1: no committed offset)
* ``kafka_consumergroup_lag_sum{consumergroup,topic}``

for every partition of each topic the group has committed an offset for (kafka_exporter's
rule).  Only the process whose coordinator is active exports them, so a ``sum`` over every
broker and coordinator counts each group once.  Beside them, the coordinator's own state:
``spark_coord_coordinator_active``, ``_epoch``, ``_groups{state}``, ``_members{protocol}``
(connected members by the protocol they came through), ``_members_absent``,
``_group_generation{consumergroup}``.

``BrokerCollector`` -- a broker's partitions, from its own logs: kafka_exporter's
``kafka_topic_partition_current_offset`` / ``_oldest_offset{topic,partition}`` and the JMX
exporter's ``kafka_log_log_size{topic,partition}`` for the partitions it leads (each
partition once across the cluster), and on the controller (the lowest live broker id) the
cluster-wide ``kafka_topic_partitions{topic}`` and ``kafka_brokers``.

Share groups (KIP-932), which kafka_exporter does not know, as ``spark_coord_share_*``.  The
coordinator that holds a share group (``GroupCollector``) exports its membership and the lag it
reads from the group's share-partition znodes (as of the leaders' last state write):

* ``spark_coord_share_group_members{sharegroup}``, ``spark_coord_share_group_epoch{sharegroup}``
* ``spark_coord_share_group_lag{sharegroup}`` (records not yet acknowledged or archived, summed
  over the partitions the group has state for)

``ShareCollector`` -- the share partitions a broker leads, from their leader's memory (each
partition once across the cluster), labels ``{sharegroup,topic,partition}``:

* ``spark_coord_share_partition_start_offset`` (SPSO: the first record the group is not done with)
* ``spark_coord_share_partition_in_flight_records`` (the window from the start offset on)
* ``spark_coord_share_partition_records{...,state}`` (records of the window by state: available,
  acquired, acknowledged, archived)
* ``spark_coord_share_partition_lag`` (log end - start offset - acknowledged - archived)
* ``spark_coord_share_partition_deliveries_total``, ``spark_coord_share_partition_archived_records_total``
  (counters since the leader loaded the partition)

and broker-wide ``spark_coord_share_sessions``, ``spark_coord_share_acquired_records_total``,
``spark_coord_share_acknowledged_records_total``, ``spark_coord_share_journal_appends_total``,
``spark_coord_share_journal_bytes_total`` (the share-state journal's group commits and their bytes).

``ZooKeeperCollector`` -- ``spark_coord_zookeeper_session_state{state}``: 1 for the
session's state now (CONNECTED, SUSPENDED, LOST), 0 for the others.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from spark_coord.coordinator.core.metrics import PROTOCOLS
from spark_coord.metrics.broker import ZK_STATES
from spark_coord.metrics.lag import LagTracker, Unavailable, on_loop

log = logging.getLogger(__name__)

class GroupCollector(Collector):
    """The coordinator's groups and their lag (kafka_exporter's metrics), and its own state."""

    def __init__(self, tracker: LagTracker):
        self.tracker = tracker

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            sample = self.tracker.current()
        except Unavailable as e:
            log.warning("metrics: coordinator state not exported: %s", e)
            return
        snap = sample.snapshot
        active = GaugeMetricFamily("spark_coord_coordinator_active",
                                   "1 while this process is the elected coordinator (it exports group metrics).")
        active.add_metric([], 1 if snap.coordinating else 0)
        epoch = GaugeMetricFamily("spark_coord_coordinator_epoch", "The coordinator epoch of the current term (-1: "
                                                                   "not the coordinator).")
        epoch.add_metric([], snap.epoch)
        yield active
        yield epoch
        if not snap.coordinating:
            return
        members = GaugeMetricFamily("kafka_consumergroup_members", "Amount of members in a consumer group",
                                    labels=["consumergroup"])
        current = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                    "Current Offset of a ConsumerGroup at Topic/Partition",
                                    labels=["consumergroup", "topic", "partition"])
        current_sum = GaugeMetricFamily("kafka_consumergroup_current_offset_sum",
                                        "Current Offset of a ConsumerGroup at Topic for all partitions",
                                        labels=["consumergroup", "topic"])
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "Current Approximate Lag of a ConsumerGroup at "
                                                           "Topic/Partition",
                                labels=["consumergroup", "topic", "partition"])
        lag_sum = GaugeMetricFamily("kafka_consumergroup_lag_sum", "Current Approximate Lag of a ConsumerGroup at "
                                                                   "Topic for all partitions",
                                    labels=["consumergroup", "topic"])
        states: dict[str, int] = {}
        protocols = {p: 0 for p in PROTOCOLS}
        absent = 0
        generation = GaugeMetricFamily("spark_coord_coordinator_group_generation",
                                       "The group's generation (changes() over time: its rebalances).",
                                       labels=["consumergroup"])
        for gl in sample.groups:
            g = gl.view
            gid = g.group_id
            members.add_metric([gid], len(g.members))
            generation.add_metric([gid], g.generation)
            states[g.state] = states.get(g.state, 0) + 1
            for m in g.members:
                if m.connected:
                    protocols[m.protocol] = protocols.get(m.protocol, 0) + 1
                else:
                    absent += 1
            sums: dict[str, list[int]] = {}
            for row in gl.partitions:
                if row.topic not in gl.consumed_topics:
                    continue
                part = str(row.partition)
                committed = -1 if row.committed is None else row.committed
                current.add_metric([gid, row.topic, part], committed)
                acc = sums.setdefault(row.topic, [0, 0])
                acc[0] += max(committed, 0)
                if row.log_end is not None:
                    value = -1 if row.lag is None else row.lag
                    lag.add_metric([gid, row.topic, part], value)
                    acc[1] += max(value, 0)
            for topic, (offset_total, lag_total) in sums.items():
                current_sum.add_metric([gid, topic], offset_total)
                lag_sum.add_metric([gid, topic], lag_total)
        yield members
        yield current
        yield current_sum
        yield lag
        yield lag_sum
        yield generation
        by_state = GaugeMetricFamily("spark_coord_coordinator_groups", "Groups by state.", labels=["state"])
        for state, n in sorted(states.items()):
            by_state.add_metric([state], n)
        yield by_state
        by_protocol = GaugeMetricFamily("spark_coord_coordinator_members",
                                        "Connected members by the protocol they joined with (coordinator: the "
                                        "coordinator protocol; spark: a Spark query's; classic: Kafka's group "
                                        "protocol).", labels=["protocol"])
        for protocol, n in sorted(protocols.items()):
            by_protocol.add_metric([protocol], n)
        yield by_protocol
        gone = GaugeMetricFamily("spark_coord_coordinator_members_absent",
                                 "Members whose connection is gone while their partitions wait for them (lease).")
        gone.add_metric([], absent)
        yield gone
        yield from _share_groups(sample)


def _share_groups(sample) -> Iterator[GaugeMetricFamily]:
    """The share groups the coordinator holds: members, epoch, and lag from their znodes."""
    members = GaugeMetricFamily("spark_coord_share_group_members", "Members of a share group (KIP-932).",
                                labels=["sharegroup"])
    epoch = GaugeMetricFamily("spark_coord_share_group_epoch", "The share group's epoch (changes() over time: "
                                                               "its assignment changes).", labels=["sharegroup"])
    lag = GaugeMetricFamily("spark_coord_share_group_lag", "Records of a share group's partitions from the start "
                                                           "offset to the log end not yet acknowledged or archived "
                                                           "(from ZooKeeper, as the leaders last wrote it).",
                            labels=["sharegroup"])
    for sl in sample.share_groups:
        gid = sl.view.group_id
        members.add_metric([gid], len(sl.view.members))
        epoch.add_metric([gid], sl.view.epoch)
        if any(p.lag is not None for p in sl.partitions):
            lag.add_metric([gid], sl.total)
    yield members
    yield epoch
    yield lag


#: Record states of a share partition's window, as ``SharePartition.counts`` names them.
SHARE_STATES = ("available", "acquired", "acknowledged", "archived")


class ShareCollector(Collector):
    """The share partitions this broker leads, from its ``SharePartitionManager`` (read on the loop)."""

    def __init__(self, broker: Any, loop: Any):
        self.broker = broker
        self.loop = loop

    def _snapshot(self) -> tuple[dict, dict, int, int, int, tuple[int, int]]:
        """(stats of the led share partitions, their log ends, sessions, acquired, acknowledged, the share-state
        journal's appends and bytes) -- on the loop."""
        ctx = self.broker.ctx
        share = getattr(ctx, "share", None)
        if share is None:
            return {}, {}, 0, 0, 0, (0, 0)
        stats = {k: v for k, v in share.stats().items() if ctx.is_leader(k[1], k[2])}
        ends = {}
        logs = self.broker.logs
        for _, topic, partition in stats:
            plog = logs.get(topic, partition) if logs is not None else None
            if plog is not None:
                ends[(topic, partition)] = plog.log_end_offset
        journal = getattr(share, "journal", None)
        appended = (journal.appends, journal.bytes) if journal is not None else (0, 0)
        return stats, ends, len(share.sessions), share.acquired_total, share.acknowledged_total, appended

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            stats, ends, sessions, acquired, acknowledged, appended = on_loop(self.loop, self._snapshot)
        except Unavailable as e:
            log.warning("metrics: share partitions not exported: %s", e)
            return
        labels = ["sharegroup", "topic", "partition"]
        start = GaugeMetricFamily("spark_coord_share_partition_start_offset",
                                  "Share-partition start offset: the first record the share group is not done with.",
                                  labels=labels)
        in_flight = GaugeMetricFamily("spark_coord_share_partition_in_flight_records",
                                      "Records of the share partition's in-flight window (from its start offset).",
                                      labels=labels)
        records = GaugeMetricFamily("spark_coord_share_partition_records",
                                    "Records of the in-flight window by state (available, acquired, acknowledged, "
                                    "archived).", labels=labels + ["state"])
        lag = GaugeMetricFamily("spark_coord_share_partition_lag",
                                "Records from the start offset to the log end not yet acknowledged or archived.",
                                labels=labels)
        deliveries = CounterMetricFamily("spark_coord_share_partition_deliveries",
                                         "Records handed out (each delivery counted) since the leader loaded the "
                                         "share partition.", labels=labels)
        archived = CounterMetricFamily("spark_coord_share_partition_archived_records",
                                       "Records archived (rejected, or at the delivery count limit) since the leader "
                                       "loaded the share partition.", labels=labels)
        for (group, topic, partition), st in sorted(stats.items()):
            ls = [group, topic, str(partition)]
            start.add_metric(ls, st["start_offset"])
            in_flight.add_metric(ls, st["end_offset"] - st["start_offset"])
            for state in SHARE_STATES:
                records.add_metric(ls + [state], st.get(state, 0))
            end = ends.get((topic, partition))
            if end is not None:
                lag.add_metric(ls, max(0, end - st["start_offset"] - st.get("acknowledged", 0) - st.get("archived", 0)))
            deliveries.add_metric(ls, st["deliveries"])
            archived.add_metric(ls, st["archived_total"])
        yield from (start, in_flight, records, lag, deliveries, archived)
        s = GaugeMetricFamily("spark_coord_share_sessions", "Open share sessions (ShareFetch) at this broker.")
        s.add_metric([], sessions)
        yield s
        a = CounterMetricFamily("spark_coord_share_acquired_records", "Records acquired by share consumers here.")
        a.add_metric([], acquired)
        yield a
        k = CounterMetricFamily("spark_coord_share_acknowledged_records",
                                "Records acknowledged (accepted, released, rejected) by share consumers here.")
        k.add_metric([], acknowledged)
        yield k
        for name, doc, value in (
                ("spark_coord_share_journal_appends", "Appends to the share-state journal (one per group commit of "
                 "acknowledgements).", appended[0]),
                ("spark_coord_share_journal_bytes", "Bytes appended to the share-state journal.", appended[1])):
            c = CounterMetricFamily(name, doc)
            c.add_metric([], value)
            yield c


class BrokerCollector(Collector):
    """A broker's partitions from its own logs; the cluster's topics and brokers on the controller."""

    def __init__(self, broker: Any, tracker: LagTracker):
        self.broker = broker
        self.tracker = tracker

    def collect(self) -> Iterator[GaugeMetricFamily]:
        current = GaugeMetricFamily("kafka_topic_partition_current_offset",
                                    "Current Offset of a Broker at Topic/Partition", labels=["topic", "partition"])
        oldest = GaugeMetricFamily("kafka_topic_partition_oldest_offset",
                                   "Oldest Offset of a Broker at Topic/Partition", labels=["topic", "partition"])
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes of the partition's log on disk.",
                                 labels=["topic", "partition"])
        logs = self.broker.logs
        for topic, partition in (logs.partitions() if logs is not None else []):
            plog = logs.get(topic, partition)
            if plog is None:
                continue
            labels = [topic, str(partition)]
            try:
                current.add_metric(labels, plog.log_end_offset)
                oldest.add_metric(labels, plog.log_start_offset)
                size.add_metric(labels, plog.size_bytes)
            except Exception:  # noqa: BLE001 -- one log must not fail the whole scrape
                log.warning("metrics: log %s-%d skipped", topic, partition, exc_info=True)
        yield current
        yield oldest
        yield size
        try:
            snap = self.tracker.current().snapshot
        except Unavailable as e:
            log.warning("metrics: cluster view not exported: %s", e)
            return
        if snap.controller:
            brokers = GaugeMetricFamily("kafka_brokers", "Number of Brokers in the Kafka Cluster.")
            brokers.add_metric([], snap.live_brokers)
            yield brokers
            partitions = GaugeMetricFamily("kafka_topic_partitions", "Number of partitions for this Topic",
                                           labels=["topic"])
            for topic, n in sorted(snap.topics.items()):
                partitions.add_metric([topic], n)
            yield partitions


class ZooKeeperCollector(Collector):
    """The ZooKeeper session's state now (kazoo's ``client.state``, read without locks)."""

    def __init__(self, process: Any):
        self.process = process

    def collect(self) -> Iterator[GaugeMetricFamily]:
        zk = getattr(self.process, "zk", None)
        state = str(getattr(zk, "state", "LOST")) if zk is not None else "LOST"
        family = GaugeMetricFamily("spark_coord_zookeeper_session_state",
                                   "1 for the ZooKeeper session's current state.", labels=["state"])
        for s in ZK_STATES:
            family.add_metric([s], 1 if s == state else 0)
        yield family
