"""BROKER configs: the broker's settings under Kafka's names and sources, static and dynamic.

A broker describes itself (resource name = its id) with every key of its
``broker.properties`` table (``spark_coord.config.BROKER``) plus the per-listener keys
it was given.  A value comes, highest precedence first, from

    DYNAMIC_BROKER_CONFIG          /config/brokers/<id>        (this broker, set at run time)
    DYNAMIC_DEFAULT_BROKER_CONFIG  /config/brokers/<default>   (every broker, set at run time)
    STATIC_BROKER_CONFIG           the properties file or an ``--override``
    DEFAULT_CONFIG                 the table's default

and every level that has it is listed as a synonym, as Kafka lists them.  Passwords are
sensitive: their values are null.  The empty name (Kafka's cluster-wide dynamic defaults)
describes the keys set at ``/config/brokers/<default>``.

Only the keys in ``DYNAMIC_BROKER_KEYS`` can be set at run time (the log settings that are
the topics' defaults, ``message.max.bytes`` and the log cleaner's: Kafka's dynamic
per-broker and cluster-wide log and cleaner configs); they apply without a restart.  Any
other known key is refused ("Cannot update these configs dynamically"), an unknown name
too, and so is a value its key refuses -- each an ``InvalidConfig`` naming the key.

``EffectiveBrokerConfig`` overlays the dynamic levels on the static ``Config``: what the
topics' defaults and the cleaner read.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Iterator, Mapping

from spark_coord.configs.model import ConfigEntry, ConfigSource, ConfigType, InvalidConfig, Synonym, render_value

log = logging.getLogger(__name__)

#: Broker keys that AlterConfigs / IncrementalAlterConfigs may set on a BROKER resource.
DYNAMIC_BROKER_KEYS = frozenset({
    "log.segment.bytes", "log.roll.ms", "log.index.interval.bytes", "log.retention.bytes", "log.retention.ms",
    "log.flush.interval.messages", "log.flush.interval.ms", "log.cleanup.policy", "log.message.timestamp.type",
    "message.max.bytes", "log.cleaner.min.cleanable.ratio", "log.cleaner.min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms", "log.cleaner.delete.retention.ms", "log.cleaner.backoff.ms",
    "log.cleaner.dedupe.buffer.size", "log.cleaner.io.max.bytes.per.second",
})

#: Broker keys Kafka types as LONG (others of our "int" keys are INT unless their default needs 64 bits).
_LONG_KEYS = frozenset({"log.retention.ms", "log.retention.bytes", "log.flush.interval.messages",
                        "log.flush.interval.ms", "log.flush.scheduler.interval.ms",
                        "log.retention.check.interval.ms", "connections.max.idle.ms", "log.roll.ms",
                        "log.cleaner.backoff.ms", "log.cleaner.min.compaction.lag.ms",
                        "log.cleaner.max.compaction.lag.ms", "log.cleaner.delete.retention.ms"})
_TYPES = {"bool": ConfigType.BOOLEAN, "str": ConfigType.STRING, "list": ConfigType.LIST,
          "password": ConfigType.PASSWORD, "double": ConfigType.DOUBLE}


class EffectiveBrokerConfig(Mapping[str, Any]):
    """A broker's settings as it runs with them: ``/config/brokers/<id>`` over ``/config/brokers/<default>``
    over the static ``Config``.  Stored values that do not parse are ignored with a warning."""

    def __init__(self, static: Mapping[str, Any], defaults: Mapping[str, str] | None = None,
                 own: Mapping[str, str] | None = None):
        self.static = static
        self.keyset = getattr(static, "keyset", None)
        self.explicit = frozenset(getattr(static, "explicit", ()))
        self.dynamic_defaults = dict(defaults or {})
        self.dynamic_own = dict(own or {})
        self._defaults = self._parse(self.dynamic_defaults, "<default>")
        self._own = self._parse(self.dynamic_own, "this broker")

    def _parse(self, raw: Mapping[str, str], where: str) -> dict[str, Any]:
        out = {}
        for name, text in raw.items():
            key = _key_of(self.static, name)
            if key is None or name not in DYNAMIC_BROKER_KEYS:
                log.warning("ignoring dynamic broker config %s of %s: not a dynamic broker config", name, where)
                continue
            try:
                out[name] = key.parse(text)
            except ValueError as e:
                log.warning("ignoring dynamic broker config of %s: %s", where, e)
        return out

    def __getitem__(self, name: str) -> Any:
        if name in self._own:
            return self._own[name]
        if name in self._defaults:
            return self._defaults[name]
        return self.static[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.static)

    def __len__(self) -> int:
        return len(self.static)

    def source(self, name: str) -> ConfigSource:
        if name in self._own:
            return ConfigSource.DYNAMIC_BROKER_CONFIG
        if name in self._defaults:
            return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        if name in self.explicit:
            return ConfigSource.STATIC_BROKER_CONFIG
        return ConfigSource.DEFAULT_CONFIG

    def with_dynamic(self, defaults: Mapping[str, str], own: Mapping[str, str]) -> "EffectiveBrokerConfig":
        return EffectiveBrokerConfig(self.static, defaults, own)


def validate_dynamic(static: Mapping[str, Any], values: Mapping[str, str]) -> dict[str, Any]:
    """Check a set of dynamic broker configs (one level); returns their typed values, raises
    ``InvalidConfig`` naming the key and the reason."""
    from spark_coord.log.config import LogConfig

    out = {}
    for name, text in values.items():
        key = _key_of(static, name)
        if key is None:
            raise InvalidConfig(f"Unknown broker config name: {name}")
        if name not in DYNAMIC_BROKER_KEYS:
            raise InvalidConfig(f"Cannot update these configs dynamically: {name} (it is read-only: set it in the "
                                "broker's properties file and restart)")
        try:
            out[name] = key.parse(text)
        except ValueError as e:
            raise InvalidConfig(f"Invalid value {text} for configuration {name}: {e}") from None
    try:
        LogConfig.from_broker_config(_Overlay(static, out))
    except ValueError as e:
        raise InvalidConfig(str(e)) from None
    return out


class _Overlay(Mapping[str, Any]):
    def __init__(self, base: Mapping[str, Any], top: Mapping[str, Any]):
        self.base, self.top = base, top

    def __getitem__(self, name: str) -> Any:
        return self.top[name] if name in self.top else self.base[name]

    def __iter__(self):
        return iter(self.base)

    def __len__(self) -> int:
        return len(self.base)


def _key_type(key: Any) -> ConfigType:
    if key.type == "int":
        big = isinstance(key.default, int) and not -2**31 <= key.default < 2**31
        return ConfigType.LONG if key.name in _LONG_KEYS or big else ConfigType.INT
    return _TYPES.get(key.type, ConfigType.UNKNOWN)


def _doc(key: Any) -> str:
    return " ".join(line.strip() for line in key.doc.strip().splitlines())


def _key_of(broker_config: Any, name: str) -> Any:
    keyset = getattr(broker_config, "keyset", None)
    if keyset is None:
        return None
    key = keyset.keys.get(name)
    if key is None and keyset.dynamic is not None:
        key = keyset.dynamic(name)
    return key


def broker_synonyms(broker_config: Any, name: str) -> tuple[Synonym, ...]:
    """Kafka's synonyms of one broker key: its dynamic values (this broker's, then every broker's), the
    static value (when set), then the default (when there is one); a password's values are null."""
    key = _key_of(broker_config, name)
    if key is None:
        return ()
    hidden = key.type == "password"
    out = []
    for layer, source in ((getattr(broker_config, "dynamic_own", {}), ConfigSource.DYNAMIC_BROKER_CONFIG),
                          (getattr(broker_config, "dynamic_defaults", {}), ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)):
        if name in layer:
            out.append(Synonym(name, None if hidden else layer[name], source))
    if name in frozenset(getattr(broker_config, "explicit", ())):
        static = getattr(broker_config, "static", broker_config)
        out.append(Synonym(name, None if hidden else render_value(static[name]), ConfigSource.STATIC_BROKER_CONFIG))
    if key.default is not None:
        out.append(Synonym(name, None if hidden else render_value(key.default), ConfigSource.DEFAULT_CONFIG))
    return tuple(out)


def broker_entry(broker_config: Any, name: str) -> ConfigEntry | None:
    """The DescribeConfigs entry of one broker key (None: not a key of this broker)."""
    key = _key_of(broker_config, name)
    if key is None or name not in broker_config:
        return None
    sensitive = key.type == "password"
    synonyms = broker_synonyms(broker_config, name)
    source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
    value = None if sensitive else render_value(broker_config[name])
    return ConfigEntry(name, value, source, _key_type(key), _doc(key), read_only=name not in DYNAMIC_BROKER_KEYS,
                       sensitive=sensitive, synonyms=synonyms)


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


def describe_broker_defaults(broker_config: Any, names: Iterable[str] | None = None) -> list[ConfigEntry]:
    """The cluster-wide dynamic defaults (the BROKER resource with the empty name): the keys set at
    ``/config/brokers/<default>``, source DYNAMIC_DEFAULT_BROKER_CONFIG."""
    defaults = getattr(broker_config, "dynamic_defaults", {})
    wanted = None if names is None else set(names)
    out = []
    for name in sorted(defaults):
        key = _key_of(broker_config, name)
        if key is None or (wanted is not None and name not in wanted):
            continue
        synonym = Synonym(name, defaults[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
        out.append(ConfigEntry(name, defaults[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, _key_type(key),
                               _doc(key), read_only=False, synonyms=(synonym,)))
    return out
