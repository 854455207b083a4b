"""RegisterConsumer checks (seeds 003 section 7) and claims (RegisterConsumer v1).

``parse_registration`` turns a request body into a ``Registration`` or a
``Refusal`` (error code and message; the connection stays open and the member
closes it, as the seeds want).  It checks what the seeds list -- the session
timeout against ``coordinator.min.session.timeout.ms`` -- and everything a
hostile body could get wrong.  Whether the consumer id is unique in its group is
the coordinator's check: it needs the group.

A ``Claim`` is what a member that lost its coordinator says it still holds: its
epoch and the partitions of each of its threads, with its positions.
``claim_fits`` compares it with what the coordinator counts the member for (its
assignment, or the owners restored from ZooKeeper after a failover).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, TypeGuard

from spark_coord.common import LARGEST, OFFSET_RESETS, TopicPartition
from spark_coord.coordinator.core.subscription import TopicCount
from spark_coord.errors import ErrorCode
from spark_coord.wire.coordinator import NO_GENERATION
from spark_coord.zk import paths

if TYPE_CHECKING:
    from spark_coord.coordinator.core.group import ConsumerRegistry


Assignment = dict[str, list[TopicPartition]]


def is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class Refusal:
    """A RegisterConsumer that cannot be accepted: the error code and why."""

    code: ErrorCode
    message: str


@dataclass
class Claim:
    """What a re-registering member says it holds: generation, threads' partitions, positions."""

    generation_id: int
    assignment: Assignment = field(default_factory=dict)
    offsets: list[dict] = field(default_factory=list)

    def partitions(self) -> set[TopicPartition]:
        return {tp for tps in self.assignment.values() for tp in tps}


@dataclass
class Registration:
    """A checked RegisterConsumer request."""

    group_id: str
    consumer_id: str
    topic_count: TopicCount
    auto_commit: bool
    auto_offset_reset: str
    session_timeout_ms: int
    claim: Claim | None = None


def parse_registration(body: Any, min_session_timeout_ms: int) -> Registration | Refusal:
    """Check a RegisterConsumer body (any version)."""
    if not isinstance(body, Mapping):
        return Refusal(ErrorCode.INVALID_REQUEST, "request body is not a struct")
    try:
        group_id = paths.validate_group(body.get("group_id"))  # any wire value: a non-string is refused too
    except ValueError as e:
        return Refusal(ErrorCode.INVALID_GROUP_ID, str(e))
    try:
        consumer_id = paths.validate_consumer_id(body.get("consumer_id"))
    except ValueError as e:
        return Refusal(ErrorCode.INVALID_REQUEST, str(e))
    session = body.get("session_timeout_ms")
    if not is_int(session) or session <= 0:
        return Refusal(ErrorCode.INVALID_REQUEST, f"session_timeout_ms {session!r} is not a positive integer")
    if session < min_session_timeout_ms:
        return Refusal(ErrorCode.SESSION_TIMEOUT_TOO_SMALL,
                       f"session timeout {session} ms is below the minimum {min_session_timeout_ms} ms")
    reset = body.get("auto_offset_reset", LARGEST)
    if reset not in OFFSET_RESETS:
        return Refusal(ErrorCode.INVALID_REQUEST, f"auto_offset_reset {reset!r} is not smallest|largest")
    auto_commit = body.get("auto_commit", True)
    if not isinstance(auto_commit, bool):
        return Refusal(ErrorCode.INVALID_REQUEST, f"auto_commit {auto_commit!r} is not a boolean")
    try:
        topic_count = TopicCount.from_request(body.get("topics"), body.get("pattern"), body.get("pattern_streams", 1))
    except ValueError as e:
        return Refusal(ErrorCode.INVALID_SUBSCRIPTION, str(e))
    claim = parse_claim(body)
    if isinstance(claim, Refusal):
        return claim
    return Registration(group_id, consumer_id, topic_count, auto_commit, reset, session, claim)


def parse_claim(body: Mapping[str, Any]) -> Claim | None | Refusal:
    """The claim of a v1 RegisterConsumer (None without one)."""
    generation = body.get("generation_id", NO_GENERATION)
    owned = body.get("owned") or []
    if generation is None or generation == NO_GENERATION:
        return None
    if not is_int(generation) or generation < 0 or not isinstance(owned, list):
        return Refusal(ErrorCode.INVALID_REQUEST, f"claim of generation {generation!r} is malformed")
    claim = Claim(generation)
    seen: set[TopicPartition] = set()
    for thread in owned:
        tid = thread.get("consumer_thread_id") if isinstance(thread, Mapping) else None
        parts = thread.get("partitions") if isinstance(thread, Mapping) else None
        if not isinstance(tid, str) or not isinstance(parts, list) or tid in claim.assignment:
            return Refusal(ErrorCode.INVALID_REQUEST, f"claim: malformed thread entry {thread!r}")
        tps = claim.assignment[tid] = []
        for p in parts:
            t = p.get("topic") if isinstance(p, Mapping) else None
            n = p.get("partition") if isinstance(p, Mapping) else None
            o = p.get("offset") if isinstance(p, Mapping) else None
            if not isinstance(t, str) or not is_int(n) or n < 0 or not is_int(o) or (t, n) in seen:
                return Refusal(ErrorCode.INVALID_REQUEST, f"claim: malformed or repeated partition {p!r}")
            seen.add((t, n))
            tps.append((t, n))
            if o >= 0:
                claim.offsets.append({"topic": t, "partition": n, "offset": o})
    return claim


def claim_fits(claim: Claim, member: "ConsumerRegistry") -> str | None:
    """None if ``member`` (absent, known to the coordinator) may be taken back with ``claim``; else why not.

    A claim fits when every partition it names is one the coordinator counts the member
    for, on the same thread, and its epoch is one the member can have: at most the newest
    sent to it, and no older than the epoch in which it got any claimed partition.  The
    member may claim less than it is counted for (a StopFetcher it carried out, or a
    StartFetcher that never reached it): the rest is free again.  No partition the
    coordinator counts for someone else can be claimed, so a claim never makes two holders."""
    held = member.threads()
    if member.epoch is None and not held:
        return "holds nothing"
    newest = max(member.sent_epoch, member.epoch if member.epoch is not None else -1)
    if claim.generation_id > newest:
        return f"claims epoch {claim.generation_id}, newer than {newest}"
    for thread, tps in claim.assignment.items():
        for tp in tps:
            if held.get(tp) != thread:
                return f"claims {tp[0]}-{tp[1]} on {thread}, which it does not hold"
            if member.acquired.get(tp, 0) > claim.generation_id:
                return f"claims {tp[0]}-{tp[1]} in epoch {claim.generation_id}, it got it in {member.acquired[tp]}"
    return None
