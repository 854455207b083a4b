"""``Kip848Member``: the thin consumer as a member of Kafka 4's consumer group protocol (KIP-848).

Used by ``Consumer(..., group_protocol="consumer")`` in place of the seeds' connector: the same
``Member`` (``connector.Member``) is driven, so fetching is the same, and only how the member
learns its assignment differs.  It speaks only Kafka's own APIs, so it joins a group on any
Kafka 4 cluster as well as on our brokers:

* one thread sends ConsumerGroupHeartbeat (API 68) to the group's coordinator (found and
  cached by ``GroupClient``; NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE look it up again)
  every ``HeartbeatIntervalMs`` the coordinator asks for.  It joins with epoch 0 and a member
  id it made itself (KIP-1082: a UUID, base64url as Kafka's ``Uuid.toString``), then sends the
  epoch each answer gives; fields unchanged since the last heartbeat are null, as Java's
  ``ConsumerHeartbeatRequestManager`` sends them;
* an answer's assignment is the member's *target*.  Reconciliation, in this order (matching
  Java's ``ConsumerMembershipManager``): partitions revoked stop being fetched and their
  offsets are committed (OffsetCommit v9: member id and epoch); partitions added start from
  their committed offsets (OffsetFetch v9 with member id and epoch, require-stable) or the
  reset policy; then a heartbeat goes at once, listing the partitions owned now, to
  acknowledge it;
* FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID: every partition is dropped without a commit
  (another member may own it already) and the member joins again with epoch 0 and the same
  member id; UNRELEASED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED, UNSUPPORTED_ASSIGNOR,
  INVALID_REGULAR_EXPRESSION, authorization and request errors are fatal: fetching stops
  and the consumer raises ``error`` to the application;
* a bad answer -- an assignment naming a topic not subscribed, an epoch going backwards, an
  error code Kafka does not define -- is logged with the member and the group, and the
  member leaves (its owned partitions committed, epoch -1) and joins again: never a crash
  nor a silent stall;
* fetching and delivery hold a lease: a heartbeat answered renews it for the consumer's
  ``session_timeout_ms``; a member that hears nothing from a coordinator for that long
  delivers nothing more (the coordinator has fenced it by then, and others own its partitions);
* ``close()`` commits the owned partitions' positions and leaves (epoch -1; a static member,
  ``group.instance.id``: -2, so its partitions wait for it for the session timeout).

The states and their moves are one table, ``_MOVES`` (Java's ``MemberState``):

    UNSUBSCRIBED -> JOINING -> RECONCILING -> ACKNOWLEDGING -> STABLE -> RECONCILING ...
    JOINING | RECONCILING | ACKNOWLEDGING | STABLE -> FENCED -> JOINING (epoch 0, same id)
    any but UNSUBSCRIBED -> JOINING (a bad answer: left and joins again)
    any -> LEAVING -> UNSUBSCRIBED (close);  any -> FATAL (final)

The I/O (heartbeats, commits, committed offsets, topic names) is behind ``MemberIo``, so the
state machine runs in unit tests against a fake coordinator with a hand-advanced clock, turned by
``poll()`` (one turn of the heartbeat thread).
"""

from __future__ import annotations

import base64
import enum
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Protocol

from spark_coord.client.connection import BrokerConnectionError
from spark_coord.client.groups import COORDINATOR_ERRORS, GroupClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.common import TopicPartition
from spark_coord.consumer.connector import CommitFailed, Member
from spark_coord.errors import ErrorCode, KafkaError, is_retriable
from spark_coord.wire.registry import ApiKey
from spark_coord.wire.types import ProtocolError

log = logging.getLogger(__name__)

__all__ = ["Kip848Member", "MemberState", "MemberIo", "ClusterIo", "make_member_id", "JOIN", "LEAVE",
           "STATIC_LEAVE", "FATAL_ERRORS"]

#: Member epochs with a meaning of their own.
JOIN, LEAVE, STATIC_LEAVE = 0, -1, -2
#: Heartbeat errors that end the member (Java's ``handleFatalFailure``).
FATAL_ERRORS = frozenset({
    ErrorCode.UNRELEASED_INSTANCE_ID, ErrorCode.GROUP_MAX_SIZE_REACHED, ErrorCode.UNSUPPORTED_ASSIGNOR,
    ErrorCode.INVALID_REGULAR_EXPRESSION, ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.INVALID_REQUEST, ErrorCode.UNSUPPORTED_VERSION,
    ErrorCode.INVALID_GROUP_ID, ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.FENCED_INSTANCE_ID})
#: Errors after which the member drops its partitions and joins again with epoch 0.
FENCED_ERRORS = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})
_IO_ERRORS = (BrokerConnectionError, ProtocolError, OSError)
#: First and largest pause after a failed heartbeat (Java's retry.backoff.ms / retry.backoff.max.ms).
RETRY_BACKOFF, RETRY_BACKOFF_MAX = 0.1, 1.0


def make_member_id() -> str:
    """A new member id as Kafka's clients make them (KIP-1082): a random UUID, base64url, unpadded."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class MemberState(enum.Enum):
    """Where the member stands in its group (Java's ``MemberState``)."""

    #: Not in the group: before the first heartbeat, and after leaving.
    UNSUBSCRIBED = "unsubscribed"
    #: Sending heartbeats with epoch 0 until the coordinator answers with an epoch.
    JOINING = "joining"
    #: A new target assignment: revoking, committing, fetching committed offsets.
    RECONCILING = "reconciling"
    #: Reconciled: the next heartbeat goes at once, listing what the member owns now.
    ACKNOWLEDGING = "acknowledging"
    #: Owns its target; heartbeats at the coordinator's interval.
    STABLE = "stable"
    #: The coordinator fenced the member: its partitions are dropped without a commit.
    FENCED = "fenced"
    #: Committing its final offsets and sending the leaving heartbeat.
    LEAVING = "leaving"
    #: An error the member cannot recover from (``Kip848Member.error``): final.
    FATAL = "fatal"


S = MemberState
#: The states each state may be entered from.
_MOVES: dict[MemberState, frozenset[MemberState]] = {
    S.UNSUBSCRIBED: frozenset({S.LEAVING}),
    S.JOINING: frozenset({S.UNSUBSCRIBED, S.FENCED, S.JOINING, S.RECONCILING, S.ACKNOWLEDGING, S.STABLE}),
    S.RECONCILING: frozenset({S.JOINING, S.RECONCILING, S.ACKNOWLEDGING, S.STABLE}),
    S.ACKNOWLEDGING: frozenset({S.RECONCILING}),
    S.STABLE: frozenset({S.JOINING, S.RECONCILING, S.ACKNOWLEDGING}),
    S.FENCED: frozenset({S.JOINING, S.RECONCILING, S.ACKNOWLEDGING, S.STABLE}),
    S.LEAVING: frozenset({S.UNSUBSCRIBED, S.JOINING, S.RECONCILING, S.ACKNOWLEDGING, S.STABLE, S.FENCED}),
    S.FATAL: frozenset(set(MemberState) - {S.FATAL}),
}


class BadAnswer(Exception):
    """A heartbeat answer the member cannot act on (it leaves and joins again)."""


class MemberIo(Protocol):
    """What the member asks of the cluster (``ClusterIo``; a fake in unit tests)."""

    def heartbeat(self, body: dict) -> dict:
        """ConsumerGroupHeartbeat to the group's coordinator: its answer (raises on I/O failure)."""

    def coordinator_lost(self) -> None:
        """The coordinator moved or went away: find it again before the next request."""

    def commit(self, offsets: dict[TopicPartition, int], member_id: str, epoch: int) -> None:
        """OffsetCommit with the member's id and epoch (raises KafkaError when refused)."""

    def committed(self, partitions: Iterable[TopicPartition], member_id: str, epoch: int) -> dict[TopicPartition, int]:
        """OffsetFetch with the member's id and epoch: the committed offsets of ``partitions`` that have one."""

    def topic_names(self, topic_ids: Iterable[bytes], subscribed: list[str] | None) -> dict[bytes, str]:
        """Names of the topics with these ids (metadata of ``subscribed``, or of every topic when None)."""

    def topic_ids(self, names: Iterable[str]) -> dict[str, bytes]:
        """Ids of these topics (those the metadata knows)."""

    def close(self) -> None:
        """Close the connections."""


class ClusterIo:
    """``MemberIo`` on a cluster: its own ``ClusterClient`` (heartbeats never queue behind fetches)
    and a ``GroupClient`` for the coordinator, commits and committed offsets."""

    def __init__(self, bootstrap: list[str], group: str, client_id: str, timeout: float, security=None):
        self.group = group
        self.cluster = ClusterClient(bootstrap, client_id=client_id, timeout=timeout, security=security)
        self.groups = GroupClient(self.cluster, timeout=timeout)
        self._names: dict[bytes, str] = {}

    def heartbeat(self, body: dict) -> dict:
        coordinator = self.groups.coordinator(self.group)
        if self.cluster.brokers.get(coordinator.node_id) == (coordinator.host, coordinator.port):
            conn = self.cluster.connection(coordinator.node_id)
        else:
            conn = self.cluster.connection_to(coordinator.host, coordinator.port)
        return conn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, body)

    def coordinator_lost(self) -> None:
        self.groups.forget(self.group)

    def commit(self, offsets: dict[TopicPartition, int], member_id: str, epoch: int) -> None:
        self.groups.commit_offsets(self.group, offsets, generation=epoch, member_id=member_id)

    def committed(self, partitions: Iterable[TopicPartition], member_id: str, epoch: int) -> dict[TopicPartition, int]:
        found = self.groups.fetch_offsets(self.group, partitions, require_stable=True, member_id=member_id,
                                          member_epoch=epoch)
        return {tp: c.offset for tp, c in found.items()}

    def topic_names(self, topic_ids: Iterable[bytes], subscribed: list[str] | None) -> dict[bytes, str]:
        wanted = set(topic_ids)
        if wanted - set(self._names):
            for name, info in self.cluster.refresh(subscribed).items():
                if not info.error:
                    self._names[info.topic_id] = name
        return {i: self._names[i] for i in wanted if i in self._names}

    def topic_ids(self, names: Iterable[str]) -> dict[str, bytes]:
        known = {n: i for i, n in self._names.items()}
        missing = [n for n in names if n not in known]
        if missing:
            for name, info in self.cluster.refresh(missing).items():
                if not info.error:
                    self._names[info.topic_id] = known[name] = name
        return {n: known[n] for n in names if n in known}

    def close(self) -> None:
        self.groups.close()
        self.cluster.close()


class Kip848Member(threading.Thread):
    """The heartbeat thread of one KIP-848 member, driving a ``Member`` (the ``Consumer``).

    Parameters
    ----------
    io : MemberIo
    group : the group id
    member : the ``Member`` told to stop and start partitions
    topics, pattern : the subscription: topic names, or a regular expression the coordinator
        matches (``SubscribedTopicRegex``, RE2/J syntax on Kafka's brokers)
    instance_id : ``group.instance.id`` (a static member) or None
    server_assignor : ``group.remote.assignor`` (``uniform``, ``range``) or None: the group's
    rebalance_timeout_ms : how long the member may take to revoke (sent when joining)
    session_timeout_ms : the lease: how long the member fetches without an answered heartbeat
    auto_commit_interval_ms : commit the positions (``Member.report_offsets``) this often (Java's
        ``auto.commit.interval.ms``); None: only on revocation, ``commit()`` and ``close()``
    clock : ``time.monotonic`` (a fake clock in tests)
    """

    def __init__(self, io: MemberIo, group: str, member: Member, *, topics: Iterable[str] | None = None,
                 pattern: str | None = None, instance_id: str | None = None, server_assignor: str | None = None,
                 rack_id: str | None = None, rebalance_timeout_ms: int = 300000, session_timeout_ms: int = 45000,
                 member_id: str | None = None, auto_commit_interval_ms: int | None = 5000,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(name=f"kip848-heartbeat-{group}", daemon=True)
        self.io = io
        self.group = group
        self.member = member
        self.topics = sorted(set(topics)) if topics else None
        self.pattern = pattern
        if (self.topics is None) == (pattern is None):
            raise ValueError("give exactly one of topics and pattern")
        self.instance_id = instance_id
        self.server_assignor = server_assignor
        self.rack_id = rack_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout = session_timeout_ms / 1000
        self.member_id = member_id or make_member_id()
        self.clock = clock
        self.auto_commit_interval = None if auto_commit_interval_ms is None else auto_commit_interval_ms / 1000
        self._next_commit = clock() + (self.auto_commit_interval or 0)
        self._auto_committed: dict[TopicPartition, int] = {}
        self.state = MemberState.UNSUBSCRIBED
        self.epoch = JOIN
        #: The interval the coordinator asked for (seconds).
        self.interval = 1.0
        #: The partitions reconciled: fetched by the member, listed in heartbeats.
        self.owned: set[TopicPartition] = set()
        #: The coordinator's last assignment, by name (None: none yet).
        self.target: set[TopicPartition] | None = None
        #: The fatal error (state FATAL), raised to the application by the consumer.
        self.error: KafkaError | None = None
        #: Rejoins after a bad answer or a fence, for tests and logs.
        self.rejoins = 0
        self.assigned = threading.Event()   # set once the first assignment was reconciled
        self._sent_owned: set[TopicPartition] | None = None
        self._sent_subscription = False
        self._failures = 0
        self._next_at = 0.0
        self._lock = threading.RLock()      # one of: the heartbeat thread, commit(), close()
        self._heard = threading.Condition(self._lock)  # notified after each heartbeat answer
        self._closing = threading.Event()
        self._wake = threading.Event()
        self._left = threading.Event()

    # ------------------------------------------------------------------ states
    def transition_to(self, state: MemberState) -> None:
        if self.state not in _MOVES[state]:
            raise RuntimeError(f"group {self.group} member {self.member_id}: {self.state.name} -> {state.name}")
        if state is not self.state:
            log.debug("group %s member %s: %s -> %s", self.group, self.member_id, self.state.name, state.name)
        self.state = state

    @property
    def static(self) -> bool:
        return bool(self.instance_id)

    # ---------------------------------------------------------------- requests
    def heartbeat_body(self, leave: bool = False) -> dict:
        """The next ConsumerGroupHeartbeat: a joining one says everything, the others only what changed."""
        joining = self.epoch == JOIN and not leave
        body = {"group_id": self.group, "member_id": self.member_id,
                "member_epoch": (STATIC_LEAVE if self.static else LEAVE) if leave else self.epoch,
                "instance_id": self.instance_id, "rack_id": self.rack_id if joining else None,
                "rebalance_timeout_ms": self.rebalance_timeout_ms if joining else -1,
                "subscribed_topic_names": None, "subscribed_topic_regex": None,
                "server_assignor": self.server_assignor if joining else None, "topic_partitions": None}
        if joining or not self._sent_subscription:
            if self.pattern is not None:
                body["subscribed_topic_regex"] = self.pattern
            else:
                body["subscribed_topic_names"] = list(self.topics or [])
        if not leave and (joining or self._sent_owned != self.owned):
            ids = self.io.topic_ids(sorted({t for t, _ in self.owned})) if self.owned else {}
            by_topic: dict[str, list[int]] = {}
            for t, p in sorted(self.owned):
                by_topic.setdefault(t, []).append(p)
            body["topic_partitions"] = [{"topic_id": ids[t], "partitions": ps} for t, ps in by_topic.items()
                                        if t in ids]
        return body

    def heartbeat_once(self) -> None:
        """Send one heartbeat and act on its answer (on the heartbeat thread, or a test)."""
        with self._lock:
            if self.state is MemberState.FATAL:
                return
            if self.state is MemberState.UNSUBSCRIBED:
                self.transition_to(MemberState.JOINING)
            body = self.heartbeat_body()
            try:
                answer = self.io.heartbeat(body)
            except (*_IO_ERRORS, KafkaError) as e:
                self._retry_later(f"heartbeat failed: {e}", coordinator=True)
                return
            self._sent_subscription = True
            if body["topic_partitions"] is not None:
                self._sent_owned = set(self.owned)
            try:
                self.on_answer(answer)
            except BadAnswer as e:
                log.error("group %s member %s (epoch %d): %s; leaving and joining again", self.group,
                          self.member_id, self.epoch, e)
                self._rejoin(commit=True)
            finally:
                self._heard.notify_all()

    def on_answer(self, answer: dict) -> None:
        """Act on one heartbeat answer (raises BadAnswer)."""
        code = answer["error_code"]
        text = answer.get("error_message") or ""
        if code == ErrorCode.NONE:
            self._failures = 0
            self._stable_answer(answer)
            return
        name = ErrorCode.name_of(code)
        if code in COORDINATOR_ERRORS:
            self._retry_later(f"{name}", coordinator=True)
        elif code in FENCED_ERRORS:
            log.warning("group %s member %s (epoch %d): %s %s; dropping %d partition(s) without committing and "
                        "joining again", self.group, self.member_id, self.epoch, name, text, len(self.owned))
            self.transition_to(MemberState.FENCED)
            self._drop_all()
            self.rejoins += 1
            self.transition_to(MemberState.JOINING)
            self._next_at = self.clock()
        elif code in FATAL_ERRORS:
            self.error = KafkaError(code, f"group {self.group} member {self.member_id}: {text or name}")
            log.error("%s; the member stops", self.error)
            self._drop_all()
            self.transition_to(MemberState.FATAL)
        elif is_retriable(code):
            self._retry_later(name)
        else:
            raise BadAnswer(f"error {name} {text}".rstrip())

    def _stable_answer(self, answer: dict) -> None:
        epoch = answer["member_epoch"]
        if answer.get("member_id") and answer["member_id"] != self.member_id:
            if self.epoch != JOIN:
                raise BadAnswer(f"member id {answer['member_id']!r} in the answer, not ours")
            self.member_id = answer["member_id"]  # v0: the coordinator names the member
        if epoch < self.epoch or epoch < 1:
            raise BadAnswer(f"member epoch went backwards from {self.epoch} to {epoch}")
        self.epoch = epoch
        self.interval = max(answer.get("heartbeat_interval_ms") or 0, 50) / 1000
        self.member.renew_lease(self.clock() + self.session_timeout)
        self._next_at = self.clock() + self.interval
        if answer.get("assignment") is not None:
            self.target = self._named(answer["assignment"]["topic_partitions"])
            self.transition_to(MemberState.RECONCILING)
        elif self.state is MemberState.JOINING:
            return  # joined, no assignment yet: the next heartbeat brings it
        if self.target is not None and (self.target != self.owned or self.state is MemberState.RECONCILING):
            self.reconcile()  # acknowledged at once; after a backoff when the committed offsets could not be read
        elif self.state is MemberState.ACKNOWLEDGING:
            self.transition_to(MemberState.STABLE)

    def _named(self, entries: list[dict]) -> set[TopicPartition]:
        """The assignment by topic name; a topic not subscribed is a bad answer."""
        ids = {e["topic_id"] for e in entries}
        names = self.io.topic_names(ids, self.topics)
        unknown = ids - set(names)
        if unknown:
            names.update(self.io.topic_names(unknown, None))
            unknown -= set(names)
        if unknown:
            raise BadAnswer(f"assignment of topic id(s) no metadata knows: "
                            f"{', '.join(str(uuid.UUID(bytes=bytes(i))) for i in sorted(unknown))}")
        out: set[TopicPartition] = set()
        for e in entries:
            name = names[e["topic_id"]]
            if not self._subscribed(name):
                raise BadAnswer(f"assignment of topic {name!r}, which the member did not subscribe to")
            out.update((name, p) for p in e["partitions"])
        return out

    def _subscribed(self, topic: str) -> bool:
        if self.topics is not None:
            return topic in self.topics
        try:
            return re.fullmatch(self.pattern or "", topic) is not None
        except re.error:
            return True  # an RE2/J expression Python's re cannot read: the coordinator's word stands

    # ---------------------------------------------------------- reconciliation
    def reconcile(self) -> None:
        """Move the owned partitions to the target: revoked ones stop and are committed first,
        added ones start from their committed offsets; then acknowledge (the next heartbeat at once)."""
        target = set(self.target or ())
        self.transition_to(MemberState.RECONCILING)
        revoked = self.owned - target
        if revoked:
            offsets = self.member.stop_fetchers(revoked) or []
            self.owned -= revoked
            self._commit({(o["topic"], o["partition"]): o["offset"] for o in offsets}, "revoking")
            log.info("group %s member %s epoch %d: revoked %s", self.group, self.member_id, self.epoch,
                     _names(revoked))
        added = target - self.owned
        if added or not self.assigned.is_set():
            try:
                committed = self.io.committed(sorted(added), self.member_id, self.epoch) if added else {}
            except (*_IO_ERRORS, KafkaError) as e:
                self.transition_to(MemberState.ACKNOWLEDGING)  # what was revoked is acknowledged meanwhile
                self._retry_later(f"fetching the committed offsets of {_names(added)} failed: {e}")
                return
            starts = {tp: committed.get(tp, -1) for tp in target}
            self.member.start_fetchers(self.epoch, starts, {tp: self.member_id for tp in target}, {})
            self.owned |= added
            self.assigned.set()
            log.info("group %s member %s epoch %d: assigned %s (%s)", self.group, self.member_id, self.epoch,
                     _names(added), ", ".join(f"{t}-{p}@{committed[(t, p)]}" for t, p in sorted(committed)) or
                     "nothing committed")
        self.transition_to(MemberState.ACKNOWLEDGING)
        self._next_at = self.clock()

    def _commit(self, offsets: dict[TopicPartition, int], why: str) -> bool:
        if not offsets:
            return True
        try:
            self.io.commit(offsets, self.member_id, self.epoch)
            return True
        except (*_IO_ERRORS, KafkaError) as e:
            log.warning("group %s member %s epoch %d: commit %s %s failed: %s", self.group, self.member_id,
                        self.epoch, why, _names(offsets), e)
            return False

    def _drop_all(self) -> None:
        """Stop every owned partition and forget it, without a commit; the next join is epoch 0."""
        if self.owned:
            self.member.stop_fetchers(set(self.owned))
        self.owned = set()
        self.target = None
        self.epoch = JOIN
        self._sent_owned = None
        self._sent_subscription = False

    def _rejoin(self, commit: bool) -> None:
        """Leave (committing what is owned) and join again with epoch 0 and the same member id."""
        if commit and self.owned:
            offsets = self.member.stop_fetchers(set(self.owned)) or []
            self._commit({(o["topic"], o["partition"]): o["offset"] for o in offsets}, "before rejoining")
            self.owned = set()
        if self.epoch != JOIN:
            try:
                self.io.heartbeat({**self.heartbeat_body(leave=True), "member_epoch": LEAVE})
            except (*_IO_ERRORS, KafkaError) as e:
                log.info("group %s member %s: leaving before rejoining failed: %s", self.group, self.member_id, e)
        self._drop_all()
        self.rejoins += 1
        self.transition_to(MemberState.JOINING)
        self._retry_later("rejoining")

    def _retry_later(self, why: str, coordinator: bool = False) -> None:
        self._failures += 1
        pause = min(RETRY_BACKOFF * 2 ** (self._failures - 1), RETRY_BACKOFF_MAX)
        log.info("group %s member %s: %s; heartbeat again in %.2f s", self.group, self.member_id, why, pause)
        if coordinator:
            self.io.coordinator_lost()
        self._next_at = self.clock() + pause

    # ----------------------------------------------------------------- commits
    def commit(self, offsets: list[dict], timeout: float | None = None) -> dict[TopicPartition, int]:
        """Commit ``offsets`` with the member's id and epoch (any thread): ``{tp: 0}`` once the
        coordinator took them; raises ``CommitFailed`` otherwise (STALE_MEMBER_EPOCH: retried once
        with the epoch the next heartbeat brings)."""
        wanted = {(o["topic"], o["partition"]): o["offset"] for o in offsets}
        if self.error is not None:
            raise CommitFailed(self.error.code, str(self.error))
        for attempt in range(2):
            with self._lock:
                member_id, epoch = self.member_id, self.epoch
            if epoch < 1:
                raise CommitFailed(ErrorCode.COORDINATOR_NOT_AVAILABLE, "not in the group right now")
            try:
                self.io.commit(wanted, member_id, epoch)
                return {tp: 0 for tp in wanted}
            except KafkaError as e:
                if e.code != ErrorCode.STALE_MEMBER_EPOCH or attempt:
                    raise CommitFailed(e.code, str(e)) from None
                self.wake()
                with self._heard:  # the next heartbeat's answer brings the member's epoch
                    self._heard.wait_for(lambda epoch=epoch: self.epoch != epoch or self.error is not None,
                                         timeout=min(self.interval * 2 + 1, self.session_timeout))
            except _IO_ERRORS as e:
                raise CommitFailed(ErrorCode.NETWORK_EXCEPTION, str(e)) from None
        raise AssertionError("unreachable")

    def auto_commit(self) -> None:
        """Commit the owned partitions' positions that moved since the last auto-commit."""
        with self._lock:
            if self.state not in (MemberState.STABLE, MemberState.ACKNOWLEDGING) or not self.owned:
                return
            offsets = {(o["topic"], o["partition"]): o["offset"] for o in self.member.report_offsets()}
            moved = {tp: o for tp, o in offsets.items() if tp in self.owned and self._auto_committed.get(tp) != o}
            if moved and self._commit(moved, "(auto-commit)"):
                self._auto_committed.update(moved)

    # ---------------------------------------------------------------- the thread
    def wake(self) -> None:
        self._next_at = 0.0
        self._wake.set()

    def poll(self) -> float:
        """One turn of the heartbeat thread: the heartbeat if one is due, the auto-commit if one is
        due; returns how long (seconds) until the next is due (a test with a fake clock calls it)."""
        if self.clock() >= self._next_at:
            self._next_at = self.clock() + self.interval
            try:
                self.heartbeat_once()
            except Exception:  # noqa: BLE001 -- a bug must not stall the member: log, join again
                log.exception("group %s member %s: heartbeat handling failed; joining again", self.group,
                              self.member_id)
                with self._lock:
                    self._rejoin(commit=False)
        if self.auto_commit_interval is not None and self.clock() >= self._next_commit:
            self._next_commit = self.clock() + self.auto_commit_interval
            self.auto_commit()
        until = min(self._next_at, self._next_commit if self.auto_commit_interval is not None else self._next_at)
        return max(0.0, min(until - self.clock(), self.interval))

    def run(self) -> None:
        try:
            while not self._closing.is_set() and self.state is not MemberState.FATAL:
                self._wake.wait(self.poll())
                self._wake.clear()
        finally:
            if self._closing.is_set():
                self._leave()

    def _leave(self) -> None:
        with self._lock:
            if self.state in (MemberState.FATAL, MemberState.UNSUBSCRIBED) or self.epoch == JOIN:
                self._left.set()
                return
            self.transition_to(MemberState.LEAVING)
            offsets = {(o["topic"], o["partition"]): o["offset"] for o in self.member.report_offsets()}
            self._commit({tp: o for tp, o in offsets.items() if tp in self.owned}, "on leaving")
            try:
                self.io.heartbeat(self.heartbeat_body(leave=True))
                log.info("group %s member %s left (epoch %d)", self.group, self.member_id, self.epoch)
            except (*_IO_ERRORS, KafkaError) as e:
                log.info("group %s member %s: could not leave (%s); the coordinator times it out", self.group,
                         self.member_id, e)
            self.owned = set()
            self.epoch = JOIN
            self.transition_to(MemberState.UNSUBSCRIBED)
            self._left.set()

    def close(self, timeout: float | None = None) -> None:
        """Commit the owned partitions' positions and leave; returns within ``timeout`` (default: the
        session timeout) whatever the cluster does."""
        self._closing.set()
        self._wake.set()
        if self.is_alive():
            self.join(self.session_timeout if timeout is None else timeout)
        elif not self._left.is_set() and self.state is not MemberState.FATAL:
            self._leave()
        if self.is_alive():
            log.warning("group %s member %s: not left in time", self.group, self.member_id)
        self.io.close()

    @property
    def left_cleanly(self) -> bool:
        return self._left.is_set()


def _names(partitions: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(partitions)) or "nothing"
