"""Topic ids (KIP-516): a random UUID per topic, kept in ``/brokers/topics/<topic>`` as Kafka
2.8+ keeps it, answered and accepted by Metadata, CreateTopics, DeleteTopics and Fetch at the
versions that carry it; shared by every broker, stable across restarts, given once to a topic
from before topic ids, new for a topic deleted and created again."""

from __future__ import annotations

import json
import signal
import threading
import uuid

import pytest
from helpers import BrokerThread, fresh_chroot, wait_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_coord.broker import topics as topic_admin
from spark_coord.client.connection import BrokerConnection
from spark_coord.client.metadata import ClusterClient
from spark_coord.cluster import LocalCluster
from spark_coord.errors import ErrorCode
from spark_coord.records.builder import BatchBuilder
from spark_coord.records.reader import iter_records
from spark_coord.wire.registry import ApiKey
from spark_coord.zk import model, paths
from spark_coord.zk.client import close as zk_close
from spark_coord.zk.client import connect as zk_connect_to

ZERO = bytes(16)
FETCH_VERSIONS = range(13, 18)


# ---------------------------------------------------------------------------- helpers

def create(conn: BrokerConnection, name: str, partitions: int = 2, assignments=None) -> dict:
    topic = {"name": name, "num_partitions": -1 if assignments else partitions,
             "replication_factor": -1 if assignments else 1, "assignments": assignments or []}
    out = conn.request(ApiKey.CREATE_TOPICS, {"topics": [topic], "timeout_ms": 10000}, version=7)
    return out["topics"][0]


def create_id(conn: BrokerConnection, name: str, partitions: int = 2) -> bytes:
    result = create(conn, name, partitions)
    assert result["error_code"] == ErrorCode.NONE, result
    return result["topic_id"]


def metadata(conn: BrokerConnection, topics: list[tuple[str | None, bytes]] | None, version: int = 12) -> list[dict]:
    body = {"topics": None if topics is None else [{"name": n, "topic_id": i} for n, i in topics],
            "allow_auto_topic_creation": False}
    return conn.request(ApiKey.METADATA, body, version=version)["topics"]


def delete(conn: BrokerConnection, topics: list[tuple[str | None, bytes]], version: int = 6) -> list[dict]:
    body = {"topics": [{"name": n, "topic_id": i} for n, i in topics], "timeout_ms": 10000}
    if version < 6:
        body = {"topic_names": [n for n, _ in topics], "timeout_ms": 10000}
    return conn.request(ApiKey.DELETE_TOPICS, body, version=version)["responses"]


def fetch(conn: BrokerConnection, version: int, topics: list[tuple[str | bytes, list[int]]], offset: int = 0) -> dict:
    """Fetch at ``version``: each topic by name (a str, v12-) or by id (bytes, v13+)."""
    key = "topic_id" if version >= 13 else "topic"
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{key: t, "partitions": [{"partition": p, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                                               for p in parts]} for t, parts in topics]}
    return conn.request(ApiKey.FETCH, body, version=version)


def produce(conn: BrokerConnection, topic: str, partition: int, values: list[bytes]) -> None:
    b = BatchBuilder()
    for v in values:
        b.append(v)
    out = conn.request(ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": b.build()}]}]})
    assert out["responses"][0]["partition_responses"][0]["error_code"] == ErrorCode.NONE


def values_of(partition_data: dict) -> list[bytes]:
    return [r.value for r in iter_records(partition_data["records"] or b"")]


def zk_topic(zk, name: str) -> tuple[dict, int]:
    data, stat = zk.get(paths.topic(name))
    return json.loads(data), stat.version


def ids_seen_by(address: tuple[str, int], names: list[str]) -> dict[str, bytes]:
    with BrokerConnection(*address, timeout=10) as conn:
        return {t["name"]: t["topic_id"] for t in metadata(conn, [(n, ZERO) for n in names])}


# ------------------------------------------------------------------ one broker, in process

@pytest.fixture
def broker(broker_factory):
    return broker_factory(0, **{"num.partitions": 2})


@pytest.fixture
def conn(broker):
    with BrokerConnection(*broker.address, timeout=15) as c:
        yield c


def test_create_topics_v7_answers_the_id_zookeeper_keeps(broker, conn, zk):
    topic_id = create_id(conn, "created")
    u = uuid.UUID(bytes=topic_id)
    assert (u.version, u.variant) == (4, uuid.RFC_4122)
    doc, _ = zk_topic(zk, "created")
    assert doc == {"version": 3, "topic_id": model.format_topic_id(topic_id), "partitions": {"0": [0], "1": [0]},
                   "adding_replicas": {}, "removing_replicas": {}}
    # every Metadata version that carries ids answers it, by name and for all topics
    for version in (10, 11, 12):
        [entry] = metadata(conn, [("created", ZERO)], version)
        assert (entry["error_code"], entry["topic_id"]) == (ErrorCode.NONE, topic_id)
        assert [t["topic_id"] for t in metadata(conn, None, version)] == [topic_id]
    assert broker.broker.view.topic_id("created") == topic_id
    assert broker.broker.view.topic_name(topic_id) == "created"
    with ClusterClient(f"127.0.0.1:{broker.port}") as client:
        assert client.topic("created").topic_id == topic_id
    # another topic, another id; a failed or validate-only create answers the zero uuid
    assert create_id(conn, "created-2") not in (topic_id, ZERO)
    assert create(conn, "created")["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
    assert create(conn, "created")["topic_id"] == ZERO
    body = {"topics": [{"name": "only-validated", "num_partitions": 1, "replication_factor": 1}],
            "timeout_ms": 5000, "validate_only": True}
    [result] = conn.request(ApiKey.CREATE_TOPICS, body, version=7)["topics"]
    assert (result["error_code"], result["topic_id"]) == (ErrorCode.NONE, ZERO)


def test_metadata_names_topics_by_id(conn):
    a, b = create_id(conn, "by-id-a"), create_id(conn, "by-id-b", 3)
    for version in (10, 11, 12):
        got = metadata(conn, [(None, b), (None, a)], version)
        assert [(t["error_code"], t["name"], t["topic_id"]) for t in got] == [
            (ErrorCode.NONE, "by-id-b", b), (ErrorCode.NONE, "by-id-a", a)]
        assert [p["partition_index"] for p in got[0]["partitions"]] == [0, 1, 2]
    # ids of nothing: unknown, the zero uuid; never auto-created, no name given back
    unknown = model.new_topic_id()
    got = metadata(conn, [(None, unknown), (None, ZERO), ("by-id-a", ZERO)])
    assert [(t["error_code"], t["name"], t["topic_id"]) for t in got] == [
        (ErrorCode.UNKNOWN_TOPIC_ID, None, unknown), (ErrorCode.UNKNOWN_TOPIC_ID, None, ZERO),
        (ErrorCode.NONE, "by-id-a", a)]
    # a name and an id: the id decides (Kafka's rule), here one naming nothing
    [entry] = metadata(conn, [("by-id-a", unknown)])
    assert (entry["error_code"], entry["name"]) == (ErrorCode.UNKNOWN_TOPIC_ID, None)
    assert sorted(t["name"] for t in metadata(conn, None)) == ["by-id-a", "by-id-b"]


def test_a_topic_deleted_and_created_again_has_a_new_id(broker, conn):
    old = create_id(conn, "reborn", 1)
    produce(conn, "reborn", 0, [b"old-1", b"old-2"])
    [gone] = delete(conn, [("reborn", ZERO)], version=5)
    assert gone["error_code"] == ErrorCode.NONE
    new = create_id(conn, "reborn", 1)
    assert new not in (old, ZERO)
    produce(conn, "reborn", 0, [b"new-1"])
    # a client still holding the old id: Metadata and Fetch answer UNKNOWN_TOPIC_ID
    [stale] = metadata(conn, [(None, old)])
    assert (stale["error_code"], stale["name"], stale["topic_id"]) == (ErrorCode.UNKNOWN_TOPIC_ID, None, old)
    for version in FETCH_VERSIONS:
        [t] = fetch(conn, version, [(old, [0])])["responses"]
        assert t["topic_id"] == old and [p["error_code"] for p in t["partitions"]] == [ErrorCode.UNKNOWN_TOPIC_ID]
        [t] = fetch(conn, version, [(new, [0])])["responses"]
        assert t["topic_id"] == new and t["partitions"][0]["error_code"] == ErrorCode.NONE
        assert values_of(t["partitions"][0]) == [b"new-1"]
    assert broker.broker.view.topic_name(old) is None and broker.broker.view.topic_name(new) == "reborn"


def test_fetch_by_id_at_every_new_version(conn):
    topic_id = create_id(conn, "fetched", 2)
    produce(conn, "fetched", 0, [b"a", b"b"])
    produce(conn, "fetched", 1, [b"c"])
    for version in FETCH_VERSIONS:
        out = fetch(conn, version, [(topic_id, [0, 1])])
        assert out["error_code"] == ErrorCode.NONE and out["node_endpoints"] == []
        [t] = out["responses"]
        assert t["topic_id"] == topic_id
        assert [(p["partition_index"], p["error_code"], p["high_watermark"]) for p in t["partitions"]] == [
            (0, ErrorCode.NONE, 2), (1, ErrorCode.NONE, 1)]
        assert [values_of(p) for p in t["partitions"]] == [[b"a", b"b"], [b"c"]]
        # from the middle of the log, as a consumer goes on
        [t] = fetch(conn, version, [(topic_id, [0])], offset=1)["responses"]
        assert [r.offset for r in iter_records(t["partitions"][0]["records"], min_offset=1)] == [1]
    # by name up to v12, as before
    [t] = fetch(conn, 12, [("fetched", [0])])["responses"]
    assert t["topic"] == "fetched" and values_of(t["partitions"][0]) == [b"a", b"b"]


def test_fetch_answers_unknown_topic_id_per_topic(conn):
    topic_id = create_id(conn, "mixed", 1)
    produce(conn, "mixed", 0, [b"x"])
    unknown = model.new_topic_id()
    for version in FETCH_VERSIONS:
        out = fetch(conn, version, [(unknown, [0, 1]), (topic_id, [0]), (ZERO, [0])])
        assert out["error_code"] == ErrorCode.NONE
        got = [(t["topic_id"], [(p["partition_index"], p["error_code"]) for p in t["partitions"]])
               for t in out["responses"]]
        assert got == [(unknown, [(0, ErrorCode.UNKNOWN_TOPIC_ID), (1, ErrorCode.UNKNOWN_TOPIC_ID)]),
                       (topic_id, [(0, ErrorCode.NONE)]), (ZERO, [(0, ErrorCode.UNKNOWN_TOPIC_ID)])]
        assert values_of(out["responses"][1]["partitions"][0]) == [b"x"]
        # with an error the record set is empty, not null: librdkafka cannot parse a null one
        assert [p["records"] for t in out["responses"] for p in t["partitions"] if p["error_code"]] == [b""] * 3
        # a known topic, a partition it does not have
        [t] = fetch(conn, version, [(topic_id, [5])])["responses"]
        assert t["partitions"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_long_poll_on_a_topic_deleted_meanwhile_answers_unknown_topic_id(broker, conn):
    topic_id = create_id(conn, "vanishing", 1)
    body = {"replica_id": -1, "max_wait_ms": 3000, "min_bytes": 1, "max_bytes": 1 << 20, "session_id": 0,
            "session_epoch": -1, "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}
    pending = conn.send(ApiKey.FETCH, body, version=13)
    wait_until(lambda: broker.broker.ctx.appends.waiting() == 1, 10, message="the fetch to wait for an append")
    with BrokerConnection(*broker.address, timeout=15) as other:
        assert delete(other, [(None, topic_id)])[0]["error_code"] == ErrorCode.NONE
    [t] = pending.result()["responses"]
    assert [p["error_code"] for p in t["partitions"]] == [ErrorCode.UNKNOWN_TOPIC_ID]


def test_delete_topics_v6_by_id(broker, conn):
    a, b = create_id(conn, "del-a", 1), create_id(conn, "del-b", 1)
    [r] = delete(conn, [(None, a)])
    assert (r["error_code"], r["name"], r["topic_id"]) == (ErrorCode.NONE, "del-a", a)
    assert [t["error_code"] for t in metadata(conn, [(None, a), ("del-b", ZERO)])] == [
        ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.NONE]
    # the id of a deleted topic and an id never given name nothing
    never = model.new_topic_id()
    got = delete(conn, [(None, a), (None, never)])
    assert [(r["error_code"], r["name"], r["topic_id"]) for r in got] == [
        (ErrorCode.UNKNOWN_TOPIC_ID, None, a), (ErrorCode.UNKNOWN_TOPIC_ID, None, never)]
    # by name at v6 answers the id it had
    [r] = delete(conn, [("del-b", ZERO)])
    assert (r["error_code"], r["name"], r["topic_id"]) == (ErrorCode.NONE, "del-b", b)
    assert broker.broker.view.topics == {}


def test_delete_topics_v6_refuses_what_kafka_refuses(broker, conn):
    keep, twice = create_id(conn, "keep", 1), create_id(conn, "twice", 1)
    got = delete(conn, [(None, ZERO), ("keep", keep), ("twice", ZERO), ("twice", ZERO), (None, keep), (None, keep),
                        (None, twice)])
    messages = {(r["name"], r["topic_id"]): (r["error_code"], r["error_message"]) for r in got}
    assert messages == {
        (None, ZERO): (ErrorCode.INVALID_REQUEST, "Neither topic name nor id were specified."),
        ("keep", keep): (ErrorCode.INVALID_REQUEST, "You may not specify both topic name and topic id."),
        ("twice", ZERO): (ErrorCode.INVALID_REQUEST, "Duplicate topic name."),
        (None, keep): (ErrorCode.INVALID_REQUEST, "Duplicate topic id."),
        ("twice", twice): (ErrorCode.NONE, None),
    }
    assert len(got) == 5  # one answer per duplicated name or id
    assert set(broker.broker.view.topics) == {"keep"}
    # a name whose topic the request also names by id: the id is deleted, the name refused
    got = delete(conn, [(None, keep), ("keep", ZERO)])
    assert [(r["name"], r["topic_id"], r["error_code"]) for r in got] == [
        ("keep", keep, ErrorCode.NONE), ("keep", keep, ErrorCode.INVALID_REQUEST)]
    assert got[1]["error_message"] == "The provided topic name maps to an ID that was already supplied."


def test_delete_by_a_stale_id_spares_the_topic_created_again(broker, conn):
    old = create_id(conn, "spared", 1)
    assert delete(conn, [("spared", ZERO)], version=5)[0]["error_code"] == ErrorCode.NONE
    new = create_id(conn, "spared", 1)
    # the conditional delete itself (the handler already refuses an id the view does not know)
    result = broker.call(topic_admin.delete_topic(broker.broker.ctx, "spared", 5000, topic_id=old))
    assert (result.code, result.topic_id) == (ErrorCode.UNKNOWN_TOPIC_ID, ZERO)
    assert broker.broker.view.topic_id("spared") == new
    result = broker.call(topic_admin.delete_topic(broker.broker.ctx, "spared", 5000, topic_id=new))
    assert (result.code, result.topic_id) == (ErrorCode.NONE, new)


def test_a_topic_rewritten_without_its_id_keeps_it(broker, conn, zk):
    """A tool that does not know topic ids (a pre-2.8 partition adder) rewrites the znode: the
    topic keeps its id, written back by the broker."""
    topic_id = create_id(conn, "rewritten", 1)
    zk.set(paths.topic("rewritten"), model.topic_assignment({0: [0], 1: [0]}))
    wait_until(lambda: zk_topic(zk, "rewritten")[0].get("topic_id"), 10, message="the id written back")
    doc, version = zk_topic(zk, "rewritten")
    assert (doc["topic_id"], doc["partitions"], version) == (model.format_topic_id(topic_id), {"0": [0], "1": [0]}, 2)
    wait_until(lambda: len(broker.broker.view.topics.get("rewritten", {})) == 2, 10, message="two partitions")
    assert broker.broker.view.topic_id("rewritten") == topic_id


def test_cluster_view_lookups_refuse_what_is_not_an_id(broker, conn):
    topic_id = create_id(conn, "looked-up", 1)
    view = broker.broker.view
    assert view.topic_name(topic_id) == "looked-up" and view.topic_name(bytearray(topic_id)) == "looked-up"
    assert view.topic_name(memoryview(topic_id)) == "looked-up"
    for bad in (ZERO, topic_id[:15], topic_id + b"\x00", b"", model.format_topic_id(topic_id), None, 7,
                uuid.UUID(bytes=topic_id)):
        assert view.topic_name(bad) is None, bad
    assert view.topic_id("looked-up") == topic_id and view.topic_id("nope") is None


def test_fetch_v16_names_the_current_leader(broker_factory):
    """KIP-951: a partition fetched from a broker that does not lead it answers
    NOT_LEADER_OR_FOLLOWER with the leader's id and its endpoint."""
    b0, b1 = broker_factory(0), broker_factory(1)
    with BrokerConnection(*b0.address, timeout=15) as conn:
        wait_until(lambda: 1 in b0.broker.view.brokers, 10, message="broker 0 to see broker 1")
        result = create(conn, "led", assignments=[{"partition_index": 0, "broker_ids": [0]},
                                                  {"partition_index": 1, "broker_ids": [1]}])
        topic_id = result["topic_id"]
        out = fetch(conn, 16, [(topic_id, [0, 1])])
        [t] = out["responses"]
        assert [(p["partition_index"], p["error_code"]) for p in t["partitions"]] == [
            (0, ErrorCode.NONE), (1, ErrorCode.NOT_LEADER_OR_FOLLOWER)]
        assert t["partitions"][1]["current_leader"] == {"leader_id": 1, "leader_epoch": 0}
        assert out["node_endpoints"] == [{"node_id": 1, "host": "127.0.0.1", "port": b1.port, "rack": None}]
        # before v16 there is nowhere to say it
        out = fetch(conn, 15, [(topic_id, [1])])
        assert out["node_endpoints"] == []
        assert out["responses"][0]["partitions"][0]["current_leader"] == {"leader_id": -1, "leader_epoch": -1}


# --------------------------------------------------------------------------- hostile input

HOSTILE = settings(max_examples=40, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@HOSTILE
@given(ids=st.lists(st.binary(min_size=16, max_size=16), min_size=1, max_size=4))
def test_ids_of_nothing_get_error_codes(conn, ids):
    """Any 16 bytes -- the zero uuid, all ones, random -- in Metadata, Fetch and DeleteTopics:
    each answered with its error code, and the connection goes on being served."""
    assert create(conn, "fuzzed", 1)["error_code"] in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS)
    known = metadata(conn, [("fuzzed", ZERO)])[0]["topic_id"]
    ids = [i for i in ids if i != known]
    got = metadata(conn, [(None, i) for i in ids])
    assert [(t["error_code"], t["name"], t["topic_id"]) for t in got] == [
        (ErrorCode.UNKNOWN_TOPIC_ID, None, i) for i in ids]
    for version in (13, 17):
        out = fetch(conn, version, [(i, [0, -1]) for i in ids])
        assert [[p["error_code"] for p in t["partitions"]] for t in out["responses"]] == [
            [ErrorCode.UNKNOWN_TOPIC_ID] * 2 for _ in ids]
    unique = list(dict.fromkeys(ids))
    codes = {(r["topic_id"], r["error_code"]) for r in delete(conn, [(None, i) for i in ids])}
    assert codes == {(i, ErrorCode.INVALID_REQUEST if i == ZERO or ids.count(i) > 1 else ErrorCode.UNKNOWN_TOPIC_ID)
                     for i in unique}
    assert metadata(conn, [(None, known)])[0]["name"] == "fuzzed"


# --------------------------------------------------------- a cluster of broker processes

TOPICS_BEFORE = [f"before-ids-{i}" for i in range(12)]
TOPICS_RACED = [f"raced-{i}" for i in range(24)]


def _write_topics_without_ids(zk, names: list[str], n_brokers: int) -> None:
    """Topics as a cluster from before topic ids has them (version 1 znodes), in one transaction."""
    zk.ensure_path(paths.BROKER_TOPICS)
    tx = zk.transaction()
    for i, name in enumerate(names):
        tx.create(paths.topic(name), model.topic_assignment({0: [i % n_brokers], 1: [(i + 1) % n_brokers]}))
    assert all(r is True or isinstance(r, str) for r in tx.commit()), "transaction failed"


def _all_given_ids(zk, names: list[str]) -> dict[str, bytes] | None:
    out = {}
    for name in names:
        doc, _ = zk_topic(zk, name)
        if "topic_id" not in doc:
            return None
        out[name] = model.parse_topic_id(doc["topic_id"])
    return out


def test_ids_are_given_once_shared_by_every_broker_and_survive_restarts(zookeeper, tmp_path):
    connect = fresh_chroot(zookeeper, "topic-ids-cluster")
    zk = zk_connect_to(connect)
    try:
        _write_topics_without_ids(zk, TOPICS_BEFORE, 3)
        # three brokers started at once find topics without ids: each gets exactly one
        cluster = LocalCluster(3, tmp_path, zk_connect=connect, overrides={"zookeeper.session.timeout.ms": 6000})
        with cluster:
            given_ids = wait_until(lambda: _all_given_ids(zk, TOPICS_BEFORE), 30, message="every topic has an id")
            assert all(zk_topic(zk, n)[1] == 1 for n in TOPICS_BEFORE), "an id was written more than once"
            assert len(set(given_ids.values())) == len(TOPICS_BEFORE)

            # topics without ids appearing while the brokers run: they all race to give them one
            _write_topics_without_ids(zk, TOPICS_RACED, 3)
            raced = wait_until(lambda: _all_given_ids(zk, TOPICS_RACED), 30, message="every raced topic has an id")
            versions = {n: zk_topic(zk, n)[1] for n in TOPICS_RACED}
            assert set(versions.values()) == {1}, versions
            given_ids.update(raced)

            names = TOPICS_BEFORE + TOPICS_RACED
            for broker_id, address in cluster.brokers.items():
                wait_until(lambda address=address: ids_seen_by(address, names) == given_ids, 20,
                           message=f"broker {broker_id} answers the ids ZooKeeper has")

            # a topic created through one broker: the same id from every broker
            with BrokerConnection(*cluster.brokers[2], timeout=15) as conn:
                created = create_id(conn, "created-in-cluster", 3)
            given_ids["created-in-cluster"] = created
            names.append("created-in-cluster")
            # (the other brokers' watches fire a moment after the creating broker answered)
            for broker_id, address in cluster.brokers.items():
                with BrokerConnection(*address, timeout=15) as conn:
                    wait_until(lambda conn=conn: metadata(conn, [(None, created)])[0]["name"] == "created-in-cluster",
                               20, message=f"broker {broker_id} to know the new topic's id")

            # every broker restarted (killed: nothing is handed over): the same ids
            for broker_id in cluster.brokers:
                cluster.kill_broker(broker_id, signal.SIGKILL)
            for broker_id in cluster.brokers:
                cluster.start_broker(broker_id)
            for broker_id, address in cluster.brokers.items():
                wait_until(lambda address=address: ids_seen_by(address, names) == given_ids, 30,
                           message=f"broker {broker_id} answers the same ids after its restart")
            assert _all_given_ids(zk, names) == given_ids
    finally:
        zk_close(zk)


def test_concurrent_brokers_in_process_agree_on_one_id(zk_connect, zk, tmp_path):
    """The same race with brokers in one process, so each broker's own view can be read."""
    _write_topics_without_ids(zk, TOPICS_BEFORE, 3)
    brokers = [BrokerThread(zk_connect, tmp_path / f"b{i}", i) for i in range(3)]
    starters = [threading.Thread(target=b.start) for b in brokers]
    try:
        for t in starters:
            t.start()
        for t in starters:
            t.join(60)
        given_ids = wait_until(lambda: _all_given_ids(zk, TOPICS_BEFORE), 30, message="every topic has an id")
        assert all(zk_topic(zk, n)[1] == 1 for n in TOPICS_BEFORE)
        for b in brokers:
            wait_until(lambda b=b: {n: b.broker.view.topic_id(n) for n in TOPICS_BEFORE} == given_ids, 20,
                       message=f"broker {b.broker.broker_id}'s view has the ids")
            assert all(b.broker.view.topic_name(i) == n for n, i in given_ids.items())
    finally:
        for b in brokers:
            b.stop()


def test_a_malformed_id_in_zookeeper_leaves_the_topic_alone(broker, conn, zk):
    """A topic znode whose topic_id is not one is treated as any malformed znode: not served,
    not rewritten (a person must look at it), and the broker goes on serving the others."""
    good = create_id(conn, "sound", 1)
    zk.create(paths.topic("garbled"), b'{"version":3,"topic_id":"not-an-id","partitions":{"0":[0]}}')
    zk.create(paths.topic("after-garbled"), model.topic_assignment({0: [0]}, model.new_topic_id()))
    wait_until(lambda: "after-garbled" in broker.broker.view.topics, 10, message="the next topic to be seen")
    assert "garbled" not in broker.broker.view.topics
    assert zk_topic(zk, "garbled") == ({"version": 3, "topic_id": "not-an-id", "partitions": {"0": [0]}}, 0)
    assert metadata(conn, [("garbled", ZERO)])[0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert metadata(conn, [(None, good)])[0]["name"] == "sound"



def test_ids_are_authorized_by_the_topic_they_name(broker_factory, zk):
    """Looked up by id, a topic is authorized as by name: Describe for Metadata (refused with
    its id and no name, as Kafka does: ids are not secret), Read for Fetch, Delete for
    DeleteTopics; an id of nothing stays UNKNOWN_TOPIC_ID."""
    from spark_coord.secret import Password
    from spark_coord.security.client import ClientSecurity
    from spark_coord.security.credentials import UserStore

    passwords = {"admin": "admin-s3cret-pw", "alice": "alice-s3cret-pw"}
    for user, password in passwords.items():
        UserStore(zk).set_password(user, password)
    b = broker_factory(0, **{"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                             "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                             "super.users": "User:admin"})
    port = b.broker.bound_ports["SASL_PLAINTEXT"]

    def as_user(user):
        return BrokerConnection("127.0.0.1", port, timeout=15, security=ClientSecurity(
            protocol="SASL_PLAINTEXT", mechanism="SCRAM-SHA-512", username=user, password=Password(passwords[user])))

    with as_user("admin") as admin, as_user("alice") as alice:
        topic_id = create_id(admin, "guarded", 1)
        unknown = model.new_topic_id()
        got = metadata(alice, [(None, topic_id), (None, unknown)])
        assert [(t["error_code"], t["name"], t["topic_id"]) for t in got] == [
            (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, topic_id), (ErrorCode.UNKNOWN_TOPIC_ID, None, unknown)]
        [t] = fetch(alice, 13, [(topic_id, [0])])["responses"]
        assert t["partitions"][0]["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        [r] = delete(alice, [(None, topic_id)])
        assert (r["error_code"], r["name"]) == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
        assert metadata(admin, [(None, topic_id)])[0]["name"] == "guarded"
