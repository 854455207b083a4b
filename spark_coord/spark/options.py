"""Options of the ``coordkafka`` source and sink, parsed and checked when the query is defined.

Spark hands a data source its options as a case-insensitive dict whose keys arrive
lower-cased, so every name is compared lower-cased here, while messages use the
documented spelling (``startingOffsets``, ``bootstrap.brokers``).  Every problem
is a ``ValueError`` whose message starts with the option's name; unknown options
are refused (with a suggestion when one is close), so a typo never silently falls
back to a default.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Mapping

from spark_coord.common import EARLIEST, LATEST

#: Group members' session timeout: long enough for members to keep consuming through a coordinator
#: failover (the brokers' zookeeper.session.timeout.ms, 18 s by default, plus an election); the
#: consumer's session.timeout.ms in spark_coord/config.py explains the choice.
DEFAULT_SESSION_TIMEOUT_MS = 30000

#: Options Spark itself may put in the dict (``load(path)``, ``save(path)``,
#: ``option("checkpointLocation", ...)`` on a writer); accepted and ignored.
SPARK_OPTIONS = frozenset({"path", "paths", "checkpointlocation", "queryname"})

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.security.client import ClientSecurity

_SOURCE_KEYS = {
    "bootstrap.brokers", "group.id", "subscribe", "subscribePattern", "assign", "startingOffsets",
    "endingOffsets", "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "failOnDataLoss",
    "includeHeaders", "session.timeout.ms", "members", "minPartitions", "fetch.max.bytes",
    "max.partition.fetch.bytes", "fetch.max.wait.ms", "socket.timeout.ms", "client.id", "coordinator.bootstrap",
}
_SINK_KEYS = {"bootstrap.brokers", "topic", "compression", "acks", "batch.size", "retries", "socket.timeout.ms",
              "client.id"}
#: Kafka's client security keys with Spark's Kafka-source prefix (``kafka.security.protocol``, ...).
_SECURITY_KEYS = {f"kafka.{k}" for k in ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
                                         "sasl.jaas.config", "ssl.ca.location", "ssl.certificate.location",
                                         "ssl.key.location", "ssl.key.password",
                                         "ssl.endpoint.identification.algorithm")}
_SOURCE_KEYS |= _SECURITY_KEYS
_SINK_KEYS |= _SECURITY_KEYS

_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_DURATION_RE = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h)?\s*$")
_DURATION_UNITS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}


def _canonical(keys: set[str]) -> dict[str, str]:
    return {k.lower(): k for k in keys}


_SOURCE_NAMES = _canonical(_SOURCE_KEYS)
_SINK_NAMES = _canonical(_SINK_KEYS)


@dataclass(frozen=True)
class SourceOptions:
    """Checked options of a read (``spark.read`` or ``spark.readStream``).

    ``starting`` / ``ending`` are ``"earliest"``, ``"latest"``, ``"group"`` or a dict
    ``{topic: {partition: offset}}`` where offset -2 means earliest and -1 latest.
    """
    bootstrap: str
    group_id: str | None = None
    #: Standalone coordinators the group's members register through (None: ask ``bootstrap``).
    coordinator_bootstrap: str | None = None
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting: str | dict[str, dict[int, int]] = "latest"
    ending: str | dict[str, dict[int, int]] = "latest"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    fail_on_data_loss: bool = True
    include_headers: bool = False
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    #: ``members``: group members the query registers (threads of the driver-side reader
    #: process, not executors): the query's share of the group's partitions.
    members: int | None = None
    min_partitions: int | None = None
    fetch_max_bytes: int = 52428800
    max_partition_fetch_bytes: int = 8 * 1048576
    fetch_max_wait_ms: int = 500
    socket_timeout_ms: int = 30000
    client_id: str = "spark-coord-spark"
    #: TLS/SASL of every connection (``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*``);
    #: None: PLAINTEXT.  Its repr hides the password.
    security: "ClientSecurity | None" = None

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is one this query reads (by subscribe, subscribePattern or assign)."""
        if self.subscribe is not None:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        return self.assign is not None and topic in self.assign


@dataclass(frozen=True)
class SinkOptions:
    """Checked options of a write (``df.write`` or ``df.writeStream``)."""
    bootstrap: str
    topic: str | None = None
    compression: str = "none"
    acks: int = -1
    batch_size: int = 262144
    retries: int = 5
    socket_timeout_ms: int = 30000
    client_id: str = "spark-coord-spark-sink"
    security: "ClientSecurity | None" = None


def _lowered(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): v for k, v in dict(options).items()}


def _reject_unknown(opts: dict[str, str], names: dict[str, str], what: str) -> None:
    unknown = sorted(k for k in opts if k not in names and k not in SPARK_OPTIONS)
    if not unknown:
        return
    hints = []
    for k in unknown:
        close = difflib.get_close_matches(k, list(names), n=1, cutoff=0.6)
        if k == "kafka.bootstrap.servers":
            close = ["bootstrap.brokers"]
        hints.append(f"{k!r}" + (f" (did you mean {names[close[0]]!r}?)" if close else ""))
    raise ValueError(f"unknown {what} option{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; "
                     f"known options: {', '.join(sorted(names.values()))}")


def _int(opts: dict[str, str], name: str, default: int | None, minimum: int | None = None) -> int | None:
    raw = opts.get(name.lower())
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{name}: expected an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}: must be at least {minimum}, got {value}")
    return value


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"{name}: expected true or false, got {raw!r}")


def _duration_ms(opts: dict[str, str], name: str, default: int) -> int:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    m = _DURATION_RE.match(str(raw))
    if not m:
        raise ValueError(f"{name}: expected a duration such as 500ms, 30s, 15m or 1h, got {raw!r}")
    return int(m.group(1)) * _DURATION_UNITS[m.group(2)]


def _bootstrap(opts: dict[str, str]) -> str:
    from spark_coord.client.metadata import parse_bootstrap

    raw = opts.get("bootstrap.brokers")
    if raw is None or not str(raw).strip():
        raise ValueError("bootstrap.brokers: required (host:port[,host:port...]) but not given")
    try:
        parse_bootstrap(str(raw))
    except ValueError as e:
        raise ValueError(f"bootstrap.brokers: {e}") from None
    return str(raw).strip()


def _topic_name(name: str, option: str) -> str:
    if not _TOPIC_RE.match(name) or name in (".", ".."):
        raise ValueError(f"{option}: {name!r} is not a valid topic name "
                         "(1-249 characters of letters, digits, '.', '_' and '-')")
    return name


def _json(raw: str, option: str):
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"{option}: not valid JSON ({e.msg} at character {e.pos}): {raw!r}") from None


def parse_assign(raw: str) -> dict[str, tuple[int, ...]]:
    """``{"topic": [0, 1]}`` as Spark's Kafka source takes it."""
    value = _json(raw, "assign")
    if not isinstance(value, dict) or not value:
        raise ValueError(f'assign: expected a JSON object such as {{"topic": [0, 1]}}, got {raw!r}')
    out = {}
    for topic, parts in value.items():
        _topic_name(topic, "assign")
        if not isinstance(parts, list) or not parts or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts):
            raise ValueError(f"assign: topic {topic!r} needs a non-empty list of partition numbers >= 0, got {parts!r}")
        out[topic] = tuple(sorted(set(parts)))
    return out


def parse_offsets_json(raw: str, option: str, allow_earliest: bool = True) -> dict[str, dict[int, int]]:
    """``{"topic": {"0": 23, "1": -2}}`` into ``{"topic": {0: 23, 1: -2}}`` (-2 earliest, -1 latest)."""
    value = _json(raw, option)
    if not isinstance(value, dict) or not value:
        raise ValueError(f'{option}: expected "earliest", "latest" or a JSON object such as '
                         f'{{"topic": {{"0": 23, "1": -2}}}}, got {raw!r}')
    out: dict[str, dict[int, int]] = {}
    for topic, parts in value.items():
        _topic_name(topic, option)
        if not isinstance(parts, dict) or not parts:
            raise ValueError(f"{option}: topic {topic!r} needs an object of partition -> offset, got {parts!r}")
        out[topic] = {}
        for p, off in parts.items():
            if not str(p).isdigit():
                raise ValueError(f"{option}: partition {p!r} of topic {topic!r} is not a number >= 0")
            if not isinstance(off, int) or isinstance(off, bool) or off < (EARLIEST if allow_earliest else LATEST):
                allowed = "-2 (earliest), -1 (latest)" if allow_earliest else "-1 (latest)"
                raise ValueError(f"{option}: offset {off!r} for {topic}-{p} must be >= 0, or {allowed}")
            out[topic][int(p)] = off
    return out


def _offsets_spec(opts: dict[str, str], name: str, default: str, words: tuple[str, ...],
                  allow_earliest: bool = True):
    raw = opts.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip()
    if text.lower() in words:
        return text.lower()
    if text.startswith("{"):
        return parse_offsets_json(text, name, allow_earliest)
    raise ValueError(f"{name}: expected {', '.join(words)} or a JSON object of offsets, got {raw!r}")


def parse_source_options(options: Mapping[str, str], streaming: bool | None) -> SourceOptions:
    """Check a read's options.

    ``streaming`` says whether it is ``readStream`` (True) or ``read`` (False); None
    (at ``load()``, where Spark does not say which) skips the checks that depend on it.
    """
    opts = _lowered(options)
    _reject_unknown(opts, _SOURCE_NAMES, "coordkafka source")
    bootstrap = _bootstrap(opts)
    chosen = [n for n in ("subscribe", "subscribePattern", "assign") if n.lower() in opts]
    if len(chosen) != 1:
        raise ValueError("subscribe, subscribePattern, assign: exactly one must be given, "
                         + (f"got {' and '.join(chosen)}" if chosen else "got none"))
    subscribe = pattern = assign = None
    if "subscribe" in opts:
        topics = [t.strip() for t in str(opts["subscribe"]).split(",") if t.strip()]
        if not topics:
            raise ValueError("subscribe: expected a comma-separated list of topics, got an empty value")
        subscribe = tuple(dict.fromkeys(_topic_name(t, "subscribe") for t in topics))
    elif "subscribepattern" in opts:
        pattern = str(opts["subscribepattern"])
        if not pattern:
            raise ValueError("subscribePattern: empty regular expression")
        try:
            re.compile(pattern)
        except re.error as e:
            raise ValueError(f"subscribePattern: not a valid regular expression ({e}): {pattern!r}") from None
    else:
        assign = parse_assign(str(opts["assign"]))

    group_id = opts.get("group.id")
    if group_id is not None and not str(group_id).strip():
        raise ValueError("group.id: empty")
    words = ("earliest", "latest", "group")
    starting = _offsets_spec(opts, "startingOffsets", "earliest" if streaming is False else "latest", words)
    if starting == "group" and group_id is None:
        raise ValueError("startingOffsets: 'group' needs group.id (the group's committed offsets are its offsets)")
    if streaming is True and "endingoffsets" in opts:
        raise ValueError("endingOffsets: only for batch reads (spark.read); a stream has no end")
    ending = _offsets_spec(opts, "endingOffsets", "latest", ("latest",), allow_earliest=False)
    if streaming is False and starting == "latest":
        raise ValueError("startingOffsets: 'latest' makes a batch read empty; use earliest or a JSON object")
    if streaming is False and starting == "group":
        raise ValueError("startingOffsets: 'group' is only for streaming reads")
    for name, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
        if isinstance(spec, dict):
            if assign is not None:
                extra = {(t, p) for t, ps in spec.items() for p in ps} - {(t, p) for t, ps in assign.items() for p in ps}
                if extra:
                    t, p = sorted(extra)[0]
                    raise ValueError(f"{name}: {t}-{p} is not one of the assigned partitions")
            elif subscribe is not None:
                extra = sorted(set(spec) - set(subscribe))
                if extra:
                    raise ValueError(f"{name}: topic {extra[0]!r} is not subscribed")
            elif pattern is not None:
                extra = sorted(t for t in spec if re.fullmatch(pattern, t) is None)
                if extra:
                    raise ValueError(f"{name}: topic {extra[0]!r} does not match subscribePattern")

    max_per = _int(opts, "maxOffsetsPerTrigger", None, 1)
    min_per = _int(opts, "minOffsetsPerTrigger", None, 1)
    if streaming is False:
        for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "group.id", "members",
                     "session.timeout.ms"):
            if name.lower() in opts:
                raise ValueError(f"{name}: only for streaming reads (spark.readStream)")
    if max_per is not None and min_per is not None and min_per > max_per:
        raise ValueError(f"minOffsetsPerTrigger: {min_per} is above maxOffsetsPerTrigger {max_per}")
    if "maxtriggerdelay" in opts and min_per is None:
        raise ValueError("maxTriggerDelay: only meaningful with minOffsetsPerTrigger")
    if group_id is not None and assign is not None:
        raise ValueError("group.id: a group member subscribes (subscribe or subscribePattern) and the coordinator "
                         "assigns partitions; assign reads fixed partitions without a group")
    if group_id is None:
        for name in ("members", "session.timeout.ms"):
            if name.lower() in opts:
                raise ValueError(f"{name}: only meaningful with group.id")
    return SourceOptions(
        bootstrap=bootstrap,
        group_id=None if group_id is None else str(group_id).strip(),
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=max_per,
        min_offsets_per_trigger=min_per,
        max_trigger_delay_ms=_duration_ms(opts, "maxTriggerDelay", 15 * 60_000),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        session_timeout_ms=_int(opts, "session.timeout.ms", DEFAULT_SESSION_TIMEOUT_MS, 100),
        members=_int(opts, "members", None, 1),
        min_partitions=_int(opts, "minPartitions", None, 1),
        fetch_max_bytes=_int(opts, "fetch.max.bytes", 52428800, 1024),
        max_partition_fetch_bytes=_int(opts, "max.partition.fetch.bytes", 8 * 1048576, 1024),
        fetch_max_wait_ms=_int(opts, "fetch.max.wait.ms", 500, 0),
        socket_timeout_ms=_int(opts, "socket.timeout.ms", 30000, 100),
        client_id=str(opts.get("client.id") or "spark-coord-spark"),
        security=_security(opts),
        coordinator_bootstrap=_coordinator_bootstrap(opts),
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Check a write's options."""
    from spark_coord.records.compression import CODEC_IDS as CODECS

    opts = _lowered(options)
    _reject_unknown(opts, _SINK_NAMES, "coordkafka sink")
    bootstrap = _bootstrap(opts)
    topic = opts.get("topic")
    if topic is not None:
        topic = _topic_name(str(topic).strip(), "topic")
    compression = str(opts.get("compression", "none")).strip().lower()
    if compression not in CODECS:
        raise ValueError(f"compression: expected one of {', '.join(CODECS)}, got {opts['compression']!r}")
    acks_raw = str(opts.get("acks", "-1")).strip().lower()
    acks = -1 if acks_raw == "all" else _int({"acks": acks_raw}, "acks", -1)
    if acks not in (-1, 0, 1):
        raise ValueError(f"acks: expected 0, 1, -1 or all, got {opts['acks']!r}")
    return SinkOptions(
        bootstrap=bootstrap,
        topic=topic,
        compression=compression,
        acks=acks,
        batch_size=_int(opts, "batch.size", 262144, 1024),
        retries=_int(opts, "retries", 5, 0),
        socket_timeout_ms=_int(opts, "socket.timeout.ms", 30000, 100),
        client_id=str(opts.get("client.id") or "spark-coord-spark-sink"),
        security=_security(opts),
    )


def _coordinator_bootstrap(opts: dict[str, str]) -> str | None:
    raw = str(opts.get("coordinator.bootstrap") or "").strip()
    if not raw:
        return None
    from spark_coord.client.metadata import parse_bootstrap

    parse_bootstrap(raw)  # ValueError naming a bad entry
    if "group.id" not in opts:
        raise ValueError("coordinator.bootstrap: only a read with group.id joins a coordinator")
    return raw


def _security(opts: dict[str, str]) -> "ClientSecurity | None":
    """The ``kafka.``-prefixed Kafka client security keys, as Spark's Kafka source takes them."""
    from spark_coord.config import ConfigError
    from spark_coord.security.client import ClientSecurity

    try:
        security = ClientSecurity.from_settings(opts, prefix="kafka.")
    except ConfigError as e:
        raise ValueError(str(e)) from None
    return None if security.protocol == "PLAINTEXT" else security
