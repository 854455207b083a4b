"""A real Apache ZooKeeper server, run with java from the jars the pyspark wheel ships.

``EmbeddedZooKeeper`` writes a ``zoo.cfg`` from ``zookeeper.properties`` keys (which
ZooKeeper reads natively; unknown keys become ``zookeeper.<key>`` system
properties), starts it in its own process session, and waits until the server
answers the ``srvr`` four-letter word with its mode.  ZooKeeper's own output goes
to ``<dataDir>/zookeeper.log`` (log4j at WARN), never to our stdout; when the
server dies during start-up the error carries the tail of that log.

Standalone (no ``server.N`` keys) it runs ``ZooKeeperServerMain``.  With
``server.N=host:peerPort:electionPort`` keys it is one member of an ensemble and
runs ``QuorumPeerMain``, ZooKeeper's own entry point for that: its id comes
from the ``myid`` key (written to ``<dataDir>/myid``) or, as ZooKeeper users
know it, from an existing ``<dataDir>/myid`` file; it serves once a quorum of
the ensemble is up.  ``EmbeddedEnsemble`` runs a whole ensemble on one machine
(tests, trials).

It is the default for local clusters and tests; production points
``zookeeper.connect`` at an ensemble instead.  Note the server is a child process:
``stop()`` it (or use it as a context manager).  A Python process that exits
normally stops its servers (atexit); one killed with SIGKILL leaves the java
process running.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import javaproperties

from spark_coord import config
from spark_coord.net import free_port

log = logging.getLogger(__name__)

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
QUORUM_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
MYID_FILE = "myid"
#: Keys of zookeeper.properties that are ours, not ZooKeeper's: never written to zoo.cfg.
OWN_KEYS = ("myid",)
_SERVER_KEY = re.compile(r"^server\.(\d+)$")
MIN_JAVA = 17
LOG_FILE = "zookeeper.log"
CFG_FILE = "zoo.cfg"
LOG4J_FILE = "log4j2.properties"
DEFAULT_JVM_OPTS = ("-Xmx512m", "-XX:+UseSerialGC")

# log4j2 for the server: WARN and above, to stdout (which we point at zookeeper.log).
_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{ISO8601} %-5p [%t] %c{1}: %m%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
# a WARN on every start about an unset limit we do not use
logger.cnxn.name = org.apache.zookeeper.server.ServerCnxnFactory
logger.cnxn.level = error
"""

_ADDRESS_IN_USE = re.compile(r"address already in use|BindException", re.IGNORECASE)


class ZooKeeperError(RuntimeError):
    """The embedded ZooKeeper server could not be found, started or stopped."""


# --------------------------------------------------------------------------- java

_java_checked: dict[str, int] = {}


def find_java() -> str:
    """The java executable: ``$JAVA_HOME/bin/java`` if JAVA_HOME is set, else ``java`` on PATH.

    Raises ``ZooKeeperError`` when none is found or it is older than Java 17.
    """
    home = os.environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not os.access(java, os.X_OK):
            raise ZooKeeperError(f"JAVA_HOME={home} has no executable bin/java; fix JAVA_HOME or unset it")
    else:
        found = shutil.which("java")
        if not found:
            raise ZooKeeperError(f"java not found: install Java {MIN_JAVA}+ or set JAVA_HOME "
                                 "(the embedded ZooKeeper and Spark need it)")
        java = found
    major = java_major_version(java)
    if major < MIN_JAVA:
        raise ZooKeeperError(f"{java} is Java {major}; Java {MIN_JAVA} or newer is needed")
    return java


def java_major_version(java: str) -> int:
    """Major version of ``java`` (8 for "1.8.0_292", 17 for "17.0.15"), from ``java -version``."""
    if java in _java_checked:
        return _java_checked[java]
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ZooKeeperError(f"cannot run {java} -version: {e}") from None
    m = re.search(r'version "([0-9]+)(?:\.([0-9]+))?', out.stderr + out.stdout)
    if not m:
        raise ZooKeeperError(f"cannot tell the version of {java}: {(out.stderr or out.stdout).strip()[:200]!r}")
    major = int(m.group(1))
    if major == 1 and m.group(2):
        major = int(m.group(2))
    _java_checked[java] = major
    return major


def find_jars() -> Path:
    """The ``jars`` directory of the installed pyspark wheel (it ships zookeeper-*.jar).

    Found without importing pyspark (which is slow to import).  Under spark-submit,
    ``pyspark`` may be imported from Spark's ``pyspark.zip``; then ``$SPARK_HOME/jars``
    (which spark-submit sets) holds the same jars.
    """
    candidates = []
    spec = importlib.util.find_spec("pyspark")
    if spec is not None and spec.origin:
        candidates.append(Path(spec.origin).parent / "jars")
    if os.environ.get("SPARK_HOME"):
        candidates.append(Path(os.environ["SPARK_HOME"]) / "jars")
    if not candidates:
        raise ZooKeeperError("pyspark is not installed; its jars provide the ZooKeeper server")
    for jars in candidates:
        if jars.is_dir() and any(jars.glob("zookeeper-*.jar")):
            return jars
    raise ZooKeeperError(f"no zookeeper-*.jar in {' or '.join(map(str, candidates))}; "
                         "is this a full pyspark installation?")


# ---------------------------------------------------------------------- helpers

def four_letter_word(host: str, port: int, word: str = "srvr", timeout: float = 2.0) -> str:
    """Send a ZooKeeper four-letter word (``srvr``, ``ruok``, ``mntr``...) and return the answer."""
    if len(word) != 4 or not word.isalpha():
        raise ValueError(f"not a four-letter word: {word!r}")
    chunks: list[bytes] = []
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode("ascii"))
        total = 0
        while total < 1 << 20:
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def render_cfg(settings: Mapping[str, Any]) -> str:
    """zoo.cfg text for ``settings`` (bools as true/false, lists comma-joined, None left out).

    Written with Java's properties escaping (ZooKeeper reads the file with
    ``java.util.Properties``), so a value holding a line break, ``=`` or non-ASCII
    text reads back exactly and cannot inject another setting.  Raises ValueError
    for a key that is not a plain setting name.
    """
    lines = ["# written by spark-coord; ZooKeeper reads this file natively"]
    for key, value in settings.items():
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            text = ",".join(str(v) for v in value)
        else:
            text = str(value)
        if not key or any(c in key for c in "=:#!\\ \t\r\n\f"):
            raise ValueError(f"illegal ZooKeeper setting name {key!r}")
        lines.append(javaproperties.join_key_value(key, text))
    return "\n".join(lines) + "\n"


def ensemble_servers(settings: Mapping[str, Any]) -> dict[int, str]:
    """``{N: "host:peerPort:electionPort[...]"}`` from the ``server.N`` keys (empty: standalone)."""
    out = {}
    for key, value in settings.items():
        m = _SERVER_KEY.match(key)
        if m and value not in (None, ""):
            out[int(m.group(1))] = str(value).strip()
    return out


def resolve_myid(settings: Mapping[str, Any], data_dir: Path) -> int:
    """This ensemble member's id: the ``myid`` setting, else ``<dataDir>/myid``.

    Raises ``ZooKeeperError`` when neither gives an integer, when they disagree,
    or when no ``server.N`` line has that id.
    """
    servers = ensemble_servers(settings)
    path = data_dir / MYID_FILE
    from_file = None
    if path.exists():
        try:
            from_file = int(path.read_text().strip())
        except ValueError:
            raise ZooKeeperError(f"{path} does not hold a server id: {path.read_text()[:40]!r}") from None
    raw = settings.get("myid")
    if raw in (None, ""):
        if from_file is None:
            raise ZooKeeperError(f"ensemble member without an id: set myid (the N of this server's server.N "
                                 f"line) or write it to {path}")
        myid = from_file
    else:
        try:
            myid = int(str(raw).strip())
        except ValueError:
            raise ZooKeeperError(f"myid: {raw!r} is not an integer") from None
        if from_file is not None and from_file != myid:
            raise ZooKeeperError(f"myid={myid} but {path} says {from_file}: this data directory belongs to "
                                 f"server {from_file}")
    if myid not in servers:
        raise ZooKeeperError(f"myid {myid} has no server.{myid} line (servers: "
                             f"{', '.join(f'server.{n}' for n in sorted(servers))})")
    return myid


def _as_bool_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_live: "weakref.WeakSet[EmbeddedZooKeeper]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for zk in list(_live):
        try:
            zk.stop(timeout=5)
        except Exception:  # noqa: BLE001 -- best effort at interpreter exit
            pass


# ------------------------------------------------------------------------ server

class EmbeddedZooKeeper:
    """One Apache ZooKeeper server in a child java process: standalone, or one member of
    an ensemble when ``settings`` hold ``server.N`` lines (then ``myid`` or
    ``<data_dir>/myid`` names this member).

    ``port=0`` picks a free port at ``start()`` (kept across restarts of the same
    object, so clients can reconnect after ``kill()`` + ``start()``).  ``data_dir``
    None uses a temporary directory that ``stop()`` deletes.  ``settings`` are
    zoo.cfg keys laid over ``config.ZOOKEEPER``'s defaults; ``clientPort`` and
    ``dataDir`` always come from ``port`` and ``data_dir``.

    >>> with EmbeddedZooKeeper() as zk:      # doctest: +SKIP
    ...     client = connect(zk.connect_string)
    """

    def __init__(self, port: int = 0, data_dir: str | os.PathLike[str] | None = None,
                 settings: Mapping[str, Any] | None = None, *, jvm_opts: tuple[str, ...] = DEFAULT_JVM_OPTS):
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
            raise ValueError(f"clientPort {port!r} is not in 0..65535")
        merged: dict[str, Any] = config.ZOOKEEPER.defaults()
        merged.update(settings or {})
        self._settings = merged
        self.servers = ensemble_servers(merged)
        self.myid: int | None = None
        self._auto_port = port == 0
        self._port = port
        self._own_data_dir = data_dir is None
        self._data_dir = Path(data_dir).resolve() if data_dir is not None else None
        self._jvm_opts = tuple(jvm_opts)
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_start = 0
        self._lock = threading.Lock()
        address = str(merged.get("clientPortAddress") or "127.0.0.1")
        self.host = "127.0.0.1" if address in ("0.0.0.0", "::", "") else address

    # ------------------------------------------------------------------ properties

    @property
    def port(self) -> int:
        """The client port (0 until the first ``start()`` when a free port is to be picked)."""
        return self._port

    @property
    def connect_string(self) -> str:
        """``host:port`` for kazoo / ``zookeeper.connect``."""
        if not self._port:
            raise ZooKeeperError("the server has not been started yet, so it has no port")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self._port}"

    @property
    def pid(self) -> int | None:
        """Process id of the java process (None before ``start()``)."""
        return self._proc.pid if self._proc else None

    @property
    def data_dir(self) -> Path | None:
        return self._data_dir

    @property
    def log_path(self) -> Path | None:
        """ZooKeeper's own log file."""
        return self._data_dir / LOG_FILE if self._data_dir else None

    @property
    def in_ensemble(self) -> bool:
        """True when this server is one member of an ensemble (``server.N`` settings)."""
        return bool(self.servers)

    def mode(self) -> str | None:
        """What ``srvr`` reports: standalone, leader, follower or observer (None: not serving)."""
        try:
            answer = four_letter_word(self.host, self._port, "srvr", timeout=1.0)
        except OSError:
            return None
        m = re.search(r"^Mode: (\w+)", answer, re.MULTILINE)
        return m.group(1) if m else None

    def is_alive(self) -> bool:
        """True while the java process runs (it may not be serving yet)."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc else None

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 30.0, wait: bool = True) -> "EmbeddedZooKeeper":
        """Start the server and wait until it serves (at most ``timeout`` seconds).

        ``wait=False`` returns once the process runs: an ensemble member serves only
        once a quorum of its ensemble is up, so start them all, then ``wait_serving``.
        Raises ``ZooKeeperError`` (with the tail of ZooKeeper's log) when java or the
        jars are missing, the ensemble settings are inconsistent, the process dies,
        or it does not serve in time.
        """
        with self._lock:
            if self.is_alive():
                raise ZooKeeperError(f"ZooKeeper is already running (pid {self.pid})")
            java, jars = find_java(), find_jars()
            if self._data_dir is None:
                self._data_dir = Path(tempfile.mkdtemp(prefix="spark-coord-zk-"))
            self._data_dir.mkdir(parents=True, exist_ok=True)
            if self.in_ensemble:
                self.myid = resolve_myid(self._settings, self._data_dir)
                (self._data_dir / MYID_FILE).write_text(f"{self.myid}\n")
            deadline = time.monotonic() + timeout
            attempts = 3 if self._auto_port and not self._port else 1
            for attempt in range(1, attempts + 1):
                if not self._port:
                    self._port = free_port(self.host)
                self._spawn(java, jars)
                _live.add(self)
                if not wait:
                    return self
                try:
                    self._wait_ready(deadline)
                    return self
                except ZooKeeperError as e:
                    self._reap(timeout=5)
                    lost_port_race = self._auto_port and _ADDRESS_IN_USE.search(str(e))
                    if lost_port_race and attempt < attempts:
                        log.info("port %d was taken before ZooKeeper bound it; picking another", self._port)
                        self._port = 0
                        continue
                    raise
        raise AssertionError("unreachable")

    def wait_serving(self, timeout: float = 30.0) -> "EmbeddedZooKeeper":
        """Wait until the started server serves clients (an ensemble member: until it has a quorum)."""
        with self._lock:
            if self._proc is None:
                raise ZooKeeperError("the server has not been started")
            self._wait_ready(time.monotonic() + timeout)
        return self

    def _spawn(self, java: str, jars: Path) -> None:
        assert self._data_dir is not None
        settings = {k: v for k, v in self._settings.items() if k not in OWN_KEYS}
        settings["clientPort"] = self._port
        settings["dataDir"] = str(self._data_dir)
        cfg = self._data_dir / CFG_FILE
        cfg.write_text(render_cfg(settings))
        log4j = self._data_dir / LOG4J_FILE
        log4j.write_text(_LOG4J2)
        cmd = [
            java, *self._jvm_opts,
            "-cp", str(jars / "*"),
            f"-Dzookeeper.admin.enableServer={_as_bool_text(settings.get('admin.enableServer', False))}",
            f"-Dzookeeper.4lw.commands.whitelist={settings.get('4lw.commands.whitelist') or '*'}",
            "-Dzookeeper.jmx.log4j.disable=true",
            f"-Dlog4j2.configurationFile={log4j}",
            QUORUM_MAIN_CLASS if self.in_ensemble else MAIN_CLASS, str(cfg),
        ]
        log_path = self._data_dir / LOG_FILE
        with open(log_path, "ab") as out:
            self._log_start = out.tell()
            member = f" as server.{self.myid} of an ensemble of {len(self.servers)}" if self.in_ensemble else ""
            out.write(f"---- spark-coord: starting ZooKeeper on port {self._port}{member}\n".encode())
            out.flush()
            log.debug("starting ZooKeeper: %s", " ".join(cmd))
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                          cwd=self._data_dir, start_new_session=True)

    def _wait_ready(self, deadline: float) -> None:
        assert self._proc is not None
        delay = 0.05
        last_error = ""
        while True:
            code = self._proc.poll()
            if code is not None:
                raise ZooKeeperError(f"ZooKeeper exited with code {code} while starting on port {self._port}; "
                                     f"last lines of {self.log_path}:\n{self.log_tail()}")
            try:
                answer = four_letter_word(self.host, self._port, "srvr", timeout=1.0)
                m = re.search(r"^Mode: (\w+)", answer, re.MULTILINE)
                if m:
                    log.info("ZooKeeper listening on %s (pid %d); mode %s; data in %s; its log: %s",
                             self.connect_string, self.pid, m.group(1), self._data_dir, self.log_path)
                    return
                last_error = answer.strip()[:200]
            except OSError as e:
                last_error = str(e)
            if time.monotonic() >= deadline:
                self._signal(signal.SIGKILL)
                raise ZooKeeperError(f"ZooKeeper did not answer on {self.host}:{self._port} in time "
                                     f"(last: {last_error}); last lines of {self.log_path}:\n{self.log_tail()}")
            time.sleep(delay)  # polling a child process for readiness; nothing to wait on
            delay = min(delay * 1.5, 0.5)

    def log_tail(self, lines: int = 25) -> str:
        """The last ``lines`` lines ZooKeeper logged in this run."""
        path = self.log_path
        if path is None or not path.exists():
            return "(no log)"
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            start = max(self._log_start, end - 16384)
            f.seek(start)
            text = f.read().decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    def _signal(self, sig: int) -> None:
        if self._proc is not None and self._proc.poll() is None:
            try:
                os.kill(self._proc.pid, sig)
            except ProcessLookupError:
                pass

    def _reap(self, timeout: float) -> None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL; always waits for the process to be gone."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log.warning("ZooKeeper (pid %d) ignored SIGTERM for %.0f s; killing it", self._proc.pid, timeout)
                self._signal(signal.SIGKILL)
                self._proc.wait()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server: SIGTERM, then SIGKILL after ``timeout`` seconds. Idempotent.

        A temporary data directory (``data_dir=None``) is deleted.
        """
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                self._reap(timeout)
                log.info("ZooKeeper (pid %d) stopped", self._proc.pid)
            _live.discard(self)
            if self._own_data_dir and self._data_dir is not None:
                shutil.rmtree(self._data_dir, ignore_errors=True)
                self._data_dir = None

    def kill(self) -> None:
        """SIGKILL the server (a crash, for tests); the data directory is kept so ``start()`` can resume."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                self._signal(signal.SIGKILL)
                self._proc.wait()
                log.info("ZooKeeper (pid %d) killed", self._proc.pid)

    def __enter__(self) -> "EmbeddedZooKeeper":
        if not self.is_alive():
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.is_alive() else "stopped"
        return f"EmbeddedZooKeeper({self.host}:{self._port}, {state})"


# ---------------------------------------------------------------------- ensemble

class EmbeddedEnsemble:
    """``size`` ZooKeeper servers on this machine forming one ensemble (tests and trials).

    Ports are picked at ``start()`` (client, peer and election port per server) and
    kept, so a member that was ``kill()``-ed can be ``start()``-ed again at the same
    address.  ``members[i]`` is ``server.{i + 1}``; ``data_dir`` None uses a
    temporary directory that ``stop()`` deletes.

    ``hosts`` gives each member an address of its own (all of them bind ``host``
    otherwise): each member's client, peer and election ports are bound on its
    address, so members on distinct addresses (one network namespace each, as the
    nemesis runs them) may share fixed ``ports`` = (client, peer, election).
    ``launch(i, start)`` runs ``start`` for member i (e.g. on a thread inside that
    member's namespace, so that its java process lives there); None: here.
    """

    def __init__(self, size: int = 3, data_dir: str | os.PathLike[str] | None = None,
                 settings: Mapping[str, Any] | None = None, host: str = "127.0.0.1", *,
                 hosts: Sequence[str] | None = None, ports: tuple[int, int, int] | None = None,
                 launch: Callable[[int, Callable[[], Any]], Any] | None = None):
        if size < 1:
            raise ValueError(f"an ensemble needs at least one server, not {size}")
        if hosts is not None and len(hosts) != size:
            raise ValueError(f"{len(hosts)} hosts for an ensemble of {size}")
        if ports is not None and (hosts is None or len(set(hosts)) != size):
            raise ValueError("fixed ports need one distinct host per member")
        self.size = size
        self.host = host
        self.hosts = list(hosts) if hosts is not None else [host] * size
        self.ports = ports
        self._launch = launch
        self._settings = dict(settings or {})
        self._own_data_dir = data_dir is None
        self._data_dir = Path(data_dir).resolve() if data_dir is not None else None
        self.members: list[EmbeddedZooKeeper] = []

    @property
    def connect_string(self) -> str:
        """``host:port,host:port,...`` of every member."""
        if not self.members:
            raise ZooKeeperError("the ensemble has not been started yet")
        return ",".join(m.connect_string for m in self.members)

    def leader(self) -> EmbeddedZooKeeper | None:
        """The member that reports ``Mode: leader`` (None while there is none)."""
        return next((m for m in self.members if m.is_alive() and m.mode() == "leader"), None)

    def start(self, timeout: float = 60.0) -> "EmbeddedEnsemble":
        """Start every member, then wait until each serves (a quorum formed)."""
        if self._data_dir is None:
            self._data_dir = Path(tempfile.mkdtemp(prefix="spark-coord-zk-ensemble-"))
        taken: set[int] = set()

        def port() -> int:
            while True:
                p = free_port(self.host)
                if p not in taken:
                    taken.add(p)
                    return p

        def bracket(h: str) -> str:
            return f"[{h}]" if ":" in h else h

        # (address, client port, peer port, election port) of each member
        addresses = [(h, *(self.ports or (port(), port(), port()))) for h in self.hosts]
        servers = {f"server.{n}": f"{bracket(h)}:{p}:{e}" for n, (h, _, p, e) in enumerate(addresses, 1)}
        self.members = [EmbeddedZooKeeper(c, self._data_dir / f"server-{n}",
                                          {"clientPortAddress": h, **self._settings, **servers, "myid": n})
                        for n, (h, c, _, _) in enumerate(addresses, 1)]
        deadline = time.monotonic() + timeout
        try:
            for i, m in enumerate(self.members):
                if self._launch is None:
                    m.start(timeout, wait=False)
                else:
                    self._launch(i, lambda m=m: m.start(timeout, wait=False))
            for m in self.members:
                m.wait_serving(max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        log.info("ZooKeeper ensemble of %d serving at %s (leader: server.%s)", self.size, self.connect_string,
                 getattr(self.leader(), "myid", "?"))
        return self

    def stop(self) -> None:
        """Stop every member; a temporary data directory is deleted.  Idempotent."""
        for m in self.members:
            m.stop()
        if self._own_data_dir and self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None

    def __enter__(self) -> "EmbeddedEnsemble":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- CLI

def run_cli(args: Any) -> int:
    """``spark-coord zookeeper [--config FILE] [--override key=value ...]``.

    Starts the server (standalone, or one member of an ensemble when the settings
    have ``server.N`` lines), logs where it listens, serves until SIGTERM or SIGINT,
    stops it cleanly and returns 0 (1 if the server could not start or died).  An
    ensemble member keeps running while it waits for a quorum of its peers.
    """
    cfg = config.load(config.ZOOKEEPER, getattr(args, "config", None), getattr(args, "override", None) or [])
    settings = dict(cfg)
    zk = EmbeddedZooKeeper(port=cfg["clientPort"], data_dir=cfg["dataDir"], settings=settings)

    stop_requested = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        received.append(signum)
        stop_requested.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            zk.start(wait=not zk.in_ensemble)
        except ZooKeeperError as e:
            log.error("%s", e)
            zk.stop()
            return 1
        serving = not zk.in_ensemble
        if not serving:
            log.info("server.%d of an ensemble of %d (%s) started (pid %d); it serves once a quorum is up",
                     zk.myid, len(zk.servers), ", ".join(f"server.{n}={a}" for n, a in sorted(zk.servers.items())),
                     zk.pid)
        log.info("serving until SIGTERM or SIGINT")
        while not stop_requested.wait(0.5):
            if not zk.is_alive():
                log.error("ZooKeeper exited unexpectedly with code %s; last lines of %s:\n%s",
                          zk.returncode, zk.log_path, zk.log_tail())
                zk.stop()
                return 1
            if not serving:
                mode = zk.mode()
                if mode is not None:
                    serving = True
                    log.info("ZooKeeper listening on %s (pid %d); mode %s", zk.connect_string, zk.pid, mode)
        log.info("received %s; stopping ZooKeeper", signal.Signals(received[0]).name)
        zk.stop()
        return 0
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        zk.stop()
