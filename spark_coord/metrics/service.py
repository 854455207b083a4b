"""The metrics endpoint of one process (a broker or a standalone coordinator), from its settings.

Off unless ``metrics.port`` is set.  Then the process gets a ``MetricsEndpoint``:

* ``registry``: a prometheus_client ``CollectorRegistry`` of its own (brokers that share a
  Python process in tests do not mix), with the process, platform and GC collectors;
* ``coordinator``: the coordinator's observer (``PrometheusCoordinatorMetrics``), handed to
  its ``Coordinator`` when it is made;
* ``broker``: the broker's request/byte/connection counters (brokers only);
* once ``start``\\ ed: the lag tracker, the collectors that read state at scrape time, and
  the HTTP server on ``metrics.host:metrics.port`` (``metrics.ssl.*``: HTTPS, optionally
  requiring client certificates).

``stop()`` blocks (the HTTP server's poll, the sampler's last round): call it off the event
loop (``run_in_executor``), since the sampler may be waiting for the loop.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import re
import ssl
from typing import Any, Callable, Iterable

from prometheus_client import CollectorRegistry, disable_created_metrics, make_wsgi_app
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from spark_coord.config import Config, ConfigError
from spark_coord.coordinator.core.metrics import PrometheusCoordinatorMetrics
from spark_coord.coordinator.doors.share_admin import read_states_blocking
from spark_coord.metrics.broker import PrometheusBrokerMetrics
from spark_coord.metrics.exporter import BrokerCollector, GroupCollector, ShareCollector, ZooKeeperCollector
from spark_coord.metrics.http import MetricsHttpServer
from spark_coord.metrics.lag import (
    ClusterSnapshot,
    LagTracker,
    LogEnds,
    ShareStates,
    Unavailable,
    broker_snapshot,
    inter_broker_security,
    on_loop,
    standalone_snapshot,
)
from spark_coord.metrics.status import CONTENT_SECURITY_POLICY, status_document, status_page

log = logging.getLogger(__name__)

# Counters' and histograms' *_created series (their creation times) say nothing to an operator and
# double the lines of a scrape; prometheus_client leaves them out for the whole process from here on.
disable_created_metrics()

def metrics_ssl_context(cfg: Config) -> ssl.SSLContext | None:
    """The endpoint's TLS context from ``metrics.ssl.*`` (None: plain HTTP).  Errors name the
    ``metrics.ssl.*`` key."""
    if not cfg.get("metrics.ssl.keystore.location"):
        for key in ("metrics.ssl.truststore.location", "metrics.ssl.key.password"):
            if cfg.get(key):
                raise ConfigError(f"{key}: needs metrics.ssl.keystore.location (the endpoint's key and certificate)")
        if str(cfg.get("metrics.ssl.client.auth") or "none").lower() != "none":
            raise ConfigError("metrics.ssl.client.auth: needs metrics.ssl.keystore.location (HTTPS)")
        return None
    from spark_coord.security.tls import server_context

    defaults = {"ssl.keystore.type": "PEM", "ssl.truststore.type": "PEM", "ssl.enabled.protocols": "TLSv1.2,TLSv1.3"}
    try:
        return server_context(lambda key: cfg.get("metrics." + key) or defaults.get(key))
    except ConfigError as e:
        raise ConfigError(re.sub(r"(?<![\w.])ssl\.", "metrics.ssl.", str(e))) from None


class MetricsEndpoint:
    """One process's registry, observers and (once started) endpoint."""

    def __init__(self, cfg: Config, process: str):
        self.process = process
        self.host: str = cfg["metrics.host"]
        self.port: int = cfg["metrics.port"]
        self.history_ms: int = cfg["metrics.lag.history.ms"]
        self.sample_ms: int = cfg["metrics.lag.sample.ms"]
        self.ssl_context = metrics_ssl_context(cfg)
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.coordinator = PrometheusCoordinatorMetrics(self.registry)
        self.broker = PrometheusBrokerMetrics(self.registry)
        self.tracker: LagTracker | None = None
        self.server: MetricsHttpServer | None = None
        self._zk = None

    @classmethod
    def from_config(cls, cfg: Config, process: str) -> "MetricsEndpoint | None":
        """The endpoint when ``metrics.port`` is set, else None (no metrics: nothing is counted)."""
        if cfg.get("metrics.port") is None:
            return None
        return cls(cfg, process)

    @property
    def bound_port(self) -> int | None:
        return self.server.port if self.server is not None else None

    @property
    def url(self) -> str | None:
        if self.server is None:
            return None
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        host = f"[{host}]" if ":" in host else host
        return f"{self.server.scheme}://{host}:{self.server.port}"

    def start(self, snapshot: Callable[[], ClusterSnapshot], log_ends: LogEnds,
              collectors: Callable[[LagTracker], Iterable[Any]] = lambda tracker: (),
              share_states: ShareStates | None = None) -> int:
        """Register the scrape-time collectors (the groups', and ``collectors(tracker)``), start the
        lag history and listen; returns the port.  ``share_states(group)``: a share group's stored
        state (blocking; read by the sampler for its lag)."""
        self.tracker = LagTracker(snapshot, log_ends, self.history_ms, self.sample_ms, share_states)
        self.registry.register(GroupCollector(self.tracker))
        for c in collectors(self.tracker):
            self.registry.register(c)
        self.server = MetricsHttpServer(self.host, self.port, self.wsgi_app(), self.ssl_context)
        port = self.server.start()
        self.tracker.start()
        log.info("%s: metrics at %s/metrics, status page at %s/", self.process, self.url, self.url)
        return port

    def start_for_broker(self, broker: Any, loop: asyncio.AbstractEventLoop) -> int:
        """Serve a started ``Broker``: its logs, its cluster view, its coordinator when elected; other
        brokers' log ends read on the inter-broker listener with the broker's credentials for it."""
        security, local_only = inter_broker_security(broker)
        if local_only is not None:
            log.warning("%s: lag is computed for the partitions this broker leads only (%s)", self.process,
                        local_only)

        def log_end(tp: tuple[str, int]) -> int | None:
            plog = broker.logs.get(*tp) if broker.logs is not None else None
            return plog.log_end_offset if plog is not None else None

        port = self.start(lambda: on_loop(loop, lambda: broker_snapshot(broker)),
                          LogEnds(local=log_end, local_id=broker.broker_id, local_only=local_only,
                                  security=security),
                          lambda tracker: [BrokerCollector(broker, tracker), ShareCollector(broker, loop),
                                           ZooKeeperCollector(broker)],
                          share_states=lambda group: read_states_blocking(broker.zk, group))
        self._watch_zk(broker.zk)
        return port

    def start_for_standalone(self, process: Any, loop: asyncio.AbstractEventLoop) -> int:
        """Serve a started standalone coordinator: its groups, with the data cluster's log ends."""
        port = self.start(lambda: on_loop(loop, lambda: standalone_snapshot(process)),
                          LogEnds(security=getattr(process, "data_security", None)),
                          lambda tracker: [ZooKeeperCollector(process)],
                          share_states=lambda group: read_states_blocking(process.zk, group))
        self._watch_zk(process.zk)
        return port

    def _watch_zk(self, zk: Any) -> None:
        self._zk = zk
        zk.add_listener(self.broker.zk_state_changed)

    def stop(self) -> None:
        """Stop serving and sampling (blocking: call it off the event loop)."""
        if self._zk is not None:
            self._zk.remove_listener(self.broker.zk_state_changed)
            self._zk = None
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.tracker is not None:
            self.tracker.stop()

    # ------------------------------------------------------------------ HTTP
    def status(self) -> dict[str, Any]:
        sample, error = None, None
        if self.tracker is not None:
            try:
                sample = self.tracker.current()
            except Unavailable as e:
                error = f"no data: {e}"
        history = self.tracker.history() if self.tracker is not None else {}
        return status_document(self.process, sample, history, self.history_ms, error)

    def wsgi_app(self) -> Callable[..., Any]:
        metrics_app = make_wsgi_app(self.registry, disable_compression=True)
        common = [("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff")]

        def metrics(environ: dict, start_response: Callable[..., Any]) -> list[bytes]:
            # Prometheus' text format whatever the scraper prefers: prometheus_client writes OpenMetrics at
            # half the speed (it checks label names character by character), and Prometheus reads both.
            # gzip at level 1 when accepted (prometheus_client's level 9 costs 4 times the CPU for 10% less).
            environ = {k: v for k, v in environ.items() if k != "HTTP_ACCEPT"}
            answer: list = []
            body = b"".join(metrics_app(environ, lambda status, headers: answer.extend((status, headers))))
            status, headers = answer
            if status.startswith("200") and "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
                body = gzip.compress(body, compresslevel=1)
                headers = list(headers) + [("Content-Encoding", "gzip")]
            start_response(status, [(k, v) for k, v in headers if k.lower() != "content-length"]
                           + [("Content-Length", str(len(body)))])
            return [body]

        def app(environ: dict, start_response: Callable[..., Any]) -> list[bytes]:
            path = environ.get("PATH_INFO") or "/"
            method = environ.get("REQUEST_METHOD", "GET")
            if path == "/metrics":
                return metrics(environ, start_response)
            if path not in ("/", "/status.json"):
                start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")] + common)
                return [b"not found: this endpoint serves /metrics, / and /status.json\n"]
            if method not in ("GET", "HEAD"):
                start_response("405 Method Not Allowed", [("Allow", "GET, HEAD"),
                                                          ("Content-Type", "text/plain; charset=utf-8")] + common)
                return [b"method not allowed\n"]
            doc = self.status()
            if path == "/status.json":
                body = json.dumps(doc, separators=(",", ":")).encode()
                headers = [("Content-Type", "application/json")]
            else:
                body = status_page(doc)
                headers = [("Content-Type", "text/html; charset=utf-8"),
                           ("Content-Security-Policy", CONTENT_SECURITY_POLICY)]
            start_response("200 OK", headers + [("Content-Length", str(len(body)))] + common)
            return [b"" if method == "HEAD" else body]

        return app
