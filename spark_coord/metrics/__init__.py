"""Observability: a Prometheus endpoint and a status page on every broker and standalone coordinator.

Off by default; ``metrics.port`` (and ``metrics.host``, 127.0.0.1 by default) turns it on
(``conf/broker.properties``, ``conf/coordinator.properties``).  One HTTP endpoint serves:

* ``/metrics`` -- Prometheus' text format (prometheus_client): consumer-group lag with
  kafka_exporter's names and labels (exported by the elected coordinator only, so a sum
  over the cluster counts each group once), the coordinator's own metrics, and on brokers
  request, byte, connection, authentication and log metrics named as the JMX exporter
  names Kafka's;
* ``/`` -- a status page: groups, members and their protocols, each partition's owner,
  committed offset, log end and lag, and each group's total lag over the last minutes;
* ``/status.json`` -- the page's data.

Modules: ``broker`` (the broker's counters), ``lag`` (snapshots taken on the event loop,
log ends, lag and its history), ``exporter`` (collectors that read state at scrape time),
``status`` (the page), ``http`` (the server), ``service`` (all of it for one process).
The coordinator's observer and its no-op default are ``spark_coord.coordinator.core.metrics``,
beside what it observes: this package sits above the coordinator and the client (it reads
their state and asks brokers for log ends) and below the servers that run it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.metrics.service import MetricsEndpoint


def metrics_endpoint(config: Any, process: str) -> "MetricsEndpoint | None":
    """The metrics endpoint of a process (``process``: how its pages name it), or None when
    ``metrics.port`` is not set: then nothing is counted and prometheus_client is not imported."""
    if config.get("metrics.port") is None:
        return None
    from spark_coord.metrics.service import MetricsEndpoint

    return MetricsEndpoint(config, process)
