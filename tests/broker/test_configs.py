"""Kafka's config APIs against real brokers: GROUP configs (KIP-848, KIP-932) stored in ZooKeeper as
ZooKeeper-mode Kafka stores entity configs and applied on every broker, TOPIC and BROKER configs
described from the brokers' properties (read-only for now).

confluent-kafka 2.16 names a group config resource ``ResourceType.GROUP`` (3, the ACL code), which
librdkafka puts on the wire as Kafka's config resource type 32; its ``ConfigSource.GROUP_CONFIG`` (8) is
a value the group set.  kafka-python 3.0 names it ``ConfigResourceType.GROUP`` (32).
"""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from helpers import local_cluster, wait_until
from kazoo.exceptions import NoNodeError

from spark_coord.client.connection import BrokerConnection
from spark_coord.errors import ErrorCode
from spark_coord.wire.registry import ApiKey
from spark_coord.zk import paths

GROUP_TYPE, TOPIC_TYPE, BROKER_TYPE = 32, 2, 4
SETTINGS = {"zookeeper.session.timeout.ms": 6000, "log.retention.ms": 3600000, "message.max.bytes": 2000000,
            "group.share.record.lock.duration.ms": 20000, "group.share.max.record.lock.duration.ms": 45000}


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory, request):
    """Two broker processes with a few settings in their properties (--override)."""
    with local_cluster(zookeeper, tmp_path_factory.mktemp("configs"), 2, "cfg-" + request.module.__name__,
                       SETTINGS) as c:
        yield c


@pytest.fixture(scope="module")
def zk(cluster):
    from spark_coord.zk.client import close, connect

    client = connect(cluster.zk_connect)
    yield client
    close(client)


def admin(cluster, broker_id: int = 0) -> AdminClient:
    host, port = cluster.brokers[broker_id]
    return AdminClient({"bootstrap.servers": f"{host}:{port}"})


def group_name() -> str:
    return f"cfg-{uuid.uuid4().hex[:8]}"


def describe(client: AdminClient, rtype, name: str) -> dict:
    resource = ConfigResource(rtype, name)
    return client.describe_configs([resource], request_timeout=15)[resource].result(20)


def incremental(client: AdminClient, rtype, name: str, ops: list[tuple[str, str | None, AlterConfigOpType]],
                validate_only: bool = False):
    resource = ConfigResource(rtype, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=op) for k, v, op in ops])
    return client.incremental_alter_configs([resource], validate_only=validate_only,
                                            request_timeout=15)[resource].result(20)


def refused(fn) -> KafkaError:
    with pytest.raises(KafkaException) as e:
        fn()
    return e.value.args[0]


def raw(cluster, broker_id: int, api_key: int, body: dict) -> dict:
    """A request to one broker (admin clients pick the broker themselves)."""
    with BrokerConnection(*cluster.brokers[broker_id], timeout=15) as conn:
        return conn.request(api_key, body)


def raw_describe(cluster, broker_id: int, rtype: int, name: str, keys=None) -> dict:
    out = raw(cluster, broker_id, ApiKey.DESCRIBE_CONFIGS, {
        "resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": True, "include_documentation": True})
    return out["results"][0]


def notifications_for(zk, group: str) -> list[str]:
    out = []
    for child in zk.get_children(paths.CONFIG_CHANGES):
        try:
            data, _ = zk.get(f"{paths.CONFIG_CHANGES}/{child}")
        except NoNodeError:  # purged since it was listed
            continue
        if json.loads(data).get("entity_path") == f"groups/{group}":
            out.append(child)
    return out


# ------------------------------------------------------------------ GROUP

def test_describe_a_group_gives_kafkas_names_and_the_brokers_defaults(cluster):
    configs = describe(admin(cluster), ResourceType.GROUP, group_name())
    assert {"share.auto.offset.reset", "share.isolation.level", "share.record.lock.duration.ms",
            "share.session.timeout.ms", "share.heartbeat.interval.ms", "consumer.session.timeout.ms",
            "consumer.heartbeat.interval.ms"} <= set(configs)
    assert configs["share.auto.offset.reset"].value == "latest"
    assert configs["share.isolation.level"].value == "read_uncommitted"
    assert configs["share.record.lock.duration.ms"].value == "20000"  # the broker's group.share.* setting
    for entry in configs.values():
        assert entry.source == ConfigSource.DEFAULT_CONFIG.value and entry.is_default
        assert not entry.is_read_only and not entry.is_sensitive


def test_a_group_config_set_at_one_broker_applies_at_the_other(cluster, zk):
    group = group_name()
    incremental(admin(cluster, 0), ResourceType.GROUP, group,
                [("share.auto.offset.reset", "earliest", AlterConfigOpType.SET)])
    # stored as ZooKeeper-mode Kafka stores entity configs, with a change notification
    data, _ = zk.get(paths.group_config(group))
    assert json.loads(data) == {"version": 1, "config": {"share.auto.offset.reset": "earliest"}}
    assert len(notifications_for(zk, group)) == 1
    # broker 1 learns it from the notification, without a restart

    def seen_at_broker_1():
        result = raw_describe(cluster, 1, GROUP_TYPE, group, ["share.auto.offset.reset"])
        [entry] = result["configs"]
        return entry if entry["value"] == "earliest" else None

    entry = wait_until(seen_at_broker_1, timeout=15, message="broker 1 to see the group's config")
    assert entry["config_source"] == 8  # GROUP_CONFIG
    assert [(s["name"], s["value"], s["source"]) for s in entry["synonyms"]] == \
        [("share.auto.offset.reset", "earliest", 8)]
    configs = describe(admin(cluster, 1), ResourceType.GROUP, group)
    assert configs["share.auto.offset.reset"].value == "earliest"
    assert configs["share.auto.offset.reset"].source == ConfigSource.GROUP_CONFIG.value
    assert configs["share.isolation.level"].source == ConfigSource.DEFAULT_CONFIG.value


def test_set_delete_and_by_duration(cluster, zk):
    group, client = group_name(), admin(cluster)
    incremental(client, ResourceType.GROUP, group, [("share.auto.offset.reset", "by_duration:PT1H",
                                                     AlterConfigOpType.SET),
                                                    ("share.isolation.level", "read_committed", AlterConfigOpType.SET),
                                                    ("share.record.lock.duration.ms", "45000",
                                                     AlterConfigOpType.SET)])
    configs = describe(client, ResourceType.GROUP, group)
    assert (configs["share.auto.offset.reset"].value, configs["share.isolation.level"].value,
            configs["share.record.lock.duration.ms"].value) == ("by_duration:PT1H", "read_committed", "45000")
    incremental(client, ResourceType.GROUP, group, [("share.isolation.level", None, AlterConfigOpType.DELETE)])
    configs = describe(client, ResourceType.GROUP, group)
    assert configs["share.isolation.level"].value == "read_uncommitted"
    assert configs["share.isolation.level"].source == ConfigSource.DEFAULT_CONFIG.value
    assert json.loads(zk.get(paths.group_config(group))[0])["config"] == {
        "share.auto.offset.reset": "by_duration:PT1H", "share.record.lock.duration.ms": "45000"}


@pytest.mark.parametrize("key, value, fragments", [
    ("share.auto.offset.reset", "sometimes", ["share.auto.offset.reset", "sometimes"]),
    ("share.record.lock.duration.ms", "50000",
     ["share.record.lock.duration.ms", "group.share.max.record.lock.duration.ms (45000)"]),
    ("share.isolation.level", "read_sometimes", ["share.isolation.level"]),
    ("share.auto.offset.reset", "by_duration:-PT1H", ["share.auto.offset.reset"]),
    ("no.such.config", "1", ["Unknown group config name: no.such.config"]),
], ids=["auto-offset-reset", "lock-beyond-max", "isolation", "negative-duration", "unknown-key"])
def test_an_invalid_value_is_refused_naming_the_key_and_nothing_is_written(cluster, zk, key, value, fragments):
    group = group_name()
    for validate_only in (False, True):
        error = refused(lambda validate_only=validate_only: incremental(
            admin(cluster), ResourceType.GROUP, group, [(key, value, AlterConfigOpType.SET)],
            validate_only=validate_only))
        assert error.code() == KafkaError.INVALID_CONFIG, error
        for fragment in fragments:
            assert fragment in error.str()
    assert zk.exists(paths.group_config(group)) is None
    assert notifications_for(zk, group) == []


def test_an_invalid_value_leaves_the_groups_configs_as_they_were(cluster, zk):
    group, client = group_name(), admin(cluster)
    incremental(client, ResourceType.GROUP, group, [("share.auto.offset.reset", "earliest", AlterConfigOpType.SET)])
    before = zk.get(paths.group_config(group))
    error = refused(lambda: incremental(client, ResourceType.GROUP, group, [
        ("share.isolation.level", "read_committed", AlterConfigOpType.SET),
        ("share.auto.offset.reset", "sometimes", AlterConfigOpType.SET)]))
    assert error.code() == KafkaError.INVALID_CONFIG
    after = zk.get(paths.group_config(group))
    assert after[0] == before[0] and after[1].version == before[1].version


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_validate_only_writes_nothing(cluster, zk):
    group, client = group_name(), admin(cluster)
    incremental(client, ResourceType.GROUP, group, [("share.auto.offset.reset", "earliest", AlterConfigOpType.SET)],
                validate_only=True)
    assert zk.exists(paths.group_config(group)) is None and notifications_for(zk, group) == []
    assert describe(client, ResourceType.GROUP, group)["share.auto.offset.reset"].value == "latest"
    resource = ConfigResource(ResourceType.GROUP, group, set_config={"share.isolation.level": "read_committed"})
    client.alter_configs([resource], validate_only=True, request_timeout=15)[resource].result(20)
    assert zk.exists(paths.group_config(group)) is None


def test_append_and_subtract_are_for_list_keys(cluster):
    for op in (AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT):
        error = refused(lambda op=op: incremental(admin(cluster), ResourceType.GROUP, group_name(),
                                                  [("share.auto.offset.reset", "earliest", op)]))
        assert error.code() == KafkaError.INVALID_CONFIG
        assert "share.auto.offset.reset" in error.str() and "LIST" in error.str()


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_alter_configs_replaces_the_whole_set(cluster, zk):
    group, client = group_name(), admin(cluster)
    incremental(client, ResourceType.GROUP, group, [("share.auto.offset.reset", "earliest", AlterConfigOpType.SET)])
    resource = ConfigResource(ResourceType.GROUP, group, set_config={"share.isolation.level": "read_committed"})
    client.alter_configs([resource], request_timeout=15)[resource].result(20)
    assert json.loads(zk.get(paths.group_config(group))[0])["config"] == {"share.isolation.level": "read_committed"}
    configs = describe(client, ResourceType.GROUP, group)
    assert configs["share.auto.offset.reset"].value == "latest"
    assert configs["share.isolation.level"].source == ConfigSource.GROUP_CONFIG.value


def test_kafkas_request_checks(cluster):
    group = group_name()
    out = raw(cluster, 0, ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
        {"resource_type": GROUP_TYPE, "resource_name": group, "configs": [
            {"name": "share.isolation.level", "config_operation": 0, "value": "read_committed"},
            {"name": "share.isolation.level", "config_operation": 1, "value": None}]},
        {"resource_type": GROUP_TYPE, "resource_name": group + "-b", "configs": [
            {"name": "share.isolation.level", "config_operation": 0, "value": None}]},
        {"resource_type": GROUP_TYPE, "resource_name": "", "configs": []},
        {"resource_type": 3, "resource_name": group, "configs": []},  # the ACL code of a group
        {"resource_type": GROUP_TYPE, "resource_name": group + "-c", "configs": [
            {"name": "share.isolation.level", "config_operation": 9, "value": "x"}]},
        {"resource_type": GROUP_TYPE, "resource_name": group + "-d", "configs": []},
        {"resource_type": GROUP_TYPE, "resource_name": group + "-d", "configs": []},
    ]})
    answers = [(r["error_code"], r["error_message"]) for r in out["responses"]]
    assert answers[0] == (ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    assert answers[1] == (ErrorCode.INVALID_REQUEST, "Null value not supported for : share.isolation.level")
    assert answers[2] == (ErrorCode.INVALID_REQUEST, "Group name must not be empty")
    assert answers[3][0] == ErrorCode.INVALID_REQUEST and "Unsupported resource type" in answers[3][1]
    assert answers[4][0] == ErrorCode.INVALID_REQUEST and "operation 9" in answers[4][1]
    assert answers[5] == answers[6] == (ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
    result = raw_describe(cluster, 0, 3, group)
    assert result["error_code"] == ErrorCode.INVALID_REQUEST and result["configs"] == []


# ------------------------------------------------------------------ TOPIC and BROKER

def test_describe_a_topic_gives_the_brokers_log_settings(cluster):
    client, topic = admin(cluster), f"cfg-topic-{uuid.uuid4().hex[:6]}"
    client.create_topics([NewTopic(topic, 2)], request_timeout=15)[topic].result(20)
    configs = wait_until(lambda: _try_describe(client, ResourceType.TOPIC, topic), timeout=15,
                         message="the new topic to be described")
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["max.message.bytes"].value == "2000000"
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert {"retention.bytes", "flush.messages", "flush.ms", "index.interval.bytes"} <= set(configs)
    # broker 1 learns the new topic from its own ZooKeeper watch, maybe after broker 0 described it
    result = wait_until(lambda: (r := raw_describe(cluster, 1, TOPIC_TYPE, topic, ["retention.ms"]))["configs"] and r,
                        timeout=15, message="broker 1 to describe the new topic")
    [entry] = result["configs"]
    assert [(s["name"], s["value"], s["source"]) for s in entry["synonyms"]] == \
        [("log.retention.ms", "3600000", 4), ("log.retention.ms", "604800000", 5)]
    assert entry["config_type"] == 5 and not entry["read_only"]  # LONG; a topic may set its own
    error = refused(lambda: describe(client, ResourceType.TOPIC, "no-such-topic-" + uuid.uuid4().hex[:6]))
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def _try_describe(client, rtype, name):
    try:
        return describe(client, rtype, name)
    except KafkaException:
        return None


def test_describe_a_broker_gives_its_properties(cluster):
    for broker_id in (0, 1):
        configs = describe(admin(cluster, broker_id), ResourceType.BROKER, str(broker_id))
        assert configs["broker.id"].value == str(broker_id)
        assert configs["broker.id"].source == ConfigSource.STATIC_BROKER_CONFIG.value
        host, port = cluster.brokers[broker_id]
        assert configs["listeners"].value == f"PLAINTEXT://{host}:{port}"
        assert configs["log.retention.ms"].value == "3600000"
        assert configs["group.share.max.record.lock.duration.ms"].value == "45000"
        assert configs["num.partitions"].value == "1"
        assert configs["num.partitions"].source == ConfigSource.DEFAULT_CONFIG.value
        assert configs["zookeeper.connect"].value == cluster.zk_connect
        assert configs["ssl.key.password"].is_sensitive and configs["ssl.key.password"].value is None
        assert configs["broker.id"].is_read_only and not configs["log.retention.ms"].is_read_only
    # Kafka describes a broker only at that broker; the empty name (cluster-wide dynamic defaults) has none
    result = raw_describe(cluster, 0, BROKER_TYPE, "1")
    assert result["error_code"] == ErrorCode.INVALID_REQUEST and "Unexpected broker id" in result["error_message"]
    result = raw_describe(cluster, 0, BROKER_TYPE, "")
    assert result["error_code"] == ErrorCode.NONE and result["configs"] == []


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_topic_configs_are_altered_stored_as_kafka_does_and_applied_on_every_broker(cluster, zk):
    client, topic = admin(cluster), f"cfg-t-{uuid.uuid4().hex[:6]}"
    client.create_topics([NewTopic(topic, 2)], request_timeout=15)[topic].result(20)
    wait_until(lambda: _try_describe(client, ResourceType.TOPIC, topic), timeout=15)
    incremental(client, ResourceType.TOPIC, topic, [("retention.ms", "1000", AlterConfigOpType.SET),
                                                    ("cleanup.policy", "compact", AlterConfigOpType.APPEND)])
    data, _ = zk.get(paths.topic_config(topic))
    assert json.loads(data) == {"version": 1, "config": {"cleanup.policy": "delete,compact", "retention.ms": "1000"}}
    assert any(json.loads(zk.get(f"{paths.CONFIG_CHANGES}/{c}")[0]).get("entity_path") == f"topics/{topic}"
               for c in zk.get_children(paths.CONFIG_CHANGES))
    for broker_id in (0, 1):  # the other broker follows the notification
        result = wait_until(lambda broker_id=broker_id: (r := raw_describe(cluster, broker_id, TOPIC_TYPE, topic,
                                                                           ["retention.ms"]))
                            ["configs"][0]["value"] == "1000" and r, timeout=15)
        entry = result["configs"][0]
        assert entry["config_source"] == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and not entry["read_only"]
        assert [s["source"] for s in entry["synonyms"]] == [1, 4, 5]  # topic, static broker, default
    incremental(client, ResourceType.TOPIC, topic, [("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT),
                                                    ("retention.ms", None, AlterConfigOpType.DELETE)])
    configs = describe(client, ResourceType.TOPIC, topic)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].value == "3600000"  # back to the broker's
    assert configs["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    # AlterConfigs replaces the whole set
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.bytes": "65536"})
    client.alter_configs([resource], request_timeout=15)[resource].result(20)
    assert json.loads(zk.get(paths.topic_config(topic))[0])["config"] == {"segment.bytes": "65536"}


@pytest.mark.parametrize("key,value,fragments", [
    ("no.such.config", "1", ["Unknown topic config name: no.such.config"]),
    ("retention.ms", "-2", ["retention.ms", "at least -1"]),
    ("segment.bytes", "ten", ["segment.bytes", "Not a number of type INT"]),
    ("segment.bytes", "9999999999", ["segment.bytes", "Not a number of type INT"]),
    ("min.cleanable.dirty.ratio", "1.5", ["min.cleanable.dirty.ratio", "no more than 1"]),
    ("cleanup.policy", "shred", ["cleanup.policy", "shred"]),
    ("message.timestamp.type", "WallClock", ["message.timestamp.type", "CreateTime, LogAppendTime"]),
])
def test_bad_topic_configs_are_refused_naming_the_key(cluster, zk, key, value, fragments):
    client, topic = admin(cluster), f"cfg-bad-{uuid.uuid4().hex[:6]}"
    client.create_topics([NewTopic(topic, 1)], request_timeout=15)[topic].result(20)
    wait_until(lambda: _try_describe(client, ResourceType.TOPIC, topic), timeout=15)
    error = refused(lambda: incremental(client, ResourceType.TOPIC, topic, [(key, value, AlterConfigOpType.SET)]))
    assert error.code() == KafkaError.INVALID_CONFIG
    for fragment in fragments:
        assert fragment in error.str()
    assert not zk.exists(paths.topic_config(topic))
    # the same through CreateTopics: refused, nothing created
    other = f"cfg-bad-{uuid.uuid4().hex[:6]}"
    with pytest.raises(KafkaException) as e:
        client.create_topics([NewTopic(other, 1, config={key: value})], request_timeout=15)[other].result(20)
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert not zk.exists(paths.topic(other)) and not zk.exists(paths.topic_config(other))
    # the broker keeps serving
    assert describe(client, ResourceType.TOPIC, topic)["retention.ms"].value == "3600000"


def test_configs_of_a_topic_that_does_not_exist_and_validate_only(cluster, zk):
    client, missing = admin(cluster), "no-such-topic-" + uuid.uuid4().hex[:6]
    error = refused(lambda: incremental(client, ResourceType.TOPIC, missing,
                                        [("retention.ms", "1000", AlterConfigOpType.SET)]))
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert not zk.exists(paths.topic_config(missing))
    topic = f"cfg-vo-{uuid.uuid4().hex[:6]}"
    client.create_topics([NewTopic(topic, 1)], request_timeout=15)[topic].result(20)
    wait_until(lambda: _try_describe(client, ResourceType.TOPIC, topic), timeout=15)
    incremental(client, ResourceType.TOPIC, topic, [("retention.ms", "1000", AlterConfigOpType.SET)],
                validate_only=True)
    assert not zk.exists(paths.topic_config(topic))
    error = refused(lambda: incremental(client, ResourceType.TOPIC, topic,
                                        [("retention.ms", "x", AlterConfigOpType.SET)], validate_only=True))
    assert error.code() == KafkaError.INVALID_CONFIG
    error = refused(lambda: incremental(client, ResourceType.TOPIC, topic,
                                        [("retention.ms", "1", AlterConfigOpType.APPEND)]))
    assert error.code() == KafkaError.INVALID_CONFIG and "not LIST" in error.str()


def test_create_topics_keeps_its_configs_and_answers_them(cluster, zk):
    topic = f"cfg-ct-{uuid.uuid4().hex[:6]}"
    body = {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                        "configs": [{"name": "cleanup.policy", "value": "compact"},
                                    {"name": "retention.ms", "value": "5000"}]}],
            "timeout_ms": 15000, "validate_only": True}
    with BrokerConnection(*cluster.brokers[0], timeout=15) as conn:
        answer = conn.request(ApiKey.CREATE_TOPICS, body)["topics"][0]
        assert answer["error_code"] == ErrorCode.NONE and not zk.exists(paths.topic(topic))
        assert not zk.exists(paths.topic_config(topic))
        body["validate_only"] = False
        answer = conn.request(ApiKey.CREATE_TOPICS, body)["topics"][0]
    assert answer["error_code"] == ErrorCode.NONE
    configs = {c["name"]: c for c in answer["configs"]}
    assert configs["cleanup.policy"]["value"] == "compact" and configs["cleanup.policy"]["config_source"] == 1
    assert configs["retention.ms"]["value"] == "5000"
    assert configs["segment.bytes"]["config_source"] == 5
    assert json.loads(zk.get(paths.topic_config(topic))[0])["config"] == {"cleanup.policy": "compact",
                                                                         "retention.ms": "5000"}
    client = admin(cluster, 1)
    assert wait_until(lambda: (c := _try_describe(client, ResourceType.TOPIC, topic)) and
                      c["retention.ms"].value == "5000", timeout=15)
    client.delete_topics([topic], request_timeout=15)[topic].result(20)
    wait_until(lambda: not zk.exists(paths.topic_config(topic)), timeout=15)


def test_dynamic_broker_configs(cluster, zk):
    client = admin(cluster)
    incremental(client, ResourceType.BROKER, "0", [("log.cleaner.backoff.ms", "2000", AlterConfigOpType.SET)])
    assert json.loads(zk.get(paths.broker_config("0"))[0])["config"] == {"log.cleaner.backoff.ms": "2000"}
    configs = describe(client, ResourceType.BROKER, "0")
    assert configs["log.cleaner.backoff.ms"].value == "2000"
    assert configs["log.cleaner.backoff.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert not configs["log.cleaner.backoff.ms"].is_read_only and configs["broker.id"].is_read_only
    # the cluster-wide default (the empty name): every broker, and the topics' defaults follow it
    result = raw(cluster, 1, ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [{
        "resource_type": BROKER_TYPE, "resource_name": "",
        "configs": [{"name": "log.retention.ms", "config_operation": 0, "value": "7200000"}]}],
        "validate_only": False})
    assert result["responses"][0]["error_code"] == ErrorCode.NONE
    assert json.loads(zk.get(paths.broker_config("<default>"))[0])["config"] == {"log.retention.ms": "7200000"}
    try:
        for broker_id in (0, 1):
            entry = wait_until(lambda broker_id=broker_id: (r := raw_describe(cluster, broker_id, BROKER_TYPE,
                                                                              str(broker_id), ["log.retention.ms"])
                                                            ["configs"][0])["value"] == "7200000" and r,
                               timeout=15)
            assert entry["config_source"] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
            assert [s["source"] for s in entry["synonyms"]] == [3, 4, 5]
        defaults = raw_describe(cluster, 0, BROKER_TYPE, "")
        assert [(c["name"], c["value"], c["config_source"]) for c in defaults["configs"]] == [
            ("log.retention.ms", "7200000", 3)]
        topic = f"cfg-bd-{uuid.uuid4().hex[:6]}"
        client.create_topics([NewTopic(topic, 1)], request_timeout=15)[topic].result(20)
        configs = wait_until(lambda: _try_describe(client, ResourceType.TOPIC, topic), timeout=15)
        assert configs["retention.ms"].value == "7200000"
        assert configs["retention.ms"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        for key, value, fragment in (("broker.id", "7", "Cannot update these configs dynamically: broker.id"),
                                     ("no.such.key", "1", "Unknown broker config name: no.such.key"),
                                     ("log.retention.ms", "soon", "log.retention.ms"),
                                     ("log.cleaner.min.cleanable.ratio", "2", "log.cleaner.min.cleanable.ratio")):
            error = refused(lambda key=key, value=value: incremental(client, ResourceType.BROKER, "0",
                                                                     [(key, value, AlterConfigOpType.SET)]))
            assert error.code() == KafkaError.INVALID_CONFIG and fragment in error.str(), error.str()
    finally:
        raw(cluster, 0, ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [{
            "resource_type": BROKER_TYPE, "resource_name": "",
            "configs": [{"name": "log.retention.ms", "config_operation": 1, "value": None}]}], "validate_only": False})
        incremental(client, ResourceType.BROKER, "0", [("log.cleaner.backoff.ms", None, AlterConfigOpType.DELETE)])
        # the brokers learn of the deletion through a ZooKeeper watch: the tests after this one (the
        # same cluster) must find their own setting again, so wait until every broker has dropped it
        for broker_id in (0, 1):
            def dropped(broker_id: int = broker_id) -> bool:
                described = raw_describe(cluster, broker_id, BROKER_TYPE, str(broker_id), ["log.retention.ms"])
                return described["configs"][0]["value"] == "3600000"

            wait_until(dropped, timeout=15, message=f"broker {broker_id} to drop the cluster-wide log.retention.ms")


# ------------------------------------------------------------------ kafka-python

def test_kafka_python_admin_describes_and_alters_group_configs(cluster):
    from kafka import admin as kafka_admin
    host, port = cluster.brokers[1]
    client = kafka_admin.KafkaAdminClient(bootstrap_servers=f"{host}:{port}", request_timeout_ms=15000)
    try:
        group = group_name()
        resource = kafka_admin.ConfigResource(kafka_admin.ConfigResourceType.GROUP, group,
                                              configs={"share.auto.offset.reset": "by_duration:P1DT2H30M"})
        assert client.alter_configs([resource]) == {"group": {group: "OK"}}  # IncrementalAlterConfigs v1
        bad = kafka_admin.ConfigResource(kafka_admin.ConfigResourceType.GROUP, group,
                                         configs={"share.isolation.level": "sometimes"})
        answer = client.alter_configs([bad])["group"][group]
        assert answer.startswith("[Error 40] InvalidConfigurationError") and "share.isolation.level" in answer
        out = client.describe_configs([kafka_admin.ConfigResource(kafka_admin.ConfigResourceType.GROUP, group)],
                                      config_filter="all")
        configs = out["group"][group]
        assert configs["share.auto.offset.reset"]["value"] == "by_duration:P1DT2H30M"
        assert configs["share.auto.offset.reset"]["config_source"] == "DYNAMIC_GROUP_CONFIG"
        assert configs["share.isolation.level"]["config_source"] == "DEFAULT_CONFIG"
        assert configs["share.auto.offset.reset"]["config_type"] == "STRING"
        broker = client.describe_configs([kafka_admin.ConfigResource(kafka_admin.ConfigResourceType.BROKER, "1")],
                                         config_filter="all")["broker"]["1"]
        assert broker["log.retention.ms"]["value"] == "3600000"
        assert broker["log.retention.ms"]["config_source"] == "STATIC_BROKER_CONFIG"
    finally:
        client.close()


# ------------------------------------------------------------------ the interface of the group code

def test_the_brokers_group_config_cache(broker_factory, zk):
    """``ctx.group_configs``: get() from memory, listeners on the loop after a change made at another
    broker, delete() removing the group's configs everywhere."""
    import threading

    a = broker_factory(0, **{"group.share.record.lock.duration.ms": 25000})
    b = broker_factory(1, **{"group.share.record.lock.duration.ms": 25000})
    group = group_name()
    configs_b = b.broker.ctx.group_configs
    assert configs_b.get(group) == configs_b.model.default_config
    assert configs_b.get(group).share_record_lock_duration_ms == 25000
    seen: list[tuple[str, bool]] = []
    b.loop.call_soon_threadsafe(configs_b.add_listener,
                                lambda g: seen.append((g, threading.current_thread() is b.thread)))
    host, port = a.address
    incremental(AdminClient({"bootstrap.servers": f"{host}:{port}"}), ResourceType.GROUP, group,
                [("share.auto.offset.reset", "by_duration:PT0.5S", AlterConfigOpType.SET),
                 ("share.record.lock.duration.ms", "15000", AlterConfigOpType.SET)])
    wait_until(lambda: configs_b.get(group).share_auto_offset_reset != "latest", timeout=15,
               message="broker 1's cache to follow the notification")
    got = configs_b.get(group)
    assert (got.share_auto_offset_reset, got.share_auto_offset_reset_duration_ms,
            got.share_record_lock_duration_ms, got.share_isolation_level) == ("by_duration:PT0.5S", 500, 15000,
                                                                              "read_uncommitted")
    wait_until(lambda: seen, timeout=5)
    assert seen[0] == (group, True)  # on broker 1's event loop
    assert a.call(a.broker.ctx.group_configs.delete(group)) is True
    assert zk.exists(paths.group_config(group)) is None
    wait_until(lambda: configs_b.get(group) == configs_b.model.default_config, timeout=15,
               message="the deletion to reach broker 1")
    assert a.broker.ctx.group_configs.get(group) == a.broker.ctx.group_configs.model.default_config
    assert a.call(a.broker.ctx.group_configs.delete(group)) is False


def test_group_configs_need_describe_configs_and_alter_configs_on_the_group(broker_factory):
    from spark_coord.security.acl import (
        AccessControlEntry,
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePattern,
    )
    from spark_coord.security.acl import ResourceType as AclResourceType

    b = broker_factory(0, **{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    group = group_name()

    def describe_code():
        with BrokerConnection(*b.address, timeout=15) as conn:
            return conn.request(ApiKey.DESCRIBE_CONFIGS, {"resources": [
                {"resource_type": GROUP_TYPE, "resource_name": group, "configuration_keys": None}]})["results"][0]

    def alter_code():
        with BrokerConnection(*b.address, timeout=15) as conn:
            return conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
                {"resource_type": GROUP_TYPE, "resource_name": group, "configs": [
                    {"name": "share.isolation.level", "config_operation": 0, "value": "read_committed"}]}]}
            )["responses"][0]["error_code"]

    assert describe_code()["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert alter_code() == ErrorCode.GROUP_AUTHORIZATION_FAILED

    def allow(operation):
        binding = AclBinding(ResourcePattern(AclResourceType.GROUP, group),
                             AccessControlEntry("User:ANONYMOUS", "*", operation, AclPermissionType.ALLOW))
        b.broker.ctx.authorizer.create([binding])

    allow(AclOperation.DESCRIBE_CONFIGS)
    wait_until(lambda: describe_code()["error_code"] == ErrorCode.NONE, timeout=15)
    assert alter_code() == ErrorCode.GROUP_AUTHORIZATION_FAILED
    allow(AclOperation.ALTER_CONFIGS)
    wait_until(lambda: alter_code() == ErrorCode.NONE, timeout=15)
    configs = {c["name"]: c for c in describe_code()["configs"]}
    assert configs["share.isolation.level"]["value"] == "read_committed"
