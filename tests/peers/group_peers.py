"""Group members of every kind as processes, for tests that put them in one group and check
what each of them saw.

- ``KafkaPeer``: a confluent-kafka or kafka-python group consumer
  (``kafka_group_consumer.py``), or Kafka's Java ``KafkaConsumer`` (``java/GroupConsumer.java``,
  run from source with Apache Kafka's jars), eager, ``cooperative-sticky`` or Kafka 4's
  ``consumer`` protocol: its assignment, revocation and lost callbacks with the partitions
  each received, and the records it read;
- ``CliConsumer``: ``spark-coord consume`` (our thin consumer), printing values;
- ``topic_index``: value -> (partition, offset) of every record of a topic, to
  turn what the CLI printed into positions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

PEER = Path(__file__).resolve().parent / "kafka_group_consumer.py"
JAVA_PEER = Path(__file__).resolve().parent / "java" / "GroupConsumer.java"


class KafkaPeer:
    """A Kafka-client group consumer process: ``kind`` confluent, kafka-python or java (Kafka's
    Java consumer, run with the jars of the folder ``jars``; default: ``peers.apache_kafka.kafka_jars()``)."""

    def __init__(self, kind: str, bootstrap: str, group: str, topic: str, client_id: str, workdir: Path,
                 strategy: str | None = None, session_ms: int = 6000, instance: str | None = None,
                 jars: Path | None = None):
        self.kind = kind
        self.client_id = client_id
        self.strategy = strategy
        self.instance = instance
        self.out = Path(workdir) / f"{client_id}.jsonl"
        self._out = open(self.out, "w")
        self.err = Path(workdir) / f"{client_id}.stderr"
        self._err = open(self.err, "w")
        args = [kind, bootstrap, group, topic, client_id, str(session_ms)] + ([strategy] if strategy else [])
        if kind == "java":
            from peers.apache_kafka import JVM_FLAGS, TOOL_HEAP, TOOLS_LOG4J, java_binary, kafka_jars

            command = [java_binary(), *TOOL_HEAP, *JVM_FLAGS, f"-Dlog4j2.configurationFile={TOOLS_LOG4J}",
                       "-cp", f"{jars or kafka_jars()}/*", str(JAVA_PEER), *args]
        else:
            command = [sys.executable, str(PEER), *args]
        self.proc = subprocess.Popen(command, stdout=self._out, stderr=self._err, stdin=subprocess.DEVNULL,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1", GROUP_INSTANCE_ID=instance or ""))

    @property
    def cooperative(self) -> bool:
        return self.strategy in ("cooperative-sticky", "consumer")

    def member_id(self) -> str | None:
        """Its member id, as its last assignment callback saw it (confluent-kafka and Java peers).  The
        coordinator knows a static member (``instance``) by its instance id instead."""
        ids = [e["member"] for e in self.events() if e["event"] == "assigned" and e.get("member")]
        return ids[-1] if ids else None

    def events(self) -> list[dict]:
        lines = self.out.read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{") and line.endswith("}")]

    def callbacks(self) -> list[tuple[float, str, set[int]]]:
        """(time, assigned | revoked | lost, partitions) of every rebalance callback, in order."""
        return [(e["ts"], e["event"], set(e["partitions"])) for e in self.events()
                if e["event"] in ("assigned", "revoked", "lost")]

    def owned(self, until: float | None = None) -> set[int]:
        """The partitions it owns by its callbacks (all of them, or those before ``until``)."""
        owned: set[int] = set()
        for ts, what, parts in self.callbacks():
            if until is not None and ts > until:
                break
            owned = owned | parts if what == "assigned" else owned - parts
        return owned

    def revoked_after(self, ts: float) -> list[set[int]]:
        """The partition sets its revocation callbacks received after ``ts``."""
        return [parts for t, what, parts in self.callbacks() if t > ts and what in ("revoked", "lost") and parts]

    def records(self) -> set[tuple[int, int]]:
        """(partition, offset) of every record it read."""
        return {(int(p), o) for e in self.events() if e["event"] == "records" for p, offs in e["offsets"].items()
                for o in offs}

    def read(self) -> int:
        return max((e["count"] for e in self.events() if e["event"] in ("read", "closed")), default=0)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def report(self, chars: int = 1500) -> str:
        """For a failure message: running or its exit status, its last callbacks, the tail of its stderr."""
        self._err.flush()
        state = "running" if self.alive() else f"exited {self.proc.returncode}"
        tail = self.err.read_text(errors="replace")[-chars:] if self.err.exists() else ""
        return f"{self.client_id} ({state}): callbacks {self.callbacks()[-4:]}; stderr: {tail!r}"

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._out.close()
        self._err.close()


class CliConsumer:
    """``spark-coord consume`` printing each record's value, one per line."""

    def __init__(self, bootstrap: str, group: str, topic: str, workdir: Path, name: str = "cli",
                 session_ms: int = 6000):
        self.name = name
        self.out = Path(workdir) / f"{name}.out"
        self.log = Path(workdir) / f"{name}.log"
        self._out = open(self.out, "wb")
        self._log = open(self.log, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "spark_coord.cli", "--log-level", "INFO", "consume",
                                      "-b", bootstrap, "--group", group, "--topic", topic, "--from-beginning",
                                      "--override", f"consumer.id={name}",
                                      "--override", f"session.timeout.ms={session_ms}"],
                                     stdout=self._out, stderr=self._log, stdin=subprocess.DEVNULL,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1"))

    def values(self) -> list[str]:
        return [line for line in self.out.read_text(errors="replace").splitlines() if line]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._out.close()
        self._log.close()
        return self.proc.returncode


def topic_index(bootstrap: str, topic: str) -> dict[str, tuple[int, int]]:
    """value -> (partition, offset) of every record of ``topic`` (a topic never trimmed, whose values
    are unique: ``testkit.producer.AckingProducer``'s)."""
    from testkit.producer import read_values

    return {value.decode(): (p, offset) for p, values in read_values(bootstrap, topic).items()
            for offset, value in enumerate(values)}
