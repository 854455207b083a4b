"""Burrow (LinkedIn's consumer lag checker, 1.2 as Debian packages it) as a test peer.

Burrow reads a cluster two ways: its ``kafka`` cluster module asks the brokers for every
partition's log end through the Kafka protocol (Metadata, then ListOffsets to each
leader, with the Sarama client), and its ``kafka_zk`` consumer module watches the groups'
committed offsets in ZooKeeper in Kafka 0.8's layout
(``/consumers/<group>/offsets/<topic>/<partition>``).  It serves what it computes (the
log ends, each group's offsets and lag) over an HTTP API.

``Burrow`` writes a configuration into a directory of the test's own, runs the binary
with it (everything on 127.0.0.1: the brokers, ZooKeeper, and its HTTP listener on a
port the kernel picks) and stops it (SIGTERM, then kill).  ``burrow_binary()`` finds the
binary (Debian installs it as ``Burrow``); ``BurrowUnavailable`` says why there is none.

A new topic settles before Burrow reads it cleanly: each broker learns of it from its own
ZooKeeper watch, so for a moment one broker's Metadata lists the topic while the leader of
one of its partitions does not know it yet and answers that partition's ListOffsets (v0,
Sarama's) with UNKNOWN_TOPIC_OR_PARTITION, as a Kafka broker does before it hears that it
leads the partition.  Burrow logs each such answer as a warning ("error in OffsetResponse")
and reads the partition again at its next refresh.  ``problems()`` leaves that warning out
for a partition whose log end Burrow has not stored yet; once it has, the same warning is a
problem (a leader that forgot the topic).

Defaults of the packaged binary that the configuration overrides: it reads
``burrow.toml`` from ``-config-dir`` (default: the working directory), writes its pid
file to ``burrow.pid`` in the working directory, listens on ``:8000`` (every interface)
when told to, logs to stdout, and lets ``BURROW_*`` environment variables override any
setting (viper's AutomaticEnv) -- so the process gets an environment without them.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

log = logging.getLogger(__name__)

#: The cluster's name in Burrow's configuration and in its HTTP paths (/v3/kafka/<name>/...).
CLUSTER = "spark-coord"

#: Every setting that decides how soon Burrow notices a change, in seconds (Burrow's
#: smallest unit): the cluster module's topic list and log ends, and how long the
#: evaluator caches a group's lag.
REFRESH_S = 1

#: How Go's runtime reports a data race it caught on a map ("fatal error: concurrent map
#: read and map write", "... writes", "... iteration and map write"); the process exits 2.
#: Burrow 1.2's kafka_zk module reads its group and topic maps from watch goroutines
#: without the lock their writers hold (upstream, ``resetTopicListWatchAndAdd`` and
#: ``resetPartitionListWatchAndAdd``), so a busy machine can end it this way while groups
#: and topics appear.  Its state is rebuilt from ZooKeeper and the brokers on start, so
#: ``Burrow`` restarts it then, as a supervisor would; any other exit is an error.
GO_MAP_RACE = "fatal error: concurrent map"

#: How Burrow 1.2 panics when its HTTP API is asked for a topic whose log ends it has
#: stored for some partitions but not yet for all: the storage module makes the topic's
#: slice of log ends with a nil entry per partition when the first one comes in, and fills
#: the others from other workers, while ``fetchTopic`` reads every entry as set (upstream,
#: ``InMemoryStorage.fetchTopic``).  The window is the first refresh after a topic is
#: created, a few milliseconds, or longer while the topic settles (a partition whose leader
#: does not know it yet stays nil); a restart rebuilds the state from the brokers, as above.
NIL_BROKER_OFFSET = "interface {} is nil, not *storage.brokerOffset"

#: Burrow's own crashes that a restart recovers from (anything else fails the test).
KNOWN_CRASHES = (GO_MAP_RACE, NIL_BROKER_OFFSET)

#: How Burrow's ``kafka`` cluster module logs a partition for which a broker's ListOffsets
#: answer carries an error code (any but NONE; upstream ``KafkaCluster.getOffsets``), at level
#: warn; it reads the partition again at its next refresh.
OFFSET_RESPONSE_ERROR = "error in OffsetResponse"

#: Sarama's text for UNKNOWN_TOPIC_OR_PARTITION (3) in that warning's ``sarama_error``.
UNKNOWN_TOPIC_OR_PARTITION = "kafka server: Request was for a topic or partition that does not exist on this broker."

#: Log levels that are problems.
PROBLEM_LEVELS = ("warn", "error", "dpanic", "panic", "fatal")

#: Restarts after such a crash, per ``Burrow``, before it counts as a failure.
MAX_RESTARTS = 3

#: How long a request that failed on its connection waits for the process to exit, in
#: seconds, before the failure counts as the request's own (a crash exits at once).
CRASH_EXIT_S = 5.0


def known_crash(output: str) -> str | None:
    """The first lines of a crash of KNOWN_CRASHES in a process's ``output``, or None."""
    for sign in KNOWN_CRASHES:
        at = output.find(sign)
        if at >= 0:
            start = output.rfind("\n", 0, at) + 1  # from the start of the line ("panic: ...")
            return "\n".join(output[start:].splitlines()[:12])
    return None


def stored_log_end(entry: dict) -> tuple[str, int] | None:
    """(topic, partition) when ``entry`` is Burrow's storage taking a partition's log end
    from the cluster module (its debug log), else None."""
    if entry.get("request") == "StorageSetBrokerOffset" and entry.get("msg") == "ok":
        return entry.get("topic"), entry.get("partition")
    return None


def problems_in(entries: list[dict]) -> list[dict]:
    """The entries of a Burrow log, in order, at a level of PROBLEM_LEVELS, but for a new
    topic's settling: an OFFSET_RESPONSE_ERROR of UNKNOWN_TOPIC_OR_PARTITION for a partition
    whose log end Burrow has not stored yet (see the module's docstring)."""
    stored: set[tuple[str, int]] = set()
    problems = []
    for entry in entries:
        partition = stored_log_end(entry)
        if partition is not None:
            stored.add(partition)
        elif entry.get("level") in PROBLEM_LEVELS and not (
                entry.get("msg") == OFFSET_RESPONSE_ERROR
                and entry.get("sarama_error") == UNKNOWN_TOPIC_OR_PARTITION
                and (entry.get("topic"), entry.get("partition")) not in stored):
            problems.append(entry)
    return problems


class BurrowUnavailable(RuntimeError):
    """No Burrow binary can run here (the message says why)."""


def burrow_binary() -> str:
    """The path of the Burrow binary on PATH (``Burrow`` from Debian's package, or ``burrow``)."""
    binary = shutil.which("Burrow") or shutil.which("burrow")
    if binary is None:
        raise BurrowUnavailable("Burrow is not on PATH (apt-get install burrow)")
    return binary


def split_zk_connect(connect: str) -> tuple[list[str], str]:
    """``host:port,host:port/chroot`` -> (["host:port", ...], "/chroot"); Burrow's ZooKeeper
    client takes the chroot apart from the servers ("/" without one)."""
    servers, slash, chroot = connect.partition("/")
    return servers.split(","), "/" + chroot.strip("/") if slash and chroot.strip("/") else "/"


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string for the plain text we write
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def render_toml(sections: dict[str, dict]) -> str:
    """``{"section.name": {key: value}}`` as TOML tables, in order."""
    out = []
    for name, body in sections.items():
        out.append(f"[{name}]")
        out.extend(f"{key} = {_toml_value(value)}" for key, value in body.items())
        out.append("")
    return "\n".join(out)


class Burrow:
    """One Burrow process watching one cluster of ours.

    ``brokers``: the cluster's ``host:port`` addresses; ``zk_connect``: the cluster's
    ZooKeeper connect string (with its chroot), where the groups' offsets are;
    ``own_zk_connect``: a connect string whose chroot Burrow may use for its own znodes.
    """

    def __init__(self, binary: str, workdir: Path, brokers: list[str], zk_connect: str, own_zk_connect: str,
                 kafka_version: str = "2.1.0"):
        self.binary = binary
        self.workdir = Path(workdir)
        self.brokers = list(brokers)
        self.zk_connect = zk_connect
        self.own_zk_connect = own_zk_connect
        self.kafka_version = kafka_version
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.log_path = self.workdir / "burrow.log"      # Burrow's own log (JSON lines)
        self.out_path = self.workdir / "burrow.out"      # the process's stdout and stderr
        self.config_path = self.workdir / "burrow.toml"
        self.restarts = 0               # restarts after a crash of Burrow's own (KNOWN_CRASHES)
        self._out_from = 0              # where the current process's output starts in out_path
        self._log_from = 0              # and its log in log_path
        # no proxy for the HTTP API, whatever the environment says: it is on loopback
        self._http = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    # ------------------------------------------------------------------ configuration
    def config(self) -> dict[str, dict]:
        zk_servers, cluster_chroot = split_zk_connect(self.zk_connect)
        own_servers, own_chroot = split_zk_connect(self.own_zk_connect)
        if own_chroot == "/":
            raise ValueError("Burrow's own znodes need a chroot of their own")
        for address in [*self.brokers, *zk_servers, *own_servers]:
            if not address.startswith("127.0.0.1:"):
                raise ValueError(f"Burrow is only pointed at loopback here, not at {address}")
        return {
            "general": {"pidfile": str(self.workdir / "burrow.pid")},
            "logging": {"filename": str(self.log_path), "level": "debug", "use-compression": False},
            # Burrow's own ZooKeeper use (its root path; the client has no chroot of its own)
            "zookeeper": {"servers": own_servers, "timeout": 6, "root-path": own_chroot},
            "client-profile.spark-coord": {"client-id": "burrow-spark-coord", "kafka-version": self.kafka_version},
            # log ends through the Kafka protocol: Metadata, then ListOffsets to each leader
            f"cluster.{CLUSTER}": {"class-name": "kafka", "servers": self.brokers, "client-profile": "spark-coord",
                                   "topic-refresh": REFRESH_S, "offset-refresh": REFRESH_S},
            # committed offsets from ZooKeeper: <zookeeper-path>/consumers/<group>/offsets/<topic>/<partition>
            f"consumer.{CLUSTER}-zk": {"class-name": "kafka_zk", "cluster": CLUSTER, "servers": zk_servers,
                                       "zookeeper-path": "" if cluster_chroot == "/" else cluster_chroot,
                                       "zookeeper-timeout": 6},
            "httpserver.default": {"address": "127.0.0.1:0"},
            # min-distance 0: every commit is its own entry (none folded into the one before)
            "storage.default": {"class-name": "inmemory", "workers": 4, "intervals": 10,
                                "expire-group": 604800, "min-distance": 0},
            "evaluator.default": {"class-name": "caching", "expire-cache": REFRESH_S},
        }

    def write_config(self) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(render_toml(self.config()))
        return self.config_path

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 30.0) -> "Burrow":
        self.write_config()
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith("BURROW_")}
        # one thread runs Go code: the runtime's own map code is not preempted, so the races of
        # GO_MAP_RACE cannot interleave there (Burrow's work here is a few requests a second)
        env["GOMAXPROCS"] = "1"
        self._out_from = self._size(self.out_path)
        self._log_from = self._size(self.log_path)
        self.port = 0
        with open(self.out_path, "ab") as out:
            self.proc = subprocess.Popen([self.binary, "-config-dir", str(self.workdir)], cwd=self.workdir, env=env,
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        log.info("Burrow (pid %d) serving http://127.0.0.1:%d", self.proc.pid, self.port)
        return self

    def _wait_ready(self, timeout: float) -> None:
        """Wait until the HTTP listener is up and /burrow/admin answers; RuntimeError (with
        the logs) if the process exits or the deadline passes first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Burrow exited with {self.proc.returncode}:\n{self.log_tail()}")
            if not self.port:
                self.port = self._listener_port()
            elif self._admin_answers():
                return
            time.sleep(0.05)
        raise RuntimeError(f"Burrow's HTTP API did not answer within {timeout} s:\n{self.log_tail()}")

    @staticmethod
    def _size(path: Path) -> int:
        try:
            return path.stat().st_size
        except OSError:
            return 0

    def _output(self) -> str:
        """What the current process wrote to stdout and stderr (a Go crash's trace goes there)."""
        try:
            with open(self.out_path, "rb") as f:
                f.seek(self._out_from)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        """Whether Burrow runs; after a crash of KNOWN_CRASHES it is restarted first (up to
        MAX_RESTARTS times, each logged with the crash's first lines).  RuntimeError, with
        the output, if it exited any other way."""
        if self.proc is None:
            return False
        if self.proc.poll() is None:
            return True
        code, output = self.proc.returncode, self._output()
        self.proc = None
        crash = known_crash(output)
        if crash is not None and self.restarts < MAX_RESTARTS:
            self.restarts += 1
            log.warning("Burrow crashed on a bug of its own (exit %d), restart %d:\n%s", code, self.restarts, crash)
            self.start()
            return True
        raise RuntimeError(f"Burrow exited with {code} while in use:\n{self.log_tail()}")

    def _listener_port(self) -> int:
        for entry in self.log_entries(self._log_from):
            if entry.get("msg") == "started listener":
                host, _, port = entry["listener"].rpartition(":")
                if host != "127.0.0.1":
                    raise RuntimeError(f"Burrow listens on {entry['listener']}, not on loopback")
                return int(port)
        return 0

    def _admin_answers(self) -> bool:
        try:
            with self._http.open(f"http://127.0.0.1:{self.port}/burrow/admin", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM (Burrow stops its modules and exits 0), then SIGKILL past ``timeout``; the exit status."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        return proc.returncode

    def __enter__(self) -> "Burrow":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ logs
    def log_entries(self, start: int = 0) -> list[dict]:
        """Burrow's log from byte ``start`` on, one dict per JSON line (lines that are not
        JSON are kept as ``{"msg": line}``)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(start)
                text = f.read().decode(errors="replace")
        except OSError:
            return []
        entries = []
        for line in text.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                entry = {"msg": line}
            entries.append(entry if isinstance(entry, dict) else {"msg": line})
        return entries

    def problems(self) -> list[dict]:
        """Burrow's log entries at level warn or above, but for new topics settling (``problems_in``)."""
        return problems_in(self.log_entries())

    def stored_partitions(self, topic: str) -> set[int]:
        """The partitions of ``topic`` whose log end Burrow has stored (from its log: reading them
        does not ask its HTTP API about a topic it holds only some log ends of; NIL_BROKER_OFFSET)."""
        return {p for t, p in filter(None, map(stored_log_end, self.log_entries())) if t == topic}

    def log_tail(self, lines: int = 40) -> str:
        parts = []  # the process's own output last: a crash's trace is what a truncated report keeps
        for path in (self.log_path, self.out_path):
            try:
                tail = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                tail = ["(none)"]
            parts.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    # ------------------------------------------------------------------ HTTP API
    def get(self, path: str) -> tuple[int, dict]:
        """GET ``path`` of the HTTP API: (status, JSON body).  A request that Burrow ends by
        crashing on one of KNOWN_CRASHES is asked again of the restarted process."""
        try:
            return self._get(path)  # an HTTP error status is answered there, not raised
        except (OSError, http.client.HTTPException) as failure:
            proc = self.proc
            if proc is None:
                raise
            try:
                proc.wait(CRASH_EXIT_S)
            except subprocess.TimeoutExpired:
                raise failure from None  # still running: the failure was not a crash
            self.alive()  # restarts it after a known crash; RuntimeError after any other exit
            return self._get(path)

    def _get(self, path: str) -> tuple[int, dict]:
        if not self.alive():
            raise RuntimeError("Burrow is not running")
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with self._http.open(url, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:  # 404s come with a JSON body too
            body = e.read()
            try:
                return e.code, json.loads(body)
            except ValueError:
                return e.code, {"error": True, "message": body.decode(errors="replace")}

    def _cluster_path(self, *parts: str) -> str:
        return "/v3/kafka/" + "/".join(urllib.parse.quote(p, safe="") for p in (CLUSTER, *parts))

    def topic_offsets(self, topic: str) -> list[int] | None:
        """The log end of each partition of ``topic`` as Burrow last read it (None: not known yet)."""
        status, body = self.get(self._cluster_path("topic", topic))
        return body["offsets"] if status == 200 and not body.get("error") else None

    def consumers(self) -> list[str]:
        """The groups Burrow knows in the cluster (those with stored offsets)."""
        status, body = self.get(self._cluster_path("consumer"))
        assert status == 200 and not body.get("error"), f"GET consumer list: {status} {body}"
        return body["consumers"]

    def lag(self, group: str) -> dict | None:
        """The group's evaluated status (partitions with offsets and current lag, totallag), or None (404)."""
        status, body = self.get(self._cluster_path("consumer", group, "lag"))
        if status == 404:
            return None
        assert status == 200 and not body.get("error"), f"GET lag of {group}: {status} {body}"
        return body["status"]


def partition_view(status: dict, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (latest committed offset Burrow holds, its current lag), for ``topic``, from a lag status."""
    return {p["partition"]: (p["end"]["offset"] if p.get("end") else None, p["current_lag"])
            for p in status.get("partitions") or [] if p["topic"] == topic}


