"""The config model without processes: group configs (Kafka 4.2's GroupConfig: names, defaults from the
broker, validation against the broker's bounds, resolution), and the topic and broker configs
DescribeConfigs reports from a broker's properties."""

from __future__ import annotations

import dataclasses

import pytest

from spark_coord import config
from spark_coord.configs import ConfigSource, ConfigType, GroupConfig, GroupConfigModel, InvalidConfig
from spark_coord.configs.broker import describe_broker
from spark_coord.configs.group import group_config_names
from spark_coord.configs.store import encode_entity_config, encode_notification, notified_group, parse_entity_config
from spark_coord.configs.topic import describe_topic


def broker(**overrides) -> config.Config:
    return config.load(config.BROKER, None, {k.replace("_", "."): v for k, v in overrides.items()})


@pytest.fixture
def model() -> GroupConfigModel:
    return GroupConfigModel(broker())


def test_kafka_names_and_the_broker_defaults():
    m = GroupConfigModel(broker(group_share_record_lock_duration_ms=20000, group_consumer_session_timeout_ms=50000))
    assert group_config_names() == [
        "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms", "share.session.timeout.ms",
        "share.heartbeat.interval.ms", "share.record.lock.duration.ms", "share.delivery.count.limit",
        "share.partition.max.record.locks", "share.auto.offset.reset", "share.isolation.level"]
    assert m.default_config == GroupConfig(
        consumer_session_timeout_ms=50000, consumer_heartbeat_interval_ms=5000, share_session_timeout_ms=45000,
        share_heartbeat_interval_ms=5000, share_record_lock_duration_ms=20000, share_delivery_count_limit=5,
        share_partition_max_record_locks=2000, share_auto_offset_reset="latest",
        share_isolation_level="read_uncommitted")
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.default_config.share_auto_offset_reset = "earliest"  # type: ignore[misc]


@pytest.mark.parametrize("settings", [
    {"share.auto.offset.reset": "earliest"},
    {"share.auto.offset.reset": "latest"},
    {"share.auto.offset.reset": "by_duration:PT1H"},
    {"share.auto.offset.reset": "by_duration:P1DT2H30M"},
    {"share.isolation.level": "read_committed"},
    {"share.record.lock.duration.ms": "15000"},
    {"share.record.lock.duration.ms": "60000"},
    {"share.session.timeout.ms": "50000", "share.heartbeat.interval.ms": "6000"},
    {"consumer.session.timeout.ms": "45000", "consumer.heartbeat.interval.ms": "15000"},
    {"share.delivery.count.limit": "10", "share.partition.max.record.locks": "100"},
    {},
])
def test_valid_settings(model, settings):
    model.validate(settings)


@pytest.mark.parametrize("settings, fragments", [
    ({"share.auto.offset.reset": "sometimes"},
     ["share.auto.offset.reset", "sometimes", "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'"]),
    ({"share.auto.offset.reset": "EARLIEST"}, ["share.auto.offset.reset"]),       # case matters, as in Kafka
    ({"share.auto.offset.reset": "by_duration:-PT1H"}, ["share.auto.offset.reset"]),
    ({"share.auto.offset.reset": "by_duration:P1Y"}, ["share.auto.offset.reset"]),
    ({"share.auto.offset.reset": "none"}, ["share.auto.offset.reset"]),           # the consumer's, not a group's
    ({"share.isolation.level": "read_sometimes"},
     ["share.isolation.level", "String must be one of: read_committed, read_uncommitted"]),
    ({"share.record.lock.duration.ms": "90000"},
     ["share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms (60000)"]),
    ({"share.record.lock.duration.ms": "14999"},
     ["share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"]),
    ({"share.record.lock.duration.ms": "999"}, ["share.record.lock.duration.ms", "Value must be at least 1000"]),
    ({"share.record.lock.duration.ms": "soon"}, ["share.record.lock.duration.ms", "Not a number of type INT"]),
    ({"share.record.lock.duration.ms": "3000000000"}, ["share.record.lock.duration.ms", "Not a number of type INT"]),
    ({"share.session.timeout.ms": "70000"}, ["share.session.timeout.ms", "group.share.max.session.timeout.ms"]),
    ({"share.heartbeat.interval.ms": "4000"}, ["share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms"]),
    ({"consumer.session.timeout.ms": "30000"},
     ["consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms"]),
    ({"consumer.heartbeat.interval.ms": "20000"},
     ["consumer.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms"]),
    ({"share.delivery.count.limit": "11"}, ["share.delivery.count.limit", "10"]),
    ({"share.partition.max.record.locks": "10001"}, ["share.partition.max.record.locks", "10000"]),
    ({"share.renew.acknowledge.enable": "true"}, ["Unknown group config name: share.renew.acknowledge.enable"]),
    ({"retention.ms": "1000"}, ["Unknown group config name: retention.ms"]),
])
def test_invalid_settings_name_the_key_and_the_reason(model, settings, fragments):
    with pytest.raises(InvalidConfig) as e:
        model.validate(settings)
    for fragment in fragments:
        assert fragment in str(e.value)


def test_session_timeout_must_exceed_the_heartbeat_interval():
    m = GroupConfigModel(broker(group_share_max_heartbeat_interval_ms=60000))
    with pytest.raises(InvalidConfig,
                       match="share.session.timeout.ms must be greater than share.heartbeat.interval.ms"):
        m.validate({"share.heartbeat.interval.ms": "45000"})  # against the broker's session timeout, 45000
    m.validate({"share.heartbeat.interval.ms": "44999"})


def test_bounds_follow_the_broker():
    m = GroupConfigModel(broker(group_share_max_record_lock_duration_ms=120000))
    m.validate({"share.record.lock.duration.ms": "90000"})


def test_only_the_groups_own_values_are_held_to_the_bounds():
    """A broker whose own default lies outside its bounds (test clusters shorten timeouts) still
    takes group configs that do not touch that setting."""
    m = GroupConfigModel(broker(group_consumer_session_timeout_ms=6000, group_consumer_heartbeat_interval_ms=500))
    m.validate({"share.auto.offset.reset": "earliest"})
    assert m.default_config.consumer_session_timeout_ms == 6000


def test_resolve_caps_to_the_current_bounds_and_skips_bad_values(model, caplog):
    resolved = model.resolve({"share.record.lock.duration.ms": "90000", "share.isolation.level": "nonsense",
                              "share.auto.offset.reset": "by_duration:PT1H", "no.such.key": "1"}, "g")
    assert resolved.share_record_lock_duration_ms == 60000  # the broker's max
    assert resolved.share_isolation_level == "read_uncommitted"
    assert resolved.share_auto_offset_reset == "by_duration:PT1H"
    assert resolved.share_auto_offset_reset_duration_ms == 3_600_000
    assert model.default_config.share_auto_offset_reset_duration_ms is None
    assert "exceeds the broker's maximum" in caplog.text and "no.such.key" in caplog.text


def test_describe_gives_sources_types_and_synonyms():
    m = GroupConfigModel(broker(group_share_record_lock_duration_ms=20000))
    entries = {e.name: e for e in m.describe({"share.auto.offset.reset": "earliest"})}
    assert list(entries) == group_config_names()
    reset, lock = entries["share.auto.offset.reset"], entries["share.record.lock.duration.ms"]
    assert (reset.value, reset.source, reset.type, reset.read_only) == \
        ("earliest", ConfigSource.GROUP_CONFIG, ConfigType.STRING, False)
    assert (lock.value, lock.source, lock.type) == ("20000", ConfigSource.DEFAULT_CONFIG, ConfigType.INT)
    assert [(s.name, s.value, s.source) for s in reset.synonyms] == \
        [("share.auto.offset.reset", "earliest", ConfigSource.GROUP_CONFIG)]
    assert reset.doc and not reset.sensitive
    wire = reset.to_wire(include_synonyms=False, include_documentation=False)
    assert wire["synonyms"] == [] and wire["documentation"] is None and wire["config_source"] == 8
    assert [e.name for e in m.describe({}, ["share.isolation.level", "nope"])] == ["share.isolation.level"]


# ------------------------------------------------------------------ topics and brokers

def test_topic_configs_are_the_brokers_log_settings(tmp_path):
    props = tmp_path / "broker.properties"
    props.write_text("log.retention.ms=3600000\nmessage.max.bytes=2000000\n")
    cfg = config.load(config.BROKER, props, ["log.segment.bytes=2048"])
    entries = {e.name: e for e in describe_topic(cfg)}
    assert {n: e.value for n, e in entries.items()} == {
        "segment.bytes": "2048", "index.interval.bytes": "4096", "retention.bytes": "-1", "retention.ms": "3600000",
        "flush.messages": "9223372036854775807", "flush.ms": "-1", "max.message.bytes": "2000000",
        "cleanup.policy": "delete", "delete.retention.ms": "86400000", "max.compaction.lag.ms": "9223372036854775807",
        "message.timestamp.type": "CreateTime", "min.cleanable.dirty.ratio": "0.5", "min.compaction.lag.ms": "0",
        "segment.ms": "604800000"}
    retention = entries["retention.ms"]
    assert retention.source == ConfigSource.STATIC_BROKER_CONFIG and retention.type == ConfigType.LONG
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("log.retention.ms", "3600000", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG)]
    assert entries["segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG  # an --override is static too
    assert entries["index.interval.bytes"].source == ConfigSource.DEFAULT_CONFIG
    assert not any(e.read_only for e in entries.values())  # every topic config can be set on the topic
    own = {e.name: e for e in describe_topic(cfg, overrides={"retention.ms": "1000"})}["retention.ms"]
    assert own.value == "1000" and own.source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert [s.source for s in own.synonyms] == [ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.STATIC_BROKER_CONFIG,
                                                ConfigSource.DEFAULT_CONFIG]
    assert [e.name for e in describe_topic(cfg, ["retention.ms"])] == ["retention.ms"]


def test_broker_configs(tmp_path):
    cfg = config.load(config.BROKER, None, {"broker.id": "3", "ssl.key.password": "hunter2",
                                            "listener.name.external.ssl.key.password": "pw2",
                                            "auto.create.topics.enable": "true"})
    entries = {e.name: e for e in describe_broker(cfg)}
    assert set(config.BROKER.keys) <= set(entries)
    assert entries["broker.id"].value == "3" and entries["broker.id"].source == ConfigSource.STATIC_BROKER_CONFIG
    assert entries["num.partitions"].source == ConfigSource.DEFAULT_CONFIG
    assert entries["auto.create.topics.enable"].value == "true"
    assert entries["auto.create.topics.enable"].type == ConfigType.BOOLEAN
    assert entries["log.retention.ms"].type == ConfigType.LONG and entries["broker.id"].type == ConfigType.INT
    assert entries["ssl.enabled.protocols"].value == "TLSv1.2,TLSv1.3"
    assert entries["ssl.enabled.protocols"].type == ConfigType.LIST
    for name in ("ssl.key.password", "listener.name.external.ssl.key.password"):
        e = entries[name]
        assert e.sensitive and e.value is None and e.type == ConfigType.PASSWORD
        assert all(s.value is None for s in e.synonyms)
        assert e.to_wire(True, False)["value"] is None
        assert all(s["value"] is None for s in e.to_wire(True, False)["synonyms"])
    assert entries["advertised.listeners"].value is None  # no default, not set
    assert entries["advertised.listeners"].synonyms == ()
    assert entries["broker.id"].read_only and not entries["log.retention.ms"].read_only  # dynamic log settings


def test_config_knows_what_was_set(tmp_path):
    props = tmp_path / "broker.properties"
    props.write_text("num.partitions=3\nadvertised.listeners=\n")
    cfg = config.load(config.BROKER, props, ["broker.id=1"])
    assert cfg.explicit == {"num.partitions", "broker.id"}
    assert cfg.with_overrides({"log.retention.ms": 5}).explicit == {"num.partitions", "broker.id", "log.retention.ms"}


# ------------------------------------------------------------------ ZooKeeper's JSON

def test_entity_config_and_notification_json():
    data = encode_entity_config({"share.isolation.level": "read_committed", "share.auto.offset.reset": "earliest"})
    assert data == (b'{"version":1,"config":{"share.auto.offset.reset":"earliest",'
                    b'"share.isolation.level":"read_committed"}}')
    assert parse_entity_config(data) == {"share.auto.offset.reset": "earliest",
                                         "share.isolation.level": "read_committed"}
    assert parse_entity_config(b"") == {}
    with pytest.raises(ValueError, match="not JSON"):
        parse_entity_config(b"{", "group 'g'")
    assert encode_notification("orders") == b'{"version":2,"entity_path":"groups/orders"}'
    assert notified_group(b'{"version":2,"entity_path":"groups/orders"}') == "orders"
    assert notified_group(b'{"version":2,"entity_path":"users/alice"}') is None
    assert notified_group(b'{"version":1,"entity_type":"groups","entity_name":"x"}') is None
    assert notified_group(b"garbage") is None
