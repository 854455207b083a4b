"""The coordinator's settings (seeds 003 section 4), read from the broker's config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from spark_coord.coordinator.core.assignors import get_assignor


def _get(cfg: Mapping[str, Any], key: str, default: Any) -> Any:
    """``cfg[key]``, or ``default`` when the key is unknown (a broker ``Config`` raises
    ``ConfigError``, a ValueError, for unknown keys rather than KeyError)."""
    try:
        value = cfg[key]
    except (KeyError, ValueError):
        return default
    return default if value is None else value


@dataclass(frozen=True)
class CoordinatorConfig:
    #: Rebalancer workers (coordinator.rebalance.threads).
    rebalance_threads: int = 3
    #: Smallest session timeout a member may register with (coordinator.min.session.timeout.ms).
    min_session_timeout_ms: int = 1000
    #: Consecutive unanswered pings tolerated; one more fails the member (coordinator.max.ping.retries).
    max_ping_retries: int = 1
    #: How often dirty offsets are written to the store (coordinator.offsets.commit.interval.ms).
    offsets_commit_interval_ms: int = 1000
    #: Wait between rebalance attempts (coordinator.rebalance.backoff.ms).
    rebalance_backoff_ms: int = 500
    #: Retries after a failed rebalance attempt before ConsumerRebalanceFailed (coordinator.rebalance.max.retries).
    rebalance_max_retries: int = 10
    #: sticky | range | roundrobin (coordinator.partition.assignment.strategy).
    assignment_strategy: str = "sticky"
    #: The broker's ZooKeeper session timeout (zookeeper.session.timeout.ms): the coordinator renews
    #: members' leases (pings them) only while ZooKeeper confirmed its election less than 2/3 of this
    #: ago.  0 turns the check off (unit tests of the core).
    leadership_timeout_ms: int = 0
    #: Session timeout and heartbeat interval of members of Kafka's consumer group protocol (KIP-848),
    #: set by the coordinator (group.consumer.session.timeout.ms, group.consumer.heartbeat.interval.ms).
    consumer_session_timeout_ms: int = 45000
    consumer_heartbeat_interval_ms: int = 5000
    #: Share groups (KIP-932): members' session timeout and heartbeat interval unless the group sets its
    #: own (group.share.session.timeout.ms, group.share.heartbeat.interval.ms), and the most members a
    #: share group takes (group.share.max.size).
    share_session_timeout_ms: int = 45000
    share_heartbeat_interval_ms: int = 5000
    share_max_size: int = 200
    #: How long the first rebalance of an empty classic group waits for more members (Kafka's
    #: group.initial.rebalance.delay.ms, ``doors.initial_join``).  Brokers read 3000 from their config;
    #: 0 here (no wait) for unit tests of the core, as ``leadership_timeout_ms``.
    initial_rebalance_delay_ms: int = 0

    def __post_init__(self) -> None:
        for name in ("rebalance_threads", "min_session_timeout_ms", "offsets_commit_interval_ms",
                     "consumer_session_timeout_ms", "consumer_heartbeat_interval_ms", "share_session_timeout_ms",
                     "share_heartbeat_interval_ms", "share_max_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"coordinator setting {name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_ping_retries", "rebalance_backoff_ms", "rebalance_max_retries", "leadership_timeout_ms",
                     "initial_rebalance_delay_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"coordinator setting {name} must be >= 0, got {getattr(self, name)}")
        get_assignor(self.assignment_strategy)

    @classmethod
    def from_broker_config(cls, cfg: Mapping[str, Any]) -> "CoordinatorConfig":
        """From a broker ``Config`` (or any mapping); missing keys take the defaults."""
        d = cls()
        return cls(
            rebalance_threads=int(_get(cfg, "coordinator.rebalance.threads", d.rebalance_threads)),
            min_session_timeout_ms=int(_get(cfg, "coordinator.min.session.timeout.ms", d.min_session_timeout_ms)),
            max_ping_retries=int(_get(cfg, "coordinator.max.ping.retries", d.max_ping_retries)),
            offsets_commit_interval_ms=int(_get(cfg, "coordinator.offsets.commit.interval.ms",
                                                   d.offsets_commit_interval_ms)),
            rebalance_backoff_ms=int(_get(cfg, "coordinator.rebalance.backoff.ms", d.rebalance_backoff_ms)),
            rebalance_max_retries=int(_get(cfg, "coordinator.rebalance.max.retries", d.rebalance_max_retries)),
            assignment_strategy=str(_get(cfg, "coordinator.partition.assignment.strategy", d.assignment_strategy)),
            leadership_timeout_ms=int(_get(cfg, "zookeeper.session.timeout.ms", d.leadership_timeout_ms)),
            consumer_session_timeout_ms=int(_get(cfg, "group.consumer.session.timeout.ms",
                                                 d.consumer_session_timeout_ms)),
            consumer_heartbeat_interval_ms=int(_get(cfg, "group.consumer.heartbeat.interval.ms",
                                                    d.consumer_heartbeat_interval_ms)),
            share_session_timeout_ms=int(_get(cfg, "group.share.session.timeout.ms", d.share_session_timeout_ms)),
            share_heartbeat_interval_ms=int(_get(cfg, "group.share.heartbeat.interval.ms",
                                                 d.share_heartbeat_interval_ms)),
            share_max_size=int(_get(cfg, "group.share.max.size", d.share_max_size)),
            initial_rebalance_delay_ms=int(_get(cfg, "group.initial.rebalance.delay.ms",
                                                d.initial_rebalance_delay_ms)),
        )
