"""BROKER and TOPIC configs as DescribeConfigs reports them: the broker's real settings, Kafka's names.

A broker describes itself (resource name = its id) with every key of its
``broker.properties`` table (``spark_coord.config.BROKER``) plus the per-listener
keys it was given: the value it runs with, source STATIC_BROKER_CONFIG when its
properties file or ``--override`` set the key, DEFAULT_CONFIG otherwise, and as
synonyms the static value (when set) and the default, as Kafka lists them.
Passwords are sensitive: their values are null.  The empty name (Kafka's
cluster-wide dynamic defaults) has no configs here.

A topic has the settings our logs take from the broker, under Kafka's topic
names::

    segment.bytes         <- log.segment.bytes
    index.interval.bytes  <- log.index.interval.bytes
    retention.bytes       <- log.retention.bytes
    retention.ms          <- log.retention.ms
    flush.messages        <- log.flush.interval.messages
    flush.ms              <- log.flush.interval.ms   (-1 here: no time-based flush)
    max.message.bytes     <- message.max.bytes

each with the broker key as its synonym and its source (STATIC_BROKER_CONFIG or
DEFAULT_CONFIG), as Kafka reports a topic without overrides.  Both are read-only
for now: there are no per-topic settings in the log yet, and no dynamic broker
settings (every entry says read-only; altering answers INVALID_REQUEST).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from spark_coord.configs.model import ConfigEntry, ConfigSource, ConfigType, Synonym, render_value

#: Kafka's topic config name -> (the broker key our logs read it from, its Kafka type).
TOPIC_SYNONYMS: dict[str, tuple[str, ConfigType]] = {
    "segment.bytes": ("log.segment.bytes", ConfigType.INT),
    "index.interval.bytes": ("log.index.interval.bytes", ConfigType.INT),
    "retention.bytes": ("log.retention.bytes", ConfigType.LONG),
    "retention.ms": ("log.retention.ms", ConfigType.LONG),
    "flush.messages": ("log.flush.interval.messages", ConfigType.LONG),
    "flush.ms": ("log.flush.interval.ms", ConfigType.LONG),
    "max.message.bytes": ("message.max.bytes", ConfigType.INT),
}

READ_ONLY_MESSAGE = ("topic and broker configs are read-only on this broker for now: topics take their "
                     "settings from the broker's properties file (no per-topic settings yet), and "
                     "broker settings change only with a restart")

#: Broker keys Kafka types as LONG (others of our "int" keys are INT unless their default needs 64 bits).
_LONG_KEYS = frozenset({"log.retention.ms", "log.retention.bytes", "log.flush.interval.messages",
                        "log.flush.interval.ms", "log.flush.scheduler.interval.ms",
                        "log.retention.check.interval.ms", "connections.max.idle.ms"})
_TYPES = {"bool": ConfigType.BOOLEAN, "str": ConfigType.STRING, "list": ConfigType.LIST,
          "password": ConfigType.PASSWORD}


def _key_type(key: Any) -> ConfigType:
    if key.type == "int":
        big = isinstance(key.default, int) and not -2**31 <= key.default < 2**31
        return ConfigType.LONG if key.name in _LONG_KEYS or big else ConfigType.INT
    return _TYPES.get(key.type, ConfigType.UNKNOWN)


def _doc(key: Any) -> str:
    return " ".join(line.strip() for line in key.doc.strip().splitlines())


def _explicit(broker_config: Any) -> frozenset[str]:
    return frozenset(getattr(broker_config, "explicit", ()))


def _key_of(broker_config: Any, name: str) -> Any:
    keyset = getattr(broker_config, "keyset", None)
    if keyset is None:
        return None
    key = keyset.keys.get(name)
    if key is None and keyset.dynamic is not None:
        key = keyset.dynamic(name)
    return key


def _broker_synonyms(broker_config: Any, key: Any) -> tuple[Synonym, ...]:
    """Kafka's synonyms of one broker key: the static value (when set), then the default (when there is
    one); a password's values are null."""
    hidden = key.type == "password"
    out = []
    if key.name in _explicit(broker_config):
        value = None if hidden else render_value(broker_config[key.name])
        out.append(Synonym(key.name, value, ConfigSource.STATIC_BROKER_CONFIG))
    if key.default is not None:
        out.append(Synonym(key.name, None if hidden else render_value(key.default), ConfigSource.DEFAULT_CONFIG))
    return tuple(out)


def broker_entry(broker_config: Any, name: str) -> ConfigEntry | None:
    """The DescribeConfigs entry of one broker key (None: not a key of this broker)."""
    key = _key_of(broker_config, name)
    if key is None or name not in broker_config:
        return None
    sensitive = key.type == "password"
    synonyms = _broker_synonyms(broker_config, key)
    source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
    value = None if sensitive else render_value(broker_config[name])
    return ConfigEntry(name, value, source, _key_type(key), _doc(key), read_only=True, sensitive=sensitive,
                       synonyms=synonyms)


def describe_broker(broker_config: Any, names: Iterable[str] | None = None) -> list[ConfigEntry]:
    """Every setting of this broker (or the ones in ``names``), in its table's order, then per-listener keys."""
    keyset = broker_config.keyset
    order = list(keyset.keys) + sorted(n for n in broker_config if n not in keyset.keys)
    wanted = None if names is None else set(names)
    out = []
    for name in order:
        if wanted is not None and name not in wanted:
            continue
        entry = broker_entry(broker_config, name)
        if entry is not None:
            out.append(entry)
    return out


def describe_topic(broker_config: Mapping[str, Any], names: Iterable[str] | None = None) -> list[ConfigEntry]:
    """The configs of a topic (every topic has the broker's, for now)."""
    wanted = None if names is None else set(names)
    out = []
    for name, (broker_key, config_type) in TOPIC_SYNONYMS.items():
        if wanted is not None and name not in wanted:
            continue
        key = _key_of(broker_config, broker_key)
        value = render_value(broker_config[broker_key])
        synonyms = _broker_synonyms(broker_config, key) if key is not None else ()
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        doc = f"The topic's {name}: this broker's {broker_key} (no per-topic settings yet). "
        if key is not None:
            doc += _doc(key)
        out.append(ConfigEntry(name, value, source, config_type, doc, read_only=True, synonyms=synonyms))
    return out
