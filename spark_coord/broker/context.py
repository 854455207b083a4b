"""What request handlers can reach: configuration, logs, the cluster view, ZooKeeper,
the waiters of long-polling fetches, the idempotent producers' state and the groups' configs."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from spark_coord.broker.producer_state import BrokerProducers
from spark_coord.broker.waiters import AppendWaiters
from spark_coord.config import Config
from spark_coord.errors import ErrorCode
from spark_coord.metrics.broker import NO_BROKER_METRICS, BrokerMetrics
from spark_coord.security.authorizer import NoAuthorizer

if TYPE_CHECKING:  # pragma: no cover
    from kazoo.client import KazooClient

    from spark_coord.broker.state import ClusterView
    from spark_coord.configs.store import GroupConfigs
    from spark_coord.log import LogManager


@dataclass
class BrokerContext:
    """Shared state of one broker, handed to every handler."""

    config: Config
    broker_id: int
    logs: "LogManager"
    view: "ClusterView"
    zk: "KazooClient"
    cluster_id: str = ""
    #: The ``BrokerServer`` serving this context (ApiVersions answers what it dispatches); typed loosely:
    #: the server imports the context, not the other way round.
    server: Any = None
    appends: AppendWaiters = field(default_factory=AppendWaiters)
    #: Producer ids (claimed in blocks from ZooKeeper) and sequence state (InitProducerId, Produce).
    producers: BrokerProducers = field(init=False)

    def __post_init__(self) -> None:
        self.producers = BrokerProducers.create(self.zk_call, self.zk, self.broker_id)
    #: ``authorize(principal, host, operation, resource) -> bool`` for every API (``security.authorizer``);
    #: handlers call ``ctx.authorized(conn, operation, resource)``.
    authorizer: Any = field(default_factory=lambda: NoAuthorizer())
    #: Request, byte and connection counters (``spark_coord.metrics.broker``; nothing without metrics.port).
    metrics: BrokerMetrics = NO_BROKER_METRICS
    #: Every group's own configs (the GROUP config resource, ``configs.store.GroupConfigs``), loaded by
    #: ``Broker.start`` and kept current from ZooKeeper: ``group_configs.get(group_id) -> GroupConfig``
    #: (never blocks), ``add_listener(fn)`` (``fn(group_id)`` on the loop after a change), ``await
    #: group_configs.delete(group_id)`` when a group is deleted.  None until the broker has started.
    group_configs: "GroupConfigs | None" = None
    #: Topic configs and dynamic broker configs (``configs.dynamic.DynamicConfigs``), loaded by ``Broker.start``
    #: and kept current from ZooKeeper: ``dynamic_configs.log_config(topic) -> LogConfig`` (never blocks).
    dynamic_configs: Any = None
    #: Share partitions this broker leads, share sessions, their persistence (``share.manager``; KIP-932).
    share: Any = None

    async def zk_call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking kazoo call off the event loop thread (with kazoo's command retry)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(self.zk.retry, fn, *args, **kwargs))

    def authorized(self, conn, operation, resource) -> bool:
        """Whether ``conn``'s principal, from its host, may do ``operation`` on ``resource``."""
        return self.authorizer.authorize(conn.auth.principal, conn.auth.host, operation, resource)

    def is_leader(self, topic: str, partition: int) -> bool:
        return self.view.leader(topic, partition) == self.broker_id

    def leader_error(self, topic: str, partition: int) -> ErrorCode:
        """Whether this broker serves ``topic-partition``: NONE, UNKNOWN_TOPIC_OR_PARTITION, or
        NOT_LEADER_OR_FOLLOWER (Produce, Fetch and ListOffsets answer these per partition)."""
        leader = self.view.leader(topic, partition)
        if leader is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return ErrorCode.NONE if leader == self.broker_id else ErrorCode.NOT_LEADER_OR_FOLLOWER
