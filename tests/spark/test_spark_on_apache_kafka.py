"""coordkafka on Apache Kafka: the standalone coordinator beside a three-node Apache Kafka 4.2
cluster in KRaft mode (replication factor 3, min.insync.replicas 2), everything over SASL_SSL
with SCRAM-SHA-512, as docs/deploying/beside-kafka.md, "Beside a secured cluster", sets it up.

One group of ours (a Spark query and a ``spark-coord consume`` member, through the
coordinator), and beside it Kafka's own Java consumers (``kafka-console-consumer``) in Kafka's
own groups, one classic and one ``group.protocol=consumer``, reading the same topic.  Half the
records are produced, then the Kafka node leading most partitions is SIGKILLed and the other
half produced (acks=all).  Checks: our members follow the new leaders and read every record
exactly once between them (nothing lost, nothing committed read again); Kafka's consumers read
every record; the group's offsets reach the log ends in the coordinator's ZooKeeper and,
mirrored, in Kafka's own offset store, where ``kafka-consumer-groups --describe`` shows them
with no lag."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from collections import Counter

import pytest
from helpers import free_port, fresh_chroot, group_offsets, group_owners, wait_until

from testkit.coordinator_process import CoordinatorProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PARTITIONS, HALF = 6, 300
USER = "alice"


class LineReader:
    """The lines a process prints, gathered by a thread (the process runs until stopped)."""

    def __init__(self, command: list[str], log_path) -> None:
        self.lines: list[str] = []
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log,
                                     text=True, start_new_session=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in iter(self.proc.stdout.readline, ""):
            self.lines.append(line.rstrip("\n"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._thread.join(10)
        self._log.close()


def produce(cluster, topic: str, values: list[str]) -> None:
    from confluent_kafka import Producer

    producer = Producer({**cluster.client_config(USER), "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    failed = []
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=i % PARTITIONS,
                         on_delivery=lambda err, msg: failed.append(err) if err else None)
    assert producer.flush(60) == 0 and not failed, failed


def leaders(cluster, topic: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    meta = AdminClient(cluster.client_config(USER)).list_topics(topic, timeout=20)
    return {p.id: p.leader for p in meta.topics[topic].partitions.values()}


def describe_group(kafka_tool, cluster, config_path, group: str) -> dict[int, tuple[int, int]]:
    """``kafka-consumer-groups --describe``: (CURRENT-OFFSET, LOG-END-OFFSET) per partition of the group."""
    from peers.apache_kafka import CONSUMER_GROUPS

    done = kafka_tool(CONSUMER_GROUPS, "--bootstrap-server", cluster.bootstrap, "--command-config", str(config_path),
                      "--describe", "--group", group, check=True)
    rows = {}
    for line in done.stdout.splitlines():
        cells = line.split()
        if len(cells) >= 6 and cells[0] == group and cells[2].isdigit() and cells[3].isdigit():
            rows[int(cells[2])] = (int(cells[3]), int(cells[4]))
    return rows


def test_query_and_cli_member_beside_kafkas_own_groups_survive_a_sigkilled_leader(
        spark, apache_kafka_3_sasl, kafka_jars, kafka_tool, zookeeper, server_cert, pki, tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic
    from peers.apache_kafka import CONSOLE_CONSUMER, kafka_tool_command

    from spark_coord.security.credentials import UserStore
    from spark_coord.zk.client import close, connect

    cluster = apache_kafka_3_sasl
    password = cluster.users[USER]
    topic, group = f"onkafka-{uuid.uuid4().hex[:6]}", f"onkafka-g-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(cluster.client_config(USER))  # kept: its futures need the client alive
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 3)]).values():
        f.result(timeout=60)
    librdkafka = {k: v for k, v in cluster.client_config(USER).items() if k != "bootstrap.servers"}
    client_file = tmp_path / "alice.properties"  # our clients' keys (spark-coord consume --command-config)
    client_file.write_text("".join(f"{k}={v}\n" for k, v in librdkafka.items()))
    java_file = cluster.write_java_client_config(tmp_path / "alice-java.properties", USER)

    # the coordinator: its own ZooKeeper, a SASL_SSL listener (alice exists there too), and the data
    # cluster's client keys through --command-config; commits mirrored into Kafka's offset store
    coordinator_zk = fresh_chroot(zookeeper, "on-kafka-coord")
    zk = connect(coordinator_zk)
    try:
        UserStore(zk).set_password(USER, password)
    finally:
        close(zk)
    port = free_port()
    coordinator = CoordinatorProcess(1001, cluster.bootstrap, coordinator_zk, tmp_path, port=port,
                                     args=("--command-config", str(client_file)),
                                     listeners=f"SASL_SSL://127.0.0.1:{port}",
                                     **{"ssl.keystore.location": str(server_cert.keystore),
                                        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                                        "coordinator.offsets.mirror": True}).wait_listening()
    readers: list[LineReader] = []
    query, victim = None, None
    rows: dict[int, list[tuple[int, int, str]]] = {}
    try:
        cli = LineReader([sys.executable, "-m", "spark_coord.cli", "consume", "-b", cluster.bootstrap,
                          "--coordinator", coordinator.address, "--group", group, "--topic", topic,
                          "--from-beginning", "--command-config", str(client_file),
                          "--override", "session.timeout.ms=6000"], tmp_path / "cli.log")
        readers.append(cli)
        java = {}
        for name, protocol in (("classic", "classic"), ("consumer", "consumer")):
            java[name] = LineReader(kafka_tool_command(
                kafka_jars, CONSOLE_CONSUMER, "--bootstrap-server", cluster.bootstrap, "--topic", topic,
                "--group", f"{group}-java-{name}", "--from-beginning", "--command-config", str(java_file),
                "--command-property", f"group.protocol={protocol}"), tmp_path / f"java-{name}.log")
            readers.append(java[name])

        def collect(df, batch_id):
            rows[batch_id] = [(r.partition, r.offset, r.value) for r in df.collect()]

        reader = (spark.readStream.format("coordkafka").option("bootstrap.brokers", cluster.bootstrap)
                  .option("coordinator.bootstrap", coordinator.address).option("subscribe", topic)
                  .option("group.id", group).option("startingOffsets", "earliest")
                  .option("session.timeout.ms", "6000"))
        for k, v in librdkafka.items():
            reader = reader.option(f"kafka.{k}", v)
        query = (reader.load().selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
                 .writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "ckpt"))
                 .trigger(processingTime="200 milliseconds").start())

        def owners() -> dict[int, str]:
            return group_owners(coordinator_zk, group, topic)

        wait_until(lambda: len(owners()) == PARTITIONS and len({o.rsplit("-", 1)[0] for o in owners().values()}) == 2,
                   timeout=180, message=lambda: f"the query and the CLI member owning the partitions: {owners()}")

        def ours() -> list[str]:
            return [v for b in sorted(rows) for _, _, v in rows[b]] + list(cli.lines)

        def everyone_read(values: list[str]) -> bool:
            if proc_died := [r for r in readers if r.proc.poll() is not None]:
                raise AssertionError(f"a reader exited: {[r.proc.args[:4] for r in proc_died]}")
            return set(values) <= set(ours()) and all(set(values) <= set(j.lines) for j in java.values())

        first = [f"first-{i}" for i in range(HALF)]
        produce(cluster, topic, first)
        wait_until(lambda: everyone_read(first), timeout=120,
                   message=lambda: f"the first {HALF} records read: ours {len(ours())}, "
                                   f"Kafka's {[len(j.lines) for j in java.values()]}")

        before = leaders(cluster, topic)
        victim = Counter(before.values()).most_common(1)[0][0]
        cluster.kill(victim)
        moved = sorted(p for p, leader in before.items() if leader == victim)
        wait_until(lambda: all(leaders(cluster, topic)[p] not in (victim, -1) for p in moved), timeout=60,
                   message=f"new leaders for partitions {moved} of the killed node {victim}")

        second = [f"second-{i}" for i in range(HALF)]
        produce(cluster, topic, second)  # acks=all: two in-sync replicas of three are enough
        everything = first + second
        wait_until(lambda: everyone_read(everything), timeout=180,
                   message=lambda: f"all {2 * HALF} records read after node {victim} was killed: ours {len(ours())}, "
                                   f"Kafka's {[len(j.lines) for j in java.values()]}")
        query.processAllAvailable()

        # our group: every record exactly once between the query and the CLI member, both reading
        read = ours()
        assert sorted(read) == sorted(everything), \
            f"read twice: {[v for v, n in Counter(read).items() if n > 1][:10]}"
        spark_partitions = {p for b in rows.values() for p, _, _ in b}
        assert spark_partitions and cli.lines and len(spark_partitions) < PARTITIONS
        # the partitions whose leader was killed were read after the kill, from their new leaders
        assert {f"second-{i}" for i in range(HALF) if i % PARTITIONS in moved} <= set(read)
        # Kafka's own groups, classic and consumer, read everything beside ours
        for name, j in java.items():
            assert set(j.lines) == set(everything), name

        ends = {p: HALF * 2 // PARTITIONS for p in range(PARTITIONS)}
        wait_until(lambda: group_offsets(coordinator_zk, group, topic) == ends, timeout=90,
                   message=lambda: f"the group's offsets in ZooKeeper {group_offsets(coordinator_zk, group, topic)}")
        described: dict = {}

        def mirrored() -> bool:
            described.update(describe_group(kafka_tool, cluster, java_file, group))
            return described == {p: (end, end) for p, end in ends.items()}

        wait_until(mirrored, timeout=90, interval=2.0,
                   message=lambda: f"kafka-consumer-groups --describe to show the mirrored offsets: {described}")
    finally:
        if query is not None:
            query.stop()
        for r in readers:
            r.stop()
        coordinator.stop()
        if victim is not None:
            cluster.restart(victim)  # the module's cluster whole again
