"""The KIP-848 member's state machine (``consumer.kip848.Kip848Member``) against a scripted
coordinator (a fake ``MemberIo``) and a fake ``Member``, on a clock advanced by hand: how it
joins and heartbeats, the order of a reconciliation, what each kind of error leads to, the
lease, how it leaves, and the moves its state table refuses."""

from __future__ import annotations

import base64
import logging
import uuid

import pytest

from spark_coord.client.connection import BrokerConnectionError
from spark_coord.client.groups import COORDINATOR_ERRORS
from spark_coord.consumer.connector import CommitFailed
from spark_coord.consumer.kip848 import FATAL_ERRORS, Kip848Member, MemberState
from spark_coord.errors import ErrorCode

GROUP = "orders-readers"
T1, T2, OTHER = b"\x01" * 16, b"\x02" * 16, b"\x09" * 16
NAMES = {T1: "t1", T2: "t2", OTHER: "other"}
IDS = {name: i for i, name in NAMES.items()}


class Clock:
    """``time.monotonic`` advanced by hand (binary fractions, so sums are exact)."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def ok(epoch: int, assignment: dict[bytes, list[int]] | None = None, interval_ms: int = 1000,
       member_id: str | None = None) -> dict:
    """A heartbeat answer without error; ``assignment``: topic id -> partitions (None: unchanged)."""
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": member_id,
            "member_epoch": epoch, "heartbeat_interval_ms": interval_ms,
            "assignment": None if assignment is None else {
                "topic_partitions": [{"topic_id": t, "partitions": ps} for t, ps in assignment.items()]}}


def err(code: int, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": int(code), "error_message": message, "member_id": None,
            "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}


def owned_in(body: dict) -> frozenset | None:
    """The partitions a heartbeat lists as owned, by name (None: not sent)."""
    if body["topic_partitions"] is None:
        return None
    return frozenset((NAMES[e["topic_id"]], p) for e in body["topic_partitions"] for p in e["partitions"])


class ScriptedIo:
    """``MemberIo``: heartbeats are answered from ``answers`` (an answer, or an exception to raise);
    with none scripted, a plain answer in ``epoch``.  Every request goes to ``events``."""

    def __init__(self, events: list):
        self.events = events
        self.sent: list[dict] = []
        self.answers: list = []
        self.epoch = 1
        self.interval_ms = 1000
        self.committed_offsets: dict = {}
        self.lost = 0
        self.closed = False

    def heartbeat(self, body: dict) -> dict:
        self.sent.append(body)
        self.events.append(("heartbeat", body["member_epoch"], owned_in(body)))
        answer = self.answers.pop(0) if self.answers else ok(self.epoch, interval_ms=self.interval_ms)
        if isinstance(answer, Exception):
            raise answer
        if answer["error_code"] == 0 and answer["member_epoch"] > 0:
            self.epoch = answer["member_epoch"]   # the plain answers that follow carry it
        return answer

    def coordinator_lost(self) -> None:
        self.lost += 1

    def commit(self, offsets, member_id, epoch) -> None:
        self.events.append(("commit", dict(offsets), member_id, epoch))

    def committed(self, partitions, member_id, epoch) -> dict:
        partitions = sorted(partitions)
        self.events.append(("committed", partitions, member_id, epoch))
        return {tp: self.committed_offsets[tp] for tp in partitions if tp in self.committed_offsets}

    def topic_names(self, topic_ids, subscribed) -> dict:
        return {i: NAMES[i] for i in topic_ids if i in NAMES}

    def topic_ids(self, names) -> dict:
        return {n: IDS[n] for n in names if n in IDS}

    def close(self) -> None:
        self.closed = True


class FakeMember:
    """The consumer the member drives: what it fetches, where its positions are, its lease."""

    def __init__(self, events: list, clock: Clock):
        self.events = events
        self.clock = clock
        self.positions: dict = {}
        self.fetching: dict = {}
        self.lease_until: float | None = None

    def report_offsets(self) -> list[dict]:
        return [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(self.positions.items())
                if (t, p) in self.fetching]

    def stop_fetchers(self, partitions=None):
        self.events.append(("stop", frozenset(partitions)))
        for tp in partitions:
            self.fetching.pop(tp, None)
        return [{"topic": t, "partition": p, "offset": self.positions[(t, p)]} for t, p in sorted(partitions)
                if (t, p) in self.positions]

    def start_fetchers(self, generation_id, assignment, threads, brokers) -> None:
        new = {tp: o for tp, o in assignment.items() if tp not in self.fetching}
        self.events.append(("start", generation_id, new))
        self.fetching.update(new)

    def connection_lost(self) -> None:
        pass

    def resume_fetchers(self) -> None:
        pass

    def renew_lease(self, until: float) -> None:
        self.lease_until = until

    def delivers(self) -> bool:
        return self.lease_until is not None and self.clock() < self.lease_until


def make(**kwargs) -> tuple[Kip848Member, ScriptedIo, FakeMember, Clock, list]:
    events: list = []
    clock = Clock()
    io, fake = ScriptedIo(events), FakeMember(events, clock)
    kwargs.setdefault("topics", ["t1", "t2"])
    member = Kip848Member(io, GROUP, fake, clock=clock, session_timeout_ms=10000, rebalance_timeout_ms=30000,
                          server_assignor="uniform", rack_id="rack-a", auto_commit_interval_ms=None, **kwargs)
    return member, io, fake, clock, events


def joined(assignment: dict[bytes, list[int]], epoch: int = 1, **kwargs):
    """A member that joined, was given ``assignment`` and acknowledged it."""
    member, io, fake, clock, events = make(**kwargs)
    io.epoch = epoch
    io.answers = [ok(epoch, assignment)]
    member.poll()   # the joining heartbeat, answered with the assignment
    member.poll()   # the acknowledging one, at once
    assert member.state is MemberState.STABLE and member.epoch == epoch
    events.clear()
    return member, io, fake, clock, events


def wait_out(member: Kip848Member, clock: Clock) -> None:
    """Advance the clock to just past the member's next heartbeat or auto-commit."""
    clock.advance(member.poll() + 1e-6)


def assert_joining_heartbeat(body: dict, member: Kip848Member) -> None:
    """Epoch 0 and every field, as a member joining says them."""
    assert body["member_epoch"] == 0 and body["member_id"] == member.member_id
    assert body["subscribed_topic_names"] == ["t1", "t2"] and body["subscribed_topic_regex"] is None
    assert body["rebalance_timeout_ms"] == 30000 and body["server_assignor"] == "uniform"
    assert body["rack_id"] == "rack-a" and body["topic_partitions"] == []


# ------------------------------------------------------------------------- joining
def test_it_joins_with_epoch_0_and_a_member_id_of_its_own():
    member, io, _, _, _ = make()
    other, *_ = make()
    member.poll()
    body = io.sent[0]
    assert_joining_heartbeat(body, member)
    # KIP-1082: the client makes its id, a random UUID as Kafka's Uuid.toString writes it
    raw = base64.urlsafe_b64decode(body["member_id"] + "==")
    assert len(body["member_id"]) == 22 and uuid.UUID(bytes=raw).version == 4
    assert other.member_id != member.member_id
    assert member.epoch == 1 and member.state is MemberState.JOINING  # joined, nothing assigned yet


def test_it_heartbeats_at_the_interval_the_coordinator_asks_for():
    member, io, _, clock, _ = make()
    io.interval_ms = 3000
    member.poll()
    assert len(io.sent) == 1
    assert member.poll() == 3.0 and len(io.sent) == 1
    clock.advance(2.5)
    member.poll()
    assert len(io.sent) == 1, "a heartbeat before the interval was up"
    clock.advance(0.5)
    member.poll()
    assert len(io.sent) == 2
    io.interval_ms = 500  # the coordinator asks for another interval: it is followed from its next answer
    clock.advance(3)
    member.poll()
    clock.advance(0.5)
    member.poll()
    assert len(io.sent) == 4


def test_fields_unchanged_since_the_last_heartbeat_are_null():
    member, io, fake, clock, _ = make()
    io.answers = [ok(1, {T1: [0, 1]})]
    member.poll()
    member.poll()
    ack = io.sent[1]
    assert ack["member_epoch"] == 1 and owned_in(ack) == {("t1", 0), ("t1", 1)}
    clock.advance(1)
    member.poll()
    steady = io.sent[2]
    assert steady["member_id"] == member.member_id and steady["member_epoch"] == 1
    for body in (ack, steady):
        assert body["subscribed_topic_names"] is None and body["subscribed_topic_regex"] is None
        assert body["rebalance_timeout_ms"] == -1 and body["server_assignor"] is None and body["rack_id"] is None
    assert steady["topic_partitions"] is None


def test_a_regex_subscription_is_sent_when_joining():
    member, io, _, clock, _ = make(topics=None, pattern="t[0-9]+")
    member.poll()
    clock.advance(1)
    member.poll()
    assert io.sent[0]["subscribed_topic_regex"] == "t[0-9]+" and io.sent[0]["subscribed_topic_names"] is None
    assert io.sent[1]["subscribed_topic_regex"] is None


# ------------------------------------------------------------------ reconciliation
def test_revoked_partitions_are_stopped_and_committed_before_the_acknowledgement():
    member, io, fake, clock, events = joined({T1: [0, 1]}, epoch=1)
    fake.positions = {("t1", 0): 5, ("t1", 1): 8}
    io.committed_offsets = {("t2", 0): 7}
    clock.advance(1)
    io.answers = [ok(2, {T1: [1], T2: [0, 1]})]
    member.poll()   # the new target
    member.poll()   # the acknowledgement, at once
    mid = member.member_id
    assert events == [
        ("heartbeat", 1, None),
        ("stop", {("t1", 0)}),
        ("commit", {("t1", 0): 5}, mid, 2),
        ("committed", [("t2", 0), ("t2", 1)], mid, 2),
        ("start", 2, {("t2", 0): 7, ("t2", 1): -1}),   # committed offsets, else the reset policy (-1)
        ("heartbeat", 2, {("t1", 1), ("t2", 0), ("t2", 1)}),
    ]
    assert member.state is MemberState.STABLE and member.owned == {("t1", 1), ("t2", 0), ("t2", 1)}


def test_an_added_partition_starts_only_once_its_committed_offset_is_known():
    member, io, fake, clock, events = joined({T1: [0]})
    fake.positions = {("t1", 0): 3}

    def refuse(*_):
        events.append(("committed-failed",))
        raise BrokerConnectionError("the coordinator went away")

    io.committed = refuse
    clock.advance(1)
    io.answers = [ok(2, {T2: [0]})]
    member.poll()
    mid = member.member_id
    assert events == [("heartbeat", 1, None), ("stop", {("t1", 0)}), ("commit", {("t1", 0): 3}, mid, 2),
                      ("committed-failed",)]
    assert member.owned == set() and fake.fetching == {}
    sent = len(io.sent)
    member.poll()
    assert len(io.sent) == sent, "OffsetFetch failed: the next heartbeat waits a backoff"
    del io.committed   # the coordinator is back
    io.committed_offsets = {("t2", 0): 9}
    events.clear()
    wait_out(member, clock)
    member.poll()   # acknowledges the revocation, and starts t2-0 after the answer
    member.poll()   # acknowledges t2-0
    assert events == [("heartbeat", 2, frozenset()), ("committed", [("t2", 0)], mid, 2), ("start", 2, {("t2", 0): 9}),
                      ("heartbeat", 2, {("t2", 0)})]


# ----------------------------------------------------------------------- fencing
@pytest.mark.parametrize("code", [ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID], ids=lambda c: c.name)
def test_a_fenced_member_drops_its_partitions_without_commit_and_rejoins_with_the_same_id(code):
    member, io, fake, clock, events = joined({T1: [0, 1]}, epoch=4)
    mid = member.member_id
    fake.positions = {("t1", 0): 5, ("t1", 1): 8}
    clock.advance(1)
    io.answers = [err(code)]
    member.poll()
    assert events == [("heartbeat", 4, None), ("stop", {("t1", 0), ("t1", 1)})]
    assert fake.fetching == {} and member.owned == set() and member.rejoins == 1
    member.poll()   # joins again at once
    assert_joining_heartbeat(io.sent[-1], member)
    assert member.member_id == mid
    assert not any(e[0] == "commit" for e in events)


# ------------------------------------------------------------------- coordinator
@pytest.mark.parametrize("failure", [*sorted(COORDINATOR_ERRORS), "io"], ids=lambda f: getattr(f, "name", f))
def test_coordinator_errors_look_the_coordinator_up_again_with_backoff(failure):
    member, io, fake, clock, _ = joined({T1: [0]})
    io.interval_ms = 5000
    answer = BrokerConnectionError("connection refused") if failure == "io" else err(failure)
    io.answers = [answer] * 6
    clock.advance(1)
    waits = []
    for _ in range(6):
        sent = len(io.sent)
        member.poll()
        assert len(io.sent) == sent + 1
        wait = member.poll()
        waits.append(wait)
        clock.advance(wait * 0.9)
        member.poll()
        assert len(io.sent) == sent + 1, "a heartbeat before the backoff was up"
        clock.advance(wait * 0.1 + 1e-6)
    assert waits == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert io.lost == 6
    member.poll()   # found again: back in the group as it was, at the coordinator's interval
    assert member.state is MemberState.STABLE and member.owned == {("t1", 0)} and member.poll() == 5.0


# ------------------------------------------------------------------------ fatal
@pytest.mark.parametrize("code", sorted(FATAL_ERRORS), ids=lambda c: c.name)
def test_a_fatal_error_ends_the_member_and_is_raised(code):
    member, io, fake, clock, events = joined({T1: [0]})
    fake.positions = {("t1", 0): 2}
    clock.advance(1)
    io.answers = [err(code, "refused for good")]
    member.poll()
    assert member.state is MemberState.FATAL and member.error is not None and member.error.code == code
    assert GROUP in str(member.error) and member.member_id in str(member.error)
    assert fake.fetching == {} and not any(e[0] == "commit" for e in events)
    sent = len(io.sent)
    clock.advance(60)
    member.poll()
    assert len(io.sent) == sent, "a heartbeat after a fatal error"
    with pytest.raises(CommitFailed) as raised:
        member.commit([{"topic": "t1", "partition": 0, "offset": 2}])
    assert raised.value.code == code


# -------------------------------------------------------------------- bad answers
@pytest.mark.parametrize("fault", ["unsubscribed", "backwards", "unknown-error"])
def test_a_bad_answer_is_logged_and_the_member_leaves_and_rejoins(fault, caplog):
    member, io, fake, clock, events = joined({T1: [0]}, epoch=3)
    mid = member.member_id
    fake.positions = {("t1", 0): 4}
    bad = {"unsubscribed": ok(3, {T1: [0], OTHER: [0]}), "backwards": ok(2), "unknown-error": err(9999)}
    reason = {"unsubscribed": "topic 'other', which the member did not subscribe to",
              "backwards": "member epoch went backwards from 3 to 2", "unknown-error": "UNKNOWN_ERROR_9999"}
    caplog.set_level(logging.INFO, logger="spark_coord.consumer.kip848")
    clock.advance(1)
    io.answers = [bad[fault]]
    member.poll()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(GROUP in m and mid in m and reason[fault] in m for m in errors), errors
    assert events == [("heartbeat", 3, None), ("stop", {("t1", 0)}), ("commit", {("t1", 0): 4}, mid, 3),
                      ("heartbeat", -1, None)]
    assert member.rejoins == 1 and member.state is MemberState.JOINING and member.error is None
    wait_out(member, clock)
    member.poll()
    assert_joining_heartbeat(io.sent[-1], member)


def test_a_failure_handling_an_answer_ends_in_a_rejoin_not_a_stalled_member(caplog):
    member, io, fake, clock, _ = joined({T1: [0]})

    def broken(*_):
        raise ValueError("a bug")

    fake.start_fetchers = broken
    clock.advance(1)
    io.answers = [ok(2, {T1: [0], T2: [0]})]
    member.poll()
    assert member.state is MemberState.JOINING and member.rejoins == 1 and member.epoch == 0
    assert any("heartbeat handling failed" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------------ lease
def test_nothing_is_delivered_once_no_heartbeat_was_answered_for_the_session_timeout():
    member, io, fake, clock, _ = joined({T1: [0]})
    clock.advance(4)
    member.poll()
    assert fake.lease_until == clock() + 10   # an answered heartbeat renews the lease
    answered_at = clock()
    io.answers = [BrokerConnectionError("unreachable"), err(ErrorCode.NOT_COORDINATOR)] * 40
    while clock() < answered_at + 12:
        assert fake.delivers() == (clock() < answered_at + 10), clock() - answered_at
        clock.advance(0.25)
        member.poll()
    assert fake.lease_until == answered_at + 10 and not fake.delivers()
    io.answers = []
    clock.advance(1)
    member.poll()
    assert fake.delivers()


# ------------------------------------------------------------------------ leaving
def test_close_commits_then_leaves_with_epoch_minus_1():
    member, io, fake, _, events = joined({T1: [0, 1]}, epoch=4)
    fake.positions = {("t1", 0): 10, ("t1", 1): 20}
    member.close(timeout=1)
    assert events == [("commit", {("t1", 0): 10, ("t1", 1): 20}, member.member_id, 4), ("heartbeat", -1, None)]
    assert member.left_cleanly and member.state is MemberState.UNSUBSCRIBED and io.closed


def test_a_static_member_leaves_with_epoch_minus_2():
    member, io, fake, _, events = joined({T1: [0]}, epoch=2, instance_id="reader-1")
    fake.positions = {("t1", 0): 7}
    member.close(timeout=1)
    assert events == [("commit", {("t1", 0): 7}, member.member_id, 2), ("heartbeat", -2, None)]
    assert io.sent[-1]["instance_id"] == "reader-1"
    assert all(body["instance_id"] == "reader-1" for body in io.sent)


# ------------------------------------------------------------------------- states
def test_the_state_table_refuses_an_illegal_move():
    member, *_ = make()
    with pytest.raises(RuntimeError, match=f"group {GROUP} member {member.member_id}: UNSUBSCRIBED -> STABLE"):
        member.transition_to(MemberState.STABLE)
    assert member.state is MemberState.UNSUBSCRIBED
    for state in (MemberState.JOINING, MemberState.RECONCILING):
        member.transition_to(state)
    with pytest.raises(RuntimeError):
        member.transition_to(MemberState.UNSUBSCRIBED)   # only through LEAVING
    member.transition_to(MemberState.LEAVING)
    with pytest.raises(RuntimeError):
        member.transition_to(MemberState.ACKNOWLEDGING)  # only after RECONCILING
    member.transition_to(MemberState.FATAL)
    for state in MemberState:
        if state is not MemberState.FATAL:
            with pytest.raises(RuntimeError):
                member.transition_to(state)               # final
    assert member.state is MemberState.FATAL
