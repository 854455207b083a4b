"""Apache Kafka 4.2 as a test peer: real brokers in KRaft mode, run from Maven's jars with ``java``.

``kafka_jars()`` resolves the dependency list ``scripts/apache-kafka/pom.xml`` (the broker,
its tools, log4j2) into a cache outside the repository on first use (``peers.maven``), and
``spark_kafka_jars()`` the jars Spark's ``format("kafka")`` needs beyond pyspark's own, at
the installed pyspark's version where it is served (``scripts/apache-kafka/spark-sql-kafka.pom.xml``);
``scripts/apache-kafka.sh`` does the same by hand.  Either raises ``ApacheKafkaUnavailable``
(the tests skip with it) where Maven or Java cannot give them.

``ApacheKafkaCluster(workdir, nodes=1|3, security="PLAINTEXT"|"SASL_SSL")`` formats and
runs combined broker+controller nodes on free loopback ports: ``kafka.tools.StorageTool
format``, then ``kafka.Kafka server.properties`` per node, as ``bin/kafka-storage.sh`` and
``bin/kafka-server-start.sh`` do.  Each node has three listeners: CLIENT (the one
``bootstrap`` names; PLAINTEXT, or SASL_SSL with SCRAM-SHA-512 and a PEM keystore from
the test PKI), INTERNAL (replication, PLAINTEXT) and CONTROLLER (the KRaft quorum,
PLAINTEXT).  A node's output goes to ``<workdir>/node-<id>/server.log``.

``kafka_tool(jars, main_class, *args)`` runs one of Kafka's command-line tools by its main
class (``TOPICS``, ``CONSOLE_PRODUCER``, ...: the classes of ``bin/*.sh`` in 4.2).
"""

from __future__ import annotations

import base64
import functools
import logging
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
import xml.etree.ElementTree as ElementTree
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from peers.maven import MavenUnavailable, resolve

from spark_coord.net import free_port

log = logging.getLogger(__name__)

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "apache-kafka"
KAFKA_POM = SCRIPTS / "pom.xml"
SPARK_KAFKA_POM = SCRIPTS / "spark-sql-kafka.pom.xml"
SERVER_LOG4J = SCRIPTS / "log4j2-server.properties"
TOOLS_LOG4J = SCRIPTS / "log4j2-tools.properties"

#: Main classes of Kafka 4.2's scripts (bin/<name>.sh).
SERVER = "kafka.Kafka"                                              # kafka-server-start
STORAGE = "kafka.tools.StorageTool"                                 # kafka-storage
TOPICS = "org.apache.kafka.tools.TopicCommand"                      # kafka-topics
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"         # kafka-console-producer
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"  # kafka-console-consumer
CONFIGS = "kafka.admin.ConfigCommand"                               # kafka-configs
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"  # kafka-consumer-groups
SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"  # kafka-share-groups
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"        # kafka-producer-perf-test
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"        # kafka-consumer-perf-test
FEATURES = "org.apache.kafka.tools.FeatureCommand"                  # kafka-features
METADATA_QUORUM = "org.apache.kafka.tools.MetadataQuorumCommand"    # kafka-metadata-quorum

#: JVM flags of every process: a small heap, and start-up before peak speed on a small shared
#: machine (C1 only, the serial collector: few compiler and GC threads).
JVM_FLAGS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-XX:+ExitOnOutOfMemoryError",
             "-Djava.awt.headless=true")
SERVER_HEAP = ("-Xms64m", "-Xmx512m")


def java_env() -> dict[str, str]:
    """The environment of a Kafka JVM: the test suite's JAVA_TOOL_OPTIONS (tests/conftest.py) left out,
    since ``JVM_FLAGS`` carry the same flags and a JVM that picks them up says so on its output, which
    the tools' tests read."""
    env = dict(os.environ)
    env.pop("JAVA_TOOL_OPTIONS", None)
    return env


TOOL_HEAP = ("-Xms32m", "-Xmx256m")

#: The SCRAM users a SASL_SSL cluster is formatted with (name -> password), unless given.
DEFAULT_USERS = {"alice": "alice-secret", "bob": "bob-secret"}
MECHANISM = "SCRAM-SHA-512"


class ApacheKafkaUnavailable(RuntimeError):
    """Apache Kafka cannot run here: no Java 17, or its jars cannot be resolved (the message says why)."""


# ---------------------------------------------------------------------------- jars
def pom_property(pom: Path, name: str) -> str:
    """A ``<properties>`` value of ``pom`` (the version it pins)."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    value = ElementTree.parse(pom).getroot().find(f"m:properties/m:{name}", ns)
    if value is None or not (value.text or "").strip():
        raise ValueError(f"{pom} has no property {name}")
    return value.text.strip()


KAFKA_VERSION = pom_property(KAFKA_POM, "kafka.version")


def kafka_jars() -> Path:
    """The folder of Apache Kafka's jars (``java -cp '<folder>/*'``), resolved on first use."""
    java_binary()
    try:
        return resolve(KAFKA_POM, f"apache-kafka-{KAFKA_VERSION}")
    except MavenUnavailable as e:
        raise ApacheKafkaUnavailable(str(e)) from e


def spark_kafka_version() -> str:
    """The version of Spark's Kafka connector wanted: ``$SPARK_COORD_SPARK_KAFKA_VERSION``, else pyspark's."""
    explicit = os.environ.get("SPARK_COORD_SPARK_KAFKA_VERSION")
    if explicit:
        return explicit
    import pyspark

    return pyspark.__version__


def _artifact(jar_name: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``."""
    return re.sub(r"-\d[^-]*(-[A-Za-z0-9.]+)?\.jar$", "", jar_name)


def spark_kafka_jars() -> list[Path]:
    """The jars ``spark.jars`` needs for ``format("kafka")``: the connector at the installed
    pyspark's version and what it depends on that pyspark's ``jars/`` lacks.  Where no
    connector of pyspark's version is served, the pom's own ``spark.version`` (the newest
    known to be) is taken instead, with a warning; ``$SPARK_COORD_SPARK_KAFKA_VERSION``
    names one version and nothing else."""
    import pyspark

    wanted = spark_kafka_version()
    versions = [wanted]
    known = pom_property(SPARK_KAFKA_POM, "spark.version")
    if not os.environ.get("SPARK_COORD_SPARK_KAFKA_VERSION") and known != wanted:
        versions.append(known)
    pyspark_jars = {_artifact(j.name) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    failures = []
    for version in versions:
        try:
            folder = resolve(SPARK_KAFKA_POM, f"spark-sql-kafka-{version}", {"spark.version": version},
                             keep=lambda jar: _artifact(jar) not in pyspark_jars)
        except MavenUnavailable as e:
            failures.append(str(e))
            continue
        if version != wanted:
            log.warning("Spark's Kafka connector %s is not served; using %s with pyspark %s", wanted, version,
                        pyspark.__version__)
        return sorted(folder.glob("*.jar"))
    raise ApacheKafkaUnavailable("\n".join(failures) + f"\n(pyspark is {pyspark.__version__}; "
                                 "SPARK_COORD_SPARK_KAFKA_VERSION names another connector version)")


@functools.lru_cache(maxsize=None)
def java_binary() -> str:
    """``java`` of ``$JAVA_HOME``, else of PATH, if it is Java 17 or later (Kafka 4's brokers need 17);
    asked once per process (``java -version`` starts a JVM)."""
    home = os.environ.get("JAVA_HOME")
    in_home = Path(home) / "bin" / "java" if home else None
    java = str(in_home) if in_home is not None and in_home.is_file() else shutil.which("java")
    if java is None:
        raise ApacheKafkaUnavailable("java is not on PATH (Apache Kafka 4 needs Java 17 or later)")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ApacheKafkaUnavailable(f"{java} -version failed: {e}") from e
    found = re.search(r'version "(\d+)', out)
    if found is None or int(found.group(1)) < 17:
        raise ApacheKafkaUnavailable(f"Apache Kafka 4 needs Java 17 or later; {java} is {out.strip()[:80]!r}")
    return java


def kafka_tool_command(jars: Path, main_class: str, *args: str) -> list[str]:
    """The command line that runs a Kafka command-line tool by its main class (for a tool that
    runs until stopped, such as the console consumer, under ``subprocess.Popen``)."""
    return [java_binary(), *TOOL_HEAP, *JVM_FLAGS, f"-Dlog4j2.configurationFile={TOOLS_LOG4J}",
            "-cp", f"{jars}/*", main_class, *args]


def kafka_tool(jars: Path, main_class: str, *args: str, timeout: float = 120.0, input: str | None = None,
               check: bool = False) -> subprocess.CompletedProcess:
    """Run a Kafka command-line tool by its main class with the resolved jars; its completed
    process (text output).  ``check``: AssertionError with its output if it exits non-zero."""
    done = subprocess.run(kafka_tool_command(jars, main_class, *args), capture_output=True, text=True, timeout=timeout,
                          input=input, stdin=None if input is not None else subprocess.DEVNULL, env=java_env())
    if check and done.returncode != 0:
        raise AssertionError(f"{main_class} {' '.join(args)} exited with {done.returncode}:\n"
                             f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return done


def random_cluster_id() -> str:
    """A cluster id as Kafka's ``Uuid.randomUuid()`` makes it: 16 random bytes, URL-safe base64
    without padding, never starting with '-' (it would read as an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


# ---------------------------------------------------------------------------- cluster
@dataclass
class KafkaNode:
    """One combined broker+controller process of an ``ApacheKafkaCluster``."""

    node_id: int
    directory: Path
    port: int                 # CLIENT listener
    internal_port: int        # INTERNAL listener (replication)
    controller_port: int      # CONTROLLER listener (the KRaft quorum)
    proc: subprocess.Popen | None = field(default=None, repr=False)
    log_from: int = 0         # where the current process's output starts in log_path

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def properties_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        """The current process's ERROR and FATAL lines (each with the exception lines after it),
        then its last ``lines`` lines: a failed start's cause comes long before its shutdown's noise."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_from)
                text = f.read().decode(errors="replace").splitlines()
        except OSError:
            text = ["(no log)"]
        problems: list[str] = []
        for i, line in enumerate(text):
            if _PROBLEM.match(line) and len(problems) < 40:
                problems.append(line)
                problems.extend(after for after in text[i + 1:i + 3] if not after.startswith(("[", "\tat ")))
        parts = [f"--- node {self.node_id}: {self.log_path}"]
        if problems:
            parts += ["errors:", *problems, "last lines:"]
        return "\n".join(parts + text[-lines:])


#: A log line at ERROR or FATAL level (the pattern of scripts/apache-kafka/log4j2-server.properties).
_PROBLEM = re.compile(r"\[[^]]+\] (ERROR|FATAL) ")


class ApacheKafkaCluster:
    """``nodes`` (1 or 3) Apache Kafka nodes in KRaft mode, each broker and controller.

    Parameters
    ----------
    workdir : where the nodes' configuration, data and logs go
    nodes : 1 (replication factor 1 everywhere) or 3 (default.replication.factor=3,
        min.insync.replicas=2, internal topics replicated 3 times)
    security : the CLIENT listener's protocol, "PLAINTEXT" or "SASL_SSL" (SCRAM-SHA-512)
    jars : the folder of Kafka's jars (default: ``kafka_jars()``)
    pki : a ``testkit.tls.TestPki`` for the SASL_SSL keystore (default: one in workdir)
    users : SCRAM users (name -> password) created at format time, for SASL_SSL
    overrides : broker settings over the defaults of ``properties()``
    """

    def __init__(self, workdir: Path, nodes: int = 1, security: str = "PLAINTEXT", jars: Path | None = None,
                 pki=None, users: dict[str, str] | None = None, overrides: dict | None = None):
        if nodes not in (1, 3):
            raise ValueError(f"nodes must be 1 or 3, not {nodes!r}")
        if security not in ("PLAINTEXT", "SASL_SSL"):
            raise ValueError(f"security must be PLAINTEXT or SASL_SSL, not {security!r}")
        self.workdir = Path(workdir)
        self.security = security
        self.jars = jars or kafka_jars()
        self.java = java_binary()
        self.users = dict(users or DEFAULT_USERS)
        self.overrides = dict(overrides or {})
        self.cluster_id = random_cluster_id()
        self.pki = pki
        self.keystore: Path | None = None
        self.nodes = [KafkaNode(i, self.workdir / f"node-{i}", *self._ports()) for i in range(1, nodes + 1)]
        self._formatted = False

    @staticmethod
    def _ports() -> tuple[int, int, int]:
        ports: list[int] = []
        while len(ports) < 3:
            port = free_port()
            if port not in ports:
                ports.append(port)
        return ports[0], ports[1], ports[2]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    # ------------------------------------------------------------------ configuration
    def properties(self, node: KafkaNode) -> dict[str, object]:
        replicas = len(self.nodes)
        isr = 2 if replicas == 3 else 1
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        props: dict[str, object] = {
            "process.roles": "broker,controller",
            "node.id": node.node_id,
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "listeners": f"CLIENT://127.0.0.1:{node.port},INTERNAL://127.0.0.1:{node.internal_port},"
                         f"CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"CLIENT://127.0.0.1:{node.port},INTERNAL://127.0.0.1:{node.internal_port}",
            "listener.security.protocol.map": f"CLIENT:{self.security},INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "log.dirs": str(node.directory / "data"),
            "num.partitions": 1,
            "default.replication.factor": replicas,
            "min.insync.replicas": isr,
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": 10,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": isr,
            "transaction.state.log.num.partitions": 10,
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": isr,
            "share.coordinator.state.topic.num.partitions": 10,
            # share groups are the share.version feature's (format --feature share.version=1);
            # 4.2 deprecates 'share' in this list
            "group.coordinator.rebalance.protocols": "classic,consumer",
            "group.initial.rebalance.delay.ms": 0,
            "unclean.leader.election.enable": "false",
            # a killed node is fenced (and leaves the metadata) within seconds
            "broker.heartbeat.interval.ms": 500,
            "broker.session.timeout.ms": 4000,
            # few threads and small buffers: tests on a small shared machine
            "num.network.threads": 2,
            "num.io.threads": 2,
            "background.threads": 2,
            "num.replica.fetchers": 1,
            "num.recovery.threads.per.data.dir": 1,
            "group.coordinator.threads": 1,
            "share.coordinator.threads": 1,
            "log.cleaner.threads": 1,
            "log.cleaner.dedupe.buffer.size": 8 * 1024 * 1024,
        }
        if self.security == "SASL_SSL":
            props.update({
                "sasl.enabled.mechanisms": MECHANISM,
                "listener.name.client.sasl.enabled.mechanisms": MECHANISM,
                f"listener.name.client.{MECHANISM.lower()}.sasl.jaas.config":
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                "listener.name.client.ssl.keystore.type": "PEM",
                "listener.name.client.ssl.keystore.location": str(self.keystore),
            })
        props.update(self.overrides)
        return props

    def _write_properties(self, node: KafkaNode) -> None:
        node.directory.mkdir(parents=True, exist_ok=True)
        lines = [f"{key}={value}" for key, value in self.properties(node).items()]
        node.properties_path.write_text("\n".join(lines) + "\n")

    def _prepare_tls(self) -> None:
        if self.security != "SASL_SSL" or self.keystore is not None:
            return
        if self.pki is None:
            from testkit.tls import TestPki

            self.pki = TestPki(self.workdir / "pki")
        self.keystore = self.pki.server("apache-kafka").keystore

    @property
    def ca_path(self) -> Path | None:
        """The CA certificate a client of the SASL_SSL listener trusts."""
        return self.pki.ca_path if self.pki is not None else None

    def format(self, timeout: float = 120.0) -> None:
        """Write every node's server.properties and format its storage (all nodes at once);
        SCRAM users are created here, as ``kafka-storage format --add-scram`` does."""
        self._prepare_tls()
        for node in self.nodes:
            self._write_properties(node)
        scram = [arg for name, password in self.users.items()
                 for arg in ("--add-scram", f"{MECHANISM}=[name={name},password={password}]")
                 ] if self.security == "SASL_SSL" else []

        def run(node: KafkaNode) -> subprocess.CompletedProcess:
            return subprocess.run([self.java, *TOOL_HEAP, *JVM_FLAGS, f"-Dlog4j2.configurationFile={TOOLS_LOG4J}",
                                   "-cp", f"{self.jars}/*", STORAGE, "format", "--cluster-id", self.cluster_id,
                                   "--config", str(node.properties_path), "--feature", "share.version=1",
                                   "--ignore-formatted", *scram],
                                  capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                                  env=java_env())

        with ThreadPoolExecutor(len(self.nodes)) as pool:
            results = list(pool.map(run, self.nodes))
        for node, done in zip(self.nodes, results, strict=True):
            if done.returncode != 0:
                raise RuntimeError(f"formatting node {node.node_id} failed ({done.returncode}):\n"
                                   f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        self._formatted = True

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 180.0) -> "ApacheKafkaCluster":
        """Format (once), start every node, and wait until each answers Metadata naming all of them."""
        started = time.monotonic()
        try:
            if not self._formatted:
                self.format(timeout)
            for node in self.nodes:
                self._launch(node)
            self.wait_ready(timeout=max(1.0, timeout - (time.monotonic() - started)))
        except BaseException:
            self.stop()
            raise
        log.info("Apache Kafka %s: %d node(s) at %s ready in %.1f s", KAFKA_VERSION, len(self.nodes),
                 self.bootstrap, time.monotonic() - started)
        return self

    def _launch(self, node: KafkaNode) -> None:
        if node.running():
            raise RuntimeError(f"node {node.node_id} is already running")
        command = [self.java, *SERVER_HEAP, *JVM_FLAGS, f"-Dlog4j2.configurationFile={SERVER_LOG4J}",
                   f"-Dkafka.logs.dir={node.directory}", "-cp", f"{self.jars}/*", SERVER, str(node.properties_path)]
        with open(node.log_path, "ab") as out:
            node.log_from = out.tell()
            node.proc = subprocess.Popen(command, cwd=node.directory, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=java_env())
        log.info("Apache Kafka node %d (pid %d) starting at %s", node.node_id, node.proc.pid, node.address)

    def wait_ready(self, nodes: list[KafkaNode] | None = None, timeout: float = 120.0) -> None:
        """Wait until each of ``nodes`` (default: all) answers Metadata on its CLIENT listener
        naming every running node; RuntimeError with the node's log if one exits or the
        deadline passes first."""
        waiting = list(nodes or self.nodes)
        deadline = time.monotonic() + timeout
        last_error = ""
        while waiting:
            node = waiting[0]
            if not node.running():
                code = node.proc.returncode if node.proc is not None else None
                raise RuntimeError(f"Apache Kafka node {node.node_id} exited with {code}:\n{node.log_tail()}")
            try:
                ids = self.metadata_brokers(node)
                want = {n.node_id for n in self.nodes if n.running()}
                if want <= ids:
                    waiting.pop(0)
                    continue
                last_error = f"Metadata names brokers {sorted(ids)}, waiting for {sorted(want)}"
            except (OSError, ConnectionError, TimeoutError) as e:
                last_error = str(e)
            if time.monotonic() >= deadline:
                raise RuntimeError(f"Apache Kafka node {node.node_id} not ready within {timeout:.0f} s "
                                   f"({last_error}):\n{node.log_tail()}")
            time.sleep(0.2)

    def metadata_brokers(self, node: KafkaNode) -> set[int]:
        """The broker ids ``node``'s Metadata answer names (through our own client)."""
        from spark_coord.client.metadata import ClusterClient

        with ClusterClient(node.address, client_id="apache-kafka-peer", timeout=5.0,
                           security=self.client_security()) as client:
            client.refresh([])
            return set(client.brokers)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM every node (a controlled shutdown), then SIGKILL what is left past ``timeout``."""
        running = [n for n in self.nodes if n.running()]
        for node in running:
            node.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for node in running:
            try:
                node.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("Apache Kafka node %d did not stop within %.0f s; killing it", node.node_id, timeout)
                node.proc.kill()
                node.proc.wait(30)

    def kill(self, node_id: int) -> None:
        """SIGKILL one node and wait for it to be gone."""
        node = self.node(node_id)
        if node.running():
            node.proc.kill()
            node.proc.wait(30)

    def restart(self, node_id: int, timeout: float = 120.0) -> None:
        """Start a stopped or killed node again; returns once it answers Metadata naming every running node."""
        node = self.node(node_id)
        self._launch(node)
        self.wait_ready([node], timeout)

    def __enter__(self) -> "ApacheKafkaCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(n.log_tail(lines) for n in self.nodes)

    # ------------------------------------------------------------------ clients
    def client_security(self, username: str | None = None, password: str | None = None):
        """Our client's ``ClientSecurity`` for the CLIENT listener (the first user by default); None for PLAINTEXT."""
        if self.security == "PLAINTEXT":
            return None
        from spark_coord.secret import Password
        from spark_coord.security.client import ClientSecurity

        name = username or next(iter(self.users))
        return ClientSecurity(protocol=self.security, mechanism=MECHANISM, username=name,
                              password=Password(password if password is not None else self.users[name]),
                              ca_location=str(self.ca_path))

    def client_config(self, username: str | None = None, password: str | None = None) -> dict[str, str]:
        """librdkafka's (confluent-kafka's) settings for the CLIENT listener."""
        config = {"bootstrap.servers": self.bootstrap}
        if self.security == "SASL_SSL":
            name = username or next(iter(self.users))
            config.update({"security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM, "sasl.username": name,
                           "sasl.password": password if password is not None else self.users[name],
                           "ssl.ca.location": str(self.ca_path)})
        return config


    def java_client_config(self, username: str | None = None, password: str | None = None) -> dict[str, str]:
        """The Java clients' settings for the CLIENT listener (a ``--command-config`` /
        ``--consumer.config`` file's keys): SCRAM through ``sasl.jaas.config``, the CA as a PEM truststore."""
        config = {"bootstrap.servers": self.bootstrap}
        if self.security == "SASL_SSL":
            name = username or next(iter(self.users))
            secret = password if password is not None else self.users[name]
            config.update({"security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM,
                           "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                               f'username="{name}" password="{secret}";',
                           "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_path)})
        return config

    def write_java_client_config(self, path: Path, username: str | None = None, password: str | None = None) -> Path:
        """``java_client_config`` as a properties file (without bootstrap.servers), for the tools."""
        config = self.java_client_config(username, password)
        config.pop("bootstrap.servers")
        path.write_text("".join(f"{key}={value}\n" for key, value in config.items()))
        return path


def main(argv: list[str] | None = None) -> int:
    """``resolve [kafka|spark-kafka|all]``: resolve the jars and print where they are."""
    import argparse

    parser = argparse.ArgumentParser(prog="apache-kafka.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["resolve"])
    parser.add_argument("which", nargs="?", choices=["kafka", "spark-kafka", "all"], default="all")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.which in ("kafka", "all"):
            started = time.monotonic()
            print(f"kafka {KAFKA_VERSION}: {kafka_jars()} ({time.monotonic() - started:.1f} s)")
        if args.which in ("spark-kafka", "all"):
            started = time.monotonic()
            jars = spark_kafka_jars()
            print(f"spark-sql-kafka (pyspark {spark_kafka_version()}): {', '.join(str(j) for j in jars)} "
                  f"({time.monotonic() - started:.1f} s)")
    except ApacheKafkaUnavailable as e:
        print(f"apache-kafka: {e}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
