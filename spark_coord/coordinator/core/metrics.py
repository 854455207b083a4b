"""What the coordinator reports as it works: one observer interface, a no-op default, and
the Prometheus instruments behind it.

The coordinator calls ``CoordinatorMetrics`` at a handful of marked call sites (each a
single line ending in ``# metrics``): a rebalance task starts, settles or fails an
attempt, a ping is sent or expires, a member is failed, offsets reach ZooKeeper, an
election is won.  ZooKeeper write latency needs no call site: ``timed(store)`` wraps the
group store.  Everything else an operator wants to see (members, groups, offsets, lag)
is *read* at scrape time from the coordinator's state (``spark_coord.metrics.lag``), so
it needs no hook at all.

``NO_METRICS`` is what a coordinator without a metrics endpoint gets: every method does
nothing.  ``PrometheusCoordinatorMetrics`` counts into a ``CollectorRegistry``; its
instruments are thread-safe (prometheus_client locks each value), so the loop thread
counts while the endpoint's threads read.

A member's *protocol* (the door it came through) is decided in one place,
``member_protocol``; a new member kind is one more line in ``_CHANNEL_KINDS``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from prometheus_client import CollectorRegistry

#: Protocol label of members that registered with the coordinator protocol (RegisterConsumer, then
#: Ping / StopFetcher / StartFetcher on their connection): the thin consumer and ``spark-coord consume``.
COORDINATOR_PROTOCOL = "coordinator"
#: Members a Spark query registered (the coordinator protocol, consumer ids ``coordkafka-...``).
SPARK_PROTOCOL = "spark"
#: Kafka's classic group protocol (JoinGroup / SyncGroup / Heartbeat): Kafka's own consumers.
CLASSIC_PROTOCOL = "classic"
#: Kafka 4's consumer group protocol (ConsumerGroupHeartbeat, KIP-848).
CONSUMER_PROTOCOL = "consumer"
#: Every value the protocol label takes, so a gauge shows 0 rather than nothing for an absent kind.
PROTOCOLS = (COORDINATOR_PROTOCOL, SPARK_PROTOCOL, CLASSIC_PROTOCOL, CONSUMER_PROTOCOL)

def member_protocol(channel: Any, consumer_id: str, kind: str | None = None) -> str:
    """The protocol label of a member: from its channel's type, else (absent: after a failover, or a
    static member away for now) from the kind the registry keeps, else from its consumer id."""
    label = getattr(channel, "PROTOCOL", None)  # the doors' channels name their protocol
    if label in (CLASSIC_PROTOCOL, CONSUMER_PROTOCOL):
        return label
    if kind in (CLASSIC_PROTOCOL, CONSUMER_PROTOCOL):
        return kind
    from spark_coord.coordinator.core.group import SPARK_MEMBER_PREFIX

    return SPARK_PROTOCOL if consumer_id.startswith(SPARK_MEMBER_PREFIX) else COORDINATOR_PROTOCOL


def partitions_moved(before: Mapping[Any, str], after: Mapping[Any, str]) -> int:
    """Partitions whose owning member differs between two owner maps ``{(topic, partition): thread}``
    (a partition newly owned counts; one no longer owned does not)."""
    from spark_coord.coordinator.core.assignors import thread_owner

    return sum(1 for tp, thread in after.items()
               if tp not in before or thread_owner(before[tp]) != thread_owner(thread))


class CoordinatorMetrics:
    """The coordinator's observer; this base class does nothing (``NO_METRICS``)."""

    enabled = False

    def rebalance_started(self, group_id: str) -> None:
        """A group's rebalance task began (a new assignment is wanted)."""

    def rebalance_completed(self, group: Any, millis: int, owners_before: Mapping[Any, str]) -> None:
        """``group`` settled (Stable or Empty) ``millis`` after its rebalance task began, when its owners
        were ``owners_before``."""

    def rebalance_failed(self, group_id: str, reason: str) -> None:
        """One attempt failed (a round timed out, a member refused, a store write failed); it retries."""

    def ping_sent(self) -> None:
        """A ping went to a member."""

    def ping_expired(self) -> None:
        """A ping expired unanswered."""

    def member_failed(self, reason: str) -> None:
        """A member was failed (pings or session unanswered, rebalance rounds failing)."""

    def offsets_committed(self, group_id: str, count: int) -> None:
        """``count`` partitions' offsets were written to ZooKeeper."""

    def elected(self, epoch: int) -> None:
        """This process became the coordinator with ``epoch``."""

    def timed(self, store: Any) -> Any:
        """The group store, its writes timed (here: the store itself)."""
        return store


NO_METRICS = CoordinatorMetrics()

#: Seconds; a rebalance takes a StopFetcher round, a commit, a StartFetcher round and owner writes.
REBALANCE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
PARTITIONS_MOVED_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
#: Seconds; one fenced ZooKeeper multi.
ZK_WRITE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
#: The group store's methods that write to ZooKeeper (``coordinator.storage.store.GroupStore``).
STORE_WRITES = ("save_member", "remove_member", "save_generation", "commit_offsets", "commit_offsets_many",
                "delete_topic",
                "delete_group", "write_owners", "verify", "write_share_states", "delete_share_states")


class PrometheusCoordinatorMetrics(CoordinatorMetrics):
    """Counters and histograms of the coordinator's events, in ``registry``."""

    enabled = True

    def __init__(self, registry: "CollectorRegistry"):
        from prometheus_client import Counter, Histogram

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, registry=registry)

        self.rebalances_started = counter("spark_coord_coordinator_rebalances_started",
                                          "Rebalance tasks begun (a group needed a new assignment).")
        self.rebalances_completed = counter("spark_coord_coordinator_rebalances_completed",
                                            "Rebalances that settled their group (Stable or Empty).")
        self.rebalances_failed = counter("spark_coord_coordinator_rebalances_failed",
                                         "Rebalance attempts that failed (each is retried after a backoff).")
        self.rebalance_seconds = Histogram("spark_coord_coordinator_rebalance_duration_seconds",
                                           "From a group's rebalance task beginning to the group settled.",
                                           buckets=REBALANCE_BUCKETS, registry=registry)
        self.moved = Histogram("spark_coord_coordinator_rebalance_partitions_moved",
                               "Partitions that changed owner in a settled rebalance.",
                               buckets=PARTITIONS_MOVED_BUCKETS, registry=registry)
        self.pings_sent = counter("spark_coord_coordinator_pings_sent", "Pings sent to members.")
        self.pings_expired = counter("spark_coord_coordinator_pings_expired", "Pings that expired unanswered.")
        self.members_failed = counter("spark_coord_coordinator_members_failed",
                                      "Members failed by the coordinator (unanswered pings or session, failing "
                                      "rebalance rounds).")
        self.offsets = counter("spark_coord_coordinator_offsets_committed",
                               "Partition offsets written to ZooKeeper (rate() gives commits per second).")
        self.elections = counter("spark_coord_coordinator_elections_won", "Elections this process won.")
        self.zk_write_seconds = Histogram("spark_coord_coordinator_zookeeper_write_duration_seconds",
                                          "Fenced ZooKeeper writes of the group store that succeeded.",
                                          buckets=ZK_WRITE_BUCKETS, registry=registry)
        self.zk_write_errors = counter("spark_coord_coordinator_zookeeper_write_errors",
                                       "Group store writes that failed (fenced, connection lost, refused).")

    def rebalance_started(self, group_id: str) -> None:
        self.rebalances_started.inc()

    def rebalance_completed(self, group: Any, millis: int, owners_before: Mapping[Any, str]) -> None:
        self.rebalances_completed.inc()
        self.rebalance_seconds.observe(millis / 1000)
        self.moved.observe(partitions_moved(owners_before, group.owners))

    def rebalance_failed(self, group_id: str, reason: str) -> None:
        self.rebalances_failed.inc()

    def ping_sent(self) -> None:
        self.pings_sent.inc()

    def ping_expired(self) -> None:
        self.pings_expired.inc()

    def member_failed(self, reason: str) -> None:
        self.members_failed.inc()

    def offsets_committed(self, group_id: str, count: int) -> None:
        self.offsets.inc(count)

    def elected(self, epoch: int) -> None:
        self.elections.inc()

    def timed(self, store: Any) -> Any:
        return TimedStore(store, self)


class TimedStore:
    """A group store whose ZooKeeper writes are timed; every other attribute is the store's own."""

    def __init__(self, store: Any, metrics: PrometheusCoordinatorMetrics):
        self._store = store
        self._metrics = metrics

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name not in STORE_WRITES:
            return attr
        metrics = self._metrics

        async def timed_write(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                result = await attr(*args, **kwargs)
            except Exception:
                metrics.zk_write_errors.inc()
                raise
            metrics.zk_write_seconds.observe(time.perf_counter() - started)
            return result

        return timed_write

    def __repr__(self) -> str:
        return f"TimedStore({self._store!r})"
