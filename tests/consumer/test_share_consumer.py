"""The thin consumer in a share group (``consumer.share.ShareConsumer``) against a real broker:
implicit and explicit acknowledgement, a release coming back counted, a reject never, the rules
of explicit mode, and close() handing back what the member still holds."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_coord.client.admin import AdminClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.consumer.share import ShareConsumer, ShareRecord, _batches, _runs
from spark_coord.records.builder import BatchBuilder
from spark_coord.wire.registry import ApiKey

TOPIC, GROUP = "share-thin", "sg-thin"
SETTINGS = {"group.share.min.heartbeat.interval.ms": 100, "group.share.heartbeat.interval.ms": 200,
            "group.share.min.session.timeout.ms": 1000, "group.share.session.timeout.ms": 6000,
            "coordinator.shards": 1}


def test_acknowledgement_batches_join_contiguous_offsets_of_one_type():
    assert _batches({5: 1, 6: 1, 7: 2, 9: 2, 3: 1}) == [
        {"first_offset": 3, "last_offset": 3, "acknowledge_types": [1]},
        {"first_offset": 5, "last_offset": 6, "acknowledge_types": [1]},
        {"first_offset": 7, "last_offset": 7, "acknowledge_types": [2]},
        {"first_offset": 9, "last_offset": 9, "acknowledge_types": [2]}]


def _runs_one_by_one(records):
    """What ``_runs`` gives, one record at a time: a record extends the run before it when it is of the
    same partition and its offset is the next one."""
    out = []
    for r in records:
        if out and out[-1][0] == (r.topic, r.partition) and r.offset == out[-1][2] + 1:
            out[-1] = (out[-1][0], out[-1][1], r.offset)
        else:
            out.append(((r.topic, r.partition), r.offset, r.offset))
    return out


def _record(topic: str, partition: int, offset: int) -> ShareRecord:
    return ShareRecord(topic, partition, offset, 0, 0, None, b"", (), 1)


def test_runs_of_a_poll():
    poll = [_record("t", 0, o) for o in range(10, 15)] + [_record("t", 1, o) for o in (15, 16, 18)] \
        + [_record("u", 1, 19), _record("t", 1, 20), _record("t", 0, 15)]
    assert _runs(poll) == [(("t", 0), 10, 14), (("t", 1), 15, 16), (("t", 1), 18, 18), (("u", 1), 19, 19),
                           (("t", 1), 20, 20), (("t", 0), 15, 15)]
    assert _runs([]) == []


@given(st.lists(st.tuples(st.sampled_from("tu"), st.integers(0, 2), st.integers(1, 40), st.integers(-3, 3)),
                max_size=30))
def test_runs_are_what_a_walk_over_the_records_gives(pieces):
    """Any list (pieces of consecutive offsets, each starting near where the one before ended, so runs
    join across pieces, break, repeat or go back): the same runs as a walk one record at a time."""
    records, offset = [], 0
    for topic, partition, length, jump in pieces:
        offset = max(0, offset + jump)
        records.extend(_record(topic, partition, o) for o in range(offset, offset + length))
        offset += length
    assert _runs(records) == _runs_one_by_one(records)


@pytest.fixture
def bootstrap(broker_factory):
    b = broker_factory(0, **SETTINGS)
    address = "%s:%d" % b.address
    with ClusterClient(address) as cc:
        AdminClient(cc).create_topic(TOPIC, 1)
        out = cc.request_any(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
            {"resource_type": 32, "resource_name": GROUP, "configs": [
                {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}],
            "validate_only": False}, version=1)
        assert out["responses"][0]["error_code"] == 0, out
        for first in range(0, 20, 5):
            builder = BatchBuilder()
            for i in range(first, first + 5):
                builder.append(b"v%d" % i, key=b"k%d" % i)
            r = cc.connection(0).request(ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 5000, "topic_data": [
                {"name": TOPIC, "partition_data": [{"index": 0, "records": builder.build()}]}]})
            assert r["responses"][0]["partition_responses"][0]["error_code"] == 0
    return address


def _poll_until(consumer: ShareConsumer, want: int, timeout: float = 20, ack: str | None = None) -> list:
    """Poll until ``want`` records came; with ``ack``, acknowledge each poll's records (explicit mode)."""
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        records = consumer.poll(0.3)
        got.extend(records)
        if ack:
            for r in records:
                consumer.acknowledge(r, ack)
    return got


def test_explicit_release_comes_back_counted_and_reject_never(bootstrap):
    with ShareConsumer(bootstrap, GROUP, [TOPIC], acknowledgement_mode="explicit", max_poll_records=5) as c:
        first = []
        while not first:
            first = c.poll(0.3)
        assert all(r.delivery_count == 1 for r in first)
        # explicit mode: the next poll needs every record acknowledged
        with pytest.raises(RuntimeError, match="not acknowledged"):
            c.poll(0.1)
        for r in first:
            c.acknowledge(r, "release" if r.offset == 0 else "reject" if r.offset == 1 else "accept")
        with pytest.raises(ValueError, match="not a record of the last poll"):
            c.acknowledge(first[0])
        assert set(c.commit().values()) == {0}
        later = _poll_until(c, 20 - len(first) + 1, ack="accept")
        again = [r for r in later if r.offset == 0]
        assert [r.delivery_count for r in again] == [2]          # released: back, counted
        assert not [r for r in later if r.offset == 1]           # rejected: never
        assert sorted({r.offset for r in first + later}) == list(range(20))
        assert set(c.commit().values()) <= {0}


def test_implicit_poll_accepts_the_last_one_and_an_explicit_close_hands_back_what_is_unacknowledged(bootstrap):
    # without a fetch sent ahead, which close() would release: every record but ``held``'s is delivered once
    a = ShareConsumer(bootstrap, GROUP, [TOPIC], max_poll_records=5, prefetch=False)
    got = _poll_until(a, 1)
    assert got
    more = a.poll(0.3)  # accepts the first poll's records
    a.close()           # implicit mode: the last poll's records are accepted too
    x = ShareConsumer(bootstrap, GROUP, [TOPIC], acknowledgement_mode="explicit", max_poll_records=5)
    held = []
    while not held:
        held = x.poll(0.3)
    x.close()           # explicit, nothing acknowledged: they go back at once, not after the lock
    with ShareConsumer(bootstrap, GROUP, [TOPIC], max_poll_records=50) as b:
        rest = _poll_until(b, 20 - len(got) - len(more))
    accepted = {r.offset for r in got + more}
    assert not {r.offset for r in rest} & accepted                     # accepted: never again
    assert {r.offset for r in held} <= {r.offset for r in rest}
    assert all(r.delivery_count == (2 if r.offset in {h.offset for h in held} else 1) for r in rest)
    assert sorted(accepted | {r.offset for r in rest}) == list(range(20))


def test_implicit_mode_an_acknowledge_overrides_the_accept_and_the_list_handed_out_is_the_applications(bootstrap):
    """Implicit mode: ``acknowledge(record, "release")`` of one record of a poll sends that instead of its
    acceptance (it comes back, counted: to this member's next poll, whose ShareFetch carries the release,
    or to the next member); the rest of the poll is accepted by the next poll, whatever the application
    did with the list it was handed (emptied here)."""
    a = ShareConsumer(bootstrap, GROUP, [TOPIC], max_poll_records=5, prefetch=False)
    first: list = []
    deadline = time.monotonic() + 20
    while not first and time.monotonic() < deadline:
        first = a.poll(0.3)
    handed, released = list(first), first[0]
    first.clear()
    a.acknowledge(released, "release")
    with pytest.raises(ValueError, match="not a record of the last poll"):
        a.acknowledge(released)
    more = a.poll(0.3)  # accepts the rest of the first poll; the release goes with it
    a.close()           # accepts ``more``
    accepted = {r.offset for r in handed[1:]}
    with ShareConsumer(bootstrap, GROUP, [TOPIC], max_poll_records=50) as b:
        rest = _poll_until(b, 20 - len(accepted) - len(more))
    after = more + rest
    assert [(r.offset, r.delivery_count) for r in after if r.offset == released.offset] == [(released.offset, 2)]
    assert not {r.offset for r in after} & accepted                    # accepted: never again
    assert all(r.delivery_count == 1 for r in after if r.offset != released.offset)
    assert sorted(accepted | {r.offset for r in after}) == list(range(20))
    assert len(after) == 20 - len(accepted)                            # none twice


def test_implicit_mode_accepts_what_a_poll_handed_out_even_once_the_application_emptied_the_list(bootstrap):
    """With a fetch sent ahead, a poll hands out the very list its answer filled: the consumer keeps its
    own copy, so emptying the list changes nothing -- the next poll and close() accept every record
    handed out, and only the records fetched ahead and never handed out come back (released)."""
    a = ShareConsumer(bootstrap, GROUP, [TOPIC], max_poll_records=5)
    handed: list = []
    deadline = time.monotonic() + 20
    while len(handed) < 10 and time.monotonic() < deadline:
        records = a.poll(0.3)
        handed.extend(records)
        records.clear()
    a.close()
    accepted = {r.offset for r in handed}
    assert len(accepted) == len(handed) >= 10
    with ShareConsumer(bootstrap, GROUP, [TOPIC], max_poll_records=50) as b:
        rest = _poll_until(b, 20 - len(accepted))
    assert not {r.offset for r in rest} & accepted                     # accepted: never again
    assert sorted(accepted | {r.offset for r in rest}) == list(range(20))


def test_acknowledgements_of_a_share_fetch_that_failed_are_sent_with_the_next_one(bootstrap):
    """A ShareFetch carrying acknowledgements fails on the client's side (its connection cut):
    they are sent again in the member's new session and taken, so nothing comes back when the
    member closes (they were dropped before, and the records went to the next member)."""
    c = ShareConsumer(bootstrap, GROUP, [TOPIC], acknowledgement_mode="explicit", max_poll_records=50)
    got = _poll_until(c, 20, ack="accept")
    assert sorted(r.offset for r in got) == list(range(20))
    conn = c.cluster.connection(0)
    real = conn.request
    failed = []

    def cut_once(api, body, *args, **kwargs):
        if api == ApiKey.SHARE_FETCH and not failed and any(
                p["acknowledgement_batches"] for t in body["topics"] for p in t["partitions"]):
            failed.append(body)
            conn.close()
            raise ConnectionError("connection cut by the test")
        return real(api, body, *args, **kwargs)

    conn.request = cut_once
    try:
        assert c.poll(0.3) == [] and failed  # the fetch with the acknowledgements failed
    finally:
        conn.request = real
    _poll_until(c, 1, timeout=2)  # the new session, then the acknowledgements ride again
    assert set(c.commit().values()) <= {0}
    c.close()  # explicit mode: anything unacknowledged would go back now
    with ShareConsumer(bootstrap, GROUP, [TOPIC], max_poll_records=50) as b:
        assert _poll_until(b, 1, timeout=3) == []

