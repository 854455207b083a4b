"""TOPIC configs: Kafka's per-topic settings, their validation, and the ``LogConfig`` they give a topic's logs.

A topic may set, for itself, values its logs otherwise take from the broker::

    topic config               type    range                       broker key (its default)
    cleanup.policy             LIST    delete, compact              log.cleanup.policy
    delete.retention.ms        LONG    >= 0                         log.cleaner.delete.retention.ms
    flush.messages             LONG    >= 1                         log.flush.interval.messages
    flush.ms                   LONG    >= 0                         log.flush.interval.ms
    index.interval.bytes       INT     >= 1                         log.index.interval.bytes
    max.compaction.lag.ms      LONG    >= 1                         log.cleaner.max.compaction.lag.ms
    max.message.bytes          INT     >= 0                         message.max.bytes
    message.timestamp.type     STRING  CreateTime, LogAppendTime    log.message.timestamp.type
    min.cleanable.dirty.ratio  DOUBLE  [0, 1]                       log.cleaner.min.cleanable.ratio
    min.compaction.lag.ms      LONG    >= 0                         log.cleaner.min.compaction.lag.ms
    retention.bytes            LONG    any (-1: no limit)           log.retention.bytes
    retention.ms               LONG    >= -1 (-1: no limit)         log.retention.ms
    segment.bytes              INT     >= 1024                      log.segment.bytes
    segment.ms                 LONG    >= 1                         log.roll.ms

Validation is Kafka's (``LogConfig.validate``): a name not in this table is refused
("Unknown topic config name: x"), a value must parse as its type and lie in its range,
and min.compaction.lag.ms may not exceed max.compaction.lag.ms; every failure is an
``InvalidConfig`` naming the key and the reason (INVALID_CONFIG on the wire).

``TopicConfigModel(broker_config)`` is built over the broker's effective settings
(``configs.broker.EffectiveBrokerConfig``: static file plus dynamic broker configs), so a
topic without an override follows the broker, dynamic changes included.
``resolve(overrides)`` gives the topic's ``LogConfig``; ``describe`` the DescribeConfigs
entries: a value the topic set has source DYNAMIC_TOPIC_CONFIG, any other the source of
the broker key it comes from, with that key's synonyms listed after the topic's own.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from spark_coord.configs.broker import broker_synonyms
from spark_coord.configs.model import (
    ConfigDef,
    ConfigEntry,
    ConfigSource,
    ConfigType,
    InvalidConfig,
    Synonym,
    at_least,
    between,
    render_value,
)
from spark_coord.log.config import COMPACT, CREATE_TIME, DELETE, LOG_APPEND_TIME, LogConfig

log = logging.getLogger(__name__)


def _policy(value: list[str]) -> str | None:
    if not value:
        return "Empty list is not allowed: use delete, compact or compact,delete"
    bad = [v for v in value if v not in (DELETE, COMPACT)]
    if bad:
        return f"Invalid value {bad[0]}: cleanup.policy takes delete, compact or both"
    return None


def _timestamp_type(value: str) -> str | None:
    return None if value in (CREATE_TIME, LOG_APPEND_TIME) else "String must be one of: CreateTime, LogAppendTime"


@dataclass(frozen=True)
class TopicKey:
    """A topic config: its definition, the broker key giving its default, and the ``LogConfig`` field it sets."""

    definition: ConfigDef
    broker_key: str
    field: str


def _key(name: str, type_: ConfigType, broker_key: str, field: str, doc: str, validator=None) -> TopicKey:
    return TopicKey(ConfigDef(name, type_, None, doc, validator), broker_key, field)


#: Every topic config served, in Kafka's (alphabetical) order.
TOPIC_KEYS: dict[str, TopicKey] = {k.definition.name: k for k in (
    _key("cleanup.policy", ConfigType.LIST, "log.cleanup.policy", "cleanup_policy",
         "A string that is either \"delete\" or \"compact\" or both. This string designates the retention "
         "policy to use on old log segments. The \"delete\" policy discards old segments when their retention "
         "time or size limit has been reached. The \"compact\" policy enables log compaction, which retains the "
         "latest value for each key.", _policy),
    _key("delete.retention.ms", ConfigType.LONG, "log.cleaner.delete.retention.ms", "delete_retention_ms",
         "The amount of time to retain tombstone markers (null values) for log compacted topics, counted from "
         "the tombstone's timestamp. Consumers reading from offset 0 must finish within this time to see them.",
         at_least(0)),
    _key("flush.messages", ConfigType.LONG, "log.flush.interval.messages", "flush_interval_messages",
         "Force an fsync of the log after this many records.", at_least(1)),
    _key("flush.ms", ConfigType.LONG, "log.flush.interval.ms", "flush_interval_ms",
         "Force an fsync of the log at least this often (milliseconds).", at_least(0)),
    _key("index.interval.bytes", ConfigType.INT, "log.index.interval.bytes", "index_interval_bytes",
         "How frequently Kafka adds an index entry to its offset index (bytes of log between entries).",
         at_least(1)),
    _key("max.compaction.lag.ms", ConfigType.LONG, "log.cleaner.max.compaction.lag.ms", "max_compaction_lag_ms",
         "The maximum time a message will remain ineligible for compaction in the log. Only applicable for "
         "logs that are being compacted.", at_least(1)),
    _key("max.message.bytes", ConfigType.INT, "message.max.bytes", "max_message_bytes",
         "The largest record batch size allowed by Kafka (after compression if compression is enabled); "
         "larger ones are refused with MESSAGE_TOO_LARGE.", at_least(0)),
    _key("message.timestamp.type", ConfigType.STRING, "log.message.timestamp.type", "message_timestamp_type",
         "Define whether the timestamp in the message is message create time or log append time. The value "
         "should be either CreateTime or LogAppendTime.", _timestamp_type),
    _key("min.cleanable.dirty.ratio", ConfigType.DOUBLE, "log.cleaner.min.cleanable.ratio",
         "min_cleanable_dirty_ratio",
         "This configuration controls how frequently the log compactor will attempt to clean the log. The "
         "cleaner cleans a log whose dirty bytes are at least this fraction of its closed segments.",
         between(0, 1)),
    _key("min.compaction.lag.ms", ConfigType.LONG, "log.cleaner.min.compaction.lag.ms", "min_compaction_lag_ms",
         "The minimum time a message will remain uncompacted in the log. Only applicable for logs that are "
         "being compacted.", at_least(0)),
    _key("retention.bytes", ConfigType.LONG, "log.retention.bytes", "retention_bytes",
         "The maximum size a partition can grow to before old log segments are discarded (\"delete\" retention "
         "policy); -1: no size limit."),
    _key("retention.ms", ConfigType.LONG, "log.retention.ms", "retention_ms",
         "The maximum time a log segment is retained before it is discarded (\"delete\" retention policy), "
         "counted from its newest record's timestamp; -1: no time limit.", at_least(-1)),
    _key("segment.bytes", ConfigType.INT, "log.segment.bytes", "segment_bytes",
         "The segment file size for the log. Retention and cleaning are always done a file at a time.",
         at_least(1024)),
    _key("segment.ms", ConfigType.LONG, "log.roll.ms", "segment_ms",
         "The period of time after which Kafka will force the log to roll even if the segment file isn't full, "
         "so that retention can delete or compact old data.", at_least(1)),
)}


def topic_config_names() -> list[str]:
    return list(TOPIC_KEYS)


class TopicConfigModel:
    """The topic configs of one broker: defaults from its effective settings."""

    def __init__(self, broker_config: Mapping[str, Any]):
        self.broker_config = broker_config
        self.default_log_config = LogConfig.from_broker_config(broker_config)

    # ------------------------------------------------------------------ validation
    @staticmethod
    def parse(overrides: Mapping[str, str]) -> dict[str, Any]:
        """Typed values of a topic's settings; ``InvalidConfig`` for an unknown name or a bad value."""
        out = {}
        for name, text in overrides.items():
            key = TOPIC_KEYS.get(name)
            if key is None:
                raise InvalidConfig(f"Unknown topic config name: {name}")
            out[name] = key.definition.parse(text)
        return out

    def _build(self, values: Mapping[str, Any]) -> LogConfig:
        fields = {}
        for name, value in values.items():
            key = TOPIC_KEYS[name]
            fields[key.field] = tuple(value) if isinstance(value, list) else value
        return dataclasses.replace(self.default_log_config, **fields)

    def validate(self, overrides: Mapping[str, str]) -> LogConfig:
        """Kafka's ``LogConfig.validate`` of a topic's complete set of settings; returns the topic's
        ``LogConfig``, raises ``InvalidConfig`` naming the key and the reason."""
        values = self.parse(overrides)
        try:
            cfg = self._build(values)
        except ValueError as e:  # a combination LogConfig refuses
            raise InvalidConfig(str(e)) from None
        if ("min.compaction.lag.ms" in values or "max.compaction.lag.ms" in values) \
                and cfg.min_compaction_lag_ms > cfg.max_compaction_lag_ms:
            raise InvalidConfig(f"conflict topic config setting min.compaction.lag.ms ({cfg.min_compaction_lag_ms}) "
                                f"> max.compaction.lag.ms ({cfg.max_compaction_lag_ms})")
        return cfg

    # ------------------------------------------------------------------ resolution
    def resolve(self, overrides: Mapping[str, str], topic: str = "?") -> LogConfig:
        """The ``LogConfig`` of a topic whose stored settings are ``overrides``.  Never raises: a stored
        value that does not parse (written by another tool) is ignored with a warning."""
        values: dict[str, Any] = {}
        for name, text in overrides.items():
            key = TOPIC_KEYS.get(name)
            if key is None:
                log.warning("topic %r: ignoring unknown topic config %s in ZooKeeper", topic, name)
                continue
            try:
                values[name] = key.definition.parse(text)
            except InvalidConfig as e:
                log.warning("topic %r: ignoring stored topic config: %s", topic, e)
        try:
            return self._build(values)
        except ValueError as e:
            log.warning("topic %r: stored configs do not combine (%s); using the broker's", topic, e)
            return self.default_log_config

    # ------------------------------------------------------------------ DescribeConfigs
    def describe(self, overrides: Mapping[str, str], names: Iterable[str] | None = None) -> list[ConfigEntry]:
        """DescribeConfigs' entries of a topic with stored settings ``overrides`` (``names``: only these)."""
        wanted = None if names is None else set(names)
        out = []
        for name, key in TOPIC_KEYS.items():
            if wanted is not None and name not in wanted:
                continue
            d = key.definition
            synonyms = list(broker_synonyms(self.broker_config, key.broker_key))
            if name in overrides:
                value, source = overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG
                synonyms.insert(0, Synonym(name, value, source))
            else:
                value = render_value(self.broker_config.get(key.broker_key))
                source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
            out.append(ConfigEntry(name, value, source, d.type, d.doc, read_only=False, sensitive=False,
                                   synonyms=tuple(synonyms)))
        return out


def describe_topic(broker_config: Mapping[str, Any], names: Iterable[str] | None = None,
                   overrides: Mapping[str, str] | None = None) -> list[ConfigEntry]:
    """The configs of a topic: its own where it set them (``overrides``), the broker's otherwise."""
    return TopicConfigModel(broker_config).describe(overrides or {}, names)
