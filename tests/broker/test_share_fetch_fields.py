"""ShareFetch's IsRenewAck, BatchSize, MaxRecords and MinBytes served as Kafka 4.2 serves them,
over the wire: a renewal must ask for nothing and acquires nothing; Renew needs IsRenewAck (a
partition's batches are refused together); AcquiredRecords ranges are cut at the first batch
boundary BatchSize records into them; MaxRecords 0 acquires nothing; MinBytes holds the answer
until the log has that much to hand out, or MaxWaitMs passes.

The same scenario runs against one of our brokers and against Apache Kafka 4.2
(``apache_kafka``, skipped where it cannot run), with the same expectations."""

from __future__ import annotations

import base64
import threading
import time
import uuid

import pytest
from helpers import wait_until

from spark_coord.client.connection import BrokerConnection
from spark_coord.errors import ErrorCode
from spark_coord.records.builder import BatchBuilder
from spark_coord.wire.registry import ApiKey

TOPIC = "share-fields"
GROUP = "sg-fields"


def _batch(first: int, n: int) -> bytes:
    b = BatchBuilder()
    for i in range(n):
        b.append(b"v%d" % (first + i), key=b"k%d" % (first + i))
    return b.build()


def _produce(c, first: int, n: int, per_batch: int) -> None:
    for start in range(first, first + n, per_batch):
        r = wait_until(lambda start=start: _produced(c, _batch(start, per_batch)), 30, 0.2,
                       f"records {start}+ produced")
        assert r == "ok"


def _produced(c, records: bytes) -> str | None:
    r = c.request(ApiKey.PRODUCE, {"acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}]}, version=9)
    code = r["responses"][0]["partition_responses"][0]["error_code"]
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                ErrorCode.LEADER_NOT_AVAILABLE):
        return None  # a topic just created
    assert code == 0, r
    return "ok"


def _member() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class _Member:
    """One share-group member's raw requests, its session epoch kept."""

    def __init__(self, c, tid: bytes):
        self.c, self.tid, self.id, self.epoch = c, tid, _member(), 0

    def fetch(self, version: int = 2, acks=None, **fields) -> tuple[dict, float]:
        body = {"group_id": GROUP, "member_id": self.id, "share_session_epoch": self.epoch, "max_wait_ms": 0,
                "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500,
                "topics": [{"topic_id": self.tid, "partitions": [
                    {"partition_index": 0, "acknowledgement_batches": acks or []}]}],
                "forgotten_topics_data": [], **fields}
        started = time.monotonic()
        out = self.c.request(ApiKey.SHARE_FETCH, body, version=version)
        if out["error_code"] == 0:
            self.epoch += 1
        return out, time.monotonic() - started

    def ack(self, acks, version: int = 1, renew: bool = False) -> list[int]:
        out = self.c.request(ApiKey.SHARE_ACKNOWLEDGE, {
            "group_id": GROUP, "member_id": self.id, "share_session_epoch": self.epoch, "is_renew_ack": renew,
            "topics": [{"topic_id": self.tid, "partitions": [
                {"partition_index": 0, "acknowledgement_batches": acks}]}]}, version=version)
        assert out["error_code"] == 0, out
        self.epoch += 1
        return [p["error_code"] for t in out["responses"] for p in t["partitions"]]


def _acquired(out: dict) -> list[tuple[int, int, int]]:
    return [(a["first_offset"], a["last_offset"], a["delivery_count"])
            for t in out["responses"] for p in t["partitions"] for a in p["acquired_records"]]


def _ack_codes(out: dict) -> list[int]:
    return [p["acknowledge_error_code"] for t in out["responses"] for p in t["partitions"]]


def _set_up(c, join=None) -> tuple[_Member, _Member]:
    """The topic (one partition: records 0-19 in batches of 5, 20-39 one per batch), the group
    reading it from the start, and two members (``join``: make them members of the group first,
    which Kafka and our brokers need before they hand a partition out)."""
    out = c.request(ApiKey.CREATE_TOPICS, {"topics": [{"name": TOPIC, "num_partitions": 1,
                                                      "replication_factor": 1}], "timeout_ms": 10000})
    assert out["topics"][0]["error_code"] == 0, out
    _produce(c, 0, 20, 5)
    _produce(c, 20, 20, 1)
    out = c.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
        {"resource_type": 32, "resource_name": GROUP, "configs": [
            {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}],
        "validate_only": False}, version=1)
    assert out["responses"][0]["error_code"] == 0, out
    tid = c.request(ApiKey.METADATA, {"topics": [{"name": TOPIC}]}, version=12)["topics"][0]["topic_id"]
    m1, m2 = _Member(c, tid), _Member(c, tid)
    if join is not None:
        join(c, m1.id)
        join(c, m2.id)
    return m1, m2


def _scenario(c, join=None) -> None:
    m1, m2 = _set_up(c, join)
    # a renewal asking for records is refused whole, before its session is looked at
    out, _ = m1.fetch(is_renew_ack=True)
    assert out["error_code"] == ErrorCode.INVALID_REQUEST and _acquired(out) == [], out

    # BatchSize 3 over batches of 5 records: one range per batch (a range ends at the first batch
    # boundary 3 or more records into it); Kafka hands a new partition out once its state is set up
    def first_fetch():
        m1.epoch = 0
        got, _ = m1.fetch(batch_size=3, max_records=20)
        return _acquired(got)
    assert wait_until(first_fetch, 30, 0.2, "the first acquisition") == [
        (0, 4, 1), (5, 9, 1), (10, 14, 1), (15, 19, 1)]

    # Renew without IsRenewAck: the partition's batches are refused together (0 stays acquired)
    assert m1.ack([{"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]},
                   {"first_offset": 1, "last_offset": 1, "acknowledge_types": [4]}], version=2) == [
        ErrorCode.INVALID_REQUEST]
    assert m1.ack([{"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]) == [0]

    # MaxRecords 0 acquires nothing, and is answered at once: the log has bytes to hand out (20-39)
    out, took = m2.fetch(version=1, max_records=0, max_wait_ms=10000)
    assert out["error_code"] == 0 and _acquired(out) == [] and took < 5, (out, took)

    # a renewal (IsRenewAck, everything else 0) renews and acquires nothing, though 20-39 are there
    out, _ = m1.fetch(acks=[{"first_offset": 1, "last_offset": 4, "acknowledge_types": [4]}], is_renew_ack=True,
                      max_records=0, max_bytes=0, min_bytes=0, max_wait_ms=0)
    assert out["error_code"] == 0 and _ack_codes(out) == [0] and _acquired(out) == [], out

    # BatchSize 7 over batches of one record: ranges of 7
    out, _ = m1.fetch(batch_size=7, max_records=20)
    assert _acquired(out) == [(20, 26, 1), (27, 33, 1), (34, 39, 1)], out
    assert m1.ack([{"first_offset": 20, "last_offset": 39, "acknowledge_types": [2]}]) == [0]

    # MinBytes beyond what the log holds: answered when MaxWaitMs runs out, with what is there then
    out, took = m2.fetch(min_bytes=1_000_000, max_wait_ms=1500, batch_size=7)
    assert _acquired(out) == [(20, 26, 2), (27, 33, 2), (34, 39, 2)] and took >= 1.2, (out, took)


def test_share_fetch_fields_on_our_broker(broker):
    with BrokerConnection(*broker.address, timeout=30) as c:
        _scenario(c, _join)


def _join(c, member: str) -> None:
    """``member`` joins the share group, subscribed to the topic, until it is assigned it (one node:
    the coordinator, once its offsets topic is up)."""
    wait_until(lambda: c.request(ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": [GROUP]},
                                 version=4)["coordinators"][0]["error_code"] == 0, 60, 0.2, "a group coordinator")
    hb = wait_until(lambda: _heartbeat(c, member, 0, [TOPIC]), 30, 0.2, "joined")
    wait_until(lambda: _heartbeat(c, member, hb["member_epoch"], None).get("assignment") or hb.get("assignment"),
               30, 0.2, "assigned")


def _heartbeat(c, member: str, epoch: int, topics) -> dict | None:
    hb = c.request(ApiKey.SHARE_GROUP_HEARTBEAT, {"group_id": GROUP, "member_id": member, "member_epoch": epoch,
                                                  "rack_id": None, "subscribed_topic_names": topics})
    return hb if hb["error_code"] == 0 else None


def test_share_fetch_fields_on_apache_kafka(apache_kafka):
    host, port = apache_kafka.bootstrap.split(",")[0].rsplit(":", 1)
    with BrokerConnection(host, int(port), timeout=30) as c:
        _scenario(c, _join)


def test_a_refused_renewal_says_which_fields_and_opens_no_session(broker):
    with BrokerConnection(*broker.address, timeout=30) as c:
        m1, _ = _set_up(c, _join)
        out, _ = m1.fetch(is_renew_ack=True, max_bytes=0, max_wait_ms=0)
        assert out["error_code"] == ErrorCode.INVALID_REQUEST
        assert out["error_message"] == "minBytes must be set to 0, maxRecords must be set to 0, if isRenewAck is true."
        m1.epoch = 1
        out, _ = m1.fetch()
        assert out["error_code"] == ErrorCode.SHARE_SESSION_NOT_FOUND
        # IsRenewAck means nothing before v2: a v1 fetch acquires as usual
        m1.epoch = 0
        out, _ = m1.fetch(version=1, is_renew_ack=True, max_records=5, batch_size=5)
        assert _acquired(out) == [(0, 4, 1)]


def test_record_limit_mode_ignores_batch_size(broker):
    with BrokerConnection(*broker.address, timeout=30) as c:
        m1, _ = _set_up(c, _join)
        out, _ = m1.fetch(share_acquire_mode=1, max_records=7, batch_size=1)
        assert _acquired(out) == [(0, 6, 1)]
        # batch-optimized with BatchSize 0: one range per batch (Kafka answers an empty range there)
        out, _ = m1.fetch(max_records=8, batch_size=0)
        assert _acquired(out) == [(7, 9, 1), (10, 14, 1)]


def test_min_bytes_answers_once_the_log_holds_them(broker):
    """A fetch waiting for MinBytes is answered when records produced meanwhile bring the log
    there -- not at the first of them -- well before MaxWaitMs, with them acquired."""
    with BrokerConnection(*broker.address, timeout=60) as c:
        m1, m2 = _set_up(c, _join)
        out, _ = m1.fetch()
        assert _acquired(out) == [(0, 39, 1)]
        answer = {}

        def fetch():
            answer["out"], answer["took"] = m2.fetch(min_bytes=1000, max_wait_ms=30000)

        waiting = threading.Thread(target=fetch)
        waiting.start()
        wait_until(lambda: broker.call(_has_session(broker, m2.id)), 10, 0.02, "m2's fetch under way")
        assert waiting.is_alive()  # nothing to hand out: it waits
        with BrokerConnection(*broker.address, timeout=30) as producer:
            _produce(producer, 40, 100, 10)  # batches of 10 records, 191 bytes each
        waiting.join(25)
        assert not waiting.is_alive() and answer["took"] < 25, answer
        got = _acquired(answer["out"])
        # 1000 bytes are 6 of those batches: the fetch acquired at least them
        assert got and got[0][0] == 40 and got[-1][1] >= 99 and all(n == 1 for _, _, n in got), got


async def _has_session(broker, member: str) -> bool:
    return (GROUP, member) in broker.broker.ctx.share.sessions


@pytest.mark.parametrize("min_bytes", [1, 0])
def test_min_bytes_one_or_zero_answers_with_what_is_there(broker, min_bytes):
    with BrokerConnection(*broker.address, timeout=30) as c:
        m1, _ = _set_up(c, _join)
        out, took = m1.fetch(min_bytes=min_bytes, max_wait_ms=10000)
        assert _acquired(out) == [(0, 39, 1)] and took < 5
