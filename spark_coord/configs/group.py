"""Group configs (the GROUP config resource, KIP-848 and KIP-932): Kafka 4.2's ``GroupConfig``.

A group may set, for itself, values the broker otherwise gives every group::

    consumer.session.timeout.ms     int >= 1     default: broker's group.consumer.session.timeout.ms
    consumer.heartbeat.interval.ms  int >= 1     default: broker's group.consumer.heartbeat.interval.ms
    share.session.timeout.ms        int >= 1     default: broker's group.share.session.timeout.ms
    share.heartbeat.interval.ms     int >= 1     default: broker's group.share.heartbeat.interval.ms
    share.record.lock.duration.ms   int >= 1000  default: broker's group.share.record.lock.duration.ms
    share.delivery.count.limit      int >= 2     default: broker's group.share.delivery.count.limit
    share.partition.max.record.locks int >= 100  default: broker's group.share.partition.max.record.locks
    share.auto.offset.reset         latest (default) | earliest | by_duration:<ISO-8601 duration>
    share.isolation.level           read_uncommitted (default) | read_committed

Validation is Kafka's (``GroupConfig.validate``): a name not in this table is
refused ("Unknown group config name: x"), a value must parse and pass its own
check, the time settings must lie within the broker's bounds
(``group.share.min/max.session.timeout.ms`` ... ``group.consumer.min/max.*``; the
delivery count limit within 2-10 and the record locks within 100-10000, Kafka's
ranges), and a session timeout must exceed its heartbeat interval.  Every failure
is an ``InvalidConfig`` naming the key and the reason (INVALID_CONFIG on the wire).
Bounds are checked for the values a group sets; the broker's own defaults are
the broker's business.  A value stored before the broker's bounds were narrowed
is capped to them when resolved, with a warning (Kafka 4.2's ``GroupConfig.evaluate``).

Not served: Kafka's ``share.renew.acknowledge.enable`` and the ``streams.*`` group
configs (no renew acknowledgements, no streams groups here); they are unknown names.

``GroupConfigModel`` holds the broker's defaults and bounds; ``resolve(overrides)``
gives the frozen ``GroupConfig`` the group and share code read, ``describe`` the
``ConfigEntry`` list of DescribeConfigs: a value the group set has source
GROUP_CONFIG, any other DEFAULT_CONFIG with the broker's value (what Kafka reports).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from spark_coord.configs.durations import BY_DURATION_PREFIX, parse_by_duration
from spark_coord.configs.model import (
    ConfigDef,
    ConfigEntry,
    ConfigSource,
    ConfigType,
    InvalidConfig,
    Synonym,
    at_least,
    one_of,
)

log = logging.getLogger(__name__)

CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"
SHARE_SESSION_TIMEOUT_MS = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL_MS = "share.heartbeat.interval.ms"
SHARE_RECORD_LOCK_DURATION_MS = "share.record.lock.duration.ms"
SHARE_DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
SHARE_PARTITION_MAX_RECORD_LOCKS = "share.partition.max.record.locks"
SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"
SHARE_ISOLATION_LEVEL = "share.isolation.level"

LATEST, EARLIEST = "latest", "earliest"
READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"


def _auto_offset_reset(value: str) -> str | None:
    """Kafka's ``ShareGroupAutoOffsetResetStrategy.Validator``."""
    if value in (LATEST, EARLIEST):
        return None
    if value.startswith(BY_DURATION_PREFIX):
        try:
            parse_by_duration(value)
            return None
        except ValueError:
            pass
    return ("The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>' "
            "(an ISO-8601 duration of zero or more, e.g. by_duration:PT1H)")


@dataclass(frozen=True)
class _GroupKey:
    """A group config: its definition, the broker key giving its default, and the broker's bounds."""

    definition: ConfigDef
    #: The broker setting whose value is the default (None: the definition's own default).
    broker_default: str | None = None
    #: (broker key, fallback value) of the smallest and largest value a group may set; the key
    #: is None where Kafka's range is fixed (the fallback then is the bound).
    lower: tuple[str | None, int] | None = None
    upper: tuple[str | None, int] | None = None


def _int(name: str, minimum: int, doc: str, broker_default: str, lower: tuple[str | None, int],
         upper: tuple[str | None, int], kafka_default: int) -> _GroupKey:
    """An int group config: Kafka's ``atLeast(minimum)``, its default the broker's ``broker_default``
    (``kafka_default`` when the broker has no such key), held to the broker's ``lower``/``upper`` bounds."""
    return _GroupKey(ConfigDef(name, ConfigType.INT, kafka_default, doc, at_least(minimum)), broker_default,
                     lower, upper)


#: Every group config, in Kafka's order.
GROUP_KEYS: dict[str, _GroupKey] = {k.definition.name: k for k in (
    _int(CONSUMER_SESSION_TIMEOUT_MS, 1,
         "The timeout to detect client failures when using the consumer group protocol.",
         "group.consumer.session.timeout.ms", ("group.consumer.min.session.timeout.ms", 45000),
         ("group.consumer.max.session.timeout.ms", 60000), 45000),
    _int(CONSUMER_HEARTBEAT_INTERVAL_MS, 1,
         "The heartbeat interval given to the members of a consumer group.",
         "group.consumer.heartbeat.interval.ms", ("group.consumer.min.heartbeat.interval.ms", 5000),
         ("group.consumer.max.heartbeat.interval.ms", 15000), 5000),
    _int(SHARE_SESSION_TIMEOUT_MS, 1,
         "The timeout to detect client failures when using the share group protocol.",
         "group.share.session.timeout.ms", ("group.share.min.session.timeout.ms", 45000),
         ("group.share.max.session.timeout.ms", 60000), 45000),
    _int(SHARE_HEARTBEAT_INTERVAL_MS, 1,
         "The heartbeat interval given to the members of a share group.",
         "group.share.heartbeat.interval.ms", ("group.share.min.heartbeat.interval.ms", 5000),
         ("group.share.max.heartbeat.interval.ms", 15000), 5000),
    _int(SHARE_RECORD_LOCK_DURATION_MS, 1000,
         "The record acquisition lock duration in milliseconds for share groups.",
         "group.share.record.lock.duration.ms", ("group.share.min.record.lock.duration.ms", 15000),
         ("group.share.max.record.lock.duration.ms", 60000), 30000),
    _int(SHARE_DELIVERY_COUNT_LIMIT, 2,
         "The maximum number of delivery attempts for a record delivered to a share group.",
         "group.share.delivery.count.limit", (None, 2), (None, 10), 5),
    _int(SHARE_PARTITION_MAX_RECORD_LOCKS, 100,
         "Share-group record lock limit per share-partition.",
         "group.share.partition.max.record.locks", (None, 100), (None, 10000), 2000),
    _GroupKey(ConfigDef(SHARE_AUTO_OFFSET_RESET, ConfigType.STRING, LATEST,
                        "The strategy to initialize the share-partition start offset: earliest (the earliest "
                        "offset), latest (the latest offset) or by_duration:<duration> (the first record at or "
                        "after now minus the duration, an ISO-8601 duration PnDTnHnMn.nS; negative durations "
                        "are not allowed).", _auto_offset_reset)),
    _GroupKey(ConfigDef(SHARE_ISOLATION_LEVEL, ConfigType.STRING, READ_UNCOMMITTED,
                        "Controls how to read records written transactionally. If set to \"read_committed\", the "
                        "share group will only deliver transactional records which have been committed. If set "
                        "to \"read_uncommitted\", the share group will return all messages, even transactional "
                        "messages which have been aborted. Non-transactional records will be returned "
                        "unconditionally in either mode.", one_of(READ_COMMITTED, READ_UNCOMMITTED))),
)}

#: (session timeout, heartbeat interval) pairs: the first must exceed the second.
_SESSION_OVER_HEARTBEAT = ((CONSUMER_SESSION_TIMEOUT_MS, CONSUMER_HEARTBEAT_INTERVAL_MS),
                           (SHARE_SESSION_TIMEOUT_MS, SHARE_HEARTBEAT_INTERVAL_MS))


def group_config_names() -> list[str]:
    return list(GROUP_KEYS)


@dataclass(frozen=True)
class GroupConfig:
    """One group's effective settings: its own values where it set them, the broker's otherwise.

    What the group and share-group code read (``ctx.group_configs.get(group_id)``)."""

    consumer_session_timeout_ms: int
    consumer_heartbeat_interval_ms: int
    share_session_timeout_ms: int
    share_heartbeat_interval_ms: int
    share_record_lock_duration_ms: int
    share_delivery_count_limit: int
    share_partition_max_record_locks: int
    #: "latest", "earliest" or "by_duration:<ISO-8601 duration>" (see ``share_auto_offset_reset_duration_ms``).
    share_auto_offset_reset: str
    #: "read_uncommitted" or "read_committed".
    share_isolation_level: str

    @property
    def share_auto_offset_reset_duration_ms(self) -> int | None:
        """The duration of a ``by_duration:`` reset in milliseconds, None for latest/earliest."""
        if self.share_auto_offset_reset.startswith(BY_DURATION_PREFIX):
            return parse_by_duration(self.share_auto_offset_reset)
        return None


_FIELDS = {name: name.replace(".", "_") for name in GROUP_KEYS}


class GroupConfigModel:
    """The group configs of one broker: defaults and bounds from its ``broker.properties``."""

    def __init__(self, broker_config: Mapping[str, Any]):
        self.broker_config = broker_config
        self.defaults: dict[str, Any] = {}
        self.bounds: dict[str, tuple[tuple[str | None, int] | None, tuple[str | None, int] | None]] = {}
        for name, key in GROUP_KEYS.items():
            default = key.definition.default
            if key.broker_default is not None:
                default = self._broker_value(key.broker_default, default)
            self.defaults[name] = default
            self.bounds[name] = (self._bound(key.lower), self._bound(key.upper))
        self.default_config = self._build(self.defaults)

    def _broker_value(self, key: str, fallback: Any) -> Any:
        try:
            value = self.broker_config[key]
        except KeyError:
            return fallback
        return fallback if value is None else value

    def _bound(self, spec: tuple[str | None, int] | None) -> tuple[str | None, int] | None:
        if spec is None:
            return None
        key, fallback = spec
        return (key, int(self._broker_value(key, fallback))) if key is not None else (None, fallback)

    # ------------------------------------------------------------------ validation
    def parse(self, overrides: Mapping[str, str]) -> dict[str, Any]:
        """The typed values of a group's settings; ``InvalidConfig`` for an unknown name or a bad value."""
        out = {}
        for name, text in overrides.items():
            key = GROUP_KEYS.get(name)
            if key is None:
                raise InvalidConfig(f"Unknown group config name: {name}")
            out[name] = key.definition.parse(text)
        return out

    def validate(self, overrides: Mapping[str, str]) -> dict[str, Any]:
        """Kafka's ``GroupConfig.validate`` of a group's complete set of settings; returns their typed
        values, raises ``InvalidConfig`` naming the key and the reason."""
        values = self.parse(overrides)
        for name, value in values.items():
            lower, upper = self.bounds[name]
            if lower is not None and value < lower[1]:
                raise InvalidConfig(f"{name} must be greater than or equal to "
                                    f"{self._bound_text(lower)}, got {value}")
            if upper is not None and value > upper[1]:
                raise InvalidConfig(f"{name} must be less than or equal to {self._bound_text(upper)}, got {value}")
        effective = {**self.defaults, **values}
        for session, heartbeat in _SESSION_OVER_HEARTBEAT:
            if (session in values or heartbeat in values) and effective[session] <= effective[heartbeat]:
                raise InvalidConfig(f"{session} must be greater than {heartbeat} "
                                    f"({effective[session]} <= {effective[heartbeat]})")
        return values

    @staticmethod
    def _bound_text(bound: tuple[str | None, int]) -> str:
        key, value = bound
        return f"{key} ({value})" if key else f"{value} (Kafka's range)"

    # ------------------------------------------------------------------ resolution
    def resolve(self, overrides: Mapping[str, str], group: str = "?") -> GroupConfig:
        """The effective ``GroupConfig`` of a group whose stored settings are ``overrides``.

        Never raises: a stored value that does not parse (written by another tool) is
        ignored with a warning, one outside the broker's current bounds is capped to them."""
        values: dict[str, Any] = {}
        for name, text in overrides.items():
            key = GROUP_KEYS.get(name)
            if key is None:
                log.warning("group %r: ignoring unknown group config %s in ZooKeeper", group, name)
                continue
            try:
                value = key.definition.parse(text)
            except InvalidConfig as e:
                log.warning("group %r: ignoring stored group config: %s", group, e)
                continue
            lower, upper = self.bounds[name]
            if lower is not None and value < lower[1]:
                log.warning("group %r: %s=%s is below the broker's minimum %s; using %d", group, name, value,
                            self._bound_text(lower), lower[1])
                value = lower[1]
            elif upper is not None and value > upper[1]:
                log.warning("group %r: %s=%s exceeds the broker's maximum %s; using %d", group, name, value,
                            self._bound_text(upper), upper[1])
                value = upper[1]
            values[name] = value
        return self._build({**self.defaults, **values})

    @staticmethod
    def _build(values: Mapping[str, Any]) -> GroupConfig:
        return GroupConfig(**{_FIELDS[name]: values[name] for name in GROUP_KEYS})

    # ------------------------------------------------------------------ DescribeConfigs
    def describe(self, overrides: Mapping[str, str], names: Iterable[str] | None = None) -> list[ConfigEntry]:
        """DescribeConfigs' entries of a group with stored settings ``overrides`` (``names``: only these)."""
        wanted = None if names is None else set(names)
        out = []
        for name, key in GROUP_KEYS.items():
            if wanted is not None and name not in wanted:
                continue
            d = key.definition
            value: str | None  # a default may be null
            if name in overrides:
                value, source = overrides[name], ConfigSource.GROUP_CONFIG
            else:
                value, source = d.render(self.defaults[name]), ConfigSource.DEFAULT_CONFIG
            out.append(ConfigEntry(name, value, source, d.type, d.doc, read_only=False, sensitive=d.sensitive,
                                   synonyms=(Synonym(name, value, source),)))
        return out
