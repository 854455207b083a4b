"""The thin consumer in a share group (KIP-932): ``ShareConsumer``, as confluent-kafka's is.

A share group hands out records, not partitions: any number of members read the same partitions,
each record goes to one member at a time under an acquisition lock, and the member acknowledges
it.  This consumer speaks only Kafka's own share APIs, so it reads a share group on Kafka 4.2 as
well as on our brokers:

* a heartbeat thread sends ShareGroupHeartbeat to the group's coordinator every
  ``heartbeat_interval`` the coordinator asks for, and keeps the assignment it answers;
* ``poll()`` sends one ShareFetch to each leader of an assigned partition, in that leader's share
  session (epoch 0 opens it, each request after carries the next epoch), with the
  acknowledgements that wait for that leader piggybacked; it returns the records acquired, each
  with its ``delivery_count``;
* ``acknowledgement_mode="implicit"`` (the default): each ``poll()`` accepts the records of the
  one before; ``"explicit"``: the application calls ``acknowledge(record, "accept" | "release" |
  "reject")`` for every record before the next ``poll()``, and ``commit()`` sends them (a
  ShareAcknowledge per leader) and returns each partition's answer;
* pipelined (implicit mode, ``prefetch=True``, the default): a ``poll()`` that returns records first
  sends the next round of ShareFetches (as soon as the answers of the round before are in, before
  their records are decoded), so they are in flight -- acquiring the next records and carrying the
  acknowledgements that waited -- while the application processes these; the next ``poll()`` takes
  their answers.  A poll's records are accepted by the next ``poll()``, so they ride
  on the ShareFetch that poll sends, one round later than without prefetch, as Kafka's clients
  fetch ahead.  Records fetched ahead and never returned by ``poll()`` are released (RELEASE) by
  ``close()``: they come back to the group (counted: their acquisition was a delivery);
* ``close()`` sends what is pending, closes every share session (what the member still holds goes
  back at once) and leaves the group.

Not thread-safe (one thread calls poll/acknowledge/commit/close), as confluent-kafka's is not.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
import uuid
from bisect import bisect_left, bisect_right
from itertools import repeat
from operator import itemgetter
from typing import Any, Iterable, NamedTuple

import pyarrow as pa

from spark_coord.client.groups import GroupClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.errors import ErrorCode, KafkaError
from spark_coord.records.arrow import decode_to_arrow
from spark_coord.wire.registry import ApiKey

log = logging.getLogger(__name__)

__all__ = ["ShareConsumer", "ShareRecord", "ACK_TYPES", "acquired_records"]

#: The wire's acknowledge types by name.
ACK_TYPES = {"accept": 1, "release": 2, "reject": 3}
OPEN, FINAL = 0, -1


class ShareRecord(NamedTuple):
    """A record a share consumer was handed; ``delivery_count`` counts this delivery."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    delivery_count: int


class _Sent(NamedTuple):
    """A ShareFetch sent ahead (``ShareConsumer.prefetch``) whose answer was not read yet."""

    leader: int
    epoch: int
    fetching: set[tuple[str, int]]
    acks: dict[tuple[str, int], list[dict]]
    pending: Any  # client.connection.PendingResponse


class ShareConsumer:
    """A member of share group ``group`` reading ``topics``."""

    def __init__(self, bootstrap: str | list[str], group: str, topics: Iterable[str], *,
                 acknowledgement_mode: str = "implicit", max_poll_records: int = 500, max_wait_ms: int = 500,
                 client_id: str = "spark-coord-share", timeout: float = 30.0, prefetch: bool = True):
        if acknowledgement_mode not in ("implicit", "explicit"):
            raise ValueError(f"acknowledgement_mode must be implicit or explicit, not {acknowledgement_mode!r}")
        self.group = group
        self.topics = sorted(set(topics))
        if not self.topics:
            raise ValueError("a share consumer needs at least one topic")
        self.explicit = acknowledgement_mode == "explicit"
        #: Keep the next round of ShareFetches in flight between polls (implicit mode only: explicit mode's
        #: acknowledgements and commits go in the sessions between polls).
        self.prefetch = prefetch and not self.explicit
        self.max_poll_records = max_poll_records
        self.max_wait_ms = max_wait_ms
        self.member_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.cluster = ClusterClient(bootstrap, client_id=client_id, timeout=timeout)
        self._bootstrap, self._client_id, self._timeout = bootstrap, client_id, timeout
        #: ``{(topic, partition)}`` the coordinator assigned (set by the heartbeat thread).
        self.assignment: set[tuple[str, int]] = set()
        self.epoch = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        #: Set once the member joined its share group (its first heartbeat answered).
        self.joined = threading.Event()
        self._interval = 1.0
        #: How long the broker locks the records it hands this member (from its ShareFetch answers).
        self.lock_timeout_ms = 30000
        #: Per leader broker: the epoch its share session's next request carries, and the
        #: partitions that session fetches.
        self._sessions: dict[int, tuple[int, set[tuple[str, int]]]] = {}
        #: Acknowledgements waiting to go: ``{(topic, partition): {offset: type}}``.
        self._pending: dict[tuple[str, int], dict[int, int]] = {}
        #: Acknowledgements of whole offset ranges waiting to go (``acknowledge_range``), as batches.
        self._pending_ranges: dict[tuple[str, int], list[dict]] = {}
        #: The last poll's records not acknowledged yet (explicit mode must acknowledge them all): the lists
        #: the poll handed out (``_hold``), moved into ``_unacked`` (by key) the first time ``acknowledge()``
        #: is called after that poll, so a poll whose records are all accepted implicitly costs no step per
        #: record here; ``_take_unacked`` gives both, in the order the poll returned them.
        self._held: list[list[ShareRecord]] = []
        self._unacked: dict[tuple[str, int, int], ShareRecord] = {}
        #: The round of ShareFetches sent ahead (``prefetch``), not answered yet: one per leader.
        self._ahead: list[_Sent] = []
        #: Records fetched ahead that no ``poll()`` returned yet.
        self._ready: list[ShareRecord] = []
        #: ShareFetches sent, with or without waiting for their answer (tests, benchmarks).
        self.fetches_sent = 0
        self._heartbeat = threading.Thread(target=self._heartbeats, name=f"share-heartbeat-{group}", daemon=True)
        self._heartbeat.start()

    # ------------------------------------------------------------ membership

    def _heartbeats(self) -> None:
        cc = ClusterClient(self._bootstrap, client_id=self._client_id, timeout=self._timeout)
        gc = GroupClient(cc)
        try:
            while not self._stop.is_set():
                try:
                    self._heartbeat_once(cc, gc)
                except Exception as e:  # noqa: BLE001 -- the member keeps trying until closed
                    log.info("share group %s: heartbeat failed (%r); trying again", self.group, e)
                    gc.forget(self.group)
                self._stop.wait(self._interval)
            try:
                self._heartbeat_once(cc, gc, leave=True)
            except (KafkaError, OSError, ConnectionError) as e:
                log.info("share group %s: could not leave (%s); the coordinator times the member out", self.group, e)
        finally:
            gc.close()
            cc.close()

    def _heartbeat_once(self, cc: ClusterClient, gc: GroupClient, leave: bool = False) -> None:
        coordinator = gc.coordinator(self.group)
        conn = cc.connection(coordinator.node_id)
        epoch = -1 if leave else self.epoch
        answer = conn.request(ApiKey.SHARE_GROUP_HEARTBEAT, {
            "group_id": self.group, "member_id": self.member_id, "member_epoch": epoch, "rack_id": None,
            "subscribed_topic_names": self.topics if epoch == 0 else None})
        code = answer["error_code"]
        if leave:
            return
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH):
            log.info("share group %s: %s; joining again", self.group, ErrorCode.name_of(code))
            self.epoch = 0
            return
        if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
            gc.forget(self.group)
            return
        if code:
            raise KafkaError(code, f"ShareGroupHeartbeat: {answer.get('error_message') or ''}")
        self.epoch = answer["member_epoch"]
        self._interval = max(answer["heartbeat_interval_ms"], 100) / 1000
        if answer["assignment"] is not None:
            names = {}
            for t in self.topics:
                info = cc.topic(t, refresh=True)
                names[info.topic_id] = t
            assigned = {(names[e["topic_id"]], p) for e in answer["assignment"]["topic_partitions"]
                        if e["topic_id"] in names for p in e["partitions"]}
            with self._lock:
                self.assignment = assigned
            log.info("share group %s: epoch %d, assigned %s", self.group, self.epoch, sorted(assigned))
        self.joined.set()

    # ------------------------------------------------------------ records

    def poll(self, timeout: float = 1.0) -> list[ShareRecord]:
        """The records acquired for this member (at most about ``max_poll_records`` per leader); []
        when none came within ``timeout`` seconds.  Implicit mode accepts the last poll's records
        first.  With ``prefetch`` the answers of the round sent ahead by the last poll come first (a
        poll may wait up to ``max_wait_ms`` for them), and a poll that returns records sends the next
        round ahead before it returns (when the answers acquired records: before they are decoded)."""
        if self._stop.is_set():
            raise RuntimeError("the share consumer is closed")
        if self._unacked or self._held:
            if self.explicit:
                raise RuntimeError(f"{len(self._unacked) + sum(map(len, self._held))} records of the last poll "
                                   "are not acknowledged (explicit acknowledgement mode)")
            self._queue_runs(self._take_unacked(), "accept")
        deadline = time.monotonic() + timeout
        self.joined.wait(max(deadline - time.monotonic(), 0))
        self._drain_ahead(send_next=self.prefetch)
        while True:
            if self._ready:
                out, self._ready = self._ready, []
                self._hold(out)
            else:
                with self._lock:
                    idle = not self.assignment and not self._pending and not self._pending_ranges
                if idle:  # nothing assigned (yet): wait for the heartbeat thread, do not spin
                    self._stop.wait(min(0.05, max(deadline - time.monotonic(), 0)))
                    out = []
                else:
                    out = self.fetch_round(max(0, min(self.max_wait_ms, int((deadline - time.monotonic()) * 1000))))
            if out and self.prefetch and not self._ahead:  # (sent already when the last round's answers came)
                self._send_ahead(self.max_wait_ms)
            if out or time.monotonic() >= deadline:
                return out

    def assigned_now(self) -> set[tuple[str, int]]:
        """The partitions a fetch round asks for; the others leave the share session."""
        with self._lock:
            return set(self.assignment)

    def _by_leader(self, assigned: set[tuple[str, int]]) -> dict[int, set[tuple[str, int]]]:
        """What each leader is asked for: its partitions assigned or with acknowledgements waiting."""
        by_leader: dict[int, set[tuple[str, int]]] = {}
        for t, p in assigned | set(self._pending) | set(self._pending_ranges):
            try:
                by_leader.setdefault(self.cluster.leader(t, p), set()).add((t, p))
            except KafkaError:
                continue
        return by_leader

    def fetch_round(self, wait_ms: int) -> list[ShareRecord]:
        """One ShareFetch to each leader of what it is assigned or has acknowledgements for (each
        waits up to ``wait_ms`` until one has brought records): the records acquired."""
        self._drain_ahead()
        assigned = self.assigned_now()
        out: list[ShareRecord] = []
        for leader, parts in sorted(self._by_leader(assigned).items()):
            out.extend(self._share_fetch(leader, parts, assigned, wait_ms if not out else 0))
        return out

    def _fetch_body(self, leader: int, parts: set[tuple[str, int]], assigned: set[tuple[str, int]],
                    wait_ms: int) -> tuple[dict, int, set[tuple[str, int]], dict[tuple[str, int], list[dict]]]:
        """A ShareFetch for ``leader``'s session: (body, its epoch, the partitions it fetches, the
        acknowledgements it carries -- taken off the queue)."""
        epoch, in_session = self._sessions.get(leader, (OPEN, set()))
        fetching = parts & assigned
        acks = self._take_pending(parts) if epoch != OPEN else {}
        topics: dict[str, list[dict]] = {}
        named = (fetching - in_session) | set(acks) if epoch != OPEN else fetching
        for t, p in sorted(named):
            topics.setdefault(t, []).append({"partition_index": p, "acknowledgement_batches": acks.get((t, p), [])})
        forgotten: dict[str, list[int]] = {}
        for t, p in sorted(in_session - fetching):
            forgotten.setdefault(t, []).append(p)
        body = {"group_id": self.group, "member_id": self.member_id, "share_session_epoch": epoch,
                "max_wait_ms": wait_ms, "min_bytes": 1, "max_bytes": 50 << 20, "max_records": self.max_poll_records,
                "batch_size": self.max_poll_records,
                "topics": [{"topic_id": self._topic_id(t), "partitions": ps} for t, ps in topics.items()],
                "forgotten_topics_data": [{"topic_id": self._topic_id(t), "partitions": ps}
                                          for t, ps in forgotten.items()] if epoch != OPEN else []}
        self.fetches_sent += 1
        return body, epoch, fetching, acks

    def _share_fetch(self, leader: int, parts: set[tuple[str, int]], assigned: set[tuple[str, int]],
                     wait_ms: int) -> list[ShareRecord]:
        body, epoch, fetching, acks = self._fetch_body(leader, parts, assigned, wait_ms)
        try:
            answer = self.cluster.connection(leader).request(ApiKey.SHARE_FETCH, body, version=1)
        except (OSError, ConnectionError, KafkaError) as e:
            return self._fetch_failed(leader, acks, e)
        out = self._fetch_answer(leader, epoch, fetching, acks, answer)
        self._hold(out)
        return out

    def _send_ahead(self, wait_ms: int) -> None:
        """Send the next round of ShareFetches without waiting for their answers (``prefetch``): only
        the first leader's may wait ``wait_ms``, as in ``fetch_round``."""
        assigned = self.assigned_now()
        for leader, parts in sorted(self._by_leader(assigned).items()):
            body, epoch, fetching, acks = self._fetch_body(leader, parts, assigned, wait_ms if not self._ahead else 0)
            try:
                pending = self.cluster.connection(leader).send(ApiKey.SHARE_FETCH, body, version=1,
                                                                timeout=self._timeout + wait_ms / 1000)
            except (OSError, ConnectionError, KafkaError) as e:
                self._fetch_failed(leader, acks, e)
                continue
            self._ahead.append(_Sent(leader, epoch, fetching, acks, pending))

    def _drain_ahead(self, send_next: bool = False) -> None:
        """Wait for the answers of the round sent ahead; their records wait in ``_ready`` for a poll.
        ``send_next`` (a poll, ``prefetch``): when the answers acquired records, the next round is sent
        as soon as they are all in -- the sessions' epochs moved on -- and before their records are
        decoded, so the broker serves it meanwhile (it carries what waited to be acknowledged: the
        records the last poll returned, accepted by this one)."""
        ahead, self._ahead = self._ahead, []
        found: list[tuple[str, dict]] = []
        for sent in ahead:
            try:
                answer = sent.pending.result()
            except (OSError, ConnectionError, KafkaError) as e:
                self._fetch_failed(sent.leader, sent.acks, e)
                continue
            found.extend(self._answered(sent.leader, sent.epoch, sent.fetching, sent.acks, answer))
        if send_next and any(p["acquired_records"] and p["records"] for _, p in found):
            self._send_ahead(self.max_wait_ms)
        for topic, p in found:
            self._ready.extend(self._records(topic, p))

    def _fetch_failed(self, leader: int, acks: dict[tuple[str, int], list[dict]],
                      error: Exception) -> list[ShareRecord]:
        log.info("share fetch from broker %d failed (%s); its session starts again", leader, error)
        self._sessions.pop(leader, None)
        self.cluster.drop_connection(leader)
        self._put_back(acks)
        return []

    def _fetch_answer(self, leader: int, epoch: int, fetching: set[tuple[str, int]],
                      acks: dict[tuple[str, int], list[dict]], answer: dict) -> list[ShareRecord]:
        """The records of a ShareFetch's answer (the session's next epoch kept)."""
        out: list[ShareRecord] = []
        for topic, p in self._answered(leader, epoch, fetching, acks, answer):
            out.extend(self._records(topic, p))
        return out

    def _answered(self, leader: int, epoch: int, fetching: set[tuple[str, int]],
                  acks: dict[tuple[str, int], list[dict]], answer: dict) -> list[tuple[str, dict]]:
        """A ShareFetch's answer taken in (the session's next epoch kept, or the session dropped and its
        acknowledgements queued again): ``(topic, partition answer)`` of each partition that brought
        records, not decoded yet."""
        if answer["error_code"]:
            log.info("share fetch from broker %d: %s; its session starts again", leader,
                     ErrorCode.name_of(answer["error_code"]))
            self._sessions.pop(leader, None)
            self._put_back(acks)
            return []
        self._sessions[leader] = (epoch + 1, set(fetching))
        self.lock_timeout_ms = answer.get("acquisition_lock_timeout_ms") or self.lock_timeout_ms
        names = self._names()
        out: list[tuple[str, dict]] = []
        for t in answer["responses"]:
            topic = names.get(t["topic_id"])
            for p in t["partitions"]:
                if topic is None:
                    continue
                if p["acknowledge_error_code"]:
                    log.warning("share group %s: acknowledgements of %s-%d: %s", self.group, topic,
                                p["partition_index"], ErrorCode.name_of(p["acknowledge_error_code"]))
                if p["error_code"]:
                    if p["error_code"] in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                        self.cluster.refresh(self.topics)
                    continue
                out.append((topic, p))
        return out

    def _hold(self, records: list[ShareRecord]) -> None:
        """Remember what a poll handed out until it is acknowledged (a copy: the application owns the list)."""
        if records:
            self._held.append(list(records))

    def _take_unacked(self) -> list[ShareRecord]:
        """The last poll's records not acknowledged yet, in the order it returned them; forgotten here."""
        out = list(self._unacked.values())
        for records in self._held:
            out.extend(records)
        self._unacked.clear()
        self._held.clear()
        return out

    def _put_back(self, acks: dict[tuple[str, int], list[dict]]) -> None:
        """Acknowledgements a failed request carried, queued again for the next one (the member
        still holds those records in a new session: the broker keeps them with the member).  If the
        broker had taken them after all, sending them again is answered INVALID_RECORD_STATE."""
        for tp, batches in acks.items():
            self._pending_ranges.setdefault(tp, []).extend(batches)

    def _queue_runs(self, records: list[ShareRecord], kind: str) -> None:
        """Acknowledge ``records`` (in the order a poll returned them) as ``kind``: one batch per run of
        consecutive offsets of a partition (records side by side in ``records``), queued for the next
        request."""
        code = ACK_TYPES[kind]
        for (topic, partition), first, last in _runs(records):
            self._pending_ranges.setdefault((topic, partition), []).append(
                {"first_offset": first, "last_offset": last, "acknowledge_types": [code]})

    def _take_pending(self, parts: Iterable[tuple[str, int]]) -> dict[tuple[str, int], list[dict]]:
        """The acknowledgements waiting for ``parts``, as AcknowledgementBatches, taken off the queue."""
        out = {tp: _batches(self._pending.pop(tp)) for tp in parts if tp in self._pending}
        for tp in parts:
            if tp in self._pending_ranges:
                out[tp] = sorted(out.get(tp, []) + self._pending_ranges.pop(tp), key=lambda b: b["first_offset"])
        return out

    def _records(self, topic: str, p: dict) -> list[ShareRecord]:
        """What a partition answer of ``topic`` brings: its acquired records (``acquired_records``)."""
        return acquired_records(topic, p)

    def _topic_id(self, topic: str) -> bytes:
        return self.cluster.topic(topic).topic_id

    def _names(self) -> dict[bytes, str]:
        """``{topic id: name}`` of the subscribed topics that exist."""
        out = {}
        for t in self.topics:
            try:
                out[self._topic_id(t)] = t
            except KafkaError:
                continue
        return out

    # ------------------------------------------------------------ acknowledgements

    def acknowledge(self, record: ShareRecord, kind: str = "accept") -> None:
        """Mark a record of the last poll accepted, released (it comes back, counted) or rejected (set
        aside for good); sent with the next poll or ``commit()``."""
        if kind not in ACK_TYPES:
            raise ValueError(f"acknowledgement {kind!r}: one of {', '.join(ACK_TYPES)}")
        for records in self._held:
            self._unacked.update(((r.topic, r.partition, r.offset), r) for r in records)
        self._held.clear()
        if self._unacked.pop((record.topic, record.partition, record.offset), None) is None:
            raise ValueError(f"{record.topic}-{record.partition}@{record.offset} is not a record of the last poll "
                             "waiting for its acknowledgement")
        self._pending.setdefault((record.topic, record.partition), {})[record.offset] = ACK_TYPES[kind]

    def acknowledge_range(self, topic: str, partition: int, first: int, last: int, kind: str = "accept") -> None:
        """Acknowledge offsets ``first..last`` of a partition at once (records this member acquired,
        whichever poll handed them out); sent with the next poll or ``commit()``."""
        if kind not in ACK_TYPES:
            raise ValueError(f"acknowledgement {kind!r}: one of {', '.join(ACK_TYPES)}")
        if last < first:
            raise ValueError(f"acknowledge_range: last offset {last} is before first {first}")
        self._pending_ranges.setdefault((topic, partition), []).append(
            {"first_offset": first, "last_offset": last, "acknowledge_types": [ACK_TYPES[kind]]})

    def acknowledgements_unsent(self) -> bool:
        """Whether acknowledgements wait to be sent (with the next poll or ``commit()``)."""
        with self._lock:
            return bool(self._pending or self._pending_ranges)

    def commit(self) -> dict[tuple[str, int], int]:
        """Send every pending acknowledgement now (a ShareAcknowledge per leader) and wait for the
        answers: ``{(topic, partition): error code}`` (0: written at the leader, for good)."""
        self._drain_ahead()  # its session's epoch moves on with the answer
        results: dict[tuple[str, int], int] = {}
        by_leader: dict[int, dict[tuple[str, int], dict[int, int]]] = {}
        for tp, acks in self._take_pending(set(self._pending) | set(self._pending_ranges)).items():
            by_leader.setdefault(self.cluster.leader(*tp), {})[tp] = acks
        for leader, acks in by_leader.items():
            results.update(self.acknowledge_at(leader, acks, final=False))
        return results

    def acknowledge_at(self, leader: int, acks: dict[tuple[str, int], list[dict]], final: bool,
                       renew: bool = False) -> dict:
        """ShareAcknowledge of ``acks`` (AcknowledgementBatches per partition) in this member's session
        with ``leader``; ``final`` closes the session, ``renew`` sends v2's IsRenewAck."""
        epoch, parts = self._sessions.get(leader, (OPEN, set()))
        if epoch == OPEN:  # no session with that leader: nothing it holds for us
            return {tp: int(ErrorCode.SHARE_SESSION_NOT_FOUND) for tp in acks}
        topics: dict[str, list[dict]] = {}
        for (t, p), batches in sorted(acks.items()):
            topics.setdefault(t, []).append({"partition_index": p, "acknowledgement_batches": batches})
        body = {"group_id": self.group, "member_id": self.member_id,
                "share_session_epoch": FINAL if final else epoch, "is_renew_ack": renew,
                "topics": [{"topic_id": self._topic_id(t), "partitions": ps} for t, ps in topics.items()]}
        try:
            answer = self.cluster.connection(leader).request(ApiKey.SHARE_ACKNOWLEDGE, body, version=2 if renew else 1)
        except (OSError, ConnectionError, KafkaError) as e:
            self._sessions.pop(leader, None)
            return {tp: int(ErrorCode.NETWORK_EXCEPTION) for tp in acks} if not isinstance(e, KafkaError) \
                else {tp: int(e.code) for tp in acks}
        if final:
            self._sessions.pop(leader, None)
        elif answer["error_code"]:
            self._sessions.pop(leader, None)
        else:
            self._sessions[leader] = (epoch + 1, parts)
        if answer["error_code"]:
            return {tp: int(answer["error_code"]) for tp in acks}
        names = self._names()
        out = {tp: 0 for tp in acks}
        for t in answer["responses"]:
            for p in t["partitions"]:
                if names.get(t["topic_id"]) is not None:
                    out[(names[t["topic_id"]], p["partition_index"])] = int(p["error_code"])
        return out

    # ------------------------------------------------------------ closing

    def close(self) -> None:
        """Send what is pending (implicit mode: the last poll's records accepted; records fetched ahead
        that no poll returned released), close every share session -- what this member still holds
        goes back at once -- and leave the group."""
        if self._stop.is_set():
            return
        if not self.explicit:
            self._queue_runs(self._take_unacked(), "accept")
        try:
            self._drain_ahead()
        except Exception as e:  # noqa: BLE001 -- closing anyway; what it acquired goes back with the session
            log.info("share consumer %s: the fetch sent ahead failed at close (%s)", self.member_id, e)
        self._queue_runs(self._ready, "release")
        self._ready = []
        by_leader: dict[int, dict[tuple[str, int], list[dict]]] = {leader: {} for leader in self._sessions}
        for tp, acks in self._take_pending(set(self._pending) | set(self._pending_ranges)).items():
            try:
                by_leader.setdefault(self.cluster.leader(*tp), {})[tp] = acks
            except KafkaError:
                continue
        for leader, acks in by_leader.items():
            try:
                self.acknowledge_at(leader, acks, final=True)
            except Exception as e:  # noqa: BLE001 -- closing anyway; the locks run out
                log.info("share session with broker %d not closed cleanly: %s", leader, e)
        self._stop.set()
        self._heartbeat.join(10)
        self.cluster.close()

    def __enter__(self) -> "ShareConsumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _batches(offsets: dict[int, int]) -> list[dict]:
    """AcknowledgementBatches for ``{offset: type}``: contiguous offsets of one type in one batch."""
    out: list[dict] = []
    for offset in sorted(offsets):
        kind = offsets[offset]
        last = out[-1] if out else None
        if last is not None and last["last_offset"] == offset - 1 and last["acknowledge_types"] == [kind]:
            last["last_offset"] = offset
        else:
            out.append({"first_offset": offset, "last_offset": offset, "acknowledge_types": [kind]})
    return out


def acquired_records(topic: str, p: dict) -> list[ShareRecord]:
    """The records of ShareFetch partition answer ``p`` (of ``topic``) that it acquired for this member:
    those of its ``acquired_records`` ranges, in the ranges' order, each with its range's delivery count.

    The record set is decoded once into columns, as the Consumer's fetches are
    (``records.arrow.decode_to_arrow``: CRCs checked, control batches skipped, compiled where numba is
    installed; ``InvalidBatch`` for a malformed one), and each range is cut out of the columns: the only
    Python step per record is building its ``ShareRecord``."""
    ranges = [(a["first_offset"], a["last_offset"], a["delivery_count"]) for a in p["acquired_records"]]
    if not ranges or not p["records"]:
        return []
    data = p["records"] if isinstance(p["records"], (bytes, bytearray, memoryview)) else bytes(p["records"])
    partition = p["partition_index"]
    batch = decode_to_arrow(data, topic, partition, start_offset=min(first for first, _, _ in ranges),
                            end_offset=max(last for _, last, _ in ranges) + 1, include_headers=True)
    rows = batch.num_rows
    if not rows:
        return []
    offsets = batch.column(4).to_pylist()  # ascending: a record set's batches are in offset order
    stamps = batch.column(5).view(pa.int64())  # microseconds; a record's own are milliseconds
    if stamps.null_count:
        times = [ts // 1000 if ts is not None else -1 for ts in stamps.to_pylist()]
    else:
        times = (stamps.to_numpy() // 1000).tolist()
    headers = batch.column(7)
    columns = (offsets, times, batch.column(6).to_pylist(), batch.column(0).to_pylist(), batch.column(1).to_pylist(),
               [tuple((h["key"], h["value"]) for h in hs) if hs else () for hs in headers.to_pylist()]
               if len(headers.flatten()) else [()] * rows)
    out: list[ShareRecord] = []
    for first, last, count in ranges:
        lo, hi = bisect_left(offsets, first), bisect_right(offsets, last)
        if hi <= lo:
            continue
        cut = columns if (lo, hi) == (0, rows) else tuple(c[lo:hi] for c in columns)
        n = hi - lo
        out.extend(map(ShareRecord._make, zip(repeat(topic, n), repeat(partition, n), *cut, repeat(count, n),
                                              strict=True)))
    return out


def _runs(records: list[ShareRecord]) -> list[tuple[tuple[str, int], int, int]]:
    """``((topic, partition), first offset, last offset)`` of each run of ``records``: records side by side
    of one partition whose offsets follow each other, the longest such runs, in order.

    A poll's records come in long runs (a partition's acquired ranges), so each run's end is searched
    for -- doubling the step, then halving it -- on the offsets alone (the last is as far from the first
    as the records are apart), and the run found is then checked whole on slices of the records' fields
    (done in C); only when that check fails is the end searched for again with whole checks.  A run of
    ``n`` records costs about ``log n`` steps in Python instead of ``n``."""
    n = len(records)
    if not n:
        return []
    topics, partitions, offsets = (list(map(itemgetter(i), records)) for i in range(3))

    def spaced(i: int, j: int) -> bool:  # as far apart in offsets as in the list
        return offsets[j] - offsets[i] == j - i

    def run(i: int, j: int) -> bool:  # records i..j: one partition's consecutive offsets
        k = j - i + 1
        return spaced(i, j) and offsets[i:j + 1] == list(range(offsets[i], offsets[i] + k)) \
            and partitions[i:j + 1].count(partitions[i]) == k and topics[i:j + 1].count(topics[i]) == k

    def end(i: int, test) -> int:  # the last j of i..j before ``test`` first fails, doubling then halving
        good, step = i, 1
        while good + step < n and test(i, good + step):
            good += step
            step *= 2
        bad = min(n, good + step)
        while bad - good > 1:
            mid = (good + bad) // 2
            if test(i, mid):
                good = mid
            else:
                bad = mid
        return good

    out = []
    i = 0
    while i < n:
        j = end(i, spaced)
        # ``spaced`` holds wherever ``run`` does: a whole run i..j is the longest (j + 1 is not even spaced)
        if not run(i, j):
            j = end(i, run)
        out.append(((topics[i], partitions[i]), offsets[i], offsets[j]))
        i = j + 1
    return out
