"""The machinery of properties files: a ``Key`` (name, type, default, doc, aliases), a ``KeySet``
of them, the ``Config`` a file and its overrides load into, and the parsers of Java properties
text and ``--override key=value`` pairs.  The keys themselves, each documented once, are the
tables of ``spark_coord.config``, which re-exports all of this."""


from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from spark_coord.secret import Password


class ConfigError(ValueError):
    """A bad properties file, key or value; the message names the key."""


class UnknownKey(ConfigError, KeyError):
    """A key no table documents (also a ``KeyError``, so ``Config.get`` answers its default)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def _bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "yes", "1", "on"):
        return True
    if t in ("false", "no", "0", "off"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def _list(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def _password(text: str) -> Password:
    return Password(text)


_PARSERS: dict[str, Callable[[str], Any]] = {"int": int, "str": str, "bool": _bool, "list": _list,
                                             "password": _password, "double": float}


@dataclass(frozen=True)
class Key:
    name: str
    type: str  # int | double | str | bool | list | password (a ``Password``: hidden in reprs and logs)
    default: Any
    doc: str
    minimum: int | None = None
    #: Other names of this setting (the Java client's or librdkafka's, where they differ).
    aliases: tuple[str, ...] = ()
    maximum: int | None = None

    def parse(self, raw: str) -> Any:
        if self.type == "password":
            return Password(raw)  # kept as written: blanks may belong to a password
        try:
            value = _PARSERS[self.type](raw.strip())
        except ValueError as e:
            raise ConfigError(f"{self.name}: {e}") from None
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(f"{self.name}: {value} is below the minimum {self.minimum}")
        if self.maximum is not None and value > self.maximum:
            raise ConfigError(f"{self.name}: {value} is above the maximum {self.maximum}")
        return value

    def render_default(self) -> str:
        if self.default is None:
            return ""
        if self.type == "bool":
            return "true" if self.default else "false"
        if self.type == "list":
            return ",".join(self.default)
        return str(self.default)


class KeySet:
    """The keys of one properties file (broker, zookeeper, consumer)."""

    def __init__(self, name: str, title: str, keys: Iterable[Key], passthrough: bool = False, footer: str = "",
                 dynamic: Callable[[str], Key | None] | None = None):
        self.name = name
        self.title = title
        self.footer = footer  # comment lines closing the rendered file
        self.keys = {k.name: k for k in keys}
        #: alias -> the documented name
        self.aliases = {a: k.name for k in self.keys.values() for a in k.aliases}
        clash = sorted(set(self.aliases) & set(self.keys))
        if clash:
            raise ValueError(f"{name}: {clash[0]} is both a key and an alias")
        # dynamic: keys whose names follow a pattern (listener.name.<listener>.<key>), documented
        # in the footer; the function answers the Key for such a name, None for any other.
        self.dynamic = dynamic
        # passthrough: keys this table does not know are kept as strings (zookeeper.properties
        # is handed to ZooKeeper itself, which has many more settings than we document).
        self.passthrough = passthrough

    def canonical(self, name: str) -> str:
        """The documented name of ``name`` (itself unless it is an alias)."""
        return self.aliases.get(name, name)

    def defaults(self) -> dict[str, Any]:
        return {k.name: k.default for k in self.keys.values()}

    def render(self) -> str:
        """The documented properties file for conf/."""
        out = [f"# {self.title}", "#", "# Every key is listed with its default value; edit a value to change it.",
               "# Any key can also be set with --override key=value on the command line.", ""]
        for k in self.keys.values():
            for line in k.doc.strip().splitlines():
                out.append(f"# {line.strip()}" if line.strip() else "#")
            if k.aliases:
                out.append(f"# Also read under the name{'s' if len(k.aliases) > 1 else ''} {', '.join(k.aliases)}.")
            out.append(f"# Type: {k.type}. Default: {k.render_default() or '(none)'}")
            out.append(f"{k.name}={k.render_default()}")
            out.append("")
        for line in self.footer.strip().splitlines():
            out.append(f"# {line}".rstrip())
        if self.footer.strip():
            out.append("")
        return "\n".join(out)


class Config(Mapping[str, Any]):
    """Typed settings: ``cfg["log.segment.bytes"]`` or ``cfg.get_int(...)``.

    ``explicit`` names the keys a properties file or an override set (the others hold
    their defaults): DescribeConfigs reports those as Kafka's static broker config."""

    def __init__(self, keyset: KeySet, values: dict[str, Any], explicit: Iterable[str] = ()):
        self.keyset = keyset
        self._values = values
        self.explicit: frozenset[str] = frozenset(explicit)

    def __getitem__(self, name: str) -> Any:
        name = self.keyset.canonical(name)
        if name not in self._values:
            raise UnknownKey(f"unknown {self.keyset.name} setting: {name}")
        return self._values[name]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def with_overrides(self, overrides: Mapping[str, Any]) -> "Config":
        values = dict(self._values)
        named = _canonical_names(self.keyset, overrides, "overrides")
        for name, value in named.items():
            values[name] = _coerce(self.keyset, name, value)
        return Config(self.keyset, values, self.explicit | set(named))

    def __repr__(self) -> str:
        return f"Config({self.keyset.name}, {self._values!r})"


def _canonical_names(keyset: KeySet, settings: Mapping[str, Any], source: str) -> dict[str, Any]:
    """``settings`` under the documented names; ``ConfigError`` when one setting is given under
    two of its names (``sasl.mechanism`` and ``sasl.mechanisms``) in the same ``source``."""
    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for name, value in settings.items():
        canonical = keyset.canonical(name)
        if canonical in given and given[canonical] != name:
            raise ConfigError(f"{canonical}: given twice in {source}, as {given[canonical]} and as {name} "
                              "(two names of one setting); keep one")
        given[canonical] = name
        out[canonical] = value
    return out


def _coerce(keyset: KeySet, name: str, value: Any) -> Any:
    key = keyset.keys.get(name)
    if key is None and keyset.dynamic is not None:
        key = keyset.dynamic(name)
    if key is None:
        if keyset.passthrough:
            return str(value)
        raise UnknownKey(f"unknown {keyset.name} setting: {name}")
    return key.parse(value) if isinstance(value, str) else value


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def parse_properties(text: str, source: str = "<text>") -> dict[str, str]:
    """A properties file's ``{key: value}``, by ``java.util.Properties.load``'s rules.

    Parsed with ``javaproperties``, which follows Java exactly: ``key=value``,
    ``key:value`` and ``key value`` forms, ``#`` and ``!`` comments, a backslash at
    the end of a line continues it (leading blanks of the next line dropped),
    escapes (``\\t``, ``\\uXXXX``, ``\\=``...), a later key overrides an earlier one,
    a key alone has the empty value, and a value keeps its trailing blanks
    (typed keys strip them).  ZooKeeper reads zookeeper.properties the same way.
    A malformed ``\\u`` escape raises ``ConfigError`` naming the line.
    """
    import javaproperties  # here: most processes (Spark's among them) never read a properties file

    out: dict[str, str] = {}
    line = 1
    try:
        for element in javaproperties.parse(text):
            if isinstance(element, javaproperties.KeyValue):
                out[element.key] = element.value
            line += len(_LINE_BREAK.findall(element.source))
    except javaproperties.InvalidUEscapeError as e:
        raise ConfigError(f"{source}:{line}: {e}") from None
    return out


def read_properties_file(path: str | Path) -> dict[str, str]:
    """``parse_properties`` of a file: UTF-8, or ISO-8859-1 (what Java's ``Properties.load`` of a
    stream reads) when the bytes are not UTF-8.  ``ConfigError`` when it cannot be read."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read {p}: {e.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("iso-8859-1")
    return parse_properties(text, str(p))


def parse_overrides(pairs: Iterable[str]) -> dict[str, str]:
    out = {}
    for p in pairs or ():
        if "=" not in p:
            raise ConfigError(f"--override expects key=value, got {p!r}")
        k, v = p.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def load(keyset: KeySet, path: str | Path | None = None, overrides: Mapping[str, Any] | Iterable[str] = ()) -> Config:
    """Defaults, then the file (if any), then overrides (a mapping or ``key=value`` strings)."""
    values = keyset.defaults()
    explicit: set[str] = set()
    if path is not None:
        for name, raw in _canonical_names(keyset, read_properties_file(path), str(path)).items():
            if raw == "" and name in keyset.keys and keyset.keys[name].default is None:
                continue
            if raw == "" and name not in keyset.keys and keyset.dynamic is not None and keyset.dynamic(name):
                continue
            values[name] = _coerce(keyset, name, raw)
            explicit.add(name)
    if not isinstance(overrides, Mapping):
        overrides = parse_overrides(overrides)
    for name, value in _canonical_names(keyset, overrides, "the overrides").items():
        values[name] = _coerce(keyset, name, value)
        explicit.add(name)
    return Config(keyset, values, explicit)
