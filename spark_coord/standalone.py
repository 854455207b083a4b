"""``spark-coord coordinator``: the coordinator as its own process, beside any Kafka-protocol cluster
(docs/deploying/beside-kafka.md).

The process is the broker's coordinator without the data plane: the same
``CoordinationService`` (coordinator shards elected in ``/coordinators/shards/<n>`` with
epochs and fenced writes, spread over the live coordinators, the coordinator protocol,
Kafka's group APIs), the same listeners and security, in a process of its own with its own
ZooKeeper.  What differs:

* the cluster view comes from the data cluster's Metadata API (``MetadataView``), read
  every ``coordinator.metadata.refresh.ms`` and at once after an error; new topics and
  partitions rebalance the interested groups as ZooKeeper watches do on our brokers;
* every coordinator process registers its endpoints in ``/coordinators/ids/<id>`` (the
  broker registration format), and ClusterMetadata answers with those processes -- the
  holder of the group's shard as coordinator -- while StartFetcher carries the data brokers members fetch
  from;
* with ``coordinator.offsets.mirror=true`` every offset written to ZooKeeper is also
  committed to the data cluster's own offset store (``OffsetMirror``: OffsetCommit as a
  standalone commit of the group, in the background, retried; it never holds up the
  ZooKeeper commit), so the cluster's own tools show the group's lag.

Every connection to the data cluster (Metadata, the offset mirror, the metrics endpoint's
ListOffsets) speaks the client security settings ``data_cluster_security`` reads: the client
keys under ``kafka.`` in the properties file, or unprefixed with ``-X`` / ``--command-config``
on the command line.  A bad value stops the process at start with the key named; a refused
log-in or a failed TLS handshake is logged as such (``describe_data_error``) and retried, and
a coordinator that cannot read the data cluster yet keeps trying, saying why.

Members reach it with ``coordinator.bootstrap`` (thin consumer, ``spark-coord consume
--coordinator``, the Spark source's ``coordinator.bootstrap`` option) and fetch from the
data cluster.  Kafka-protocol consumers (``subscribe()``) are not served through a
standalone coordinator: they ask any broker of the data cluster for their group's
coordinator, which names the data cluster's own.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable

from spark_coord import config as config_mod
from spark_coord.broker.coordination import CoordinationService
from spark_coord.broker.handlers import api_versions, sasl_authenticate, sasl_handshake
from spark_coord.broker.registration import BrokerIdTaken, BrokerRegistration
from spark_coord.broker.security import BrokerSecurity
from spark_coord.broker.server import BrokerServer
from spark_coord.client.groups import GroupClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.transport import SaslAuthenticationFailed
from spark_coord.config import ConfigError
from spark_coord.coordinator.storage.zk_store import ZkGroupStore
from spark_coord.errors import ErrorCode
from spark_coord.gc_pauses import start_from_config
from spark_coord.metrics import metrics_endpoint
from spark_coord.metrics.broker import NO_BROKER_METRICS
from spark_coord.security.client import ClientSecurity
from spark_coord.zk import client as zk_client
from spark_coord.zk import model, paths
from spark_coord.zk.client import ZooKeeperUnavailable, start_until_started

log = logging.getLogger(__name__)

COORDINATOR_IDS = paths.COORDINATOR_IDS
#: Topics the cluster keeps for itself (Kafka's offsets and transaction state): no group gets them.
INTERNAL_PREFIX = "__"


def coordinator_path(coordinator_id: int) -> str:
    return paths.coordinator(int(coordinator_id))


def data_cluster_security(cfg: config_mod.Config) -> ClientSecurity | None:
    """The client security of every connection to the data cluster (``kafka.*`` keys), None for
    PLAINTEXT; ``ConfigError`` names a bad key, a TLS file that cannot be read included."""
    prefix = config_mod.DATA_CLUSTER_PREFIX
    security = ClientSecurity.from_settings(cfg, prefix=prefix)
    if security.protocol == "PLAINTEXT":
        return None
    try:
        security.ssl_context()  # read the CA, certificate and key files now, not at every retry
    except (OSError, ssl.SSLError, ValueError) as e:
        key = "ssl.ca.location"
        if security.certificate_location or security.key_location:
            key = "ssl.ca.location / ssl.certificate.location / ssl.key.location"
        raise ConfigError(f"{prefix}{key}: the data cluster's TLS files cannot be used: {e}") from None
    return security


def describe_data_error(e: BaseException, security: ClientSecurity | None) -> str:
    """What went wrong reaching the data cluster, in words naming the setting to look at."""
    protocol = security.protocol if security is not None else "PLAINTEXT"
    if isinstance(e, SaslAuthenticationFailed):
        return (f"SASL authentication failed ({security.mechanism if security else '?'} as "
                f"{security.username if security else '?'}; check kafka.sasl.*): {e}")
    if isinstance(e, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(e):
        return f"TLS: the data broker's certificate is not trusted (check kafka.ssl.ca.location): {e}"
    if isinstance(e, ssl.SSLError) or "[SSL" in str(e) or "EOF occurred in violation of protocol" in str(e):
        return (f"TLS handshake failed (security.protocol {protocol}: is the data broker's listener TLS? "
                f"check kafka.security.protocol and kafka.ssl.*): {e}")
    if isinstance(e, ConnectionResetError) or "closed the connection" in str(e):
        return (f"the data broker closed the connection (is its listener {protocol}? check "
                f"kafka.security.protocol): {e}")
    return str(e)


def _level(described: str) -> int:
    """ERROR for a failure only a setting can fix (credentials, TLS), WARNING for one that may pass."""
    return logging.ERROR if described.startswith(("SASL authentication failed", "TLS")) else logging.WARNING


class _Throttle:
    """Log a repeated failure once a minute, a new one at once."""

    def __init__(self, interval: float = 60.0):
        self.interval = interval
        self._last: tuple[str, float] | None = None

    def __call__(self, level: int, message: str, *args: Any) -> None:
        text = message % args if args else message
        now = time.monotonic()
        if self._last is not None and self._last[0] == text and now - self._last[1] < self.interval:
            log.debug("%s", text)
            return
        self._last = (text, now)
        log.log(level, "%s", text)

    def reset(self) -> None:
        self._last = None


@dataclass(frozen=True)
class DataBroker:
    """A broker of the data cluster as its Metadata names it; members reach it at that address
    whichever listener they reached the coordinator on."""

    id: int
    host: str
    port: int

    def endpoint_for(self, listener: str | None) -> model.Endpoint:
        return model.Endpoint("DATA", "PLAINTEXT", self.host, self.port)


class MetadataView:
    """The data cluster's brokers and topics, read with Metadata requests on an interval.

    ``brokers`` (id -> ``DataBroker``) and ``topics`` (name -> {partition: [leader]}) change on the
    loop thread; listeners are called there after every change.  Internal topics (``__*``) are left out.
    """

    def __init__(self, bootstrap: list[str], refresh_ms: int, loop: asyncio.AbstractEventLoop,
                 client_id: str = "spark-coord-coordinator", timeout: float = 10.0,
                 security: ClientSecurity | None = None):
        self.bootstrap = list(bootstrap)
        self.security = security  # TLS/SASL of every Metadata connection (None: PLAINTEXT)
        #: Why the last read failed (None: it did not), for the log and for ``start``.
        self.last_error: str | None = None
        self._log = _Throttle()
        self.refresh_ms = refresh_ms
        self.loop = loop
        self.client_id = client_id
        self.timeout = timeout
        self.brokers: dict[int, DataBroker] = {}
        self.topics: dict[str, dict[int, list[int]]] = {}
        #: Topic name -> its 16-byte id (KIP-516), for the topics whose brokers name one.
        self.topic_ids: dict[str, bytes] = {}
        self.loaded = asyncio.Event()
        self._listeners: list[Callable[["MetadataView"], None]] = []
        self._cluster = None
        self._task: asyncio.Task | None = None

    def add_listener(self, fn: Callable[["MetadataView"], None]) -> None:
        self._listeners.append(fn)

    async def start(self, timeout: float = 30.0) -> None:
        """Read the cluster once, then keep reading it.  Waits for the first answer, saying every
        ``timeout`` seconds why there is none yet (the reads go on: a data cluster down, or one that
        refuses our credentials until they are fixed on either side, is waited for)."""
        self._task = self.loop.create_task(self._run(), name="metadata-view")
        loaded = self.loop.create_task(self.loaded.wait())
        waited = 0.0
        try:
            while not (await asyncio.wait({loaded}, timeout=timeout))[0]:
                waited += timeout
                log.error("the data cluster %s has answered no Metadata for %.0f s (%s); still trying",
                          ",".join(self.bootstrap), waited, self.last_error or "no answer")
        finally:
            loaded.cancel()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._cluster is not None:
            cluster, self._cluster = self._cluster, None
            await self.loop.run_in_executor(None, cluster.close)

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            try:
                brokers, topics, ids = await self.loop.run_in_executor(None, self._read)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 -- logged; the loop keeps reading until stopped
                self.last_error = describe_data_error(e, self.security)
                self._log(_level(self.last_error), "reading the data cluster's metadata failed: %s; retrying",
                          self.last_error)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.refresh_ms / 1000)
                continue
            if self.last_error is not None:
                log.info("reading the data cluster's metadata again (%d brokers)", len(brokers))
                self.last_error = None
                self._log.reset()
            backoff = 0.1
            self._apply(brokers, topics, ids)
            await asyncio.sleep(self.refresh_ms / 1000)

    def _read(self) -> tuple[dict[int, DataBroker], dict[str, dict[int, list[int]]], dict[str, bytes]]:
        if self._cluster is None:
            self._cluster = ClusterClient(self.bootstrap, client_id=self.client_id, timeout=self.timeout,
                                          security=self.security)
        try:
            infos = self._cluster.refresh()
        except Exception:
            cluster, self._cluster = self._cluster, None
            cluster.close()
            raise
        brokers = {i: DataBroker(i, h, p) for i, (h, p) in self._cluster.brokers.items()}
        topics = {name: {p: [info.leader] for p, info in t.partitions.items()}
                  for name, t in infos.items()
                  if t.error == ErrorCode.NONE and t.partitions and not name.startswith(INTERNAL_PREFIX)}
        ids = {name: bytes(infos[name].topic_id) for name in topics if any(infos[name].topic_id)}
        return brokers, topics, ids

    def _apply(self, brokers: dict[int, DataBroker], topics: dict[str, dict[int, list[int]]],
               ids: dict[str, bytes] | None = None) -> None:
        ids = ids or {}
        changed = brokers != self.brokers or ids != self.topic_ids or {t: len(p) for t, p in topics.items()} != \
            {t: len(p) for t, p in self.topics.items()}
        self.brokers, self.topics, self.topic_ids = brokers, topics, ids
        first = not self.loaded.is_set()
        self.loaded.set()
        if changed or first:
            for fn in list(self._listeners):
                try:
                    fn(self)
                except Exception:
                    log.exception("metadata listener failed")


class MetadataGroupStore(ZkGroupStore):
    """The group store in the coordinator's ZooKeeper; the topics come from the data cluster."""

    def __init__(self, client, epoch_check, view: MetadataView, owns=None):
        super().__init__(client, epoch_check, owns)
        self.view = view

    async def topics(self) -> dict[str, int]:
        await self.view.loaded.wait()
        return {t: len(p) for t, p in self.view.topics.items()}


class OffsetMirror:
    """Commits offsets written to ZooKeeper into the data cluster's own offset store, in a thread.

    ``offer(group, offsets)`` never blocks: the newest offsets per group replace older ones not
    sent yet.  A failed commit is logged and retried (backing off to ``max_backoff`` seconds).
    """

    def __init__(self, bootstrap: list[str], client_id: str = "spark-coord-coordinator", max_backoff: float = 5.0,
                 security: ClientSecurity | None = None):
        self.bootstrap = bootstrap
        self.security = security  # TLS/SASL of its connections (None: PLAINTEXT)
        self._log = _Throttle()
        self.client_id = client_id
        self.max_backoff = max_backoff
        self._pending: dict[str, dict[tuple[str, int], int]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.mirrored = 0  # offsets written so far (tests, logs)
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name="offset-mirror", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def offer(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        with self._lock:
            self._pending.setdefault(group, {}).update(offsets)
        self._wake.set()

    def _take(self) -> dict[str, dict[tuple[str, int], int]]:
        with self._lock:
            taken, self._pending = self._pending, {}
        return taken

    def _run(self) -> None:
        backoff = 0.1
        cluster = groups = None
        while not self._stop.is_set():
            self._wake.wait(1.0)
            self._wake.clear()
            batch = self._take()
            failed: dict[str, dict[tuple[str, int], int]] = {}
            for group, offsets in batch.items():
                try:
                    if groups is None:
                        cluster = ClusterClient(self.bootstrap, client_id=self.client_id, timeout=10.0,
                                                security=self.security)
                        groups = GroupClient(cluster, timeout=10.0)
                    groups.commit_offsets(group, offsets)
                    self.mirrored += len(offsets)
                except Exception as e:  # noqa: BLE001 -- logged and counted; kept for the next round
                    self.failures += 1
                    described = describe_data_error(e, self.security)
                    self._log(_level(described), "mirroring offsets of %s to the data cluster failed: %s; retrying",
                              group, described)
                    failed[group] = offsets
                    if cluster is not None:
                        cluster.close()
                    cluster = groups = None
            if failed:
                with self._lock:  # newer offsets that arrived meanwhile win
                    for group, offsets in failed.items():
                        self._pending[group] = {**offsets, **self._pending.get(group, {})}
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)
                self._wake.set()
            else:
                backoff = 0.1
        if cluster is not None:
            cluster.close()


class StandaloneCoordination(CoordinationService):
    """The broker's ``CoordinationService`` with the data cluster's view; the coordinator registry
    (``/coordinators/ids``) holds the coordinator processes, registered by ``StandaloneCoordinator``."""

    register_self = False

    def __init__(self, host: Any):
        super().__init__(host)
        self.enabled = True

    def _make_store(self, epoch_check, owns):
        return MetadataGroupStore(self.broker.zk, epoch_check, self.broker.view, owns)

    def live_brokers(self, listener: str | None = None) -> list[tuple[int, str, int]]:
        """The data cluster's brokers (members fetch from them whichever listener they came in on)."""
        return [(b.id, b.host, b.port) for b in sorted(self.broker.view.brokers.values(), key=lambda b: b.id)]

    def coordinator_nodes(self, listener: str | None) -> list[tuple[int, str, int]]:
        """ClusterMetadata names the coordinator processes, where members look for the coordinator."""
        out = []
        for cid, info in sorted(self.coordinators.items()):
            ep = info.endpoint_for(listener)
            if ep is not None:
                out.append((cid, ep.host, ep.port))
        return out

    def node_endpoint(self, node_id: int, listener: str | None) -> tuple[int, str, int] | None:
        info = self.coordinators.get(node_id)
        ep = info.endpoint_for(listener) if info is not None else None
        return None if ep is None else (node_id, ep.host, ep.port)

    def _log_end_sources(self):
        """The data cluster's leaders, asked with the client security for that cluster (nothing is local)."""
        view = self.broker.view
        endpoints = {b.id: (b.host, b.port) for b in view.brokers.values()}
        leaders = {(t, p): replicas[0] for t, assignment in view.topics.items()
                   for p, replicas in assignment.items() if replicas}
        return None, None, None, getattr(self.broker, "data_security", None), leaders, endpoints


class StandaloneCoordinator:
    """One coordinator process: listeners, ZooKeeper, the data cluster's view, election."""

    def __init__(self, cfg: config_mod.Config):
        self.config = cfg
        self.coordinator_id: int = cfg["coordinator.id"]
        self.broker_id = self.coordinator_id  # CoordinationService's name for it
        self.security = BrokerSecurity(cfg)
        #: The client security of every connection to the data cluster (None: PLAINTEXT).
        self.data_security = data_cluster_security(cfg)
        self.zk = None
        self.view: MetadataView | None = None
        self.ctx = None
        self.server = None
        self.coordination: StandaloneCoordination | None = None
        self.registration: BrokerRegistration | None = None
        self.mirror: OffsetMirror | None = None
        self.metrics = metrics_endpoint(cfg, f"coordinator {self.coordinator_id}")  # metrics

    @property
    def bound_ports(self) -> dict[str, int]:
        return dict(self.server.bound_ports) if self.server else {}

    def advertised_endpoints(self) -> list[tuple[str, str, str, int]]:
        return self.security.listener_config.endpoints(self.bound_ports)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        cfg = self.config
        try:
            self.zk = await loop.run_in_executor(None, lambda: zk_client.connect_from_config(cfg, create_chroot=True))
            await loop.run_in_executor(None, self.security.start, self.zk)
            self.view = MetadataView(cfg["bootstrap.servers"], cfg["coordinator.metadata.refresh.ms"], loop,
                                     security=self.data_security)
            await self.view.start()
            self.ctx = SimpleNamespace(authorizer=self.security.authorizer, server=None)
            self.server = BrokerServer(self.ctx, self.security.served, cfg["socket.request.max.bytes"],
                                       cfg["connections.max.idle.ms"] / 1000,
                                       connection_auth=self.security.connection_auth,
                                       metrics=self.metrics.broker if self.metrics else NO_BROKER_METRICS)  # metrics
            self.ctx.server = self.server
            self.coordination = StandaloneCoordination(self)
            for handler in [api_versions.HANDLER, sasl_handshake.HANDLER, sasl_authenticate.HANDLER,
                            *self.coordination.handlers()]:
                self.server.add_handler(handler)
            await self.server.start()
            endpoints = self.advertised_endpoints()
            _, _, host, port = endpoints[0]
            self.registration = BrokerRegistration(self.zk, loop, self.coordinator_id, host, port,
                                                   stale_wait=cfg["zookeeper.session.timeout.ms"] / 1000 * 2 + 5,
                                                   endpoints=endpoints, path=coordinator_path(self.coordinator_id))
            await self.registration.start()
            if cfg["coordinator.offsets.mirror"]:
                self.mirror = OffsetMirror(cfg["bootstrap.servers"], security=self.data_security)
                self.mirror.start()
            if self.mirror is not None:
                self.coordination.on_committed = self.mirror.offer
            await self.coordination.start()
            if self.metrics is not None:  # metrics
                self.metrics.start_for_standalone(self, loop)  # metrics
        except BaseException:
            await self.stop()
            raise
        log.info("coordinator %d listening on %s (data cluster %s, ZooKeeper %s%s)", self.coordinator_id,
                 ", ".join(f"{n}://{h}:{p}" for n, _, h, p in self.advertised_endpoints()),
                 ",".join(cfg["bootstrap.servers"]) + self._data_security_text(), cfg["zookeeper.connect"],
                 ", offsets mirrored" if self.mirror is not None else "")

    def _data_security_text(self) -> str:
        s = self.data_security
        if s is None:
            return ""
        return f" over {s.protocol}" + (f" as {s.username} ({s.mechanism})" if s.sasl else "")

    async def stop(self) -> None:
        loop = asyncio.get_running_loop()
        if self.metrics is not None:  # metrics
            await loop.run_in_executor(None, self.metrics.stop)  # metrics
        if self.coordination is not None:
            await self.coordination.stop()
            self.coordination = None
        if self.mirror is not None:
            await loop.run_in_executor(None, self.mirror.stop)
            self.mirror = None
        if self.registration is not None:
            await self.registration.stop()
            self.registration = None
        if self.server is not None:
            await self.server.stop()
            self.server = None
        if self.view is not None:
            await self.view.stop()
            self.view = None
        self.security.stop()
        if self.zk is not None:
            zk, self.zk = self.zk, None
            await loop.run_in_executor(None, zk_client.close, zk)


async def serve(cfg: config_mod.Config) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # start() waits for the data cluster as long as it takes (saying why), and starts again when its ZooKeeper
    # session is lost midway: a signal stops it meanwhile
    starting = asyncio.ensure_future(start_until_started(lambda: StandaloneCoordinator(cfg),
                                                         f"coordinator {cfg['coordinator.id']}"))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)  # start() closes what it opened
        log.info("coordinator %d stopped before it started", cfg["coordinator.id"])
        return 0
    try:
        coordinator = starting.result()
    except (BrokerIdTaken, ZooKeeperUnavailable, ConnectionError, OSError) as e:
        stopping.cancel()
        log.error("coordinator %d cannot start: %s", cfg["coordinator.id"], e)
        return 1
    freezer = start_from_config(cfg["gc.freeze.interval.ms"])  # full collections off the loop's hot path
    await stopping
    log.info("coordinator %d stopping", coordinator.coordinator_id)
    if freezer is not None:
        freezer.stop()
    await coordinator.stop()
    return 0


def data_cluster_overrides(command_config: str | None, options: list[str] | None) -> dict[str, str]:
    """``--command-config FILE`` then ``-X key=value`` (later wins): client security keys, as every client
    command takes them, returned as the coordinator's ``kafka.*`` keys.  ``ConfigError`` names a key that
    is not a client security key."""
    from spark_coord.security.client import ALIASES, KEYS

    out: dict[str, str] = {}
    sources = []
    if command_config:
        sources.append((command_config, config_mod.read_properties_file(command_config), True))
    if options:
        sources.append(("-X", config_mod.parse_overrides(options), False))
    for source, settings, from_file in sources:
        given: dict[str, str] = {}
        for name, value in settings.items():
            canonical = ALIASES.get(name, name)
            if canonical not in KEYS:
                if from_file and name in ("client.id", "socket.timeout.ms", "request.timeout.ms"):
                    continue  # the rest of a client properties file: not the data cluster's security
                raise ConfigError(f"{source} {name}: the coordinator takes the data cluster's client security "
                                  f"settings here ({', '.join(KEYS)}); set its other keys with --override")
            if canonical in given and given[canonical] != name:
                raise ConfigError(f"{canonical}: given twice in {source}, as {given[canonical]} and as {name} "
                                  "(two names of one setting); keep one")
            given[canonical] = name
            out[config_mod.DATA_CLUSTER_PREFIX + canonical] = value
    return out


def run_cli(args) -> int:
    """Entry point of ``spark-coord coordinator --config FILE --override k=v -X k=v --command-config FILE``."""
    cfg = config_mod.load(config_mod.COORDINATOR, args.config, args.override)
    data = data_cluster_overrides(getattr(args, "command_config", None), getattr(args, "client_option", None))
    if data:
        cfg = cfg.with_overrides(data)
    data_cluster_security(cfg)  # a bad setting stops here, naming its key
    return asyncio.run(serve(cfg))


__all__ = ["StandaloneCoordinator", "MetadataView", "OffsetMirror", "DataBroker", "COORDINATOR_IDS", "run_cli",
           "coordinator_path", "data_cluster_security", "data_cluster_overrides", "describe_data_error"]
