"""Coordinator discovery (seeds 001 onStartup step 2, 003 section 7 consumerStartup 1-3).

Round-robin over the known brokers and the bootstrap list: connect, send
ClusterMetadata v1 naming the member's group (its coordinator is the holder of the
group's coordinator shard), and accept the first answer that names a coordinator we can
reach.  A broker that cannot be connected, answers an error, or knows no
coordinator yet is skipped; the caller retries with backoff until it is closed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from spark_coord.consumer.channel import ChannelClosed, CoordinatorChannel
from spark_coord.errors import ErrorCode
from spark_coord.wire import coordinator as api
from spark_coord.wire.types import ProtocolError

log = logging.getLogger(__name__)

__all__ = ["ClusterView", "Discovery"]


@dataclass
class ClusterView:
    """What one ClusterMetadata answer said: the coordinator and the live brokers."""

    coordinator_id: int
    coordinator_epoch: int
    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)

    @property
    def coordinator_address(self) -> tuple[str, int] | None:
        return self.brokers.get(self.coordinator_id)


class Discovery:
    """Round-robin ClusterMetadata over the brokers we know, then the bootstrap list."""

    def __init__(self, bootstrap: list[tuple[str, int]], client_id: str | None, timeout: float, security=None,
                 group_id: str | None = None):
        """``group_id``: the member's group; the coordinator found is the one of its shard (None:
        shard 0's)."""
        if not bootstrap:
            raise ValueError("no bootstrap brokers given")
        self.bootstrap = list(bootstrap)
        self.client_id = client_id
        self.timeout = timeout
        self.security = security  # a security.client.ClientSecurity (None: PLAINTEXT)
        self.group_id = group_id
        self.known: list[tuple[str, int]] = []
        self._next = 0

    def _candidates(self) -> list[tuple[str, int]]:
        seen: list[tuple[str, int]] = []
        for addr in self.known + self.bootstrap:
            if addr not in seen:
                seen.append(addr)
        return seen

    def one_round(self) -> ClusterView | None:
        """Ask each candidate once, starting where the previous round stopped; None if none knew."""
        candidates = self._candidates()
        for i in range(len(candidates)):
            host, port = candidates[(self._next + i) % len(candidates)]
            view = self._ask(host, port)
            if view is not None:
                self._next = (self._next + i + 1) % len(candidates)
                self.known = sorted(set(view.brokers.values()))
                return view
        self._next = (self._next + 1) % max(1, len(candidates))
        return None

    def _ask(self, host: str, port: int) -> ClusterView | None:
        try:
            channel = CoordinatorChannel(host, port, self.client_id, self.timeout, security=self.security)
        except ChannelClosed as e:
            log.info("discovery: %s", e)
            return None
        try:
            resp = channel.request(api.CLUSTER_METADATA, {"group_id": self.group_id}, version=api.METADATA_VERSION)
        except (ChannelClosed, ProtocolError) as e:
            log.info("discovery: ClusterMetadata from %s:%d failed: %s", host, port, e)
            return None
        finally:
            channel.close()
        if resp["error_code"]:
            log.info("discovery: %s:%d answered %s", host, port, ErrorCode.name_of(resp["error_code"]))
            return None
        brokers = {b["node_id"]: (b["host"], b["port"]) for b in resp["brokers"]
                   if b["host"] and 0 < b["port"] < 65536}
        view = ClusterView(resp["coordinator_id"], resp["coordinator_epoch"], brokers)
        if view.coordinator_id < 0 or view.coordinator_address is None:
            log.info("discovery: %s:%d knows no reachable coordinator (id %d)", host, port, view.coordinator_id)
            return None
        return view
