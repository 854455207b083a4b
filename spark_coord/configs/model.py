"""Kafka's vocabulary for configs: resource types, sources, types, operations, and one config's definition.

The codes are Kafka's own, as they travel in DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs (``ConfigResource.Type``, ``DescribeConfigsResponse.ConfigSource``
and ``ConfigType``, ``AlterConfigOp.OpType``).  A ``ConfigDef`` is one config name
with its type, default, documentation, validation and sensitivity; ``ConfigEntry``
is what DescribeConfigs says about it (value, source, synonyms).  Nothing here
does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Callable


class ConfigResourceType(IntEnum):
    """Kafka's ``ConfigResource.Type`` (not the ACL resource types: a group is 32 here, 3 there)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32

    @classmethod
    def of(cls, code: int) -> "ConfigResourceType":
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


class ConfigSource(IntEnum):
    """Where a config's value comes from (Kafka's ``DescribeConfigsResponse.ConfigSource``)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1          # Kafka's TOPIC_CONFIG: set on the topic
    DYNAMIC_BROKER_CONFIG = 2         # set dynamically for one broker
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3  # set dynamically for every broker
    STATIC_BROKER_CONFIG = 4          # the broker's properties file (or --override)
    DEFAULT_CONFIG = 5                # nobody set it: the built-in default
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8                  # set on the group (Kafka 4: DYNAMIC_GROUP_CONFIG in the admin API)


class ConfigType(IntEnum):
    """A config's data type (Kafka's ``DescribeConfigsResponse.ConfigType``, DescribeConfigs v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class AlterConfigOp(IntEnum):
    """IncrementalAlterConfigs' operations (Kafka's ``AlterConfigOp.OpType``)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class InvalidConfig(ValueError):
    """A config name or value Kafka would refuse with INVALID_CONFIG; the message names the key."""


INT32_MIN, INT32_MAX = -2**31, 2**31 - 1
INT64_MIN, INT64_MAX = -2**63, 2**63 - 1

_RANGES = {ConfigType.INT: (INT32_MIN, INT32_MAX), ConfigType.LONG: (INT64_MIN, INT64_MAX),
           ConfigType.SHORT: (-2**15, 2**15 - 1)}

#: ``validator(value) -> None`` when fine, else the reason (Kafka's ``ConfigDef.Validator``).
Validator = Callable[[Any], "str | None"]


def at_least(minimum: int) -> Validator:
    """Kafka's ``Range.atLeast``."""
    def check(value: int) -> str | None:
        return None if value >= minimum else f"Value must be at least {minimum}"
    return check


def between(low: float, high: float) -> Validator:
    """Kafka's ``Range.between``."""
    def check(value: float) -> str | None:
        return None if low <= value <= high else f"Value must be no less than {low} and no more than {high}"
    return check


def one_of(*choices: str) -> Validator:
    """Kafka's ``ValidString.in`` (case-sensitive, as Kafka's is)."""
    def check(value: str) -> str | None:
        return None if value in choices else f"String must be one of: {', '.join(choices)}"
    return check


@dataclass(frozen=True)
class ConfigDef:
    """One config name: its type, default, documentation, validation and sensitivity."""

    name: str
    type: ConfigType
    default: Any
    doc: str
    validator: Validator | None = None
    sensitive: bool = False

    def parse(self, text: str | None) -> Any:
        """The typed value of ``text`` (as Kafka's ``ConfigDef.parseType`` reads it, then validated);
        ``InvalidConfig`` names the key, the value and the reason."""
        if text is None:
            raise InvalidConfig(f"Invalid value null for configuration {self.name}: a value is required")
        raw = text.strip()
        value: Any
        if self.type in _RANGES:
            low, high = _RANGES[self.type]
            try:
                value = int(raw, 10)
            except ValueError:
                raise InvalidConfig(f"Invalid value {text} for configuration {self.name}: "
                                    f"Not a number of type {self.type.name}") from None
            if not low <= value <= high:
                raise InvalidConfig(f"Invalid value {text} for configuration {self.name}: "
                                    f"Not a number of type {self.type.name}")
        elif self.type == ConfigType.DOUBLE:
            try:
                value = float(raw)
            except ValueError:
                raise InvalidConfig(f"Invalid value {text} for configuration {self.name}: "
                                    "Not a number of type DOUBLE") from None
            if value != value or value in (float("inf"), float("-inf")):
                raise InvalidConfig(f"Invalid value {text} for configuration {self.name}: "
                                    "Not a number of type DOUBLE")
        elif self.type == ConfigType.BOOLEAN:
            if raw.lower() not in ("true", "false"):
                raise InvalidConfig(f"Invalid value {text} for configuration {self.name}: "
                                    "Expected value to be either true or false")
            value = raw.lower() == "true"
        elif self.type == ConfigType.LIST:
            value = [p.strip() for p in raw.split(",") if p.strip()]
        else:
            value = raw
        if self.validator is not None:
            why = self.validator(value)
            if why:
                raise InvalidConfig(f"Invalid value {text} for configuration {self.name}: {why}")
        return value

    def render(self, value: Any) -> str | None:
        """``value`` as DescribeConfigs shows it (Kafka's ``ConfigDef.convertToString``)."""
        return render_value(value)


def render_value(value: Any) -> str | None:
    """A typed value as Kafka writes it: ``true``/``false``, lists comma-joined, None as null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


@dataclass(frozen=True)
class Synonym:
    """A name a config is also set under, with its value there and where that comes from."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class ConfigEntry:
    """What DescribeConfigs says about one config of a resource."""

    name: str
    value: str | None
    source: ConfigSource
    type: ConfigType = ConfigType.UNKNOWN
    doc: str | None = None
    read_only: bool = False
    sensitive: bool = False
    #: Highest precedence first; the first one's source is the entry's.
    synonyms: tuple[Synonym, ...] = ()

    def to_wire(self, include_synonyms: bool, include_documentation: bool) -> dict:
        """The entry as a ``DescribeConfigsResourceResult`` dict (every version's fields; the
        codec keeps those of the version it encodes: v0's is-default, v1's source and synonyms)."""
        return {
            "name": self.name,
            "value": None if self.sensitive else self.value,
            "read_only": self.read_only,
            "is_default": self.source == ConfigSource.DEFAULT_CONFIG,
            "config_source": int(self.source),
            "is_sensitive": self.sensitive,
            "synonyms": [{"name": s.name, "value": None if self.sensitive else s.value, "source": int(s.source)}
                         for s in self.synonyms] if include_synonyms else [],
            "config_type": int(self.type),
            "documentation": self.doc if include_documentation else None,
        }
