"""RegisterConsumer checks (seeds 003 section 7) and claims (RegisterConsumer v1).

``parse_registration`` turns a request body into a ``Registration`` or a
``Refusal`` (error code and message; the connection stays open and the member
closes it, as the seeds want).  It checks what the seeds list -- the session
timeout against ``coordinator.min.session.timeout.ms`` -- and everything a
hostile body could get wrong.  Whether the consumer id is unique in its group is
the coordinator's check: it needs the group.

A ``Claim`` is what a member that lost its coordinator says it still holds: a
generation and the partitions of each of its threads, with its positions.
``claim_matches`` compares it with what the coordinator knows the member holds
(its assignment, or the owners restored from ZooKeeper after a failover).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from spark_coord.common import LARGEST, OFFSET_RESETS, TopicPartition
from spark_coord.coordinator.subscription import TopicCount
from spark_coord.errors import ErrorCode
from spark_coord.wire.coordinator import NO_GENERATION
from spark_coord.zk import paths


Assignment = dict[str, list[TopicPartition]]


def is_int(v: Any) -> bool:
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
        group_id = paths.validate_group(body.get("group_id"))
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


def _normal(assignment: Assignment) -> dict[str, list[TopicPartition]]:
    return {thread: sorted(tps) for thread, tps in assignment.items() if tps}


def claim_matches(claim: Claim, generation_id: int, holds: Assignment | None) -> str | None:
    """None if ``claim`` is exactly what the coordinator knows the member ``holds`` in the group's
    current ``generation_id``; else the reason it is not."""
    if claim.generation_id != generation_id:
        return f"claims generation {claim.generation_id}, the group is at {generation_id}"
    if holds is None:
        return "holds no assignment in this generation"
    if _normal(claim.assignment) != _normal(holds):
        return (f"claims {sorted(claim.partitions())}, holds "
                f"{sorted(tp for tps in holds.values() for tp in tps)}")
    return None
