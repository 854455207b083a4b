"""The thin share consumer's pipeline (``ShareConsumer(prefetch=True)``, implicit mode) against a real
broker: a poll that returns records sends the next ShareFetch before it returns, so the next records
are acquired while the application holds these, and their acceptance rides on the ShareFetch the next
poll sends; records fetched ahead and never returned are released by close(), and across close() no
record is lost or returned twice."""

from __future__ import annotations

import time

import pytest

from spark_coord.client.admin import AdminClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.consumer.share import ShareConsumer
from spark_coord.records.builder import BatchBuilder
from spark_coord.wire.registry import ApiKey

TOPIC, GROUP = "share-pipe", "sg-pipe"
RECORDS = 60
SETTINGS = {"group.share.min.heartbeat.interval.ms": 100, "group.share.heartbeat.interval.ms": 200,
            "group.share.min.session.timeout.ms": 1000, "group.share.session.timeout.ms": 6000,
            "coordinator.shards": 1}
ACCEPT = 1


class Recording(ShareConsumer):
    """Keeps each ShareFetch it sends: (the poll it was sent in, the acknowledgements it carried), and
    what it did in which poll, in order: ``(poll, "send" | "decode")``."""

    def __init__(self, *args, **kwargs):
        self.sent: list[tuple[int, dict]] = []
        self.events: list[tuple[int, str]] = []
        self.polls = 0
        self.released: set[int] = set()
        super().__init__(*args, **kwargs)

    def _fetch_body(self, leader, parts, assigned, wait_ms):
        out = super()._fetch_body(leader, parts, assigned, wait_ms)
        self.sent.append((self.polls, out[3]))
        self.events.append((self.polls, "send"))
        return out

    def _records(self, topic, p):
        self.events.append((self.polls, "decode"))
        return super()._records(topic, p)

    def _queue_runs(self, records, kind):
        if kind == "release":
            self.released.update(r.offset for r in records)
        super()._queue_runs(records, kind)

    def poll(self, timeout: float = 1.0):
        self.polls += 1
        return super().poll(timeout)


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
        for first in range(0, RECORDS, 5):
            builder = BatchBuilder()
            for i in range(first, first + 5):
                builder.append(b"v%d" % i, key=b"k%d" % i)
            r = cc.connection(0).request(ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 5000, "topic_data": [
                {"name": TOPIC, "partition_data": [{"index": 0, "records": builder.build()}]}]})
            assert r["responses"][0]["partition_responses"][0]["error_code"] == 0
    return address


def _offsets(acks: dict, kind: int) -> set[int]:
    return {o for batches in acks.values() for b in batches if b["acknowledge_types"] == [kind]
            for o in range(b["first_offset"], b["last_offset"] + 1)}


def test_the_next_fetch_is_in_flight_while_the_application_holds_a_poll(bootstrap):
    a = Recording(bootstrap, GROUP, [TOPIC], max_poll_records=5)
    polls: list[list] = []
    deadline = time.monotonic() + 20
    while not polls and time.monotonic() < deadline:
        got = a.poll(0.3)
        if got:
            polls.append(got)
    assert polls, "no records in 20 s"
    first = {r.offset for r in polls[0]}
    # poll 1 returned: the fetch for poll 2 is already sent, and its records are not acknowledged in it
    ahead = [acks for n, acks in a.sent if n == a.polls]
    assert len(ahead) == 2 and a._ahead  # the fetch that brought poll 1's records, then the one sent ahead
    assert not _offsets(ahead[1], ACCEPT) & first
    while len(polls) < 4 and time.monotonic() < deadline:
        got = a.poll(0.3)
        if got:
            polls.append(got)
    assert len(polls) == 4
    # poll 1's records were accepted by the fetch poll 2 sent ahead (poll 2's own records came from poll 1's)
    carried = {n: _offsets(acks, ACCEPT) for n, acks in a.sent}
    assert first <= set().union(*(v for n, v in carried.items() if n > 1))
    assert a.fetches_sent >= 5 and a._ahead
    a.close()  # poll 4's records accepted; what the fetch sent ahead acquired is released
    released = a.released
    assert released  # the fetch sent ahead by poll 4 had acquired the next records
    returned = [r.offset for p in polls for r in p]
    assert not released & set(returned)

    with ShareConsumer(bootstrap, GROUP, [TOPIC], max_poll_records=50, prefetch=False) as b:
        rest: list = []
        deadline = time.monotonic() + 20
        while len(returned) + len(rest) < RECORDS and time.monotonic() < deadline:
            rest.extend(b.poll(0.3))
    later = [r.offset for r in rest]
    assert sorted(returned + later) == list(range(RECORDS))  # none lost, none returned twice
    assert all(r.delivery_count == (2 if r.offset in released else 1) for r in rest)


def test_a_poll_sends_the_next_fetch_before_it_decodes_the_records_it_returns(bootstrap):
    """A poll that takes the answer of the fetch sent ahead sends the next one as soon as that answer is
    in, and only then decodes the answer's records (the broker serves the next fetch meanwhile); the
    first poll, which had nothing in flight, fetches, decodes, then sends ahead."""
    a = Recording(bootstrap, GROUP, [TOPIC], max_poll_records=5)
    returned: list[int] = []  # the polls that returned records
    deadline = time.monotonic() + 20
    while len(returned) < 4 and time.monotonic() < deadline:
        if a.poll(0.3):
            returned.append(a.polls)
    events = list(a.events)
    a.close()
    assert len(returned) == 4
    steps = {n: [e for k, e in events if k == n] for n in returned}
    assert steps[returned[0]][-2:] == ["decode", "send"]
    for n in returned[1:]:
        assert steps[n] == ["send", "decode"], steps
