"""What a broker reports: requests, errors, latency, bytes, connections, authentication, logs,
and its ZooKeeper session.

Names: where Kafka has a metric of the same meaning, the name is what the Prometheus JMX
exporter's example configuration for Kafka (``kafka-2_0_0.yml``, lower-cased names) makes of
Kafka's own MBean, so dashboards built on it read ours too (each name, then the MBean):

- ``kafka_network_requestmetrics_requests_total{request,version}``:
  ``kafka.network:type=RequestMetrics,name=RequestsPerSec``
- ``kafka_network_requestmetrics_errors_total{request,error}``:
  ``...,name=ErrorsPerSec`` (every error code of an answer, NONE too)
- ``kafka_server_brokertopicmetrics_bytesin_total{topic}``:
  ``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec``
- ``kafka_server_brokertopicmetrics_bytesout_total{topic}``: ``...,name=BytesOutPerSec``
- ``kafka_server_brokertopicmetrics_messagesin_total{topic}``: ``...,name=MessagesInPerSec``
- ``kafka_server_socket_server_metrics_connection_count{listener}``:
  ``kafka.server:type=socket-server-metrics``
- ``kafka_server_socket_server_metrics_connection_creation_total``: ``connection-creation-total``
- ``kafka_server_socket_server_metrics_failed_authentication_total``:
  ``failed-authentication-total`` (and ``successful_``)
- ``kafka_log_log_size{topic,partition}``: ``kafka.log:type=Log,name=Size``
- ``kafka_server_sessionexpirelistener_zookeeper{disconnects,expires}_total``:
  ``...ZooKeeperDisconnectsPerSec``

Where Kafka's metric has another shape (its request time is a percentile gauge) the name
is our own: ``spark_coord_broker_request_duration_seconds{request}`` is a histogram of the
time a handler took (a Fetch's long-poll wait included; an answer a handler writes later,
CommitOffsets, counts until it handed the request on), ``spark_coord_zookeeper_session_state
{state}`` is 1 for the session's current state.

The hot path (``request``) runs on the event loop for every request: instrument children are
looked up once per (API, version) and kept, so a request costs a dict look-up, two locked
additions and one histogram observation.  ``NO_BROKER_METRICS`` does nothing at all.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Iterable

from spark_coord.errors import ErrorCode
from spark_coord.records.region import FileRegion

if TYPE_CHECKING:  # pragma: no cover
    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)

#: Seconds; a Fetch long-polls up to its max_wait_ms, a JoinGroup waits for its rebalance.
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: ZooKeeper session states (kazoo's), in the order a dashboard lists them.
ZK_STATES = ("CONNECTED", "SUSPENDED", "LOST")

_ERROR_NAMES: dict[int, str] = {}


def error_name(code: int) -> str:
    name = _ERROR_NAMES.get(code)
    if name is None:
        name = _ERROR_NAMES[code] = ErrorCode.name_of(code)
    return name


def error_counts(body: Any, depth: int = 3) -> dict[int, int]:
    """How often each error code appears in an answer: its own ``error_code`` and those of the
    entries of its lists (topics, their partitions), ``depth`` levels down (Kafka's errorCounts)."""
    counts: dict[int, int] = {}

    def visit(obj: dict, level: int) -> None:
        code = obj.get("error_code")
        if code is not None and isinstance(code, int):  # an int or an ErrorCode
            code = int(code)
            counts[code] = counts.get(code, 0) + 1
        if level == 0:
            return
        for value in obj.values():
            if type(value) is list:
                for item in value:
                    if type(item) is dict:
                        visit(item, level - 1)

    if type(body) is dict:
        visit(body, depth)
    return counts


class BrokerMetrics:
    """The broker's observer; this base class does nothing (``NO_BROKER_METRICS``)."""

    enabled = False

    def connection_opened(self, listener: str) -> None:
        """A client connected on ``listener``."""

    def connection_closed(self, listener: str) -> None:
        """A connection on ``listener`` ended."""

    def request(self, name: str, version: int, seconds: float, response: Any) -> None:
        """A request of API ``name`` was handled in ``seconds``; ``response`` is the answer (None: none)."""

    def authentication(self, listener: str, ok: bool) -> None:
        """A SASL authentication on ``listener`` completed (``ok``) or failed."""

    def appended(self, topic: str, size: int, records: int) -> None:
        """``records`` records, ``size`` bytes, were appended to a partition of ``topic``."""

    def fetched(self, responses: Iterable[dict]) -> None:
        """A Fetch answer goes out with these topic responses."""


NO_BROKER_METRICS = BrokerMetrics()


class PrometheusBrokerMetrics(BrokerMetrics):
    """The broker's counters, gauges and histograms, in ``registry``."""

    enabled = True

    def __init__(self, registry: "CollectorRegistry"):
        from prometheus_client import Counter, Gauge, Histogram

        self.requests = Counter("kafka_network_requestmetrics_requests", "Requests handled, by API and version.",
                                ["request", "version"], registry=registry)
        self.errors = Counter("kafka_network_requestmetrics_errors",
                              "Error codes in answers, by API and error (NONE included), as Kafka counts them.",
                              ["request", "error"], registry=registry)
        self.latency = Histogram("spark_coord_broker_request_duration_seconds",
                                 "Time a request's handler took, by API (a Fetch's long poll included).",
                                 ["request"], buckets=REQUEST_BUCKETS, registry=registry)
        self.bytes_in = Counter("kafka_server_brokertopicmetrics_bytesin", "Record batch bytes appended, by topic.",
                                ["topic"], registry=registry)
        self.messages_in = Counter("kafka_server_brokertopicmetrics_messagesin", "Records appended, by topic.",
                                   ["topic"], registry=registry)
        self.bytes_out = Counter("kafka_server_brokertopicmetrics_bytesout",
                                 "Record bytes sent in Fetch answers, by topic.", ["topic"], registry=registry)
        self.connections = Gauge("kafka_server_socket_server_metrics_connection_count",
                                 "Open connections, by listener.", ["listener"], registry=registry)
        self.connections_created = Counter("kafka_server_socket_server_metrics_connection_creation",
                                           "Connections accepted, by listener.", ["listener"], registry=registry)
        self.auth_failed = Counter("kafka_server_socket_server_metrics_failed_authentication",
                                   "SASL authentications that failed, by listener.", ["listener"], registry=registry)
        self.auth_ok = Counter("kafka_server_socket_server_metrics_successful_authentication",
                               "SASL authentications that succeeded, by listener.", ["listener"], registry=registry)
        self.zk_disconnects = Counter("kafka_server_sessionexpirelistener_zookeeperdisconnects",
                                      "Times the ZooKeeper connection was lost (kazoo SUSPENDED).", registry=registry)
        self.zk_expires = Counter("kafka_server_sessionexpirelistener_zookeeperexpires",
                                  "Times the ZooKeeper session expired (kazoo LOST).", registry=registry)
        # children looked up once: the loop thread's own caches (plain dicts, only it writes them)
        self._per_api: dict[tuple[str, int], tuple[Any, Any]] = {}
        self._per_error: dict[tuple[str, int], Any] = {}
        self._per_topic: dict[str, tuple[Any, Any, Any]] = {}

    # ------------------------------------------------------------------ connections
    def connection_opened(self, listener: str) -> None:
        self.connections.labels(listener).inc()
        self.connections_created.labels(listener).inc()

    def connection_closed(self, listener: str) -> None:
        self.connections.labels(listener).dec()

    def authentication(self, listener: str, ok: bool) -> None:
        (self.auth_ok if ok else self.auth_failed).labels(listener).inc()

    # ------------------------------------------------------------------ requests
    def request(self, name: str, version: int, seconds: float, response: Any) -> None:
        children = self._per_api.get((name, version))
        if children is None:
            children = self._per_api[(name, version)] = (self.requests.labels(name, str(version)),
                                                         self.latency.labels(name))
        children[0].inc()
        children[1].observe(seconds)
        if response is None:
            return
        for code, n in error_counts(response).items():
            child = self._per_error.get((name, code))
            if child is None:
                child = self._per_error[(name, code)] = self.errors.labels(name, error_name(code))
            child.inc(n)

    # ------------------------------------------------------------------ bytes
    def _topic(self, topic: str) -> tuple[Any, Any, Any]:
        children = self._per_topic.get(topic)
        if children is None:
            children = self._per_topic[topic] = (self.bytes_in.labels(topic), self.messages_in.labels(topic),
                                                 self.bytes_out.labels(topic))
        return children

    def appended(self, topic: str, size: int, records: int) -> None:
        bytes_in, messages_in, _ = self._topic(topic)
        bytes_in.inc(size)
        messages_in.inc(records)

    def fetched(self, responses: Iterable[dict]) -> None:
        for t in responses:
            size = 0
            for p in t.get("partitions") or ():
                records = p.get("records")
                if isinstance(records, FileRegion):
                    size += records.length
                elif records:
                    size += len(records)
            if size:
                self._topic(t.get("topic") or "")[2].inc(size)

    # ------------------------------------------------------------------ ZooKeeper
    def zk_state_changed(self, state: str) -> None:
        """kazoo's connection listener (its own thread; the counters lock themselves)."""
        if state == "SUSPENDED":
            self.zk_disconnects.inc()
        elif state == "LOST":
            self.zk_expires.inc()
