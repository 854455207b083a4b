"""Reading the values of a Spark source's or sink's options: the options under their documented
names (``Opts``, remembering how the user spelled each one, for messages) and the readers of
integers, booleans, durations, topic names and JSON, each refusing a bad value with a
``ValueError`` that names the option as it was given (``spark.options`` builds on them)."""

from __future__ import annotations

import json
import re

#: A Kafka topic name (and what a prefix or group id taken as one must look like).
TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_DURATION_RE = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h)?\s*$")
_DURATION_UNITS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}


class Opts:
    """Options under their documented names, remembering how the user spelled each one."""

    def __init__(self, values: dict[str, str], given: dict[str, str]) -> None:
        self.values = values    # lower-cased documented name -> value
        self.given = given      # lower-cased documented name -> the option as the user gave it

    def __contains__(self, name: str) -> bool:
        return name.lower() in self.values

    def get(self, name: str, default=None):
        return self.values.get(name.lower(), default)

    def label(self, name: str) -> str:
        """The option as the user gave it (``kafka.fetch.max.bytes`` or ``fetch.max.bytes``)."""
        return self.given.get(name.lower(), name)


def int_option(opts: Opts, name: str, default: int | None, minimum: int | None = None) -> int | None:
    raw = opts.get(name)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{opts.label(name)}: expected an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{opts.label(name)}: must be at least {minimum}, got {value}")
    return value


def bool_option(opts: Opts, name: str, default: bool) -> bool:
    raw = opts.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"{opts.label(name)}: expected true or false, got {raw!r}")


def duration_ms(opts: Opts, name: str, default: int) -> int:
    raw = opts.get(name)
    if raw is None:
        return default
    m = _DURATION_RE.match(str(raw))
    if not m:
        raise ValueError(f"{name}: expected a duration such as 500ms, 30s, 15m or 1h, got {raw!r}")
    return int(m.group(1)) * _DURATION_UNITS[m.group(2)]


def topic_name(name: str, option: str) -> str:
    if not TOPIC_NAME.match(name) or name in (".", ".."):
        raise ValueError(f"{option}: {name!r} is not a valid topic name "
                         "(1-249 characters of letters, digits, '.', '_' and '-')")
    return name


def json_value(raw: str, option: str):
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"{option}: not valid JSON ({e.msg} at character {e.pos}): {raw!r}") from None
