"""How a query's group members join their group: ``kafka.group.protocol`` (docs/spark/kafka4-groups.md).

Two ways in, one ``Member`` each (the query's ``_QueryMember`` of ``spark.group``), so the
planning, the active commits and the revocation hold are the same whichever way a member came:

- ``coordkafka``: the coordinator's own channel (``ConsumerCoordinatorConnector``): pings, a
  lease, claims after a coordinator failover.  Needs spark-coord's coordinator: our brokers, or
  standalone coordinators (``coordinator.bootstrap``) beside any Kafka cluster.
- ``consumer``: Kafka 4's consumer group protocol (KIP-848, ``consumer.kip848.Kip848Member``),
  spoken to the group's coordinator among the brokers: only Kafka's own APIs
  (ConsumerGroupHeartbeat, OffsetCommit and OffsetFetch with the member epoch), so the query is
  a member of a group on any Kafka 4 cluster, beside Kafka's own consumers, with no ZooKeeper.

``auto`` (the default) picks per cluster, by what the bootstrap brokers advertise in ApiVersions:
``coordkafka`` when standalone coordinators are named or the brokers serve the coordinator's
ClusterMetadata (our brokers: what queries did before the option existed), else ``consumer`` when
they serve ConsumerGroupHeartbeat (Kafka 4), else the query fails at its start, naming the option
(a Kafka 3 cluster: neither way in).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from spark_coord.client.metadata import parse_bootstrap
from spark_coord.consumer.kip848 import ClusterIo, Kip848Member
from spark_coord.spark.options import (
    GROUP_PROTOCOL_AUTO,
    GROUP_PROTOCOL_CONSUMER,
    GROUP_PROTOCOL_COORDKAFKA,
    SourceOptions,
)
from spark_coord.wire.coordinator import CLUSTER_METADATA
from spark_coord.wire.registry import ApiKey

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.consumer.connector import Member

log = logging.getLogger(__name__)

__all__ = ["resolve_group_protocol", "kip848_member", "check_protocol_settings"]


def resolve_group_protocol(opts: SourceOptions, cluster: "ClusterClient") -> str:
    """The protocol the query's members join with: the option, or for ``auto`` the cluster's (module
    docstring).  Raises ValueError, naming the option, when an ``auto`` cluster serves neither."""
    if opts.group_protocol != GROUP_PROTOCOL_AUTO:
        return opts.group_protocol
    if opts.coordinator_bootstrap is not None:
        return GROUP_PROTOCOL_COORDKAFKA
    conn = cluster.any_connection()
    served = conn.broker_versions
    if int(CLUSTER_METADATA) in served:
        chosen = GROUP_PROTOCOL_COORDKAFKA
    elif int(ApiKey.CONSUMER_GROUP_HEARTBEAT) in served:
        chosen = GROUP_PROTOCOL_CONSUMER
    else:
        raise ValueError(f"kafka.group.protocol: the broker at {conn.host}:{conn.port} serves neither spark-coord's "
                         "coordinator nor Kafka 4's consumer group protocol (ConsumerGroupHeartbeat), so group "
                         f"{opts.group_id!r} cannot be joined; name standalone coordinators with "
                         "coordinator.bootstrap, or read without group.id")
    served_by = "spark-coord's coordinator" if chosen == GROUP_PROTOCOL_COORDKAFKA else "Kafka 4's consumer groups"
    log.info("group %s: the brokers (%s:%d) serve %s; the query's members join with kafka.group.protocol=%s",
             opts.group_id, conn.host, conn.port, served_by, chosen)
    return chosen


def kip848_member(opts: SourceOptions, member: "Member", member_id: str, index: int = 0) -> Kip848Member:
    """A KIP-848 member driving ``member`` (not started), the query's ``index``-th (its static id is
    ``<kafka.group.instance.id>-<index>``).  It commits nothing by itself but its revocations and its
    leaving: the query commits what Spark confirmed (``GroupPartitionSource``)."""
    if opts.group_id is None:
        raise ValueError("group.id is required for group membership")
    bootstrap = [f"{h}:{p}" for h, p in parse_bootstrap(opts.bootstrap)]
    io = ClusterIo(bootstrap, opts.group_id, opts.client_id, opts.socket_timeout_ms / 1000, opts.security)
    instance = None if opts.group_instance_id is None else f"{opts.group_instance_id}-{index}"
    return Kip848Member(io, opts.group_id, member, topics=opts.subscribe, pattern=opts.subscribe_pattern,
                        instance_id=instance, server_assignor=opts.group_remote_assignor,
                        session_timeout_ms=opts.session_timeout_ms, member_id=member_id, auto_commit_interval_ms=None)


def check_protocol_settings(opts: SourceOptions, protocol: str) -> None:
    """Kafka 4's member settings with members that join through spark-coord's coordinator (``auto`` chose
    it): refused at the query's start, naming the options, rather than quietly not applied."""
    given = [name for name, value in (("kafka.group.instance.id", opts.group_instance_id),
                                      ("kafka.group.remote.assignor", opts.group_remote_assignor)) if value]
    if given and protocol != GROUP_PROTOCOL_CONSUMER:
        raise ValueError(f"{', '.join(given)}: settings of Kafka 4's consumer group protocol, but group "
                         f"{opts.group_id!r} joins through spark-coord's coordinator "
                         f"(kafka.group.protocol={protocol}); set kafka.group.protocol=consumer")
