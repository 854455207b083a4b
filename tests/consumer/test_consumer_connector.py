"""The coordinator connector against an in-test coordinator speaking the real protocol."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
from consumer_fakes import FakeCoordinator, RecordingMember
from helpers import free_port, wait_until

from spark_coord.consumer.connector import CommitFailed, ConsumerCoordinatorConnector, Registration
from spark_coord.errors import ErrorCode

OFFSETS = [{"topic": "t", "partition": 0, "offset": 42}, {"topic": "t", "partition": 1, "offset": 7}]


@pytest.fixture
def fake():
    f = FakeCoordinator(epoch=7)
    yield f
    f.close()


@pytest.fixture
def make_connector(fake):
    made: list[ConsumerCoordinatorConnector] = []

    def make(member=None, session_timeout_ms: int = 3000, consumer_id: str = "c1", bootstrap=None):
        reg = Registration(group_id="g", consumer_id=consumer_id, topics={"t": 2},
                           session_timeout_ms=session_timeout_ms)
        conn = ConsumerCoordinatorConnector(bootstrap or [fake.address], reg, member or RecordingMember(OFFSETS),
                                            socket_timeout_ms=2000, backoff_ms=20, max_backoff_ms=100)
        conn.start()
        made.append(conn)
        return conn

    yield make
    fake.close()  # the coordinator goes away first, so closing members do not wait for pings
    for c in made:
        c.close(timeout=5.0)
        assert not c.is_alive()


def test_registers_with_the_subscription(fake, make_connector):
    conn = make_connector()
    session = fake.next_session()
    assert session.registration == {"group_id": "g", "consumer_id": "c1", "topics": [{"topic": "t", "streams": 2}],
                                    "pattern": None, "pattern_streams": 1, "auto_commit": True,
                                    "auto_offset_reset": "largest", "session_timeout_ms": 3000,
                                    "generation_id": -1, "owned": []}  # nothing to claim
    assert conn.registered.wait(5) and conn.coordinator_epoch == 7 and conn.coordinator.coordinator_id == 0


def test_discovery_skips_dead_brokers_round_robin(fake, make_connector):
    make_connector(bootstrap=[("127.0.0.1", free_port()), fake.address])  # nothing listens on the first
    assert fake.next_session().consumer_id == "c1"


def test_registration_error_closes_and_rediscovers(fake, make_connector):
    fake.register_errors = [ErrorCode.CONSUMER_ID_ALREADY_REGISTERED, ErrorCode.SESSION_TIMEOUT_TOO_SMALL]
    conn = make_connector()
    fake.next_session()
    assert len(fake.registrations) == 3
    assert fake.metadata_requests >= 3  # each refusal went back to discovery
    wait_until(lambda: conn.registrations == 1, 5)


def test_ping_is_answered_with_offsets(fake, make_connector):
    make_connector()
    session = fake.next_session()
    answer = session.ping(epoch=7, generation=3, retries=1)
    assert answer == {"error_code": 0, "consumer_id": "c1", "generation_id": -1, "offsets": []}  # holds nothing
    session.start_fetcher(7, 3, {("t", 0): 1, ("t", 1): 1})
    answer = session.ping(epoch=7, generation=3, retries=1)
    assert answer == {"error_code": 0, "consumer_id": "c1", "generation_id": 3, "offsets": OFFSETS}


def test_stop_fetcher_stops_before_reporting(fake, make_connector):
    member = RecordingMember(OFFSETS)
    make_connector(member)
    session = fake.next_session()
    session.start_fetcher(7, 1, {("t", 0): 1})
    answer = session.stop_fetcher(epoch=7, generation=1)
    assert answer["error_code"] == 0 and answer["offsets"] == OFFSETS
    names = member.names()
    assert names.index("stop") < names.index("report", names.index("stop") - 1)
    assert session.ping(7, 1)["offsets"] == []  # stopped: nothing more to report until started again


def test_stop_fetcher_v1_stops_only_the_partitions_it_names(fake, make_connector):
    member = RecordingMember(OFFSETS)
    conn = make_connector(member)
    session = fake.next_session()
    session.start_fetcher(7, 1, {("t", 0): 1, ("t", 1): 1}, version=1)
    answer = session.stop_fetcher(epoch=7, generation=2, partitions=[("t", 1), ("t", 5)])  # t-5 it does not hold
    assert answer["error_code"] == 0 and answer["generation_id"] == 2
    assert answer["offsets"] == [{"topic": "t", "partition": 1, "offset": 7}]  # what it gave up
    assert ("stop", {("t", 1)}) in member.events and ("stop",) not in member.events
    assert conn.generation_id == 2
    assert session.ping(7, 2)["offsets"] == OFFSETS  # it still holds t-0 (the fake reports fixed offsets)
    assert conn._threads == {("t", 0): "c1-0"}


def test_claim_refused_drops_the_assignment_and_registers_again_without_one(fake, make_connector):
    member = RecordingMember(OFFSETS)
    conn = make_connector(member)
    first = fake.next_session()
    first.start_fetcher(7, 2, {("t", 0): 40})
    fake.register_errors = [ErrorCode.CLAIM_REFUSED]
    first.close()
    second = fake.next_session()
    claims = [r["generation_id"] for r in fake.registrations]
    assert claims == [-1, 2, -1]  # refused, then no claim
    assert "lost" in member.names() and conn.generation_id == -1
    wait_until(lambda: conn.registrations == 2, 5)
    assert second.ping(7, 2)["offsets"] == []


def test_start_fetcher_adopts_generation_and_assignment(fake, make_connector):
    member = RecordingMember(OFFSETS)
    conn = make_connector(member)
    session = fake.next_session()
    answer = session.start_fetcher(7, 4, {("t", 0): 10, ("t", 1): -1}, brokers=[(0, ("127.0.0.1", 9))])
    assert answer == {"error_code": 0, "consumer_id": "c1", "generation_id": 4}
    start = [e for e in member.events if e[0] == "start"][0]
    assert start[1] == 4 and start[2] == {("t", 0): 10, ("t", 1): -1}
    assert start[3] == {("t", 0): "c1-0", ("t", 1): "c1-0"} and start[4] == {0: ("127.0.0.1", 9)}
    assert conn.generation_id == 4
    assert session.ping(7, 4)["generation_id"] == 4


def test_stale_coordinator_epoch_is_refused(fake, make_connector):
    member = RecordingMember(OFFSETS)
    conn = make_connector(member)
    session = fake.next_session()
    assert session.ping(epoch=6)["error_code"] == ErrorCode.STALE_COORDINATOR_EPOCH
    assert session.stop_fetcher(epoch=6, generation=1)["error_code"] == ErrorCode.STALE_COORDINATOR_EPOCH
    assert "stop" not in member.names()  # a deposed coordinator cannot stop our fetchers
    assert session.ping(epoch=9)["error_code"] == 0  # a newer epoch is adopted...
    assert conn.coordinator_epoch == 9
    assert session.ping(epoch=7)["error_code"] == ErrorCode.STALE_COORDINATOR_EPOCH  # ...and 7 is now stale


def test_request_for_another_consumer_is_refused(fake, make_connector):
    make_connector()
    session = fake.next_session()
    assert session.ping(epoch=7, consumer_id="someone-else")["error_code"] == ErrorCode.UNKNOWN_CONSUMER


def test_silence_for_a_session_timeout_stops_fetching_then_resumes_when_taken_back(fake, make_connector):
    member = RecordingMember(OFFSETS)
    conn = make_connector(member, session_timeout_ms=600)
    first = fake.next_session()
    first.start_fetcher(7, 4, {("t", 0): 40, ("t", 1): 7})
    assert first.is_closed_by_peer(timeout=5)  # the member gave up on a silent coordinator...
    second = fake.next_session()               # ...and claims what it holds at the next one
    assert second.registration["generation_id"] == 4
    assert second.registration["owned"] == [{"consumer_thread_id": "c1-0", "partitions": OFFSETS}]
    wait_until(lambda: conn.registrations == 2, 5)
    names = member.names()
    assert "lost" in names and "resume" in names and names.index("lost") < names.index("resume")
    assert conn.generation_id == 4


class ResumeFailsOnce(RecordingMember):
    """A member whose first resume after a take-back fails (an unexpected error of the application)."""

    def __init__(self, offsets):
        super().__init__(offsets)
        self.failures = 1

    def resume_fetchers(self) -> None:
        super().resume_fetchers()
        if self.failures:
            self.failures -= 1
            raise RuntimeError("resume failed")


def test_a_failure_after_the_take_back_never_leaves_the_coordinator_counting_a_member_that_is_gone(
        fake, make_connector):
    """Taken back, then something fails before the connector serves the channel: it closes that
    channel (the coordinator sees the member go) and registers again, instead of leaving the
    coordinator pinging a connection nobody reads while its own commits fail as unregistered."""
    member = ResumeFailsOnce(OFFSETS)
    conn = make_connector(member, session_timeout_ms=600)
    first = fake.next_session()
    first.start_fetcher(7, 4, {("t", 0): 40, ("t", 1): 7})
    assert first.is_closed_by_peer(timeout=5)  # silence: the lease ran out, the member reconnects
    second = fake.next_session()               # taken back; the resume fails
    assert second.registration["generation_id"] == 4
    assert second.is_closed_by_peer(timeout=5), "the channel the coordinator took the member back on stays open"
    third = fake.next_session()                # it claims what it holds again, and is taken back
    assert third.registration["generation_id"] == 4
    wait_until(conn.registered.is_set, 5)
    assert conn.is_alive()
    assert third.ping(7, 4)["error_code"] == 0
    assert member.names().count("resume") == 2


def test_lost_connection_keeps_fetching_and_claims_its_assignment(fake, make_connector):
    """seeds 004: the member does not stop consumption while it rediscovers the coordinator."""
    member = RecordingMember(OFFSETS)
    conn = make_connector(member, session_timeout_ms=3000)
    first = fake.next_session()
    first.start_fetcher(7, 2, {("t", 0): 40, ("t", 1): 7})
    first.close()
    second = fake.next_session()
    assert second.registration["generation_id"] == 2
    wait_until(lambda: conn.registrations == 2, 5)
    assert "lost" not in member.names() and "stop" not in member.names()
    assert second.ping(7, 2)["generation_id"] == 2


def test_refused_claim_drops_the_assignment(fake, make_connector):
    member = RecordingMember(OFFSETS)
    conn = make_connector(member)
    first = fake.next_session()
    first.start_fetcher(7, 2, {("t", 0): 40})
    fake.accept_claims = False
    first.close()
    second = fake.next_session()
    assert second.registration["generation_id"] == 2
    wait_until(lambda: conn.registrations == 2, 5)
    assert "lost" in member.names() and conn.generation_id == -1
    assert second.ping(7, 2)["offsets"] == []


def test_lease_runs_out_while_no_coordinator_can_be_found(fake, make_connector):
    member = RecordingMember(OFFSETS)
    conn = make_connector(member, session_timeout_ms=800)
    session = fake.next_session()
    session.start_fetcher(7, 2, {("t", 0): 40})
    started = time.monotonic()
    fake.close()  # no coordinator any more
    session.close()
    wait_until(lambda: "lost" in member.names(), 5)
    assert 0.6 <= time.monotonic() - started < 2.5  # the session timeout after the StartFetcher
    assert member.lease_until <= time.monotonic()
    assert conn.generation_id == 2  # kept, dormant: claimed if a coordinator appears


def test_commit_is_answered_on_the_member_connection(fake, make_connector):
    conn = make_connector()
    session = fake.next_session()
    assert conn.registered.wait(5)
    session.start_fetcher(7, 3, {("t", 0): 1})
    result = {}
    committer = threading.Thread(target=lambda: result.update(conn.commit(OFFSETS, timeout=5)))
    committer.start()
    header, request = session.member_request()
    assert header.api_key == 1006 and header.correlation_id < 0
    assert request == {"group_id": "g", "consumer_id": "c1", "generation_id": 3, "leave": False, "offsets": OFFSETS}
    assert session.ping(7, 3)["error_code"] == 0  # the coordinator's requests keep being answered meanwhile
    session.commit_answer(header, request, code=0)
    committer.join(5)
    assert result == {("t", 0): 0, ("t", 1): 0}


class SeesGenerationOnStart(RecordingMember):
    """A member that notes the connector's generation the moment its assignment becomes visible
    (an application thread that sees ``assignment()`` and commits at once stamps that generation)."""

    def __init__(self, offsets):
        super().__init__(offsets)
        self.connector = None
        self.seen: list[int] = []

    def start_fetchers(self, generation_id, assignment, threads, brokers) -> None:
        super().start_fetchers(generation_id, assignment, threads, brokers)
        self.seen.append(self.connector.generation_id)


def test_a_commit_made_as_soon_as_the_assignment_shows_carries_its_generation(fake, make_connector):
    """A clean-clone run committed right after ``assignment()`` showed its partitions and was refused
    STALE_GENERATION: the assignment became visible before the connector took its generation, so the
    commit went out stamped -1."""
    member = SeesGenerationOnStart(OFFSETS)
    conn = make_connector(member)
    member.connector = conn
    session = fake.next_session()
    assert session.start_fetcher(7, 4, {("t", 0): 10})["error_code"] == 0
    session.start_fetcher(7, 6, {("t", 0): 10, ("t", 1): 3})
    assert member.seen == [4, 6]


def test_commit_without_a_coordinator_fails_at_once(make_connector):
    dead = socket.create_server(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()
    conn = make_connector(bootstrap=[("127.0.0.1", port)])
    started = time.monotonic()
    with pytest.raises(CommitFailed) as err:
        conn.commit(OFFSETS)
    assert err.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE and time.monotonic() - started < 1


@pytest.mark.parametrize("garbage", [
    struct.pack(">i", 2**31 - 1),                       # a size far above the limit: refused before allocating
    struct.pack(">i", -5),                              # negative size
    struct.pack(">i", 11) + struct.pack(">hhih", 1002, 0, 1, 99) + b"x",  # client id longer than the frame
    struct.pack(">i", 10) + struct.pack(">hhih", 3, 0, 1, -1),           # Metadata: not a member API
])
def test_protocol_violation_reconnects(fake, make_connector, garbage):
    make_connector()
    session = fake.next_session()
    session.sock.sendall(garbage)
    assert session.is_closed_by_peer()
    fake.next_session()


def test_close_commits_the_final_offsets_and_leaves(fake, make_connector):
    conn = make_connector(session_timeout_ms=20000)
    session = fake.next_session()
    assert conn.registered.wait(5)
    session.start_fetcher(7, 5, {("t", 0): 1, ("t", 1): 1})
    closer = threading.Thread(target=conn.close)
    closer.start()
    header, request = session.member_request()
    assert header.api_key == 1006
    assert request == {"group_id": "g", "consumer_id": "c1", "generation_id": 5, "leave": True, "offsets": OFFSETS}
    # it must not leave before the coordinator confirms the offsets are written (it waits up to 20 s)
    assert session.ping(7, 5)["error_code"] == 0 and closer.is_alive()
    session.commit_answer(header, request)
    closer.join(5)
    assert not closer.is_alive() and not conn.is_alive() and conn.left_cleanly
    assert session.is_closed_by_peer()


def test_close_is_bounded_when_the_coordinator_never_confirms(fake, make_connector):
    conn = make_connector(session_timeout_ms=1500)
    session = fake.next_session()
    session.start_fetcher(7, 5, {("t", 0): 1})
    started = time.monotonic()
    conn.close()
    assert time.monotonic() - started < 1.5 + 0.5 and not conn.left_cleanly
    assert session.member_request()[0].api_key == 1006  # it tried


def test_close_without_offsets_is_immediate(fake, make_connector):
    conn = make_connector(RecordingMember([]), session_timeout_ms=20000)
    fake.next_session()
    assert conn.registered.wait(5)
    conn.close(timeout=5)
    assert not conn.is_alive()


def test_close_before_any_coordinator_is_found(make_connector):
    conn = make_connector(bootstrap=[("127.0.0.1", free_port())])
    conn.close(timeout=5)
    assert not conn.is_alive()


def test_a_lease_run_out_on_a_channel_that_stayed_open_is_claimed_on_a_new_registration(fake, make_connector):
    """Found by the network nemesis: a cut that drops packets without resetting the connection let
    the member's lease run out while its channel stayed open; the coordinator's late pings kept the
    channel from falling silent, and the member sat on its dormant partitions for 41 s.  Now the
    first request after the lease ran out sends it to a new registration, where it claims its
    generation and resumes once taken back."""
    member = RecordingMember(OFFSETS)
    conn = make_connector(member, session_timeout_ms=3000)
    first = fake.next_session()
    first.start_fetcher(7, 4, {("t", 0): 40, ("t", 1): 7})
    with conn._lease_cond:  # the lease runs out as a cut would make it, the channel open
        conn._lease_until = 0.0
        conn._lease_cond.notify_all()
    wait_until(lambda: "lost" in member.names(), 5, message="the member to stop fetching")
    deadline = time.monotonic() + 8  # the coordinator keeps pinging (faster than the session)

    def closed() -> bool:
        try:
            return first.is_closed_by_peer(timeout=0.3)
        except TimeoutError:
            return False

    while not closed():
        assert time.monotonic() < deadline, "the member kept the channel its lease ran out on"
        try:
            first.ping(7, 4)
        except Exception:  # noqa: BLE001 -- the member closed the channel
            break
    second = fake.next_session()
    assert second.registration["generation_id"] == 4
    wait_until(lambda: "resume" in member.names(), 5, message="the member to resume once taken back")
    assert second.ping(7, 4)["error_code"] == 0
