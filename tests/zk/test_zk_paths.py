"""spark_coord.zk.paths: Kafka's layout, and names that cannot be znodes refused."""

from __future__ import annotations

import pytest

from spark_coord.zk import paths


def test_kafka_layout():
    assert paths.BROKER_IDS == "/brokers/ids"
    assert paths.broker(3) == "/brokers/ids/3"
    assert paths.BROKER_TOPICS == "/brokers/topics"
    assert paths.topic("orders.v1") == "/brokers/topics/orders.v1"
    assert paths.COORDINATOR == "/consumers/coordinator"
    assert paths.group("g1") == "/consumers/g1"
    assert paths.group_ids("g1") == "/consumers/g1/ids"
    assert paths.member("g1", "host-12-ab") == "/consumers/g1/ids/host-12-ab"
    assert paths.group_state("g1") == "/consumers/g1/state"
    assert paths.group_offsets("g1") == "/consumers/g1/offsets"
    assert paths.topic_offsets("g1", "t") == "/consumers/g1/offsets/t"
    assert paths.offset("g1", "t", 7) == "/consumers/g1/offsets/t/7"
    assert paths.group_owners("g1") == "/consumers/g1/owners"
    assert paths.topic_owners("g1", "t") == "/consumers/g1/owners/t"
    assert paths.owner("g1", "t", 0) == "/consumers/g1/owners/t/0"


def test_group_ids_may_be_any_single_component():
    # Kafka group ids are free text; anything that is one znode name is fine.
    for g in ("my group", "grüppe", "a:b", "x" * paths.NAME_MAX_LENGTH, "...."):
        assert paths.group(g) == f"/consumers/{g}"


@pytest.mark.parametrize("bad", ["a/b", "", ".", "..", "bad\x00", "tab\there", "del\x7f", "x" * 256, None, 5])
def test_bad_group_ids_are_refused_naming_them(bad):
    with pytest.raises(ValueError) as e:
        paths.group(bad)
    assert "group id" in str(e.value)


def test_group_may_not_shadow_the_coordinator_node():
    with pytest.raises(ValueError, match="reserved"):
        paths.offset("coordinator", "t", 0)
    assert paths.parse_group_node("coordinator") is None
    assert paths.parse_group_node("g") == "g"
    assert paths.parse_group_node("..") is None


@pytest.mark.parametrize("bad", ["a/b", "", ".", "..", "sp ace", "ünï", "x" * 250, "a:b"])
def test_bad_topic_names_are_refused_naming_them(bad):
    with pytest.raises(ValueError) as e:
        paths.topic(bad)
    assert repr(bad[:40]) in str(e.value)


def test_topic_name_at_kafka_limit_is_fine():
    assert paths.topic("t" * 249).endswith("t" * 249)


@pytest.mark.parametrize("bad", [-1, True, "1", 1.0, None])
def test_bad_partitions_and_broker_ids(bad):
    with pytest.raises(ValueError, match="partition"):
        paths.offset("g", "t", bad)
    with pytest.raises(ValueError, match="broker id"):
        paths.broker(bad)


def test_bad_consumer_id():
    with pytest.raises(ValueError, match="consumer id"):
        paths.member("g", "a/b")


def test_child_node_names_parse_strictly():
    assert paths.parse_broker_node("0") == 0
    assert paths.parse_partition_node("12") == 12
    for bad in ("", "07", "-1", "1.0", "x", " 1", "1" * 25):
        with pytest.raises(ValueError, match="not a"):
            paths.parse_partition_node(bad)


def test_chroot_validation():
    assert paths.validate_chroot("/a/b") == "/a/b"
    for bad in ("a", "/", "/a/", "/a//b", "/a/../b", "/a\x00"):
        with pytest.raises(ValueError):
            paths.validate_chroot(bad)


def test_group_config_paths():
    """Group configs sit where ZooKeeper-mode Kafka keeps entity configs (/config/<type>/<name>)."""
    assert paths.group_config("orders") == "/config/groups/orders"
    assert paths.group_config("coordinator") == "/config/groups/coordinator"  # reserved only under /consumers
    assert paths.group_config_entity("orders") == "groups/orders"
    for bad in ("", "a/b", "..", "x\u0000"):
        with pytest.raises(ValueError, match="group id"):
            paths.group_config(bad)
