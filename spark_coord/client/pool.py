"""Clients kept between uses in one process, per cluster and security settings, closed when idle.

Spark runs the tasks of a query one after another in the same Python worker
processes; without this each task would connect to its brokers again, and over
TLS/SASL pay the handshake and the log-in again (Spark caches its Kafka consumers
and producers for the same reason).  ``lease(...)`` hands out a ``ClusterClient``
(its broker connections, metadata and, for a sink, its idempotent producer's id) for
one task and takes it back afterwards; the next task with the same settings gets it
again, already connected.  A client is never shared by two users at once: a second
concurrent lease gets a client of its own.  After a failure the user calls
``lease.discard()``: the client is closed rather than kept (its byte streams or
producer sequences may be in an unknown state).

A kept client that stays unused for ``idle_ms`` (Kafka's ``connections.max.idle.ms``,
540000 by default) is closed by a daemon thread; ``idle_ms=0`` keeps nothing (every
lease connects anew).  ``close_all()`` empties the pool.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spark_coord.client.metadata import ClusterClient, parse_bootstrap

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.security.client import ClientSecurity

log = logging.getLogger(__name__)

#: Kafka's connections.max.idle.ms default.
DEFAULT_IDLE_MS = 540_000


@dataclass
class _Kept:
    cluster: ClusterClient
    idle_ms: int
    since: float = field(default_factory=time.monotonic)
    #: what users keep with the client between leases (a sink's producer id and sequences)
    state: dict = field(default_factory=dict)


class Lease:
    """One use of a pooled ``ClusterClient``: ``with lease(...) as lease: lease.cluster ...``."""

    def __init__(self, pool: "ClientPool", key: tuple, kept: _Kept) -> None:
        self._pool = pool
        self._key = key
        self._kept = kept
        self._discard = False

    @property
    def cluster(self) -> ClusterClient:
        return self._kept.cluster

    @property
    def state(self) -> dict:
        """A dict kept with the client from one lease to the next (empty for a new client)."""
        return self._kept.state

    @property
    def reused(self) -> bool:
        """Whether the client was kept from an earlier lease."""
        return bool(self._kept.state.get("_leases", 0) > 1)

    def discard(self) -> None:
        """Close the client at the end of the lease instead of keeping it."""
        self._discard = True

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._pool._give_back(self._key, self._kept, self._discard or exc_type is not None)


class ClientPool:
    """Idle ``ClusterClient``s by settings; see the module docstring."""

    def __init__(self, sweep_s: float = 10.0) -> None:
        self._idle: dict[tuple, list[_Kept]] = {}
        self._lock = threading.Lock()
        self._sweep_s = sweep_s
        self._sweeper: threading.Thread | None = None
        self.created = 0
        self.reused = 0

    def lease(self, bootstrap: str, client_id: str, timeout: float, security: "ClientSecurity | None" = None,
              idle_ms: int = DEFAULT_IDLE_MS) -> Lease:
        key = (tuple(parse_bootstrap(bootstrap)), client_id, float(timeout), security)
        kept = None
        with self._lock:
            idle = self._idle.get(key)
            while idle and kept is None:
                candidate = idle.pop()
                if time.monotonic() - candidate.since < candidate.idle_ms / 1000:
                    kept = candidate
                else:
                    _close(candidate)
        if kept is None:
            kept = _Kept(ClusterClient(bootstrap, client_id=client_id, timeout=timeout, security=security), idle_ms)
            self.created += 1
        else:
            kept.idle_ms = idle_ms
            self.reused += 1
        kept.state["_leases"] = kept.state.get("_leases", 0) + 1
        return Lease(self, key, kept)

    def _give_back(self, key: tuple, kept: _Kept, discard: bool) -> None:
        if discard or kept.idle_ms <= 0:
            _close(kept)
            return
        kept.since = time.monotonic()
        with self._lock:
            self._idle.setdefault(key, []).append(kept)
            if self._sweeper is None or not self._sweeper.is_alive():
                self._sweeper = threading.Thread(target=self._sweep, name="coordkafka-idle-clients", daemon=True)
                self._sweeper.start()

    def _sweep(self) -> None:
        """Close clients idle for longer than their ``idle_ms``; end when none is left."""
        while True:
            time.sleep(self._sweep_s)
            now = time.monotonic()
            with self._lock:
                expired = []
                for key, idle in list(self._idle.items()):
                    keep = [k for k in idle if now - k.since < k.idle_ms / 1000]
                    expired += [k for k in idle if k not in keep]
                    if keep:
                        self._idle[key] = keep
                    else:
                        del self._idle[key]
                left = bool(self._idle)
                if not left:
                    self._sweeper = None
            for kept in expired:
                log.debug("closing a client idle for %.0f s", now - kept.since)
                _close(kept)
            if not left:
                return

    def idle_count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._idle.values())

    def close_all(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for kept in (k for v in idle.values() for k in v):
            _close(kept)


def _close(kept: _Kept) -> None:
    try:
        kept.cluster.close()
    except Exception as e:  # noqa: BLE001 -- closing is best effort
        log.debug("closing a pooled client: %s", e)


#: The process's pool (Spark's Python workers: one per worker process).
POOL = ClientPool()


def lease(bootstrap: str, client_id: str, timeout: float, security: Any = None, idle_ms: int = DEFAULT_IDLE_MS
          ) -> Lease:
    """A lease of the process's pool (``POOL.lease``)."""
    return POOL.lease(bootstrap, client_id, timeout, security, idle_ms)
