"""Idempotent producers: InitProducerId, producer id blocks in ZooKeeper, sequence checks in Produce.

Real clients with idempotence on (kafka-python's default, confluent-kafka with
enable.idempotence) against a LocalCluster of broker processes; hand-built batches
over a raw socket against an in-process broker for duplicates, gaps and epochs.
"""

from __future__ import annotations

import json
import time

import pytest
from helpers import wait_until
from kafka_io import connect, roundtrip

from spark_coord.broker import producer_state
from spark_coord.client.admin import EARLIEST, AdminClient
from spark_coord.client.fetcher import fetch
from spark_coord.client.metadata import ClusterClient
from spark_coord.errors import ErrorCode
from spark_coord.records.builder import BatchBuilder
from spark_coord.records.reader import iter_batches, iter_records
from spark_coord.zk import paths

PRODUCE_V = 9
INIT_PID = 22


def _read_all(bootstrap: str, topic: str) -> list[tuple[int, int, bytes | None, bytes | None, int]]:
    """Every record of ``topic`` as (partition, offset, key, value, producer_id of its batch)."""
    got = []
    with ClusterClient(bootstrap) as cluster:
        starts = AdminClient(cluster).list_offsets(topic, None, EARLIEST)
        for p, pos in starts.items():
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                data = fetch(cluster.connection(cluster.leader(topic, p)), {(topic, p): pos}, max_wait_ms=100)[0]
                assert data.error == 0, ErrorCode(data.error).name
                buf = data.records or b""
                for header, batch in iter_batches(buf):
                    for r in iter_records(batch, min_offset=pos):
                        got.append((p, r.offset, r.key, r.value, header.producer_id))
                        pos = r.offset + 1
                if pos >= data.high_watermark:
                    break
            else:
                raise AssertionError(f"{topic}-{p}: could not read up to the high watermark in time")
    return got


def _create(cluster, topic: str, partitions: int = 3) -> None:
    with ClusterClient(cluster.bootstrap) as c:
        AdminClient(c).create_topic(topic, partitions)


def _assert_exactly_once(rows, values: list[bytes]) -> None:
    got = sorted(v for _p, _o, _k, v, _pid in rows)
    assert len(got) == len(set(got)), "a record was stored twice"
    assert got == sorted(values)
    assert all(pid >= 0 for *_, pid in rows), "the client did not produce idempotently"
    by_partition: dict[int, list[int]] = {}
    for p, off, *_ in rows:
        by_partition.setdefault(p, []).append(off)
    for p, offs in by_partition.items():
        assert offs == list(range(offs[0], offs[0] + len(offs))), f"partition {p}: offsets not contiguous"


# ------------------------------------------------------------------ real clients

def test_kafka_python_default_producer_is_idempotent_and_stores_each_record_once(cluster):
    from kafka import KafkaProducer

    topic = "idem-kafka-python"
    _create(cluster, topic)
    values = [f"kp-{i}".encode() for i in range(300)]
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=2)  # defaults: idempotent, acks=all
    try:
        futures = [producer.send(topic, value=v, key=str(i % 7).encode()) for i, v in enumerate(values)]
        producer.flush(30)
        metadata = [f.get(timeout=30) for f in futures]
    finally:
        producer.close(10)
    assert {m.partition for m in metadata} == {0, 1, 2}
    rows = _read_all(cluster.bootstrap, topic)
    _assert_exactly_once(rows, values)
    # the acknowledged offsets are where the records are
    stored = {(p, off): v for p, off, _k, v, _pid in rows}
    assert all(stored[(m.partition, m.offset)] == v for m, v in zip(metadata, values, strict=True))


def test_confluent_idempotent_producer_stores_each_record_once(cluster):
    from confluent_kafka import Producer

    topic = "idem-confluent"
    _create(cluster, topic)
    values = [f"ck-{i}".encode() for i in range(300)]
    errors = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 2,
                         "log_level": 3})
    for i, v in enumerate(values):
        producer.produce(topic, value=v, key=str(i % 5).encode(),
                         on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(30) == 0
    assert not errors, errors
    _assert_exactly_once(_read_all(cluster.bootstrap, topic), values)


def test_producer_id_blocks_live_in_zookeeper_in_kafkas_format(cluster):
    from spark_coord.zk import client as zk_client

    zk = zk_client.connect(cluster.zk_connect)
    try:
        with ClusterClient(cluster.bootstrap) as c:
            ids = set()
            for broker_id in sorted(cluster.brokers):
                for _ in range(3):
                    r = c.connection(broker_id).request(INIT_PID, {"transactional_id": None,
                                                                   "transaction_timeout_ms": 60000})
                    assert r["error_code"] == 0 and r["producer_epoch"] == 0
                    ids.add(r["producer_id"])
        assert len(ids) == 3 * len(cluster.brokers), "two producers got the same id"
        data, _ = zk.get(paths.LATEST_PRODUCER_ID_BLOCK)
        doc = json.loads(data)
        assert doc["version"] == 1 and doc["broker"] in cluster.brokers
        start, end = int(doc["block_start"]), int(doc["block_end"])
        assert isinstance(doc["block_start"], str) and end - start + 1 == producer_state.BLOCK_SIZE
        assert max(ids) <= end
    finally:
        zk_client.close(zk)


# ------------------------------------------------------------------ raw batches

def _batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    for v in values:
        b.append(v, timestamp_ms=1_700_000_000_000)
    return b.build()


def _produce(s, topic: str, batch: bytes, partition: int = 0) -> dict:
    r = roundtrip(s, 0, PRODUCE_V, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    return r["responses"][0]["partition_responses"][0]


def _init_pid(s, version: int = 4, transactional_id: str | None = None) -> dict:
    return roundtrip(s, INIT_PID, version, {"transactional_id": transactional_id, "transaction_timeout_ms": 60000})


def _topic(broker, name: str) -> None:
    host, port = broker.address
    with ClusterClient(f"{host}:{port}") as c:
        AdminClient(c).create_topic(name, 1)
    wait_until(lambda: broker.broker.logs.get(name, 0), 10, message=f"the log of {name}-0")


def _values(broker, topic: str, partition: int = 0) -> list[bytes]:
    plog = broker.broker.logs.get(topic, partition)
    region = plog.read(plog.log_start_offset, 10 * 1024 * 1024)
    return [r.value for r in iter_records(region.read() if region else b"")]


def test_duplicate_batch_is_stored_once_and_answered_with_its_first_offset(broker):
    _topic(broker, "dup")
    s = connect(broker.address)
    pid = _init_pid(s)["producer_id"]
    assert _produce(s, "dup", _batch(pid, 0, 0, [b"a", b"b"]))["base_offset"] == 0
    first = _produce(s, "dup", _batch(pid, 0, 2, [b"c"]))
    assert (first["error_code"], first["base_offset"]) == (0, 2)
    again = _produce(s, "dup", _batch(pid, 0, 2, [b"c"]))  # a retry after a lost answer
    assert (again["error_code"], again["base_offset"]) == (0, 2)
    older = _produce(s, "dup", _batch(pid, 0, 0, [b"a", b"b"]))  # still within the five cached batches
    assert (older["error_code"], older["base_offset"]) == (0, 0)
    assert _values(broker, "dup") == [b"a", b"b", b"c"]
    assert _produce(s, "dup", _batch(pid, 0, 3, [b"d"]))["base_offset"] == 3


def test_sequence_gap_and_stale_epoch_are_refused_and_nothing_is_appended(broker):
    _topic(broker, "gaps")
    s = connect(broker.address)
    pid = _init_pid(s)["producer_id"]
    assert _produce(s, "gaps", _batch(pid, 0, 0, [b"x"]))["error_code"] == 0
    gap = _produce(s, "gaps", _batch(pid, 0, 5, [b"y"]))
    assert gap["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and "expected sequence 1" in gap["error_message"]
    assert _produce(s, "gaps", _batch(pid, 1, 0, [b"z"]))["error_code"] == 0  # a new epoch restarts at 0
    stale = _produce(s, "gaps", _batch(pid, 0, 1, [b"w"]))
    assert stale["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH
    bad_start = _produce(s, "gaps", _batch(pid, 2, 7, [b"v"]))
    assert bad_start["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert _values(broker, "gaps") == [b"x", b"z"]
    # producers are independent; a plain (non-idempotent) batch is never checked
    other = _init_pid(s)["producer_id"]
    assert other != pid
    assert _produce(s, "gaps", _batch(other, 0, 0, [b"o"]))["error_code"] == 0
    assert _produce(s, "gaps", _batch(-1, -1, -1, [b"p"]))["error_code"] == 0
    assert _produce(s, "gaps", _batch(-1, -1, -1, [b"p"]))["error_code"] == 0
    assert _values(broker, "gaps") == [b"x", b"z", b"o", b"p", b"p"]


def test_unknown_producer_is_accepted_at_any_sequence_and_sequences_wrap(broker):
    """A producer the partition has no state for (last seen in an older segment) is accepted at any sequence."""
    _topic(broker, "wrap")
    s = connect(broker.address)
    top = 2**31 - 1
    assert _produce(s, "wrap", _batch(4242, 3, top - 1, [b"1", b"2"]))["error_code"] == 0
    assert _produce(s, "wrap", _batch(4242, 3, 0, [b"3"]))["error_code"] == 0  # wrapped from 2**31-1 to 0
    assert _produce(s, "wrap", _batch(4242, 3, 0, [b"3"]))["base_offset"] == 2  # duplicate
    assert _values(broker, "wrap") == [b"1", b"2", b"3"]


def test_a_retry_after_a_broker_restart_is_answered_as_the_duplicate(broker_factory, tmp_path):
    """The restarted broker rebuilds its producers' sequences from the log: the retry of a batch
    appended before the restart (its answer lost) is not stored again, and a gap is still refused."""
    kept = {"log.dirs": str(tmp_path / "kept-logs")}
    first = broker_factory(0, **kept)
    _topic(first, "restart")
    s = connect(first.address)
    pid = _init_pid(s)["producer_id"]
    other = _init_pid(s)["producer_id"]
    for producer, seq, values in ((pid, 0, [b"a", b"b"]), (other, 0, [b"o"]), (pid, 2, [b"c"]), (pid, 3, [b"d"])):
        assert _produce(s, "restart", _batch(producer, 0, seq, values))["error_code"] == 0
    s.close()
    first.stop()
    second = broker_factory(0, **kept)
    wait_until(lambda: second.broker.logs.get("restart", 0), 10, message="the log of restart-0")
    s = connect(second.address)
    again = _produce(s, "restart", _batch(pid, 0, 3, [b"d"]))
    assert (again["error_code"], again["base_offset"]) == (0, 4)
    assert _produce(s, "restart", _batch(other, 0, 0, [b"o"]))["base_offset"] == 2
    gap = _produce(s, "restart", _batch(pid, 0, 9, [b"x"]))
    assert gap["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and "expected sequence 4" in gap["error_message"]
    assert _produce(s, "restart", _batch(pid, 0, 4, [b"e"]))["base_offset"] == 5
    assert _values(second, "restart") == [b"a", b"b", b"o", b"c", b"d", b"e"]
    s.close()


def test_idempotent_batch_without_epoch_or_with_company_is_refused(broker):
    _topic(broker, "invalid")
    s = connect(broker.address)
    r = _produce(s, "invalid", _batch(7, -1, 0, [b"x"]))
    assert r["error_code"] == ErrorCode.INVALID_RECORD
    two = _batch(7, 0, 0, [b"a"]) + _batch(7, 0, 1, [b"b"])
    assert _produce(s, "invalid", two)["error_code"] == ErrorCode.INVALID_RECORD
    assert _values(broker, "invalid") == []


@pytest.mark.parametrize("version", range(0, 5))
def test_init_producer_id_every_version_and_a_transactional_id(broker, version):
    s = connect(broker.address)
    a, b = _init_pid(s, version), _init_pid(s, version)
    assert a["error_code"] == b["error_code"] == 0
    assert b["producer_id"] == a["producer_id"] + 1 and a["producer_epoch"] == 0
    # a transactional id gets its producer id from the transaction coordinator (this broker holds every
    # shard): a new one at epoch 0, the same one at the next epoch when asked again
    tid = f"my-txn-{version}"
    first, again = _init_pid(s, version, transactional_id=tid), _init_pid(s, version, transactional_id=tid)
    assert first["error_code"] == again["error_code"] == ErrorCode.NONE
    assert first["producer_id"] > b["producer_id"] and first["producer_epoch"] == 0
    assert (again["producer_id"], again["producer_epoch"]) == (first["producer_id"], 1)


def test_a_restarted_broker_claims_a_fresh_block(broker_factory, zk):
    first = broker_factory(0)
    s = connect(first.address)
    before = _init_pid(s)["producer_id"]
    s.close()
    first.stop()
    second = broker_factory(0)
    s = connect(second.address)
    after = _init_pid(s)["producer_id"]
    assert after >= before + producer_state.BLOCK_SIZE, "a producer id was handed out twice"
    s.close()


def test_unusable_block_znode_is_an_error_answer_not_a_crash(broker, zk):
    zk.ensure_path(paths.LATEST_PRODUCER_ID_BLOCK)
    zk.set(paths.LATEST_PRODUCER_ID_BLOCK, b"{not json")
    s = connect(broker.address)
    assert _init_pid(s)["error_code"] == ErrorCode.UNKNOWN_SERVER_ERROR
    zk.set(paths.LATEST_PRODUCER_ID_BLOCK, b"")  # Kafka creates it empty: the first block starts at 0
    r = _init_pid(s)
    assert (r["error_code"], r["producer_id"]) == (0, 0)
