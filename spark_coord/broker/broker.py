"""``Broker``: one broker process's parts wired together.

Start order: open the logs (recovery), listen (so the bound port is known),
connect to ZooKeeper, read or create the cluster id, load the groups' configs
(and follow their change notifications), load the cluster view,
register ``/brokers/ids/<id>``, stand for coordinator, and last open the metrics
endpoint (``metrics.port``; ``spark_coord.metrics``).  Stop order is the reverse, so
clients see the broker leave ZooKeeper before its socket closes.  Log flush and
retention run periodically in a worker thread, off the event loop; the log cleaner
(compaction) runs in its own thread.  Topic configs and dynamic broker configs are
followed from ZooKeeper and applied to the logs as they change.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kazoo.exceptions import NodeExistsError

from spark_coord.broker.context import BrokerContext
from spark_coord.broker.coordination import CoordinationService
from spark_coord.broker.handlers import data_handlers
from spark_coord.broker.registration import BrokerRegistration
from spark_coord.broker.security import BrokerSecurity
from spark_coord.broker.server import BrokerServer
from spark_coord.broker.state import ClusterView
from spark_coord.config import Config
from spark_coord.configs.dynamic import DynamicConfigs
from spark_coord.configs.store import GroupConfigs
from spark_coord.log.cleaner import CleanerSettings, LogCleaner
from spark_coord.metrics import metrics_endpoint
from spark_coord.metrics.broker import NO_BROKER_METRICS
from spark_coord.share.changes import ShareStateChanges
from spark_coord.share.journal import JOURNAL_DIR, ShareJournal
from spark_coord.share.manager import SharePartitionManager, ShareSettings
from spark_coord.zk import client as zk_client
from spark_coord.zk import paths

log = logging.getLogger(__name__)


def _new_cluster_id() -> str:
    """Kafka's form of a cluster id: a 22-character url-safe base64 uuid."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class Broker:
    """A broker: ``await start()``, serve, ``await stop()``; ``bound_port`` once started."""

    def __init__(self, config: Config):
        self.config = config
        self.broker_id: int = config["broker.id"]
        self.security = BrokerSecurity(config)  # listeners and TLS contexts: a bad setting fails here
        first = self.security.listener_config.listeners[0]
        self.host, self.port = first.host, first.port
        self.zk = None
        self.logs = None
        self.view: ClusterView | None = None
        self.server: BrokerServer | None = None
        self.ctx: BrokerContext | None = None
        self.registration: BrokerRegistration | None = None
        self.coordination: CoordinationService | None = None
        #: Follows the share-state notifications of the admin APIs (``share.changes``).
        self.share_changes: ShareStateChanges | None = None
        #: The metrics endpoint (None without metrics.port); its observers exist before the parts they watch.
        self.metrics = metrics_endpoint(config, f"broker {self.broker_id}")
        self._tasks: list[asyncio.Task] = []
        #: The log cleaner thread (compaction of topics whose cleanup.policy has compact).
        self.cleaner: LogCleaner | None = None
        self._maintenance = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"broker-{self.broker_id}-logs")
        self.started = False

    @property
    def bound_port(self) -> int | None:
        """The port of the first listener (see ``bound_ports`` for all of them)."""
        return self.server.bound_port if self.server else None

    @property
    def bound_ports(self) -> dict[str, int]:
        """Listener name -> the port it listens on."""
        return dict(self.server.bound_ports) if self.server else {}

    def advertised_endpoints(self) -> list[tuple[str, str, str, int]]:
        """``(listener, protocol, host, port)`` clients are told, the inter-broker listener first."""
        return self.security.listener_config.endpoints(self.bound_ports)

    @property
    def advertised(self) -> tuple[str, int]:
        """The broker's default address: its PLAINTEXT endpoint, else the inter-broker listener's
        (what ``/brokers/ids`` readers take as its host and port)."""
        endpoints = self.advertised_endpoints()
        _, _, host, port = next((e for e in endpoints if e[1] == "PLAINTEXT"), endpoints[0])
        return host, port

    # ------------------------------------------------------------------ start
    async def start(self) -> None:
        from spark_coord.log import LogConfig, LogManager

        loop = asyncio.get_running_loop()
        cfg = self.config
        try:
            self.logs = await loop.run_in_executor(
                None, LogManager, Path(cfg["log.dirs"]), LogConfig.from_broker_config(cfg))
            self.zk = await loop.run_in_executor(None, lambda: zk_client.connect_from_config(cfg, create_chroot=True))
            await loop.run_in_executor(None, self.security.start, self.zk)
            self.view = ClusterView(self.zk, loop)
            counters = self.metrics.broker if self.metrics is not None else NO_BROKER_METRICS
            self.ctx = BrokerContext(cfg, self.broker_id, self.logs, self.view, self.zk,
                                     authorizer=self.security.authorizer, metrics=counters)
            self.server = BrokerServer(self.ctx, self.security.served, cfg["socket.request.max.bytes"],
                                       cfg["connections.max.idle.ms"] / 1000,
                                       connection_auth=self.security.connection_auth, metrics=counters)
            self.ctx.server = self.server
            journal, recovered = None, None
            if cfg["group.share.state.journal.enable"]:
                # beside the partition logs on the leader's one disk, fsynced as they are (every record or never)
                journal = ShareJournal(Path(cfg["log.dirs"]) / JOURNAL_DIR,
                                       cfg["group.share.state.journal.segment.bytes"],
                                       fsync=cfg["log.flush.interval.messages"] == 1)
                recovered = await loop.run_in_executor(None, journal.open)
            self.ctx.share = SharePartitionManager(self.ctx, settings=self._share_settings,
                                                   max_sessions=cfg["group.share.max.share.sessions"],
                                                   flush_interval_ms=cfg["group.share.state.checkpoint.interval.ms"],
                                                   journal=journal, recovered=recovered)
            self.coordination = CoordinationService(self)
            for handler in data_handlers() + self.coordination.handlers():
                self.server.add_handler(handler)
            self.ctx.cluster_id = await loop.run_in_executor(None, self._cluster_id)
            group_configs = GroupConfigs(self.zk, cfg)
            await loop.run_in_executor(None, group_configs.start, loop)
            self.ctx.group_configs = group_configs
            dynamic = DynamicConfigs(self.zk, cfg, self.broker_id)
            await loop.run_in_executor(None, dynamic.start, loop)
            self.ctx.dynamic_configs = dynamic
            self.logs.set_config_source(dynamic.log_config)
            dynamic.add_listener(self._configs_changed)
            self.cleaner = LogCleaner(self.logs, lambda: CleanerSettings.from_broker_config(dynamic.broker_config))
            self.cleaner.start()
            await self.view.start()
            self.view.add_listener(self._reconcile_logs)
            self._reconcile_logs(self.view)
            self.ctx.share.start()
            self.share_changes = ShareStateChanges(self.zk, self.ctx.share, loop)
            await loop.run_in_executor(None, self.share_changes.start)
            await self.server.start()
            host, port = self.advertised
            self.registration = BrokerRegistration(self.zk, loop, self.broker_id, host, port,
                                                   stale_wait=cfg["zookeeper.session.timeout.ms"] / 1000 * 2 + 5,
                                                   endpoints=self.advertised_endpoints())
            await self.registration.start()
            await self.coordination.start()
            # Serve Metadata that lists this broker from the first request on.
            if not await self.view.wait_for(lambda v: self.broker_id in v.brokers,
                                            cfg["zookeeper.connection.timeout.ms"] / 1000):
                log.warning("broker %d: own registration not yet visible in ZooKeeper", self.broker_id)
            if self.metrics is not None:
                self.metrics.start_for_broker(self, loop)
        except BaseException:
            await self.stop()
            raise
        self._tasks = [
            loop.create_task(self._periodic(cfg["log.flush.scheduler.interval.ms"], self.logs.flush_due, "flush")),
            loop.create_task(self._periodic(cfg["log.retention.check.interval.ms"], self.logs.apply_retention,
                                            "retention")),
        ]
        self.started = True
        log.info("broker %d listening on %s (cluster %s, ZooKeeper %s)", self.broker_id,
                 ", ".join(f"{name}://{host}:{port}" for name, _, host, port in self.advertised_endpoints()),
                 self.ctx.cluster_id, cfg["zookeeper.connect"])

    def _share_settings(self, group: str) -> ShareSettings:
        """What ``group``'s share partitions follow: the broker's group.share.* settings, and the
        group's own configs where it has them (share.record.lock.duration.ms, share.delivery.count.limit,
        share.partition.max.record.locks, share.auto.offset.reset); a change applies from the next
        acquisition, acknowledgement or lock expiry on."""
        cfg = self.config
        configs = getattr(self.ctx, "group_configs", None)
        own = configs.get(group) if configs is not None else None
        if own is None:
            return ShareSettings(lock_duration_ms=cfg["group.share.record.lock.duration.ms"],
                                 delivery_count_limit=cfg["group.share.delivery.count.limit"],
                                 max_in_flight=cfg["group.share.partition.max.record.locks"])
        return ShareSettings(lock_duration_ms=own.share_record_lock_duration_ms,
                             delivery_count_limit=own.share_delivery_count_limit,
                             max_in_flight=own.share_partition_max_record_locks,
                             auto_offset_reset=own.share_auto_offset_reset)

    def _configs_changed(self, kind: str, name: str) -> None:
        """A topic's configs or the dynamic broker configs changed (on the loop): give the logs their new
        settings, apply retention to them at once (a lowered retention.ms frees space promptly, not at the
        next retention check) and wake the cleaner (a topic may have become compacted)."""
        if self.logs is None:
            return
        topic = name if kind == "topics" else None
        changed = self.logs.refresh_configs(topic)
        if changed:
            log.info("broker %d: new log settings for %d partition log(s)", self.broker_id, len(changed))
            asyncio.get_running_loop().run_in_executor(self._maintenance, self.logs.apply_retention, topic)
        if self.cleaner is not None:
            self.cleaner.wake()

    def _cluster_id(self) -> str:
        """Read ``/cluster/id``, creating it once for a new cluster (blocking); Kafka keeps it
        there as ``{"version":"1","id":"<cluster id>"}``."""
        data = json.dumps({"version": "1", "id": _new_cluster_id()}, separators=(",", ":")).encode()
        try:
            self.zk.create(paths.CLUSTER_ID, data, makepath=True)
        except NodeExistsError:
            pass
        raw, _ = self.zk.get(paths.CLUSTER_ID)
        try:
            return str(json.loads(raw)["id"])
        except (ValueError, KeyError, TypeError):
            log.warning("%s holds no cluster id JSON: %r", paths.CLUSTER_ID, raw[:80])
            return ""

    def _reconcile_logs(self, view: ClusterView) -> None:
        """Create the logs of partitions this broker leads; drop logs of topics that are gone."""
        if self.logs is None:
            return
        for topic, assignment in view.topics.items():
            for partition, replicas in assignment.items():
                if replicas and replicas[0] == self.broker_id and self.logs.get(topic, partition) is None:
                    self.logs.get_or_create(topic, partition)
                    log.info("created log %s-%d", topic, partition)
        for topic, partition in self.logs.partitions():
            if topic not in view.topics:
                log.info("topic %s is gone: deleting log %s-%d", topic, topic, partition)
                self.logs.delete_partition(topic, partition)

    async def _periodic(self, interval_ms: int, fn, what: str) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await loop.run_in_executor(self._maintenance, fn)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("log %s failed", what)

    # ------------------------------------------------------------------ stop
    async def stop(self) -> None:
        """Deregister, close connections, stop watches, close logs and ZooKeeper. Idempotent."""
        loop = asyncio.get_running_loop()
        if self.metrics is not None:
            await loop.run_in_executor(None, self.metrics.stop)
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self.coordination is not None:
            await self.coordination.stop()
            self.coordination = None
        if self.registration is not None:
            await self.registration.stop()
            self.registration = None
        if self.server is not None:
            await self.server.stop()
        if self.share_changes is not None:
            self.share_changes.stop()
            self.share_changes = None
        if self.ctx is not None and self.ctx.share is not None:
            await self.ctx.share.stop()
            if self.ctx.share.journal is not None:
                self.ctx.share.journal.close()
        if self.view is not None:
            self.view.stop()
        self.security.stop()
        if self.ctx is not None and self.ctx.group_configs is not None:
            self.ctx.group_configs.stop()
        if self.ctx is not None and self.ctx.dynamic_configs is not None:
            self.ctx.dynamic_configs.stop()
        if self.cleaner is not None:
            cleaner, self.cleaner = self.cleaner, None
            await loop.run_in_executor(None, cleaner.stop)
        if self.logs is not None:
            logs, self.logs = self.logs, None
            await loop.run_in_executor(self._maintenance, logs.close)
        if self.zk is not None:
            zk, self.zk = self.zk, None
            await loop.run_in_executor(None, zk_client.close, zk)
        self._maintenance.shutdown(wait=False)
        if self.started:
            log.info("broker %d stopped", self.broker_id)
        self.started = False
