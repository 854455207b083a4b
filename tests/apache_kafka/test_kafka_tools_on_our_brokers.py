"""Apache Kafka 4.2's own clients and command-line tools against our brokers: one row of the
conformance table of docs/reference/kafka-tools.md per test.

One 3-broker cluster of ours is shared by the module (with an authorizer and the anonymous
principal as a super user, so kafka-acls has something to talk to and every other tool is
allowed everything).  Every tool run starts a JVM: setup data is written with our own
producer, and what a tool did is checked with our client or in ZooKeeper.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

import pytest
from helpers import group_offsets, local_cluster, wait_until
from peers.apache_kafka import (
    CONFIGS,
    CONSOLE_CONSUMER,
    CONSUMER_GROUPS,
    CONSUMER_PERF,
    JVM_FLAGS,
    PRODUCER_PERF,
    SHARE_GROUPS,
    TOOL_HEAP,
    TOOLS_LOG4J,
    TOPICS,
    java_binary,
)

#: Main classes of Kafka 4.2's scripts beyond those peers.apache_kafka names (checked in kafka-tools-4.2.2.jar).
ACLS = "org.apache.kafka.tools.AclCommand"                                   # kafka-acls
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"                         # kafka-get-offsets
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"                # kafka-delete-records
CONSOLE_SHARE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"  # kafka-console-share-consumer

PERF_TOPIC, PERF_RECORDS = "perf", 20000
TOOL_TIMEOUT = 90.0

T = TypeVar("T")


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with local_cluster(zookeeper, tmp_path_factory.mktemp("kafka-tools"), 3, "kafka-tools", {
            "num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:ANONYMOUS"}) as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster):
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(cluster.bootstrap, client_id="kafka-tools-test") as c:
        yield c


@pytest.fixture(scope="module")
def zk(cluster):
    from spark_coord.zk.client import close, connect

    z = connect(cluster.zk_connect)
    yield z
    close(z)


@pytest.fixture(scope="module")
def tool(kafka_jars, cluster):
    """``tool(main_class, *args, **options)``: a Kafka tool run with ``--bootstrap-server`` of our
    cluster; AssertionError with its output when it exits non-zero, unless ``check=False``."""
    from peers.apache_kafka import kafka_tool

    def run(main_class: str, *args: str, check: bool = True, **options) -> subprocess.CompletedProcess:
        options.setdefault("timeout", TOOL_TIMEOUT)
        return kafka_tool(kafka_jars, main_class, "--bootstrap-server", cluster.bootstrap, *args, check=check,
                          **options)

    return run


@pytest.fixture(scope="module")
def produced(cluster, tool, client):
    """The perf topic (3 partitions, made with kafka-topics) filled by kafka-producer-perf-test:
    its output, and every record value as our fetcher reads it back, sorted."""
    tool(TOPICS, "--create", "--topic", PERF_TOPIC, "--partitions", "3", "--replication-factor", "1")
    done = tool(PRODUCER_PERF, "--topic", PERF_TOPIC, "--num-records", str(PERF_RECORDS), "--record-size", "100",
                "--throughput", "-1", "--command-property", f"bootstrap.servers={cluster.bootstrap}",
                "--command-property", "acks=all", "--command-property", "enable.idempotence=true")
    return done, sorted(_read_all(client, PERF_TOPIC))


# ---------------------------------------------------------------------------- helpers
def _read_all(client, topic: str) -> list[str]:
    """Every record value of ``topic`` (text), read with our fetcher up to each log end."""
    from spark_coord.client.fetcher import fetch
    from spark_coord.records.reader import iter_records

    info = client.topic(topic, refresh=True, wait=10.0)
    ends = _log_ends(client, topic)
    values: list[str] = []
    for p in info.partitions:
        position, deadline = 0, time.monotonic() + 30
        while position < ends[p]:
            assert time.monotonic() < deadline, f"{topic}-{p}: read {position} of {ends[p]}"
            (data,) = fetch(client.connection(client.leader(topic, p)), {(topic, p): position}, max_wait_ms=100)
            assert data.error == 0, f"{topic}-{p}: fetch error {data.error}"
            for record in iter_records(data.records or b"", min_offset=position):
                values.append(record.value.decode())
                position = record.offset + 1
    return values


def _log_ends(client, topic: str, earliest: bool = False) -> dict[int, int]:
    from spark_coord.client.admin import AdminClient

    client.refresh([topic])
    return AdminClient(client).list_offsets(topic, None, -2 if earliest else -1)


def _produce(client, topic: str, partitions: int, per_partition: int) -> list[str]:
    """Create ``topic`` and write ``per_partition`` records into each partition with our producer."""
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.producer import Producer

    AdminClient(client).create_topic(topic, partitions=partitions)
    client.topic(topic, refresh=True, wait=10.0)
    producer = Producer(client, acks=-1)
    values = [f"{topic}-{p}-{i}" for p in range(partitions) for i in range(per_partition)]
    for v in values:
        producer.send(topic, v.encode(), partition=int(v.split("-")[-2]))
    producer.flush()
    return values


def _table(out: str, first: str) -> list[dict[str, str]]:
    """The rows of a whitespace-aligned table printed by a Kafka tool, whose header starts with ``first``."""
    lines = out.splitlines()
    rows: list[dict[str, str]] = []
    for i, line in enumerate(lines):
        if line.split()[:1] == [first]:
            header = line.split()
            for row in lines[i + 1:]:
                if not row.strip() or row.split()[:1] == [first]:
                    break
                rows.append(dict(zip(header, row.split(), strict=True)))
    return rows


def _offsets(rows: list[dict[str, str]], column: str) -> dict[int, int]:
    return {int(r["PARTITION"]): int(r[column]) for r in rows}


def _output(done: subprocess.CompletedProcess) -> str:
    """What a tool printed, both streams (kafka-consumer-groups says "no active members" on stderr)."""
    return done.stdout + done.stderr


def _lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line]


def _concurrently(*calls: Callable[[], T]) -> list[T]:
    """Independent tool runs at once (each starts a JVM); their results in order."""
    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result() for f in [pool.submit(c) for c in calls]]


def _start_tool(kafka_jars, main_class: str, *args: str, out, err) -> subprocess.Popen:
    """A Kafka tool running in the background (its output to the files ``out`` and ``err``)."""
    return subprocess.Popen([java_binary(), *TOOL_HEAP, *JVM_FLAGS, f"-Dlog4j2.configurationFile={TOOLS_LOG4J}",
                             "-cp", f"{kafka_jars}/*", main_class, *args],
                            stdout=out, stderr=err, stdin=subprocess.DEVNULL)


def _group(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------------------- producer
def test_producer_perf_test_idempotent_acks_all(produced, client):
    done, values = produced
    assert re.search(rf"^{PERF_RECORDS} records sent, ", done.stdout, re.M), done.stdout[-2000:] + done.stderr[-2000:]
    assert sum(_log_ends(client, PERF_TOPIC).values()) == PERF_RECORDS
    assert len(values) == len(set(values)) == PERF_RECORDS  # each record once: no duplicate from a retry


# ---------------------------------------------------------------------------- consumers
@pytest.mark.parametrize("properties", [
    ("group.protocol=classic", "partition.assignment.strategy=org.apache.kafka.clients.consumer.RangeAssignor"),
    ("group.protocol=classic",
     "partition.assignment.strategy=org.apache.kafka.clients.consumer.CooperativeStickyAssignor"),
    ("group.protocol=consumer",),
], ids=["classic-range", "classic-cooperative-sticky", "consumer-kip848"])
def test_console_consumer_reads_every_record_and_commits(produced, tool, client, cluster, properties):
    _, values = produced
    group = _group("console")
    done = tool(CONSOLE_CONSUMER, "--topic", PERF_TOPIC, "--from-beginning", "--max-messages", str(PERF_RECORDS),
                "--timeout-ms", "60000", "--group", group,
                *[arg for p in properties for arg in ("--command-property", p)])
    assert f"Processed a total of {PERF_RECORDS} messages" in done.stderr, done.stderr[-3000:]
    assert sorted(_lines(done.stdout)) == values

    ends = _log_ends(client, PERF_TOPIC)
    described = _output(tool(CONSUMER_GROUPS, "--describe", "--group", group))
    rows = _table(described, "GROUP")
    assert _offsets(rows, "CURRENT-OFFSET") == ends, described
    assert {r["LAG"] for r in rows} == {"0"}, described
    # the consumer left when it closed (a KIP-848 member too: it leaves with epoch -1)
    assert f"Consumer group '{group}' has no active members." in described, described
    assert group_offsets(cluster.zk_connect, group, PERF_TOPIC) == ends


def test_consumer_perf_test_reads_every_record(produced, tool):
    done = tool(CONSUMER_PERF, "--topic", PERF_TOPIC, "--num-records", str(PERF_RECORDS), "--timeout", "60000",
                "--group", _group("perf"))
    header, row = _lines(done.stdout)[-2:]
    stats = dict(zip((h.strip() for h in header.split(",")), (v.strip() for v in row.split(",")), strict=True))
    assert int(stats["data.consumed.in.nMsg"]) == PERF_RECORDS, done.stdout


def test_consumer_groups_list_describe_reset_delete(kafka_jars, tool, client, cluster, tmp_path):
    from spark_coord.client.groups import GroupClient

    topic, group = "groups-tool", _group("cg")
    values = _produce(client, topic, 3, 10)
    ends = _log_ends(client, topic)
    log, err = tmp_path / "consumer.out", tmp_path / "consumer.err"
    with open(log, "wb") as out, open(err, "wb") as errors:
        consumer = _start_tool(kafka_jars, CONSOLE_CONSUMER, "--bootstrap-server", cluster.bootstrap,
                               "--topic", topic, "--from-beginning", "--group", group,
                               "--command-property", "auto.commit.interval.ms=200", out=out, err=errors)
    try:
        wait_until(lambda: group_offsets(cluster.zk_connect, group, topic) == ends, timeout=60,
                   message=lambda: f"the group's commits at the log ends {ends}; consumer said:\n"
                                   f"{err.read_text()[-3000:]}")
        described, members, listed, refused = _concurrently(
            lambda: tool(CONSUMER_GROUPS, "--describe", "--group", group).stdout,
            lambda: tool(CONSUMER_GROUPS, "--describe", "--members", "--group", group).stdout,
            lambda: tool(CONSUMER_GROUPS, "--list").stdout,
            lambda: tool(CONSUMER_GROUPS, "--reset-offsets", "--to-earliest", "--execute", "--group", group,
                         "--topic", topic, check=False))
        rows = _table(described, "GROUP")
        assert _offsets(rows, "CURRENT-OFFSET") == ends == _offsets(rows, "LOG-END-OFFSET"), described
        assert {r["LAG"] for r in rows} == {"0"}, described
        assert len({r["CONSUMER-ID"] for r in rows}) == 1 and rows[0]["CONSUMER-ID"] != "-", described
        members = _table(members, "GROUP")
        assert [(m["CONSUMER-ID"], m["#PARTITIONS"]) for m in members] == [(rows[0]["CONSUMER-ID"], "3")], members
        assert group in _lines(listed)
        # an active group's offsets are not reset: Kafka's tool checks the group's state first
        assert "can only be reset if the group" in refused.stdout + refused.stderr, refused.stdout + refused.stderr
    finally:
        consumer.terminate()  # a clean shutdown: it leaves the group
        try:
            consumer.wait(30)
        except subprocess.TimeoutExpired:
            consumer.kill()
            consumer.wait(30)
            raise
    assert sorted(_lines(log.read_text())) == sorted(values)

    with GroupClient(client) as groups:
        wait_until(lambda: groups.describe_groups([group])[group].state == "Empty", timeout=30,
                   message="the group empty after its consumer left")
    reset = tool(CONSUMER_GROUPS, "--reset-offsets", "--to-earliest", "--execute", "--group", group,
                 "--topic", topic).stdout
    assert _offsets(_table(reset, "GROUP"), "NEW-OFFSET") == {0: 0, 1: 0, 2: 0}, reset
    assert group_offsets(cluster.zk_connect, group, topic) == {0: 0, 1: 0, 2: 0}
    again = tool(CONSOLE_CONSUMER, "--topic", topic, "--group", group, "--max-messages", str(len(values)),
                 "--timeout-ms", "60000")  # no --from-beginning: from the committed offsets, all 0
    assert sorted(_lines(again.stdout)) == sorted(values), again.stderr[-3000:]

    deleted = tool(CONSUMER_GROUPS, "--delete", "--group", group).stdout
    assert f"Deletion of requested consumer groups ('{group}') was successful." in deleted, deleted
    assert group not in _lines(tool(CONSUMER_GROUPS, "--list").stdout)
    assert group_offsets(cluster.zk_connect, group, topic) == {}


def test_console_share_consumer_and_share_groups(produced, tool, client):
    _, values = produced
    group = _group("share")
    tool(CONFIGS, "--alter", "--entity-type", "groups", "--entity-name", group,
         "--add-config", "share.auto.offset.reset=earliest")
    configured = tool(CONFIGS, "--describe", "--entity-type", "groups", "--entity-name", group).stdout
    assert "share.auto.offset.reset=earliest" in configured, configured

    done = tool(CONSOLE_SHARE_CONSUMER, "--topic", PERF_TOPIC, "--group", group, "--max-messages",
                str(PERF_RECORDS), "--timeout-ms", "60000")
    assert f"Processed a total of {PERF_RECORDS} messages" in done.stderr, done.stderr[-3000:]
    assert sorted(_lines(done.stdout)) == values  # each record once: all acknowledged, none redelivered

    listed, described, members = _concurrently(
        lambda: tool(SHARE_GROUPS, "--list").stdout,
        lambda: tool(SHARE_GROUPS, "--describe", "--group", group).stdout,
        lambda: _output(tool(SHARE_GROUPS, "--describe", "--members", "--group", group)))
    assert group in _lines(listed)
    rows = _table(described, "GROUP")
    ends = _log_ends(client, PERF_TOPIC)
    assert _offsets(rows, "START-OFFSET") == ends and {r["LAG"] for r in rows} == {"0"}, described
    assert f"Share group '{group}' has no active members." in members, members


def test_share_groups_reset_delete_offsets_and_delete(tool, client):
    """kafka-share-groups' Admin operations that change a share group, on an empty group that read
    a topic to its end: ``--reset-offsets --to-earliest --execute`` (AlterShareGroupOffsets),
    ``--delete-offsets --topic`` (DeleteShareGroupOffsets) and ``--delete`` (DeleteGroups); each
    checked in the group's offsets as DescribeShareGroupOffsets answers them, through the tool's
    ``--describe`` and our client."""
    from spark_coord.client.groups import GroupClient

    topic, group = _group("share-admin"), _group("share-admin")
    values = _produce(client, topic, 3, 10)
    tool(CONFIGS, "--alter", "--entity-type", "groups", "--entity-name", group,
         "--add-config", "share.auto.offset.reset=earliest")
    done = tool(CONSOLE_SHARE_CONSUMER, "--topic", topic, "--group", group, "--max-messages", str(len(values)),
                "--timeout-ms", "60000")
    assert sorted(_lines(done.stdout)) == sorted(values), done.stderr[-3000:]
    ends = _log_ends(client, topic)
    with GroupClient(client) as groups:
        def offsets() -> dict[int, int]:
            return {p: o.start_offset for (t, p), o in groups.share_group_offsets(group).items() if t == topic}

        # as of the leaders' ZooKeeper checkpoint, which follows the acknowledgements (journaled) within
        # group.share.state.checkpoint.interval.ms
        wait_until(lambda: offsets() == ends, timeout=10, message=lambda: f"the checkpoint: {offsets()}")

        reset = tool(SHARE_GROUPS, "--reset-offsets", "--to-earliest", "--execute", "--group", group,
                     "--topic", topic).stdout
        assert {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in _table(reset, "GROUP")} == dict.fromkeys(ends, 0), \
            reset
        assert offsets() == dict.fromkeys(ends, 0)
        described = tool(SHARE_GROUPS, "--describe", "--group", group).stdout
        assert _offsets(_table(described, "GROUP"), "START-OFFSET") == dict.fromkeys(ends, 0), described

        deleted = _output(tool(SHARE_GROUPS, "--delete-offsets", "--group", group, "--topic", topic))
        assert topic in deleted and "Error" not in deleted, deleted
        assert offsets() == {}

        gone = _output(tool(SHARE_GROUPS, "--delete", "--group", group))
        assert "successful" in gone, gone
        assert group not in [g.group_id for g in groups.list_share_groups()]


# ---------------------------------------------------------------------------- admin
def test_topics_create_list_describe_alter_delete(tool, client):
    from spark_coord.client.admin import AdminClient

    topic = "topics-tool"
    created = tool(TOPICS, "--create", "--topic", topic, "--partitions", "2", "--replication-factor", "1",
                   "--config", "retention.ms=3600000").stdout
    assert f"Created topic {topic}." in created, created
    assert topic in _lines(tool(TOPICS, "--list").stdout)
    tool(TOPICS, "--alter", "--topic", topic, "--partitions", "4")
    described = tool(TOPICS, "--describe", "--topic", topic).stdout
    assert "PartitionCount: 4" in described and "Configs: retention.ms=3600000" in described, described
    info = client.topic(topic, refresh=True)
    leaders = {int(p): int(leader) for p, leader in re.findall(r"Partition: (\d+)\tLeader: (\d+)", described)}
    assert leaders == {p: info.partitions[p].leader for p in range(4)}, described
    assert f"TopicId: {base64.urlsafe_b64encode(info.topic_id).decode().rstrip('=')}\t" in described, described

    tool(TOPICS, "--delete", "--topic", topic)
    wait_until(lambda: topic not in AdminClient(client).list_topics(), timeout=30, message=f"{topic} deleted")
    assert topic not in _lines(tool(TOPICS, "--list").stdout)


def test_configs_topic_and_broker(tool, client, zk):
    from spark_coord.client.admin import AdminClient

    topic = "configs-tool"
    AdminClient(client).create_topic(topic, partitions=1)
    tool(CONFIGS, "--alter", "--entity-type", "topics", "--entity-name", topic, "--add-config", "retention.ms=7200000")
    described = tool(CONFIGS, "--describe", "--entity-type", "topics", "--entity-name", topic).stdout
    assert "retention.ms=7200000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=7200000" in described, \
        described
    ours = {c["name"]: c["value"] for c in AdminClient(client).describe_topic_configs(topic)}
    assert ours["retention.ms"] == "7200000"

    tool(CONFIGS, "--alter", "--entity-type", "brokers", "--entity-name", "0", "--add-config",
         "log.retention.ms=86400000")
    try:
        described, refused = _concurrently(
            lambda: tool(CONFIGS, "--describe", "--entity-type", "brokers", "--entity-name", "0").stdout,
            lambda: _output(tool(CONFIGS, "--alter", "--entity-type", "brokers", "--entity-name", "0",
                                 "--add-config", "log.cleaner.threads=2", check=False)))
        # only the dynamic keys of configs/broker.py; Kafka would take this one too
        assert "InvalidConfigurationException: Unknown broker config name: log.cleaner.threads" in refused, refused
        assert "log.retention.ms=86400000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=86400000" \
            in described, described
        stored = json.loads(zk.get("/config/brokers/0")[0])
        assert stored["config"] == {"log.retention.ms": "86400000"}
    finally:
        tool(CONFIGS, "--alter", "--entity-type", "brokers", "--entity-name", "0", "--delete-config",
             "log.retention.ms")
    assert json.loads(zk.get("/config/brokers/0")[0])["config"] == {}


def test_acls_add_list_remove(tool, zk):
    topic, group = "acls-tool", "acls-group"
    added = tool(ACLS, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic,
                 "--group", group).stdout
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in added, added
    listed = tool(ACLS, "--list").stdout
    for resource in (f"resourceType=TOPIC, name={topic}", f"resourceType=GROUP, name={group}"):
        assert f"Current ACLs for resource `ResourcePattern({resource}, patternType=LITERAL)`:" in listed, listed
    stored = json.loads(zk.get(f"/kafka-acl/Topic/{topic}")[0])
    assert [(a["principal"], a["operation"], a["permissionType"]) for a in stored["acls"]] == [
        ("User:alice", "Read", "Allow")]

    tool(ACLS, "--remove", "--force", "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic)
    listed = tool(ACLS, "--list").stdout
    assert f"name={topic}," not in listed and f"name={group}," in listed, listed


def test_configs_scram_user_alter_and_describe(tool, zk):
    user = "tool-user"
    done = tool(CONFIGS, "--alter", "--entity-type", "users", "--entity-name", user,
                "--add-config", "SCRAM-SHA-256=[iterations=8192,password=tool-secret]").stdout
    assert f"Completed updating config for user {user}." in done, done
    stored = json.loads(zk.get(f"/config/users/{user}")[0])["config"]
    assert re.fullmatch(r"salt=\S+,stored_key=\S+,server_key=\S+,iterations=8192", stored["SCRAM-SHA-256"]), stored

    # --describe asks DescribeClientQuotas (none kept: an empty list), then the SCRAM credentials
    shown = tool(CONFIGS, "--describe", "--entity-type", "users", "--entity-name", user).stdout
    assert f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-256=iterations=8192" in shown, shown

    tool(CONFIGS, "--alter", "--entity-type", "users", "--entity-name", user, "--delete-config", "SCRAM-SHA-256")
    assert not zk.exists(f"/config/users/{user}")  # its last credential deleted


def test_get_offsets_and_delete_records(tool, client, tmp_path):
    topic = "offsets-tool"
    _produce(client, topic, 3, 10)

    def offsets(*args: str) -> dict[int, int]:
        out = tool(GET_OFFSETS, "--topic", topic, *args).stdout
        return {int(p): int(o) for p, o in re.findall(rf"^{topic}:(\d+):(\d+)$", out, re.M)}

    latest, earliest = _concurrently(offsets, lambda: offsets("--time", "-2"))
    assert latest == _log_ends(client, topic) == {0: 10, 1: 10, 2: 10}
    assert earliest == {0: 0, 1: 0, 2: 0}

    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 4}]}))
    deleted = tool(DELETE_RECORDS, "--offset-json-file", str(plan)).stdout
    assert f"partition: {topic}-0\tlow_watermark: 4" in deleted, deleted
    assert offsets("--time", "-2") == {0: 4, 1: 0, 2: 0}
    assert _log_ends(client, topic, earliest=True) == {0: 4, 1: 0, 2: 0}
