"""Properties files and their keys, each documented once, here.

Every key has a name (Kafka's own wherever Kafka has one), a type, a default and a
doc string.  ``conf/*.properties`` are rendered from these tables (a test keeps them
in step), ``load()`` reads a file and applies ``--override key=value`` pairs, and an
unknown key or a bad value raises ``ConfigError`` naming the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import javaproperties


class ConfigError(ValueError):
    """A bad properties file, key or value; the message names the key."""


def _bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "yes", "1", "on"):
        return True
    if t in ("false", "no", "0", "off"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def _list(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


_PARSERS: dict[str, Callable[[str], Any]] = {"int": int, "str": str, "bool": _bool, "list": _list}


@dataclass(frozen=True)
class Key:
    name: str
    type: str  # int | str | bool | list
    default: Any
    doc: str
    minimum: int | None = None

    def parse(self, raw: str) -> Any:
        try:
            value = _PARSERS[self.type](raw.strip())
        except ValueError as e:
            raise ConfigError(f"{self.name}: {e}") from None
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(f"{self.name}: {value} is below the minimum {self.minimum}")
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

    def __init__(self, name: str, title: str, keys: Iterable[Key], passthrough: bool = False, footer: str = ""):
        self.name = name
        self.title = title
        self.footer = footer  # comment lines closing the rendered file
        self.keys = {k.name: k for k in keys}
        # passthrough: keys this table does not know are kept as strings (zookeeper.properties
        # is handed to ZooKeeper itself, which has many more settings than we document).
        self.passthrough = passthrough

    def defaults(self) -> dict[str, Any]:
        return {k.name: k.default for k in self.keys.values()}

    def render(self) -> str:
        """The documented properties file for conf/."""
        out = [f"# {self.title}", "#", "# Every key is listed with its default value; edit a value to change it.",
               "# Any key can also be set with --override key=value on the command line.", ""]
        for k in self.keys.values():
            for line in k.doc.strip().splitlines():
                out.append(f"# {line.strip()}" if line.strip() else "#")
            out.append(f"# Type: {k.type}. Default: {k.render_default() or '(none)'}")
            out.append(f"{k.name}={k.render_default()}")
            out.append("")
        for line in self.footer.strip().splitlines():
            out.append(f"# {line}".rstrip())
        if self.footer.strip():
            out.append("")
        return "\n".join(out)


class Config(Mapping[str, Any]):
    """Typed settings: ``cfg["log.segment.bytes"]`` or ``cfg.get_int(...)``."""

    def __init__(self, keyset: KeySet, values: dict[str, Any]):
        self.keyset = keyset
        self._values = values

    def __getitem__(self, name: str) -> Any:
        if name not in self._values:
            raise ConfigError(f"unknown {self.keyset.name} setting: {name}")
        return self._values[name]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def with_overrides(self, overrides: Mapping[str, Any]) -> "Config":
        values = dict(self._values)
        for name, value in overrides.items():
            values[name] = _coerce(self.keyset, name, value)
        return Config(self.keyset, values)

    def __repr__(self) -> str:
        return f"Config({self.keyset.name}, {self._values!r})"


def _coerce(keyset: KeySet, name: str, value: Any) -> Any:
    key = keyset.keys.get(name)
    if key is None:
        if keyset.passthrough:
            return str(value)
        raise ConfigError(f"unknown {keyset.name} setting: {name}")
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
    if path is not None:
        for name, raw in read_properties_file(path).items():
            if raw == "" and name in keyset.keys and keyset.keys[name].default is None:
                continue
            values[name] = _coerce(keyset, name, raw)
    if not isinstance(overrides, Mapping):
        overrides = parse_overrides(overrides)
    for name, value in overrides.items():
        values[name] = _coerce(keyset, name, value)
    return Config(keyset, values)


# --------------------------------------------------------------------------- broker

BROKER = KeySet("broker", "spark-coord broker settings (spark-coord broker --config conf/broker.properties)", [
    Key("broker.id", "int", 0, "Unique id of this broker in the cluster; it names /brokers/ids/<id> in ZooKeeper.", minimum=0),
    Key("listeners", "str", "PLAINTEXT://127.0.0.1:9092",
        "Where the broker listens, as PLAINTEXT://host:port. Port 0 picks a free port\n"
        "(the chosen port is what gets registered in ZooKeeper)."),
    Key("advertised.listeners", "str", None,
        "The address clients are told to connect to (Metadata, /brokers/ids).\n"
        "Empty means the same as listeners."),
    Key("log.dirs", "str", "data/broker-0", "Directory holding this broker's partition logs (one subdirectory per partition)."),
    Key("zookeeper.connect", "str", "127.0.0.1:2181", "ZooKeeper connection string, host:port[,host:port...][/chroot]."),
    Key("zookeeper.session.timeout.ms", "int", 18000,
        "ZooKeeper session timeout (Kafka's default since 2.5). A broker silent this long loses its\n"
        "session: its registration and, if it coordinates, the coordinator role go to other brokers.\n"
        "Shorter: a coordinator whose host dies (or is cut off) and does not come back is replaced\n"
        "sooner -- after about this long plus one ZooKeeper tick (18.6 s measured with the default,\n"
        "6.4 s with 6000). Longer: a VM pause, swapping or a network partition of that length does\n"
        "not cost a session, after which every group would rebalance under a new coordinator; and a\n"
        "client whose ZooKeeper server dies silently has 1/3 of this left to reach another server\n"
        "after noticing (it waits 2/3 of it), which gets tight below about 10000 in an ensemble.\n"
        "Two cases no longer depend on it: a connection loss shorter than the timeout costs nothing\n"
        "(the coordinator keeps serving and its ZooKeeper writes wait), and a broker restarted after\n"
        "a crash replaces its own stale registration and election node at once (0.7 s measured).", minimum=1000),
    Key("zookeeper.connection.timeout.ms", "int", 18000, "How long to wait for the first ZooKeeper connection at start-up.", minimum=100),
    Key("num.partitions", "int", 1, "Partitions of a topic created without an explicit count (auto-created or -1 in CreateTopics).", minimum=1),
    Key("auto.create.topics.enable", "bool", False,
        "Create a topic when a client asks Metadata or Produce for one that does not exist."),
    Key("delete.topic.enable", "bool", True, "Allow DeleteTopics."),
    Key("message.max.bytes", "int", 1048588,
        "Largest record batch the broker accepts (after compression); larger ones get MESSAGE_TOO_LARGE.", minimum=64),
    Key("socket.request.max.bytes", "int", 104857600,
        "Largest request frame; a size prefix above this is refused before anything is allocated\n"
        "and the connection is closed.", minimum=1024),
    Key("connections.max.idle.ms", "int", 600000,
        "Close a connection that has sent nothing for this long (also bounds a client that\n"
        "connects and never sends a request).", minimum=100),
    Key("log.segment.bytes", "int", 1073741824, "Roll to a new segment file when the active one reaches this size.", minimum=1024),
    Key("log.index.interval.bytes", "int", 4096, "Bytes of log between two entries of the sparse offset index.", minimum=1),
    Key("log.retention.bytes", "int", -1, "Delete oldest segments while a partition is larger than this; -1 keeps everything."),
    Key("log.retention.ms", "int", 604800000, "Delete segments whose newest record is older than this; -1 keeps everything."),
    Key("log.retention.check.interval.ms", "int", 300000, "How often retention is applied.", minimum=10),
    Key("log.flush.interval.messages", "int", 9223372036854775807,
        "fsync a partition after this many appended records. The default leaves flushing to the OS\n"
        "(as Kafka does); 1 fsyncs every produce request before it is acknowledged.", minimum=1),
    Key("log.flush.interval.ms", "int", -1,
        "fsync partitions with unflushed data at least this often; -1 leaves it to the OS."),
    Key("log.flush.scheduler.interval.ms", "int", 1000, "How often the time-based flush policy is checked.", minimum=10),
    # coordinator (used only while this broker is the elected coordinator)
    Key("coordinator.enable", "bool", True, "Run a coordinator candidate in this broker (one broker is elected at a time)."),
    Key("coordinator.rebalance.threads", "int", 3,
        "Rebalance workers; a group is only ever rebalanced by one worker at a time.", minimum=1),
    Key("coordinator.min.session.timeout.ms", "int", 1000,
        "Members registering with a smaller session.timeout.ms are refused (SESSION_TIMEOUT_TOO_SMALL).", minimum=1),
    Key("coordinator.max.ping.retries", "int", 1,
        "A member whose pings go unanswered more than this many times in a row is failed and its group rebalanced.\n"
        "Each ping waits 2/3 of the member's session timeout; pings go out every 1/3.", minimum=0),
    Key("coordinator.offsets.commit.interval.ms", "int", 1000,
        "How often consumed offsets reported in ping answers are written to ZooKeeper\n"
        "(/consumers/<group>/offsets/<topic>/<partition>). They are also written before every StartFetcher.", minimum=10),
    Key("coordinator.rebalance.backoff.ms", "int", 500, "Wait before retrying a rebalance that timed out or failed.", minimum=0),
    Key("coordinator.rebalance.max.retries", "int", 10,
        "Attempts before a rebalance is given up and ConsumerRebalanceFailed is logged (the next group change retries).",
        minimum=1),
    Key("coordinator.partition.assignment.strategy", "str", "range",
        "range (Kafka 0.7/0.8's rule: contiguous ranges per topic over sorted consumer threads) or roundrobin."),
])

# ------------------------------------------------------------------------ zookeeper

ZOOKEEPER = KeySet("zookeeper", "Embedded Apache ZooKeeper settings (spark-coord zookeeper --config conf/zookeeper.properties).\n"
                   "# This file is handed to ZooKeeper itself, so any zoo.cfg setting may be added", [
    Key("clientPort", "int", 2181, "Port ZooKeeper listens on for clients. 0 picks a free port.", minimum=0),
    Key("clientPortAddress", "str", "127.0.0.1", "Address ZooKeeper listens on."),
    Key("dataDir", "str", "data/zookeeper", "Where ZooKeeper keeps its snapshots and transaction log."),
    Key("tickTime", "int", 2000, "ZooKeeper's basic time unit in ms; sessions may last 2 to 20 ticks by default.", minimum=1),
    Key("minSessionTimeout", "int", 1000, "Shortest session timeout (ms) ZooKeeper grants; short ones make tests of failures fast.", minimum=1),
    Key("maxSessionTimeout", "int", 60000, "Longest session timeout (ms) ZooKeeper grants.", minimum=1),
    Key("maxClientCnxns", "int", 0, "Connections allowed per client address; 0 means unlimited.", minimum=0),
    Key("admin.enableServer", "bool", False, "ZooKeeper's HTTP admin server (it would take port 8080)."),
    Key("4lw.commands.whitelist", "str", "*", "Four-letter-word commands allowed (srvr, stat, mntr, ...)."),
    Key("initLimit", "int", 10, "Ensemble only: ticks a follower may take to connect to the leader and sync with it.",
        minimum=1),
    Key("syncLimit", "int", 5, "Ensemble only: ticks a follower may fall behind the leader before it is dropped.",
        minimum=1),
    Key("myid", "str", None,
        "Ensemble only: this server's id, the N of its own server.N line; written to dataDir/myid.\n"
        "Empty: read dataDir/myid, as ZooKeeper itself does."),
], passthrough=True, footer="""
An ensemble (3 or 5 servers; a majority must be up): give every server the same server.N
lines, host:peerPort:electionPort, and its own myid and dataDir, for example
  server.1=zk1.example.com:2888:3888
  server.2=zk2.example.com:2888:3888
  server.3=zk3.example.com:2888:3888
  myid=1
and point zookeeper.connect at all of them: zk1.example.com:2181,zk2.example.com:2181,zk3.example.com:2181
""")

# ------------------------------------------------------------------------- consumer

CONSUMER = KeySet("consumer", "spark-coord thin consumer settings (spark-coord consume --config conf/consumer.properties)", [
    Key("bootstrap.brokers", "list", ["127.0.0.1:9092"],
        "Brokers tried round-robin to discover the cluster and its coordinator, host:port[,host:port...]."),
    Key("group.id", "str", None, "Consumer group to join (required)."),
    Key("consumer.id", "str", None, "Member id within the group; empty generates <host>-<pid>-<random>."),
    Key("session.timeout.ms", "int", 30000,
        "The member's lease. The coordinator pings every third of it; a member whose pings go unanswered\n"
        "is failed, and its partitions move to others once this long has passed since the last ping sent\n"
        "to it (at once when it leaves cleanly). A member that loses its coordinator keeps consuming while\n"
        "it finds the next one, for at most this long since a coordinator last spoke to it. The default\n"
        "outlasts a coordinator failover (the brokers' zookeeper.session.timeout.ms, 18 s by default, plus\n"
        "an election), so consumption does not stop when the coordinator's broker dies; shorter values\n"
        "detect dead members sooner but stop consumption during a slow failover.", minimum=100),
    Key("auto.commit.enable", "bool", True, "Report consumed offsets in ping answers so the coordinator commits them."),
    Key("auto.offset.reset", "str", "largest",
        "Where to start when the group has no committed offset or it is out of range: smallest or largest."),
    Key("fetch.min.bytes", "int", 1, "Fetch requests wait until at least this many bytes are available...", minimum=0),
    Key("fetch.wait.max.ms", "int", 500, "...or this long, whichever comes first.", minimum=0),
    Key("fetch.max.bytes", "int", 52428800, "Most bytes one Fetch response may carry.", minimum=1),
    Key("max.partition.fetch.bytes", "int", 1048576, "Most bytes per partition in one Fetch response.", minimum=1),
    Key("socket.timeout.ms", "int", 30000, "Give up on a broker request after this long.", minimum=100),
    Key("client.id", "str", "spark-coord", "Client id sent in every request header (shows up in broker logs)."),
])

KEYSETS = {ks.name: ks for ks in (BROKER, ZOOKEEPER, CONSUMER)}
