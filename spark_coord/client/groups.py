"""Consumer groups over Kafka's own group APIs, against any Kafka-protocol cluster.

``GroupClient`` finds a group's coordinator (FindCoordinator), commits offsets
from outside the group's membership (OffsetCommit with generation -1 and an
empty member id, as admin tools and "simple" consumers that assign partitions
themselves do), reads committed offsets (OffsetFetch, several groups per request
where the coordinator serves v8+), and lists, describes and deletes groups.  It
mirrors offsets into a data cluster's own offset store, so that cluster's tools
see a group's lag, and drives tests.

Versions are negotiated per connection with ApiVersions (``BrokerConnection``);
request bodies are built for whichever version that gives.  A coordinator that
moved or is not ready yet (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, or a broken connection) is looked up again after a
backoff that doubles from ``retry_backoff_ms`` up to ``retry_backoff_max_ms`` (the
Java client's ``retry.backoff.ms`` / ``retry.backoff.max.ms``), until the call's
``timeout`` runs out.  Other errors raise ``KafkaError`` with Kafka's code, or are
returned as data where a call reports one result per group.

Example::

    with ClusterClient("broker1:9092") as cluster:
        groups = GroupClient(cluster)
        groups.commit_offsets("mirror", {("clicks", 0): 1200, ("clicks", 1): 1187})
        groups.fetch_offsets("mirror")   # {("clicks", 0): CommittedOffset(1200, ...), ...}
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, TypeVar

from spark_coord.client.connection import BrokerConnection, BrokerConnectionError
from spark_coord.client.metadata import ClusterClient
from spark_coord.common import TopicPartition
from spark_coord.errors import ErrorCode, KafkaError
from spark_coord.wire import consumer_protocol
from spark_coord.wire.find_coordinator import BATCHED_VERSION, KEY_TYPE_GROUP
from spark_coord.wire.join_group import CONSUMER_PROTOCOL_TYPE
from spark_coord.wire.offset_commit import STANDALONE_GENERATION
from spark_coord.wire.offset_fetch import MULTI_GROUP_VERSION, NO_OFFSET
from spark_coord.wire.registry import ApiKey

log = logging.getLogger(__name__)

__all__ = ["GroupClient", "Coordinator", "CommittedOffset", "GroupListing", "GroupMember", "GroupDescription",
           "ShareMember", "ShareGroupDescription", "ShareOffset", "COORDINATOR_ERRORS"]

T = TypeVar("T")

#: Errors that mean "ask again where the group's coordinator is".
COORDINATOR_ERRORS = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})


@dataclass(frozen=True)
class Coordinator:
    """The broker that coordinates a group."""
    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class CommittedOffset:
    """A group's committed position in one partition: the next offset to consume."""
    offset: int
    metadata: str | None = None
    leader_epoch: int = -1


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str | None = None      # ListGroups v4+
    group_type: str | None = None  # ListGroups v5+


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes = field(repr=False)
    assignment: bytes = field(repr=False)

    def assigned_partitions(self) -> dict[str, list[int]]:
        """The member's assignment read as the consumer protocol (ConsumerProtocolError if it is not)."""
        return consumer_protocol.partitions_by_topic(
            consumer_protocol.decode_assignment(self.assignment)["assigned_partitions"])


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    error: int
    state: str
    protocol_type: str
    protocol: str
    members: list[GroupMember]

    @property
    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE


@dataclass(frozen=True)
class ShareMember:
    """A member of a share group (KIP-932), as ShareGroupDescribe tells it."""
    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None
    epoch: int
    subscribed: list[str]
    #: ``{topic: [partitions]}`` (a partition may be assigned to several members of a share group).
    assignment: dict[str, list[int]]


@dataclass(frozen=True)
class ShareGroupDescription:
    group_id: str
    error: int
    state: str
    epoch: int
    assignment_epoch: int
    assignor: str
    members: list[ShareMember]
    error_message: str | None = None


@dataclass(frozen=True)
class ShareOffset:
    """Where a share group stands on a partition (DescribeShareGroupOffsets): its start offset (the
    first record it is not done with; -1: no state yet) and, from v1 (Kafka 4.2), its lag (-1: unknown)."""
    start_offset: int
    leader_epoch: int = -1
    lag: int = -1


class _Retry(Exception):
    """A coordinator error or a broken connection: look the coordinator up again and retry."""

    def __init__(self, group: str | None, code: int, text: str):
        super().__init__(text)
        self.group = group
        self.code = code


class GroupClient:
    """Group operations against the cluster behind ``cluster``; safe to share between threads.

    Parameters
    ----------
    cluster : ClusterClient
    timeout : seconds a call keeps retrying coordinator errors before it raises
    retry_backoff_ms, retry_backoff_max_ms : the first and the largest pause between retries
    """

    def __init__(self, cluster: ClusterClient, timeout: float = 30.0, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 1000):
        if retry_backoff_ms <= 0 or retry_backoff_max_ms < retry_backoff_ms:
            raise ValueError("need 0 < retry_backoff_ms <= retry_backoff_max_ms")
        self.cluster = cluster
        self.timeout = timeout
        self.retry_backoff = retry_backoff_ms / 1000
        self.retry_backoff_max = retry_backoff_max_ms / 1000
        self._lock = threading.Lock()
        self._coordinators: dict[str, Coordinator] = {}
        self._conns: dict[tuple[str, int], BrokerConnection] = {}  # coordinators outside the cluster metadata

    def close(self) -> None:
        """Close the connections this client opened itself (the cluster's stay open)."""
        with self._lock:
            for conn in self._conns.values():
                conn.close()
            self._conns.clear()

    def __enter__(self) -> "GroupClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- retrying
    def _retrying(self, what: str, attempt: Callable[[], T]) -> T:
        """Run ``attempt`` until it stops raising _Retry, with bounded backoff, or raise KafkaError."""
        deadline = time.monotonic() + self.timeout
        pause = self.retry_backoff
        while True:
            try:
                return attempt()
            except _Retry as e:
                if e.group is not None:
                    self.forget(e.group)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KafkaError(e.code, f"{what}: {e} (gave up after {self.timeout:g} s)") from None
                log.info("%s: %s; retrying in %.2f s", what, e, min(pause, left))
                time.sleep(min(pause, left))
                pause = min(pause * 2, self.retry_backoff_max)

    @staticmethod
    def _check(group: str | None, code: int, what: str) -> None:
        if code in COORDINATOR_ERRORS:
            raise _Retry(group, code, f"{what}: {ErrorCode.name_of(code)}")

    def _request(self, conn: BrokerConnection, group: str | None, api_key: int, body: dict) -> dict:
        try:
            return conn.request(api_key, body)
        except BrokerConnectionError as e:
            raise _Retry(group, ErrorCode.NETWORK_EXCEPTION, str(e)) from e

    # ------------------------------------------------------------- coordinators
    def forget(self, group: str) -> None:
        """Drop the cached coordinator of ``group`` (the next call looks it up again)."""
        with self._lock:
            self._coordinators.pop(group, None)

    def coordinator(self, group: str, refresh: bool = False) -> Coordinator:
        """The broker coordinating ``group`` (cached; FindCoordinator when unknown or ``refresh``)."""
        if refresh:
            self.forget(group)
        return self.coordinators([group])[group]

    def coordinators(self, groups: Iterable[str]) -> dict[str, Coordinator]:
        """The coordinator of each group, looked up in one FindCoordinator v4+ request where served."""
        groups = list(dict.fromkeys(groups))
        with self._lock:
            known = {g: self._coordinators[g] for g in groups if g in self._coordinators}
        missing = [g for g in groups if g not in known]
        if missing:
            known.update(self._retrying(f"FindCoordinator {missing}", lambda: self._find(missing)))
        return known

    def _find(self, groups: list[str]) -> dict[str, Coordinator]:
        try:
            conn = self.cluster.any_connection()
        except BrokerConnectionError as e:
            raise _Retry(None, ErrorCode.NETWORK_EXCEPTION, str(e)) from e
        version = conn.version_for(ApiKey.FIND_COORDINATOR)
        found: dict[str, Coordinator] = {}
        if version is not None and version >= BATCHED_VERSION:
            resp = self._request(conn, None, ApiKey.FIND_COORDINATOR,
                                 {"key_type": KEY_TYPE_GROUP, "coordinator_keys": groups})
            answers = [(c["key"], c) for c in resp["coordinators"]]
        else:
            answers = [(g, self._request(conn, None, ApiKey.FIND_COORDINATOR, {"key": g, "key_type": KEY_TYPE_GROUP}))
                       for g in groups]
        for group, a in answers:
            if group not in groups:
                continue
            self._check(None, a["error_code"], f"FindCoordinator {group!r}")
            if a["error_code"]:
                raise KafkaError(a["error_code"], a.get("error_message") or f"FindCoordinator {group!r}")
            found[group] = Coordinator(a["node_id"], a["host"], a["port"])
        lost = [g for g in groups if g not in found]
        if lost:
            raise _Retry(None, ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no coordinator in the answer for {lost}")
        with self._lock:
            self._coordinators.update(found)
        return found

    def _connection(self, coordinator: Coordinator, group: str | None) -> BrokerConnection:
        """A connection to ``coordinator``: the cluster's own when the metadata names it, else one of ours."""
        try:
            if self.cluster.brokers.get(coordinator.node_id) == (coordinator.host, coordinator.port):
                return self.cluster.connection(coordinator.node_id)
            address = (coordinator.host, coordinator.port)
            with self._lock:
                conn = self._conns.get(address)
                if conn is None or conn.closed:
                    conn = self._conns[address] = BrokerConnection(
                        coordinator.host, coordinator.port, client_id=self.cluster.client_id,
                        timeout=self.cluster.timeout, security=self.cluster.security)
                return conn
        except BrokerConnectionError as e:
            raise _Retry(group, ErrorCode.NETWORK_EXCEPTION, str(e)) from e

    def _group_connection(self, group: str) -> BrokerConnection:
        return self._connection(self.coordinator(group), group)

    # ------------------------------------------------------------------ offsets
    def commit_offsets(self, group: str, offsets: Mapping[TopicPartition, int | CommittedOffset],
                       generation: int = STANDALONE_GENERATION, member_id: str = "") -> None:
        """Commit ``{(topic, partition): offset}`` for ``group`` (offsets: the next to consume).

        By default a standalone commit (generation -1, empty member id), which a
        coordinator accepts for a group that has no members of the group protocol.
        Raises KafkaError naming every partition the coordinator refused.
        """
        topics: dict[str, list[dict]] = {}
        for (topic, partition), value in sorted(offsets.items()):
            c = value if isinstance(value, CommittedOffset) else CommittedOffset(int(value))
            topics.setdefault(topic, []).append({
                "partition_index": partition, "committed_offset": c.offset, "committed_leader_epoch": c.leader_epoch,
                "commit_timestamp": -1, "committed_metadata": c.metadata})
        body = {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
                "group_instance_id": None, "retention_time_ms": -1,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

        def attempt() -> None:
            resp = self._request(self._group_connection(group), group, ApiKey.OFFSET_COMMIT, body)
            failed = {}
            for t in resp["topics"]:
                for p in t["partitions"]:
                    self._check(group, p["error_code"], f"OffsetCommit {group!r}")
                    if p["error_code"]:
                        failed[(t["name"], p["partition_index"])] = p["error_code"]
            if failed:
                first = next(iter(failed.values()))
                text = ", ".join(f"{t}-{p}: {ErrorCode.name_of(c)}" for (t, p), c in sorted(failed.items()))
                if set(failed.values()) == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION} and self._exist(failed):
                    # the topic is new and the coordinator has not seen it yet: retriable, as Kafka's
                    # commitSync takes it; a partition no broker knows is refused at once
                    raise _Retry(None, first, f"OffsetCommit {group!r}: {text}, which the cluster's metadata has")
                raise KafkaError(first, f"OffsetCommit {group!r} refused {text}")
        self._retrying(f"OffsetCommit {group!r}", attempt)

    def _exist(self, partitions: Iterable[TopicPartition]) -> bool:
        """Whether the cluster's metadata, asked now, has every one of ``partitions``."""
        partitions = list(partitions)
        try:
            known = self.cluster.refresh(sorted({t for t, _ in partitions}))
        except (KafkaError, BrokerConnectionError):
            return False
        return all(t in known and known[t].error == 0 and p in known[t].partitions for t, p in partitions)

    def fetch_offsets(self, group: str, partitions: Iterable[TopicPartition] | None = None,
                      require_stable: bool = False, member_id: str | None = None,
                      member_epoch: int = -1) -> dict[TopicPartition, CommittedOffset]:
        """``group``'s committed offsets: of ``partitions``, or of every partition it has committed (None).

        Partitions with nothing committed are left out; an unknown group has none.  A KIP-848
        member sends its ``member_id`` and ``member_epoch`` (OffsetFetch v9; STALE_MEMBER_EPOCH
        raises KafkaError).
        """
        member = {group: (member_id, member_epoch)} if member_id is not None else {}
        return self.fetch_offsets_many({group: partitions}, require_stable, member)[group]

    def fetch_offsets_many(self, groups: Mapping[str, Iterable[TopicPartition] | None],
                           require_stable: bool = False,
                           members: Mapping[str, tuple[str, int]] | None = None
                           ) -> dict[str, dict[TopicPartition, CommittedOffset]]:
        """Committed offsets of several groups: one OffsetFetch v8+ per coordinator where served;
        ``members``: ``{group: (member id, member epoch)}`` of the KIP-848 members asking (v9)."""
        members = members or {}
        wanted = {g: None if ps is None else sorted(set(ps)) for g, ps in groups.items()}
        out: dict[str, dict[TopicPartition, CommittedOffset]] = {}

        def attempt() -> None:
            by_coordinator: dict[Coordinator, list[str]] = {}
            for g, c in self.coordinators([g for g in wanted if g not in out]).items():
                by_coordinator.setdefault(c, []).append(g)
            for coordinator, names in by_coordinator.items():
                conn = self._connection(coordinator, names[0])
                version = conn.version_for(ApiKey.OFFSET_FETCH)
                if version is not None and version >= MULTI_GROUP_VERSION:
                    body = {"groups": [{"group_id": g, "topics": _fetch_topics(wanted[g]),
                                        "member_id": members.get(g, (None, -1))[0],
                                        "member_epoch": members.get(g, (None, -1))[1]} for g in names],
                            "require_stable": require_stable}
                    resp = self._request(conn, names[0], ApiKey.OFFSET_FETCH, body)
                    answers = [(a["group_id"], a["error_code"], a["topics"]) for a in resp["groups"]]
                else:
                    answers = []
                    for g in names:
                        if wanted[g] is None and version is not None and version < 2:
                            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                                             f"OffsetFetch v{version} cannot list every partition of {g!r}")
                        resp = self._request(conn, g, ApiKey.OFFSET_FETCH, {
                            "group_id": g, "topics": _fetch_topics(wanted[g]), "require_stable": require_stable})
                        answers.append((g, resp["error_code"], resp["topics"]))
                for g, code, topics in answers:
                    if g in wanted and g not in out:
                        out[g] = _read_offsets(g, code, topics, self._check)
        self._retrying(f"OffsetFetch {sorted(wanted)}", attempt)
        return out

    # ------------------------------------------------------------------- groups
    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[GroupListing]:
        """Every group of the cluster: ListGroups to each broker (each lists the groups it coordinates);
        ``types`` (``classic``, ``consumer``, ``share``) filters where the brokers serve ListGroups v5."""
        types = list(types)
        self.cluster.refresh([])
        listed: dict[str, GroupListing] = {}
        for node_id in sorted(self.cluster.brokers):
            def attempt(node_id: int = node_id) -> list[dict]:
                try:
                    conn = self.cluster.connection(node_id)
                except BrokerConnectionError as e:
                    raise _Retry(None, ErrorCode.NETWORK_EXCEPTION, str(e)) from e
                resp = self._request(conn, None, ApiKey.LIST_GROUPS,
                                     {"states_filter": list(states), "types_filter": types})
                self._check(None, resp["error_code"], f"ListGroups at broker {node_id}")
                if resp["error_code"]:
                    raise KafkaError(resp["error_code"], f"ListGroups at broker {node_id}")
                return resp["groups"]
            for g in self._retrying(f"ListGroups at broker {node_id}", attempt):
                listed[g["group_id"]] = GroupListing(g["group_id"], g["protocol_type"], g["group_state"] or None,
                                                     g["group_type"] or None)
        return [listed[g] for g in sorted(listed)]

    def describe_groups(self, groups: Iterable[str]) -> dict[str, GroupDescription]:
        """State, protocol and members of each group, asked of its coordinator."""
        def parse(g: dict) -> GroupDescription:
            members = [GroupMember(m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"],
                                   m["member_metadata"], m["member_assignment"]) for m in g["members"]]
            return GroupDescription(g["group_id"], g["error_code"], g["group_state"], g["protocol_type"],
                                    g["protocol_data"], members)
        return {name: parse(g) for name, g in self._per_coordinator(
            "DescribeGroups", groups, ApiKey.DESCRIBE_GROUPS,
            lambda names: {"groups": names, "include_authorized_operations": False},
            lambda resp: [(g["group_id"], g["error_code"], g) for g in resp["groups"]]).items()}

    def delete_groups(self, groups: Iterable[str]) -> dict[str, int]:
        """Delete each group (with its committed offsets); returns ``{group: error code}``
        (NONE, NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND...)."""
        results = self._per_coordinator(
            "DeleteGroups", groups, ApiKey.DELETE_GROUPS, lambda names: {"groups_names": names},
            lambda resp: [(r["group_id"], r["error_code"], r["error_code"]) for r in resp["results"]])
        for g in results:
            self.forget(g)
        return results

    # ------------------------------------------------------------- share groups (KIP-932)
    def list_share_groups(self) -> list[GroupListing]:
        """The share groups of the cluster (ListGroups, type ``share``)."""
        return [g for g in self.list_groups(types=["share"])
                if g.group_type == "share" or (g.group_type is None and g.protocol_type == "share")]

    def describe_share_groups(self, groups: Iterable[str]) -> dict[str, ShareGroupDescription]:
        """State, epochs and members (with their assignments) of each share group (ShareGroupDescribe);
        a group id that is not a share group has ``error`` GROUP_ID_NOT_FOUND."""
        def parse(g: dict) -> ShareGroupDescription:
            members = [ShareMember(m["member_id"], m["client_id"], m["client_host"], m.get("rack_id"),
                                   m["member_epoch"], list(m.get("subscribed_topic_names") or []),
                                   {tp["topic_name"]: sorted(tp["partitions"])
                                    for tp in (m.get("assignment") or {}).get("topic_partitions") or []})
                       for m in g.get("members") or []]
            return ShareGroupDescription(g["group_id"], g["error_code"], g.get("group_state") or "",
                                         g.get("group_epoch", -1), g.get("assignment_epoch", -1),
                                         g.get("assignor_name") or "", members, g.get("error_message"))
        return {name: parse(g) for name, g in self._per_coordinator(
            "ShareGroupDescribe", groups, ApiKey.SHARE_GROUP_DESCRIBE,
            lambda names: {"group_ids": names, "include_authorized_operations": False},
            lambda resp: [(g["group_id"], g["error_code"], g) for g in resp["groups"]]).items()}

    def share_group_offsets(self, group: str, partitions: Iterable[TopicPartition] | None = None
                            ) -> dict[TopicPartition, ShareOffset]:
        """Where ``group`` stands on ``partitions`` (None: every partition it has state for), by
        DescribeShareGroupOffsets.  Raises KafkaError for a group or partition error."""
        body = {"groups": [{"group_id": group, "topics": None if partitions is None else [
            {"topic_name": t, "partitions": ps} for t, ps in _by_topic(partitions).items()]}]}

        def attempt() -> dict[TopicPartition, ShareOffset]:
            resp = self._request(self._group_connection(group), group, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, body)
            answer = next((g for g in resp["groups"] if g["group_id"] == group), None)
            if answer is None:
                raise _Retry(group, ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no answer for {group!r}")
            self._check(group, answer["error_code"], f"DescribeShareGroupOffsets {group!r}")
            if answer["error_code"]:
                raise KafkaError(answer["error_code"], answer.get("error_message")
                                 or f"DescribeShareGroupOffsets {group!r}")
            out: dict[TopicPartition, ShareOffset] = {}
            for t in answer["topics"]:
                for p in t["partitions"]:
                    if p["error_code"]:
                        raise KafkaError(p["error_code"], p.get("error_message")
                                         or f"DescribeShareGroupOffsets {group!r} {t['topic_name']}-"
                                            f"{p['partition_index']}")
                    out[(t["topic_name"], p["partition_index"])] = ShareOffset(
                        p["start_offset"], p["leader_epoch"], p.get("lag", -1))
            return out
        return self._retrying(f"DescribeShareGroupOffsets {group!r}", attempt)

    def alter_share_group_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Set ``group``'s start offset on each partition (AlterShareGroupOffsets); the group must have
        no member.  Raises KafkaError (NON_EMPTY_GROUP, ...) naming every partition refused."""
        body = {"group_id": group, "topics": [
            {"topic_name": t, "partitions": [{"partition_index": p, "start_offset": int(offsets[(t, p)])} for p in ps]}
            for t, ps in _by_topic(offsets).items()]}

        def attempt() -> None:
            resp = self._request(self._group_connection(group), group, ApiKey.ALTER_SHARE_GROUP_OFFSETS, body)
            self._check(group, resp["error_code"], f"AlterShareGroupOffsets {group!r}")
            if resp["error_code"]:
                raise KafkaError(resp["error_code"], resp.get("error_message") or f"AlterShareGroupOffsets {group!r}")
            failed = {(t["topic_name"], p["partition_index"]): p["error_code"]
                      for t in resp["responses"] for p in t["partitions"] if p["error_code"]}
            if failed:
                first = next(iter(failed.values()))
                text = ", ".join(f"{t}-{p}: {ErrorCode.name_of(c)}" for (t, p), c in sorted(failed.items()))
                raise KafkaError(first, f"AlterShareGroupOffsets {group!r} refused {text}")
        self._retrying(f"AlterShareGroupOffsets {group!r}", attempt)

    def delete_share_group_offsets(self, group: str, topics: Iterable[str]) -> dict[str, int]:
        """Forget ``group``'s state of whole topics (DeleteShareGroupOffsets); the group must have no
        member.  Returns ``{topic: error code}``; a group-level error raises KafkaError."""
        body = {"group_id": group, "topics": [{"topic_name": t} for t in dict.fromkeys(topics)]}

        def attempt() -> dict[str, int]:
            resp = self._request(self._group_connection(group), group, ApiKey.DELETE_SHARE_GROUP_OFFSETS, body)
            self._check(group, resp["error_code"], f"DeleteShareGroupOffsets {group!r}")
            if resp["error_code"]:
                raise KafkaError(resp["error_code"], resp.get("error_message") or f"DeleteShareGroupOffsets {group!r}")
            return {t["topic_name"]: t["error_code"] for t in resp["responses"]}
        return self._retrying(f"DeleteShareGroupOffsets {group!r}", attempt)

    def _per_coordinator(self, what: str, groups: Iterable[str], api_key: int,
                         make_body: Callable[[list[str]], dict],
                         answers: Callable[[dict], list[tuple[str, int, T]]]) -> dict[str, T]:
        """Send ``make_body(groups)`` to each coordinator for its groups; retry groups whose
        answer is a coordinator error; return the per-group results."""
        wanted = list(dict.fromkeys(groups))
        out: dict[str, T] = {}

        def attempt() -> None:
            by_coordinator: dict[Coordinator, list[str]] = {}
            for g, c in self.coordinators([g for g in wanted if g not in out]).items():
                by_coordinator.setdefault(c, []).append(g)
            retry = None
            for coordinator, names in by_coordinator.items():
                resp = self._request(self._connection(coordinator, names[0]), names[0], api_key, make_body(names))
                for name, code, result in answers(resp):
                    if name not in names:
                        continue
                    if code in COORDINATOR_ERRORS:
                        self.forget(name)
                        retry = _Retry(name, code, f"{what} {name!r}: {ErrorCode.name_of(code)}")
                    else:
                        out[name] = result
            if retry is not None:
                raise retry
            lost = [g for g in wanted if g not in out]
            if lost:
                raise _Retry(lost[0], ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{what}: no answer for {lost}")
        self._retrying(f"{what} {wanted}", attempt)
        return {g: out[g] for g in wanted}


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(set(partitions)):
        topics.setdefault(topic, []).append(partition)
    return topics


def _fetch_topics(partitions: list[TopicPartition] | None) -> list[dict] | None:
    if partitions is None:
        return None
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    return [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]


def _read_offsets(group: str, code: int, topics: list[dict], check) -> dict[TopicPartition, CommittedOffset]:
    """One group's OffsetFetch answer as ``{(topic, partition): CommittedOffset}``."""
    check(group, code, f"OffsetFetch {group!r}")
    if code == ErrorCode.GROUP_ID_NOT_FOUND:
        return {}
    if code:
        raise KafkaError(code, f"OffsetFetch {group!r}")
    out: dict[TopicPartition, CommittedOffset] = {}
    for t in topics:
        for p in t["partitions"]:
            pcode = p["error_code"]
            check(group, pcode, f"OffsetFetch {group!r}")
            if pcode == ErrorCode.UNSTABLE_OFFSET_COMMIT:
                raise _Retry(None, pcode, f"OffsetFetch {group!r}: {t['name']}-{p['partition_index']} has a "
                                          "pending transactional commit")
            if pcode:
                raise KafkaError(pcode, f"OffsetFetch {group!r} {t['name']}-{p['partition_index']}")
            if p["committed_offset"] != NO_OFFSET:
                out[(t["name"], p["partition_index"])] = CommittedOffset(
                    p["committed_offset"], p["metadata"], p["committed_leader_epoch"])
    return out


def describe_share_group(bootstrap: str, group: str, **client_settings) -> ShareGroupDescription:
    """One share group as its coordinator describes it (ShareGroupDescribe), on a short-lived client."""
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap, **client_settings) as cc:
        with GroupClient(cc) as gc:
            return gc.describe_share_groups([group])[group]
