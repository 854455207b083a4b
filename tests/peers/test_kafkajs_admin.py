"""kafkajs 2.2's admin client against our brokers: the admin run tests/broker/test_admin_apis.py
makes with confluent-kafka and kafka-python, done by ``kafkajs_admin.js`` (createTopics,
describeConfigs of a topic and a broker, alterConfigs + read back, createPartitions +
fetchTopicMetadata, deleteTopicRecords + fetchTopicOffsets / fetchTopicOffsetsByTimestamp).
kafkajs has no SCRAM admin calls, so that part of the run is not here.  Skipped where
node/npm or kafkajs cannot be had (the ``kafkajs`` fixture)."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from helpers import local_cluster
from peers.kafkajs import by_event

SCRIPT = Path(__file__).with_name("kafkajs_admin.js")
PARTITIONS, GROWN_TO = 2, 4
RECORDS, DELETE_BEFORE = 10, 4
RETENTION_MS = "3600000"


@pytest.fixture(scope="module")
def ours(zookeeper, tmp_path_factory):
    """Two broker processes, so the partitions' leaders (and deleteTopicRecords' requests) differ."""
    with local_cluster(zookeeper, tmp_path_factory.mktemp("kafkajs-admin"), 2, "kafkajs-admin",
                       {"zookeeper.session.timeout.ms": 6000}) as c:
        yield c


def run_script(kafkajs, timeout: float = 60.0, **arguments) -> list[dict]:
    done = subprocess.run([shutil.which("node") or "node", str(SCRIPT), json.dumps(arguments)],
                          capture_output=True, text=True, env=kafkajs.env, timeout=timeout)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    errors = by_event(events, "error")
    assert done.returncode == 0 and not errors, \
        f"kafkajs admin failed at {errors[0]['step'] if errors else '?'}: {errors}\n{done.stderr[-3000:]}"
    return events


def test_kafkajs_admin_configs_partitions_and_delete_records(ours, kafkajs):
    topic = f"jsadm-{uuid.uuid4().hex[:8]}"
    events = run_script(kafkajs, brokers=ours.bootstrap.split(","), topic=topic, partitions=PARTITIONS,
                        grownTo=GROWN_TO, retentionMs=RETENTION_MS, records=RECORDS, deleteBefore=DELETE_BEFORE)
    [summary] = by_event(events, "summary")

    assert summary["created"] is True

    # describeConfigs: the topic (TOPIC) and a broker (BROKER), with Kafka's names
    topic_configs = summary["topicConfigs"]
    assert topic_configs["name"] == topic
    assert {"retention.ms", "cleanup.policy", "segment.bytes"} <= set(topic_configs["configs"])
    assert topic_configs["configs"]["cleanup.policy"] == "delete"
    broker_configs = summary["brokerConfigs"]
    assert int(broker_configs["name"]) in ours.brokers
    assert broker_configs["configs"]["broker.id"] == broker_configs["name"]
    # not set yet: the topic has the broker's log.retention.ms
    assert topic_configs["configs"]["retention.ms"] == broker_configs["configs"]["log.retention.ms"] != RETENTION_MS

    # alterConfigs retention.ms, read back by describeConfigs as the topic's own setting
    assert summary["altered"] == [{"errorCode": 0, "resourceName": topic}]
    assert summary["retentionEntries"] == 1  # only the name asked for
    retention = summary["retentionMs"]
    assert (retention["name"], retention["value"], retention["isDefault"]) == ("retention.ms", RETENTION_MS, False)
    assert retention["configSource"] == 1  # DYNAMIC_TOPIC_CONFIG (kafkajs asks DescribeConfigs v2: sources)

    # createPartitions to GROWN_TO, as fetchTopicMetadata sees it, every partition led by one of our brokers
    assert [p["partition"] for p in summary["partitions"]] == list(range(GROWN_TO))
    assert all(p["errorCode"] == 0 and p["leader"] in ours.brokers for p in summary["partitions"])

    # deleteTopicRecords up to DELETE_BEFORE on partition 0: the low watermark moves there, the others stay
    assert summary["produced"] == [{"partition": 0, "baseOffset": 0, "errorCode": 0}]
    before = {p["partition"]: (p["low"], p["high"]) for p in summary["offsetsBefore"]}
    assert before == {0: (0, RECORDS), **{p: (0, 0) for p in range(1, GROWN_TO)}}
    after = {p["partition"]: (p["low"], p["high"]) for p in summary["offsetsAfter"]}
    assert after == {0: (DELETE_BEFORE, RECORDS), **{p: (0, 0) for p in range(1, GROWN_TO)}}
    # by timestamp 0: the first record still there (empty partitions answer their end)
    by_time = {p["partition"]: p["offset"] for p in summary["offsetsByTimestamp"]}
    assert by_time == {0: DELETE_BEFORE, **{p: 0 for p in range(1, GROWN_TO)}}
