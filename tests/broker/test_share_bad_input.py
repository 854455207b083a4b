"""Share fetches and acknowledgements that break the rules (KIP-932) get Kafka's error codes, change
nothing, and the broker keeps serving everyone: out-of-order or unknown share session epochs, an
acknowledgement of records another member holds or nobody acquired, an acknowledge type out of
range, an inverted range, acknowledgements opening a session, a lock duration out of bounds."""

from __future__ import annotations

import pytest
from helpers import wait_until

from spark_coord.client.connection import BrokerConnection
from spark_coord.errors import ErrorCode
from spark_coord.records.builder import BatchBuilder
from spark_coord.wire.registry import ApiKey

TOPIC = "share-bad"
GROUP = "sg-bad"


def _batch(first: int, n: int) -> bytes:
    b = BatchBuilder()
    for i in range(n):
        b.append(b"v%d" % (first + i), key=b"k%d" % (first + i))
    return b.build()


@pytest.fixture
def conn(broker):
    with BrokerConnection(*broker.address, timeout=10) as c:
        _set_up(c)
        yield c


def _set_up(c) -> None:
    """The topic (one partition, records 0-9 in two batches) and the group reading it from the start."""
    out = c.request(ApiKey.CREATE_TOPICS, {"topics": [{"name": TOPIC, "num_partitions": 1,
                                                      "replication_factor": 1}], "timeout_ms": 10000})
    assert out["topics"][0]["error_code"] == 0
    for first in (0, 5):
        r = c.request(ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 5000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": _batch(first, 5)}]}]})
        assert r["responses"][0]["partition_responses"][0]["error_code"] == 0
    out = c.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
        {"resource_type": 32, "resource_name": GROUP, "configs": [
            {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}],
        "validate_only": False}, version=1)
    assert out["responses"][0]["error_code"] == 0, out
    _join(c)


def _join(c) -> None:
    """A member joins the group (its coordinator saves the group, which a share partition's first state
    needs, as Kafka initializes a group's share state only after a ShareGroupHeartbeat); the members of
    the tests fetch under ids of their own."""
    wait_until(lambda: c.request(ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": [GROUP]},
                                 version=4)["coordinators"][0]["error_code"] == 0, 60, 0.2, "a group coordinator")
    wait_until(lambda: c.request(ApiKey.SHARE_GROUP_HEARTBEAT, {
        "group_id": GROUP, "member_id": "joined-" + TOPIC, "member_epoch": 0, "rack_id": None,
        "subscribed_topic_names": [TOPIC]})["error_code"] == 0, 30, 0.2, "a member joined")


def _topic_id(conn) -> bytes:
    md = conn.request(ApiKey.METADATA, {"topics": [{"name": TOPIC}]}, version=12)
    return md["topics"][0]["topic_id"]


def _fetch(conn, member: str, epoch: int, acks=None, partitions=(0,), version: int = 1, tid=None, **extra) -> dict:
    tid = tid or _topic_id(conn)
    parts = [{"partition_index": p, "acknowledgement_batches": acks or []} for p in partitions]
    body = {"group_id": GROUP, "member_id": member, "share_session_epoch": epoch, "max_wait_ms": 0, "min_bytes": 0,
            "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500, "topics": [{"topic_id": tid,
                                                                                     "partitions": parts}],
            "forgotten_topics_data": [], **extra}
    return conn.request(ApiKey.SHARE_FETCH, body, version=version)


def _ack(conn, member: str, epoch: int, acks, version: int = 1, renew: bool = False) -> dict:
    return conn.request(ApiKey.SHARE_ACKNOWLEDGE, {"group_id": GROUP, "member_id": member, "share_session_epoch": epoch,
                                                   "is_renew_ack": renew,
                                                   "topics": [{"topic_id": _topic_id(conn), "partitions": [
                                                       {"partition_index": 0, "acknowledgement_batches": acks}]}]},
                        version=version)


def _part(out: dict) -> dict:
    return out["responses"][0]["partitions"][0]


def _acquired(out: dict) -> list[tuple[int, int, int]]:
    return [(a["first_offset"], a["last_offset"], a["delivery_count"])
            for t in out["responses"] for p in t["partitions"] for a in p["acquired_records"]]


def test_session_epochs_out_of_order_and_unknown(conn):
    # no session yet: a later epoch is SHARE_SESSION_NOT_FOUND
    assert _fetch(conn, "m1", 3)["error_code"] == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert _ack(conn, "m1", 1, [])["error_code"] == ErrorCode.SHARE_SESSION_NOT_FOUND
    # ShareAcknowledge never opens a session
    assert _ack(conn, "m1", 0, [])["error_code"] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    out = _fetch(conn, "m1", 0)
    assert out["error_code"] == 0 and _acquired(out) == [(0, 9, 1)]
    # the next epoch is 1: 5 is out of order, refused, and the session stays as it was (as Kafka)
    assert _fetch(conn, "m1", 5)["error_code"] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert _fetch(conn, "m2", 0)["error_code"] == 0 and _acquired(_fetch(conn, "m2", 1)) == []  # m1 holds them
    out = _fetch(conn, "m1", 1, acks=[{"first_offset": 0, "last_offset": 9, "acknowledge_types": [1]}])
    assert out["error_code"] == 0 and _part(out)["acknowledge_error_code"] == 0
    assert _fetch(conn, "m2", -2)["error_code"] == ErrorCode.INVALID_SHARE_SESSION_EPOCH


def test_a_session_opened_again_keeps_its_members_records(conn):
    """Records are held by the member, not its session (Kafka's ShareSessionCache drops the old
    session and releases nothing): a member that opens its session again -- as a client does after
    a request failed on its side -- can still accept what it acquired, and nobody else gets it
    meanwhile.  Seen from outside: a Spark query's batch went to a ShareConsumer too, its records
    released when the query's share session started again."""
    assert _acquired(_fetch(conn, "m1", 0)) == [(0, 9, 1)]
    assert _fetch(conn, "m1", 0)["error_code"] == 0  # opened again: nothing new to acquire
    assert _acquired(_fetch(conn, "m2", 0)) == []     # still m1's
    out = _fetch(conn, "m1", 1, acks=[{"first_offset": 0, "last_offset": 9, "acknowledge_types": [1]}])
    assert out["error_code"] == 0 and _part(out)["acknowledge_error_code"] == 0
    assert _acquired(_fetch(conn, "m2", 1)) == []     # accepted for good


def test_acknowledgements_that_break_the_rules_change_nothing(conn):
    out = _fetch(conn, "m1", 0)
    assert _acquired(out) == [(0, 9, 1)]
    # acknowledgements may not open a session
    assert _fetch(conn, "m9", 0, acks=[{"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]
                  )["error_code"] == ErrorCode.INVALID_REQUEST
    _fetch(conn, "m2", 0)  # another member's session: nothing left to acquire
    # m2 acknowledging m1's records: INVALID_RECORD_STATE
    out = _ack(conn, "m2", 1, [{"first_offset": 0, "last_offset": 4, "acknowledge_types": [1]}])
    assert out["error_code"] == 0 and _part(out)["error_code"] == ErrorCode.INVALID_RECORD_STATE
    # beyond what anyone acquired
    out = _ack(conn, "m1", 1, [{"first_offset": 8, "last_offset": 12, "acknowledge_types": [1]}])
    assert _part(out)["error_code"] == ErrorCode.INVALID_RECORD_STATE
    # an ack type out of range, an inverted range, a types array of the wrong length, Renew before v2
    epoch = 2
    for bad in ({"first_offset": 0, "last_offset": 1, "acknowledge_types": [7]},
                {"first_offset": 3, "last_offset": 1, "acknowledge_types": [1]},
                {"first_offset": 0, "last_offset": 3, "acknowledge_types": [1, 1]},
                {"first_offset": 0, "last_offset": 1, "acknowledge_types": [4]}):
        out = _ack(conn, "m1", epoch, [bad])
        epoch += 1
        assert _part(out)["error_code"] == ErrorCode.INVALID_REQUEST, (bad, out)
    # m1 still holds all ten, unchanged: it accepts them now
    out = _ack(conn, "m1", epoch, [{"first_offset": 0, "last_offset": 9, "acknowledge_types": [1]}])
    assert _part(out)["error_code"] == 0
    # accepted records are never handed out again
    fresh = _fetch(conn, "m3", 0)
    assert _acquired(fresh) == []


def test_release_reject_and_renew(conn):
    assert _acquired(_fetch(conn, "m1", 0)) == [(0, 9, 1)]
    batches = [{"first_offset": 0, "last_offset": 4, "acknowledge_types": [2, 2, 3, 1, 1]},
               {"first_offset": 5, "last_offset": 9, "acknowledge_types": [4]}]
    # Renew only with v2's IsRenewAck (as Kafka): without it the partition is INVALID_REQUEST and
    # none of its batches applies
    assert _part(_ack(conn, "m1", 1, batches, version=2))["error_code"] == ErrorCode.INVALID_REQUEST
    assert _acquired(_fetch(conn, "m2", 0)) == []  # nothing was released
    # per-offset types: 0-1 released, 2 rejected, 3-4 accepted, 5-9 renewed (v2)
    out = _ack(conn, "m1", 2, batches, version=2, renew=True)
    assert _part(out)["error_code"] == 0, out
    assert _acquired(_fetch(conn, "m2", 1)) == [(0, 1, 2)]  # only the released come back, counted


def test_a_lock_duration_out_of_bounds_is_refused(conn):
    out = conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
        {"resource_type": 32, "resource_name": GROUP, "configs": [
            {"name": "share.record.lock.duration.ms", "config_operation": 0, "value": "999999999"}]}],
        "validate_only": False}, version=1)
    r = out["responses"][0]
    assert r["error_code"] == ErrorCode.INVALID_CONFIG and "share.record.lock.duration.ms" in r["error_message"]


def test_other_clients_are_served_throughout(conn, broker):
    """After every kind of bad share request above, a well-behaved member opens a session and reads."""
    _fetch(conn, "bad", 7)
    _ack(conn, "bad", 0, [{"first_offset": -5, "last_offset": -1, "acknowledge_types": [9]}])
    _fetch(conn, "bad", 0, acks=[{"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}])
    _fetch(conn, "bad", 0, tid=b"\x01" * 16)
    with BrokerConnection(*broker.address, timeout=10) as other:
        out = _fetch(other, "good", 0)
        assert out["error_code"] == 0 and _acquired(out) == [(0, 9, 1)]


def test_a_session_epoch_wraps_from_the_largest_int32_to_one(conn, broker):
    """As Kafka's share (and fetch) sessions: after 2**31 - 1 the next epoch is 1, not a number the
    request's INT32 cannot carry."""
    assert _fetch(conn, "wrap", 0)["error_code"] == 0
    broker.call(_set_epoch(broker, "wrap", 2**31 - 1))
    assert _fetch(conn, "wrap", 2**31 - 1)["error_code"] == 0
    out = _fetch(conn, "wrap", 1, acks=[{"first_offset": 0, "last_offset": 9, "acknowledge_types": [1]}])
    assert out["error_code"] == 0 and _part(out)["acknowledge_error_code"] == 0
    assert _fetch(conn, "wrap", 2)["error_code"] == 0


async def _set_epoch(broker, member: str, epoch: int) -> None:
    broker.broker.ctx.share.sessions[(GROUP, member)].epoch = epoch


def test_a_partition_that_fails_its_checks_is_answered_and_kept_out_of_the_session(conn):
    """A partition that does not exist, named when a session opens, gets its error once and does not
    join the session: kept there, it made every later fetch of the session answer at once."""
    out = _fetch(conn, "badpart", 0, partitions=(0, 7))
    codes = {p["partition_index"]: p["error_code"] for p in out["responses"][0]["partitions"]}
    assert codes == {0: 0, 7: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert _acquired(out) == [(0, 9, 1)]
    out = _fetch(conn, "badpart", 1, acks=[{"first_offset": 0, "last_offset": 9, "acknowledge_types": [1]}])
    assert [p["partition_index"] for p in out["responses"][0]["partitions"]] == [0]
    assert _part(out)["acknowledge_error_code"] == 0


def test_share_sessions_beyond_the_brokers_limit_are_refused(broker_factory):
    """group.share.max.share.sessions (Kafka's name and default, 2000): a new session beyond it is
    refused SHARE_SESSION_LIMIT_REACHED; a member's own session opened again, and every session
    already open, go on; a closed session frees its place."""
    b = broker_factory(1, **{"group.share.max.share.sessions": 2})
    with BrokerConnection(*b.address, timeout=10) as c:
        _set_up(c)
        assert _fetch(c, "s1", 0, max_records=1, batch_size=1)["error_code"] == 0
        assert _fetch(c, "s2", 0, max_records=1, batch_size=1)["error_code"] == 0
        assert _fetch(c, "s3", 0)["error_code"] == ErrorCode.SHARE_SESSION_LIMIT_REACHED
        assert _fetch(c, "s1", 0, max_records=1, batch_size=1)["error_code"] == 0  # its own, opened again
        assert _fetch(c, "s2", 1)["error_code"] == 0
        assert _fetch(c, "s2", -1)["error_code"] == 0  # closed: its place is free
        out = _fetch(c, "s3", 0)
        assert out["error_code"] == 0 and _acquired(out)
