"""Options of the ``coordkafka`` source and sink, parsed and checked when the query is defined.

Names are Spark's Kafka source's and sink's where Spark has one, so a job written for
``format("kafka")`` moves by changing the format name: ``kafka.bootstrap.servers``,
``subscribe``, ``startingOffsets``, ``startingTimestamp``, ``maxOffsetsPerTrigger``,
``failOnDataLoss``, ... and Kafka's own client settings with Spark's ``kafka.``
prefix.  A ``kafka.`` setting our client implements is passed through (under the
Java client's name or librdkafka's where they differ: ``kafka.sasl.mechanism`` and
``kafka.sasl.mechanisms``); any other ``kafka.`` setting is refused with an error
that names it -- never silently ignored -- and the few that Spark itself refuses
(``kafka.auto.offset.reset``, serializers) or that mean something else here
(``kafka.group.id``: ``group.id`` is real group membership in coordkafka) say why.
The names this source had before Spark's (``bootstrap.brokers``, ``fetch.max.bytes``,
``compression``, ...) are kept; one setting given under two of its names is refused.

Spark hands a data source its options as a case-insensitive dict whose keys arrive
lower-cased, so every name is compared lower-cased here, while messages use the
documented spelling (``startingOffsets``, ``kafka.bootstrap.servers``).  Every
problem is a ``ValueError`` whose message starts with the option's name as the user
gave it; unknown options are refused (with a suggestion when one is close), so a
typo never silently falls back to a default.
"""

from __future__ import annotations

import difflib
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from spark_coord.common import EARLIEST, LATEST
from spark_coord.spark.option_values import TOPIC_NAME
from spark_coord.spark.option_values import Opts as _Opts
from spark_coord.spark.option_values import bool_option as _bool
from spark_coord.spark.option_values import duration_ms as _duration_ms
from spark_coord.spark.option_values import int_option as _int
from spark_coord.spark.option_values import json_value as _json
from spark_coord.spark.option_values import topic_name as _topic_name

log = logging.getLogger(__name__)

#: Group members' session timeout: long enough for members to keep consuming through a coordinator
#: failover (the brokers' zookeeper.session.timeout.ms, 18 s by default, plus an election); the
#: consumer's session.timeout.ms in spark_coord/config.py explains the choice.
DEFAULT_SESSION_TIMEOUT_MS = 30000

#: Options Spark itself may put in the dict (``load(path)``, ``save(path)``,
#: ``option("checkpointLocation", ...)`` on a writer); accepted and ignored.
SPARK_OPTIONS = frozenset({"path", "paths", "checkpointlocation", "queryname"})

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.security.client import ClientSecurity

#: Options of the source, by their documented names (Spark's where Spark has one).
_SOURCE_KEYS = {
    "bootstrap.brokers", "group.id", "subscribe", "subscribePattern", "assign", "startingOffsets",
    "startingTimestamp", "startingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy",
    "endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp", "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger", "maxTriggerDelay", "failOnDataLoss", "includeHeaders", "session.timeout.ms", "members",
    "minPartitions", "maxRecordsPerPartition", "fetch.max.bytes", "max.partition.fetch.bytes", "fetch.max.wait.ms",
    "fetch.min.bytes", "socket.timeout.ms", "client.id", "coordinator.bootstrap", "groupIdPrefix",
    "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries", "fetchOffset.retryIntervalMs", "connections.max.idle.ms",
    "share.group.id", "share.parallelism", "share.acknowledgements.path", "group.protocol",
    "group.instance.id", "group.remote.assignor", "isolation.level",
}
_SINK_KEYS = {"bootstrap.brokers", "topic", "compression", "acks", "batch.size", "retries", "socket.timeout.ms",
              "client.id", "includeHeaders", "linger.ms", "enable.idempotence", "max.in.flight.requests.per.connection",
              "connections.max.idle.ms", "transactional.id.prefix", "transaction.timeout.ms"}

#: Kafka consumer settings (``kafka.`` + name) the source implements -> the option they set.
KAFKA_CONSUMER_SETTINGS = {
    "bootstrap.servers": "bootstrap.brokers",
    "client.id": "client.id",
    "fetch.max.bytes": "fetch.max.bytes",
    "max.partition.fetch.bytes": "max.partition.fetch.bytes",
    "fetch.max.wait.ms": "fetch.max.wait.ms",
    "fetch.min.bytes": "fetch.min.bytes",
    "request.timeout.ms": "socket.timeout.ms",
    "session.timeout.ms": "session.timeout.ms",
    "connections.max.idle.ms": "connections.max.idle.ms",
    # how group.id's members join: Kafka 4's consumer group protocol (KIP-848) or the coordinator's own
    "group.protocol": "group.protocol",
    # with group.protocol=consumer: static membership (KIP-345; one id per member) and the coordinator's assignor
    "group.instance.id": "group.instance.id",
    "group.remote.assignor": "group.remote.assignor",
    # read_committed: latest offsets are the last stable offsets, aborted transactions' records are dropped
    "isolation.level": "isolation.level",
    # reading a share group (KIP-932), under the names of Spark's kafka-share proposal (SPARK-54321)
    "share.group.id": "share.group.id",
    "share.parallelism": "share.parallelism",
    "share.acknowledgements.path": "share.acknowledgements.path",
}
#: Kafka producer settings (``kafka.`` + name) the sink implements -> the option they set.
KAFKA_PRODUCER_SETTINGS = {
    "bootstrap.servers": "bootstrap.brokers",
    "client.id": "client.id",
    "acks": "acks",
    "compression.type": "compression",
    "batch.size": "batch.size",
    "linger.ms": "linger.ms",
    "retries": "retries",
    "request.timeout.ms": "socket.timeout.ms",
    "enable.idempotence": "enable.idempotence",
    "max.in.flight.requests.per.connection": "max.in.flight.requests.per.connection",
    "connections.max.idle.ms": "connections.max.idle.ms",
    "transactional.id.prefix": "transactional.id.prefix",
    "transaction.timeout.ms": "transaction.timeout.ms",
}
#: librdkafka's (or older) names of those settings -> the Java client's.
KAFKA_ALIASES = {
    "metadata.broker.list": "bootstrap.servers",
    "fetch.wait.max.ms": "fetch.max.wait.ms",
    "socket.timeout.ms": "request.timeout.ms",
    "request.required.acks": "acks",
    "compression.codec": "compression.type",
    "queue.buffering.max.ms": "linger.ms",
    "message.send.max.retries": "retries",
    "max.in.flight": "max.in.flight.requests.per.connection",
}
#: ``kafka.`` settings refused with a reason: Spark's Kafka source refuses the same ones, or they
#: mean something else here.
KAFKA_REFUSED = {
    "group.id": "coordkafka's group.id option (without the kafka. prefix) joins the consumer group for real -- "
                "its coordinator assigns the query partitions and receives its committed offsets -- while Spark's "
                "kafka.group.id only names the group its unmanaged consumers use; give group.id to join a group, "
                "or leave it out to read every partition without one",
    "auto.offset.reset": "set startingOffsets (or startingTimestamp) instead, as Spark's Kafka source asks",
    "enable.auto.commit": "offsets are committed by the query (with group.id: to the group, after each batch)",
    "key.deserializer": "keys are always read as bytes (Spark's rule); cast the key column instead",
    "value.deserializer": "values are always read as bytes (Spark's rule); cast the value column instead",
    "key.serializer": "keys are always written as bytes or strings (Spark's rule); cast the key column instead",
    "value.serializer": "values are always written as bytes or strings (Spark's rule); cast the value column instead",
    "interceptor.classes": "Java classes do not run in a Python data source",
    "partitioner.class": "Java classes do not run in a Python data source; rows go to their partition column, else "
                         "Kafka's default partitioner (murmur2 of the key, sticky without one)",
    "transactional.id": "transactions are written with kafka.transactional.id.prefix: a query writes from many "
                        "tasks, each its own producer, whose transactional id is <prefix>-<partition> "
                        "(docs/spark/exactly-once.md)",
    "isolation.level": "a consumer setting (the source's kafka.isolation.level); readers of a transactional sink's "
                       "output set it to read_committed",
    "heartbeat.interval.ms": "the coordinator pings group members every third of session.timeout.ms",
}

_TIMESTAMP_STRATEGIES = ("error", "latest")
#: ``kafka.group.protocol``: how group.id's members join (docs/spark/kafka4-groups.md).  ``auto`` asks the
#: bootstrap brokers (ApiVersions): spark-coord's coordinator where they serve it, else Kafka 4's protocol.
GROUP_PROTOCOL_AUTO, GROUP_PROTOCOL_COORDKAFKA, GROUP_PROTOCOL_CONSUMER = "auto", "coordkafka", "consumer"
GROUP_PROTOCOLS = (GROUP_PROTOCOL_AUTO, GROUP_PROTOCOL_COORDKAFKA, GROUP_PROTOCOL_CONSUMER)


def _canonical(keys: set[str]) -> dict[str, str]:
    return {k.lower(): k for k in keys}


_SOURCE_NAMES = _canonical(_SOURCE_KEYS)
_SINK_NAMES = _canonical(_SINK_KEYS)


@dataclass(frozen=True)
class SourceOptions:
    """Checked options of a read (``spark.read`` or ``spark.readStream``).

    ``starting`` / ``ending`` are ``"earliest"``, ``"latest"``, ``"group"`` or a dict
    ``{topic: {partition: offset}}`` where offset -2 means earliest and -1 latest.
    The timestamp options, when given, take precedence over them (Spark's order:
    ``startingTimestamp``, then ``startingOffsetsByTimestamp``, then ``startingOffsets``).
    """
    bootstrap: str
    group_id: str | None = None
    #: Standalone coordinators the group's members register through (None: ask ``bootstrap``).
    coordinator_bootstrap: str | None = None
    #: ``kafka.group.protocol``: ``auto``, ``coordkafka`` (the coordinator's own channel) or ``consumer``
    #: (Kafka 4's consumer group protocol, KIP-848: no spark-coord coordinator or ZooKeeper needed).
    group_protocol: str = GROUP_PROTOCOL_AUTO
    #: ``kafka.group.instance.id`` (Kafka 4's protocol only): the members are static, member ``i`` being
    #: ``<id>-<i>``, so a query restarted within the group's session timeout gets its partitions back.
    group_instance_id: str | None = None
    #: ``kafka.group.remote.assignor`` (Kafka 4's protocol only): the assignor the group's coordinator runs.
    group_remote_assignor: str | None = None
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting: str | dict[str, dict[int, int]] = "latest"
    ending: str | dict[str, dict[int, int]] = "latest"
    #: ``startingTimestamp``: one timestamp (ms) for every partition.
    starting_timestamp: int | None = None
    #: ``startingOffsetsByTimestamp``: ``{topic: {partition: timestamp ms}}``.
    starting_by_timestamp: dict[str, dict[int, int]] | None = None
    #: ``startingOffsetsByTimestampStrategy``: "error" (fail) or "latest" when no record is that recent.
    starting_timestamp_strategy: str = "error"
    ending_timestamp: int | None = None
    ending_by_timestamp: dict[str, dict[int, int]] | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    fail_on_data_loss: bool = True
    include_headers: bool = False
    #: ``kafka.isolation.level``: 0 read_uncommitted (the default, as Spark's Kafka source), 1 read_committed
    #: (the latest offsets are the last stable offsets, executors drop the records of aborted transactions).
    isolation_level: int = 0
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    #: ``members``: group members the query registers (threads of the driver-side reader
    #: process, not executors): the query's share of the group's partitions.
    members: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fetch_max_bytes: int = 52428800
    max_partition_fetch_bytes: int = 8 * 1048576
    fetch_max_wait_ms: int = 500
    fetch_min_bytes: int = 1
    socket_timeout_ms: int = 30000
    #: ``kafkaConsumer.pollTimeoutMs``: executors' fetch timeout (None: ``socket_timeout_ms``).
    poll_timeout_ms: int | None = None
    #: ``fetchOffset.numRetries`` / ``fetchOffset.retryIntervalMs``: the driver's offset look-ups.
    offset_retries: int = 3
    offset_retry_interval_ms: int = 10
    client_id: str = "spark-coord-spark"
    #: ``kafka.connections.max.idle.ms``: executors' Python workers keep their connections this long
    #: for the next task (0: every task connects anew).
    connections_max_idle_ms: int = 540_000
    #: TLS/SASL of every connection (``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*``);
    #: None: PLAINTEXT.  Its repr hides the password.
    security: "ClientSecurity | None" = None
    #: ``kafka.share.group.id``: read as a member of this share group (a queue) instead of by offsets.
    share_group_id: str | None = None
    #: ``kafka.share.parallelism``: input partitions (Spark tasks) per micro-batch of a share group
    #: (None: one per topic-partition the batch holds records of).
    share_parallelism: int | None = None
    #: ``kafka.share.acknowledgements.path``: where ``foreachBatch`` helpers leave the rows to release
    #: or reject (None: a directory per share group under the system's temporary directory).
    share_acknowledgements_path: str | None = None

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
    #: attempts per batch after a retriable failure (backing off 0.1 s, doubling up to 2 s: 13 s in all)
    retries: int = 10
    socket_timeout_ms: int = 30000
    client_id: str = "spark-coord-spark-sink"
    #: ``kafka.linger.ms``: the longest rows wait in a task for more rows before they are sent
    #: (None: until 4 MiB are gathered or the task's rows end).
    linger_ms: int | None = None
    #: ``kafka.enable.idempotence``: producer id and sequence numbers on every record batch.
    idempotence: bool = True
    #: ``kafka.max.in.flight.requests.per.connection``: Produce requests a task keeps in flight.
    max_in_flight: int = 5
    #: ``kafka.connections.max.idle.ms``: how long a Python worker keeps its connections and producer id
    #: for the next task (0: every task connects anew).
    connections_max_idle_ms: int = 540_000
    security: "ClientSecurity | None" = None
    #: ``kafka.transactional.id.prefix``: exactly once (docs/spark/exactly-once.md): task ``p`` writes in
    #: transactions of the id ``<prefix>-<p>``, ended by the driver's commit; None: at least once.
    transactional_id_prefix: str | None = None
    #: ``kafka.transaction.timeout.ms``: the coordinator aborts a task's transaction the driver has not
    #: ended by then (Kafka's broker maximum, transaction.max.timeout.ms, is 15 min by default).
    transaction_timeout_ms: int = 900_000


def _normalized(options: Mapping[str, str], names: dict[str, str], kafka_settings: dict[str, str],
                what: str) -> _Opts:
    """The options under their documented names: ``kafka.`` settings mapped to the options they
    set (security keys kept as ``kafka.<Java name>``), unknown ones refused by name."""
    from spark_coord.security.client import ALIASES as SECURITY_ALIASES
    from spark_coord.security.client import KEYS as SECURITY_KEYS

    values: dict[str, str] = {}
    given: dict[str, str] = {}
    unknown = []
    for key, value in dict(options).items():
        key = str(key).lower()
        if key in SPARK_OPTIONS:
            continue
        if key.startswith("kafka."):
            setting = key[len("kafka."):]
            setting = KAFKA_ALIASES.get(setting, SECURITY_ALIASES.get(setting, setting))
            if setting in SECURITY_KEYS:
                name = "kafka." + setting
            elif setting in kafka_settings:
                name = kafka_settings[setting].lower()
            elif setting in KAFKA_REFUSED:
                raise ValueError(f"{key}: not taken by coordkafka: {KAFKA_REFUSED[setting]}")
            else:
                raise ValueError(
                    f"{key}: not a Kafka {what} setting coordkafka implements, so it is refused rather than "
                    f"ignored; it takes {', '.join('kafka.' + k for k in sorted(kafka_settings))} and the client "
                    f"security settings ({', '.join('kafka.' + k for k in SECURITY_KEYS)})")
        elif key in names:
            name, key = key, names[key]  # messages use the documented spelling
        else:
            unknown.append(key)
            continue
        if name in given:
            raise ValueError(f"{given[name]}: given twice, as {given[name]} and as {key} (two names of one setting); "
                             "keep one")
        given[name] = key
        values[name] = value
    if unknown:
        _reject_unknown(unknown, names, f"coordkafka {'source' if what == 'consumer' else 'sink'}")
    return _Opts(values, given)


def _reject_unknown(unknown: list[str], names: dict[str, str], what: str) -> None:
    hints = []
    for k in sorted(unknown):
        close = difflib.get_close_matches(k, list(names), n=1, cutoff=0.6)
        hints.append(f"{k!r}" + (f" (did you mean {names[close[0]]!r}?)" if close else ""))
    raise ValueError(f"unknown {what} option{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; "
                     f"known options: {', '.join(sorted(names.values()))} and Kafka client settings as kafka.<name>")


def _bootstrap(opts: _Opts) -> str:
    from spark_coord.client.metadata import parse_bootstrap

    raw = opts.get("bootstrap.brokers")
    if raw is None or not str(raw).strip():
        raise ValueError("kafka.bootstrap.servers: required (host:port[,host:port...]) but not given "
                         "(bootstrap.brokers is the same option)")
    try:
        parse_bootstrap(str(raw))
    except ValueError as e:
        raise ValueError(f"{opts.label('bootstrap.brokers')}: {e}") from None
    return str(raw).strip()


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


def parse_offsets_json(raw: str, option: str, allow_earliest: bool = True,
                       what: str = "offset") -> dict[str, dict[int, int]]:
    """``{"topic": {"0": 23, "1": -2}}`` into ``{"topic": {0: 23, 1: -2}}`` (-2 earliest, -1 latest).

    ``what`` names the numbers in messages (``offset``, or ``timestamp`` for the ByTimestamp options)."""
    value = _json(raw, option)
    if not isinstance(value, dict) or not value:
        example = '{"topic": {"0": 1700000000000}}' if what == "timestamp" else '{"topic": {"0": 23, "1": -2}}'
        words = "" if what == "timestamp" else '"earliest", "latest" or '
        raise ValueError(f'{option}: expected {words}a JSON object such as {example}, got {raw!r}')
    out: dict[str, dict[int, int]] = {}
    for topic, parts in value.items():
        _topic_name(topic, option)
        if not isinstance(parts, dict) or not parts:
            raise ValueError(f"{option}: topic {topic!r} needs an object of partition -> {what}, got {parts!r}")
        out[topic] = {}
        for p, off in parts.items():
            if not str(p).isdigit():
                raise ValueError(f"{option}: partition {p!r} of topic {topic!r} is not a number >= 0")
            if not isinstance(off, int) or isinstance(off, bool) or off < (EARLIEST if allow_earliest else LATEST):
                allowed = "-2 (earliest), -1 (latest)" if allow_earliest else "-1 (latest)"
                raise ValueError(f"{option}: {what} {off!r} for {topic}-{p} must be >= 0, or {allowed}")
            out[topic][int(p)] = off
    return out


def _offsets_spec(opts: _Opts, name: str, default: str, words: tuple[str, ...], allow_earliest: bool = True):
    raw = opts.get(name)
    if raw is None:
        return default
    text = str(raw).strip()
    if text.lower() in words:
        return text.lower()
    if text.startswith("{"):
        return parse_offsets_json(text, name, allow_earliest)
    raise ValueError(f"{name}: expected {', '.join(words)} or a JSON object of offsets, got {raw!r}")


def _timestamp(opts: _Opts, name: str) -> int | None:
    raw = opts.get(name)
    if raw is None or not str(raw).strip():
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{name}: expected a timestamp in milliseconds since the epoch, such as "
                         f"1700000000000, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{name}: a timestamp is >= 0, got {value}")
    return value


def _check_topics(spec: dict, name: str, subscribe, pattern, assign) -> None:
    """Every partition of a JSON spec belongs to what the query reads."""
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


_warned_prefix: set[str] = set()


def parse_source_options(options: Mapping[str, str], streaming: bool | None) -> SourceOptions:
    """Check a read's options.

    ``streaming`` says whether it is ``readStream`` (True) or ``read`` (False); None
    (at ``load()``, where Spark does not say which) skips the checks that depend on it.
    """
    opts = _normalized(options, _SOURCE_NAMES, KAFKA_CONSUMER_SETTINGS, "consumer")
    bootstrap = _bootstrap(opts)
    chosen = [n for n in ("subscribe", "subscribePattern", "assign") if n in opts]
    if len(chosen) != 1:
        raise ValueError("subscribe, subscribePattern, assign: exactly one must be given, "
                         + (f"got {' and '.join(chosen)}" if chosen else "got none"))
    subscribe = pattern = assign = None
    if "subscribe" in opts:
        topics = [t.strip() for t in str(opts.get("subscribe")).split(",") if t.strip()]
        if not topics:
            raise ValueError("subscribe: expected a comma-separated list of topics, got an empty value")
        subscribe = tuple(dict.fromkeys(_topic_name(t, "subscribe") for t in topics))
    elif "subscribePattern" in opts:
        pattern = str(opts.get("subscribePattern"))
        if not pattern:
            raise ValueError("subscribePattern: empty regular expression")
        try:
            re.compile(pattern)
        except re.error as e:
            raise ValueError(f"subscribePattern: not a valid regular expression ({e}): {pattern!r}") from None
    else:
        assign = parse_assign(str(opts.get("assign")))

    group_id = opts.get("group.id")
    if group_id is not None and not str(group_id).strip():
        raise ValueError("group.id: empty")
    if "groupIdPrefix" in opts and str(opts.get("groupIdPrefix")) not in _warned_prefix:
        _warned_prefix.add(str(opts.get("groupIdPrefix")))
        log.warning("groupIdPrefix has no meaning in coordkafka and is not used: a query without group.id reads "
                    "its partitions without any consumer group (Spark's Kafka source makes up a group id for that), "
                    "and group.id joins a real group")
    share_group = _share_group(opts, streaming, group_id, subscribe)
    words = ("earliest", "latest", "group")
    starting = _offsets_spec(opts, "startingOffsets", "earliest" if streaming is False else "latest", words)
    if starting == "group" and group_id is None:
        raise ValueError("startingOffsets: 'group' needs group.id (the group's committed offsets are its offsets)")
    for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
        if streaming is True and name in opts:
            raise ValueError(f"{name}: only for batch reads (spark.read); a stream has no end")
    ending = _offsets_spec(opts, "endingOffsets", "latest", ("latest",), allow_earliest=False)
    starting_timestamp = _timestamp(opts, "startingTimestamp")
    ending_timestamp = _timestamp(opts, "endingTimestamp")
    starting_by_ts = ending_by_ts = None
    if opts.get("startingOffsetsByTimestamp") is not None:
        starting_by_ts = parse_offsets_json(str(opts.get("startingOffsetsByTimestamp")).strip(),
                                            "startingOffsetsByTimestamp", what="timestamp")
    if opts.get("endingOffsetsByTimestamp") is not None:
        ending_by_ts = parse_offsets_json(str(opts.get("endingOffsetsByTimestamp")).strip(),
                                          "endingOffsetsByTimestamp", allow_earliest=False, what="timestamp")
    strategy = str(opts.get("startingOffsetsByTimestampStrategy", "error")).strip().lower()
    if strategy not in _TIMESTAMP_STRATEGIES:
        raise ValueError(f"startingOffsetsByTimestampStrategy: expected error or latest, got "
                         f"{opts.get('startingOffsetsByTimestampStrategy')!r}")
    by_timestamp = starting_timestamp is not None or starting_by_ts is not None
    if streaming is False and starting == "latest" and not by_timestamp:
        raise ValueError("startingOffsets: 'latest' makes a batch read empty; use earliest or a JSON object")
    if streaming is False and starting == "group":
        raise ValueError("startingOffsets: 'group' is only for streaming reads")
    for name, spec in (("startingOffsets", starting), ("endingOffsets", ending),
                       ("startingOffsetsByTimestamp", starting_by_ts), ("endingOffsetsByTimestamp", ending_by_ts)):
        if isinstance(spec, dict):
            _check_topics(spec, name, subscribe, pattern, assign)

    max_per = _int(opts, "maxOffsetsPerTrigger", None, 1)
    min_per = _int(opts, "minOffsetsPerTrigger", None, 1)
    if streaming is False:
        for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "group.id", "members",
                     "session.timeout.ms"):
            if name in opts:
                raise ValueError(f"{opts.label(name)}: only for streaming reads (spark.readStream)")
    if max_per is not None and min_per is not None and min_per > max_per:
        raise ValueError(f"minOffsetsPerTrigger: {min_per} is above maxOffsetsPerTrigger {max_per}")
    if "maxTriggerDelay" in opts and min_per is None:
        raise ValueError("maxTriggerDelay: only meaningful with minOffsetsPerTrigger")
    if group_id is not None and assign is not None:
        raise ValueError("group.id: a group member subscribes (subscribe or subscribePattern) and the coordinator "
                         "assigns partitions; assign reads fixed partitions without a group")
    if group_id is None:
        for name in ("members", "session.timeout.ms", "group.protocol", "group.instance.id", "group.remote.assignor"):
            if name in opts:
                raise ValueError(f"{opts.label(name)}: only meaningful with group.id")
    return SourceOptions(
        share_group_id=share_group,
        share_parallelism=_int(opts, "share.parallelism", None, 1),
        share_acknowledgements_path=str(opts.get("share.acknowledgements.path")).strip()
        if opts.get("share.acknowledgements.path") else None,
        bootstrap=bootstrap,
        group_id=None if group_id is None else str(group_id).strip(),
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_timestamp=starting_timestamp,
        starting_by_timestamp=starting_by_ts,
        starting_timestamp_strategy=strategy,
        ending_timestamp=ending_timestamp,
        ending_by_timestamp=ending_by_ts,
        max_offsets_per_trigger=max_per,
        min_offsets_per_trigger=min_per,
        max_trigger_delay_ms=_duration_ms(opts, "maxTriggerDelay", 15 * 60_000),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        isolation_level=_isolation_level(opts),
        session_timeout_ms=_int(opts, "session.timeout.ms", DEFAULT_SESSION_TIMEOUT_MS, 100),
        members=_int(opts, "members", None, 1),
        min_partitions=_int(opts, "minPartitions", None, 1),
        max_records_per_partition=_int(opts, "maxRecordsPerPartition", None, 1),
        fetch_max_bytes=_int(opts, "fetch.max.bytes", 52428800, 1024),
        max_partition_fetch_bytes=_int(opts, "max.partition.fetch.bytes", 8 * 1048576, 1024),
        fetch_max_wait_ms=_int(opts, "fetch.max.wait.ms", 500, 0),
        fetch_min_bytes=_int(opts, "fetch.min.bytes", 1, 0),
        socket_timeout_ms=_int(opts, "socket.timeout.ms", 30000, 100),
        poll_timeout_ms=_int(opts, "kafkaConsumer.pollTimeoutMs", None, 100),
        offset_retries=_int(opts, "fetchOffset.numRetries", 3, 0),
        offset_retry_interval_ms=_int(opts, "fetchOffset.retryIntervalMs", 10, 0),
        client_id=str(opts.get("client.id") or "spark-coord-spark"),
        connections_max_idle_ms=_int(opts, "connections.max.idle.ms", 540_000, 0),
        security=_security(opts),
        coordinator_bootstrap=_coordinator_bootstrap(opts),
        group_protocol=_group_protocol(opts),
        group_instance_id=_kip848_setting(opts, "group.instance.id"),
        group_remote_assignor=_kip848_setting(opts, "group.remote.assignor"),
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Check a write's options."""
    from spark_coord.records.compression import CODEC_IDS as CODECS

    opts = _normalized(options, _SINK_NAMES, KAFKA_PRODUCER_SETTINGS, "producer")
    bootstrap = _bootstrap(opts)
    topic = opts.get("topic")
    if topic is not None:
        topic = _topic_name(str(topic).strip(), "topic")
    compression = str(opts.get("compression", "none")).strip().lower()
    if compression not in CODECS:
        raise ValueError(f"{opts.label('compression')}: expected one of {', '.join(CODECS)}, "
                         f"got {opts.get('compression')!r}")
    acks_raw = str(opts.get("acks", "-1")).strip().lower()
    acks = -1 if acks_raw == "all" else _int(_Opts({"acks": acks_raw}, opts.given), "acks", -1)
    if acks not in (-1, 0, 1):
        raise ValueError(f"{opts.label('acks')}: expected 0, 1, -1 or all, got {opts.get('acks')!r}")
    max_in_flight = _int(opts, "max.in.flight.requests.per.connection", 5, 1)
    # Kafka's rule: idempotence is on by default and needs acks=all and at most 5 requests in flight; a
    # conflicting setting turns the default off, and is refused when idempotence was asked for explicitly
    conflict = None
    if acks != -1:
        conflict = f"{opts.label('acks')}: the idempotent sink needs acks=all, got {opts.get('acks')!r}"
    elif max_in_flight > 5:
        conflict = (f"{opts.label('max.in.flight.requests.per.connection')}: at most 5 with idempotence (the broker "
                    f"remembers a producer's last 5 batches per partition), got {max_in_flight}")
    if "enable.idempotence" in opts:
        idempotence = _bool(opts, "enable.idempotence", True)
        if idempotence and conflict:
            raise ValueError(conflict + f" ({opts.label('enable.idempotence')}=true)")
    else:
        idempotence = conflict is None
        if conflict:
            log.info("idempotence off: %s", conflict)
    _bool(opts, "includeHeaders", False)  # Spark's sink takes it too; a headers column is written when present
    prefix = _transactional_id_prefix(opts, idempotence, conflict)
    return SinkOptions(
        bootstrap=bootstrap,
        topic=topic,
        compression=compression,
        acks=acks,
        batch_size=_int(opts, "batch.size", 262144, 1024),
        retries=_int(opts, "retries", 10, 0),
        socket_timeout_ms=_int(opts, "socket.timeout.ms", 30000, 100),
        client_id=str(opts.get("client.id") or "spark-coord-spark-sink"),
        linger_ms=_int(opts, "linger.ms", None, 0),
        idempotence=idempotence,
        max_in_flight=max_in_flight,
        connections_max_idle_ms=_int(opts, "connections.max.idle.ms", 540_000, 0),
        security=_security(opts),
        transactional_id_prefix=prefix,
        transaction_timeout_ms=_int(opts, "transaction.timeout.ms", 900_000, 1),
    )


#: What a transactional sink adds to its prefix: the topic of its sink group's pseudo-partitions.
SINK_TOPIC_SUFFIX = "-sink"


def _transactional_id_prefix(opts: _Opts, idempotence: bool, conflict: str | None) -> str | None:
    """``kafka.transactional.id.prefix``, checked: a transactional producer is idempotent with acks=all
    (Kafka's rule: ``transactional.id`` requires ``enable.idempotence``), and ``<prefix>-sink`` (the topic of
    the sink group's pseudo-partitions) must be a valid topic name."""
    raw = opts.get("transactional.id.prefix")
    if raw is None:
        if "transaction.timeout.ms" in opts:
            raise ValueError(f"{opts.label('transaction.timeout.ms')}: only taken with "
                             "kafka.transactional.id.prefix (the sink writes no transactions without it)")
        return None
    label = opts.label("transactional.id.prefix")
    prefix = str(raw).strip()
    if not prefix:
        raise ValueError(f"{label}: must not be empty")
    if not TOPIC_NAME.match(prefix + SINK_TOPIC_SUFFIX):
        raise ValueError(f"{label}: {prefix!r} + {SINK_TOPIC_SUFFIX!r} must be a topic name (letters, digits, "
                         "'.', '_', '-', at most 249 characters): it names the topic of the sink group's offsets")
    if conflict:
        raise ValueError(f"{label}: a transactional producer is idempotent; {conflict}")
    if not idempotence:
        raise ValueError(f"{label}: a transactional producer is idempotent; "
                         f"{opts.label('enable.idempotence')}=false refused")
    return prefix


#: Options that mean nothing to a share group, and why.
_NOT_FOR_SHARE = {
    "startingOffsets": "a share group starts where the group's share.auto.offset.reset says (latest by default; "
                       "set it with spark-coord share-groups or kafka-configs.sh --entity-type groups)",
    "startingTimestamp": "a share group starts where the group's share.auto.offset.reset says",
    "startingOffsetsByTimestamp": "a share group starts where the group's share.auto.offset.reset says",
    "minOffsetsPerTrigger": "a share group hands out what it has; each micro-batch takes what was acquired",
    "maxTriggerDelay": "a share group hands out what it has; each micro-batch takes what was acquired",
    "members": "a query is one member of its share group (kafka.share.parallelism sets how many tasks read)",
    "minPartitions": "kafka.share.parallelism sets how many tasks read a micro-batch of a share group",
    "maxRecordsPerPartition": "kafka.share.parallelism sets how many tasks read a micro-batch of a share group",
    "isolation.level": "a share group reads as the group's share.isolation.level config says",
}


def _isolation_level(opts: _Opts) -> int:
    """``kafka.isolation.level``: read_uncommitted (0, the default) or read_committed (1)."""
    from spark_coord.client.fetcher import isolation_level_of

    raw = opts.get("isolation.level")
    return 0 if raw is None else isolation_level_of(raw, opts.label("isolation.level"))


def _share_group(opts: _Opts, streaming: bool | None, group_id, subscribe) -> str | None:
    """``kafka.share.group.id``, checked against the options a share group cannot take."""
    raw = opts.get("share.group.id")
    if raw is None:
        for name in ("share.parallelism", "share.acknowledgements.path"):
            if name in opts:
                raise ValueError(f"{opts.label(name)}: only meaningful with kafka.share.group.id")
        return None
    label = opts.label("share.group.id")
    share = str(raw).strip()
    if not share:
        raise ValueError(f"{label}: empty")
    if streaming is False:
        raise ValueError(f"{label}: a share group is a queue, read by spark.readStream only: it hands each record "
                         "to one reader until it is acknowledged, so it has no offset range that a batch read "
                         "(spark.read) could read again; read the topic without kafka.share.group.id for that")
    if group_id is not None:
        raise ValueError(f"{label}: give either group.id (a consumer group: partitions) or kafka.share.group.id "
                         "(a share group: records), not both")
    if subscribe is None:
        raise ValueError(f"{label}: a share group member subscribes to topics by name: use subscribe "
                         "(subscribePattern and assign are not share group subscriptions)")
    for name, why in _NOT_FOR_SHARE.items():
        if name in opts:
            raise ValueError(f"{opts.label(name)}: not with {label}: {why}")
    return share


def _group_protocol(opts: _Opts) -> str:
    """``kafka.group.protocol``: Kafka's ``consumer``, the coordinator's ``coordkafka``, or ``auto``."""
    raw = opts.get("group.protocol")
    if raw is None:
        return GROUP_PROTOCOL_AUTO
    label = opts.label("group.protocol")
    value = str(raw).strip().lower()
    if value == "classic":
        raise ValueError(f"{label}: classic is not taken: the query's members join with Kafka 4's consumer group "
                         "protocol (consumer), where the group's coordinator assigns partitions, or through "
                         "spark-coord's coordinator (coordkafka); Kafka's classic protocol has the members assign")
    if value not in GROUP_PROTOCOLS:
        raise ValueError(f"{label}: expected one of {', '.join(GROUP_PROTOCOLS)}, got {raw!r}")
    if value == GROUP_PROTOCOL_CONSUMER and str(opts.get("coordinator.bootstrap") or "").strip():
        raise ValueError(f"{opts.label('coordinator.bootstrap')}: not with {label}=consumer, whose members find "
                         "their group's coordinator among the brokers (FindCoordinator)")
    return value


def _kip848_setting(opts: _Opts, name: str) -> str | None:
    """``kafka.group.instance.id`` / ``kafka.group.remote.assignor``: settings of Kafka 4's consumer group
    protocol, refused with ``kafka.group.protocol=coordkafka`` (whose coordinator has neither)."""
    raw = opts.get(name)
    if raw is None:
        return None
    value = str(raw).strip()
    if not value or not TOPIC_NAME.match(value):
        raise ValueError(f"{opts.label(name)}: expected a name of letters, digits, '.', '_' and '-', got {raw!r}")
    if str(opts.get("group.protocol") or "").strip().lower() == GROUP_PROTOCOL_COORDKAFKA:
        raise ValueError(f"{opts.label(name)}: a setting of Kafka 4's consumer group protocol, not with "
                         f"{opts.label('group.protocol')}=coordkafka")
    return value


def _coordinator_bootstrap(opts: _Opts) -> str | None:
    raw = str(opts.get("coordinator.bootstrap") or "").strip()
    if not raw:
        return None
    from spark_coord.client.metadata import parse_bootstrap

    parse_bootstrap(raw)  # ValueError naming a bad entry
    if "group.id" not in opts:
        raise ValueError("coordinator.bootstrap: only a read with group.id joins a coordinator")
    return raw


def _security(opts: _Opts) -> "ClientSecurity | None":
    """The ``kafka.``-prefixed Kafka client security keys, as Spark's Kafka source takes them."""
    from spark_coord.config import ConfigError
    from spark_coord.security.client import ClientSecurity

    try:
        security = ClientSecurity.from_settings(opts.values, prefix="kafka.")
    except ConfigError as e:
        raise ValueError(str(e)) from None
    return None if security.protocol == "PLAINTEXT" else security
