"""``ConsumerCoordinatorConnector``: the thread that owns a member's coordinator channel.

The algorithm of seeds 001 (Consumer.onStartup / onLostConnection / Connector.*)
and 003 sections 7, 8 and 11, with the consumer states of seeds 004:

1. Discovery: ClusterMetadata round-robin over the brokers (``Discovery``),
   retrying with exponential backoff until closed.
2. Connect to the coordinator and send RegisterConsumer (v2: this member hands
   partitions over incrementally).  A member that still holds an assignment
   claims it (its epoch, partitions per thread, its positions); the answer says
   whether it is back in that epoch.  CLAIM_REFUSED means it must stop what it
   holds and register again without a claim (at once).  Any other error code is
   logged, the channel closed, and after a backoff discovery starts again
   (CONSUMER_ID_ALREADY_REGISTERED is expected for a moment after a reconnect,
   until the coordinator has noticed our old connection closed).
3. Serve the channel: read requests FROM the coordinator and answer each with the
   same correlation id -- Ping (offsets when there are any to report), StopFetcher
   (v1: stop just the partitions it names, the others go on; v0: stop
   everything; then answer with the offsets), StartFetcher (the complete
   assignment and the new epoch: start what is new, answer).
   A request stamped with a coordinator epoch older than the newest one seen is
   refused with STALE_COORDINATOR_EPOCH (a deposed coordinator, DESIGN.md "Coordinator shards").
   ``commit()`` (any thread) sends CommitOffsets on the same channel; its answer
   arrives between the coordinator's requests.
4. Lost connection, a protocol violation, or silence: go back to 1 *without
   stopping* (seeds 004, "re-discover co-ord": the member does not stop
   consumption).

The lease (DESIGN.md "One holder at a time (invariant 1)"): a member may fetch its assignment only until
its session timeout has passed since it last heard a request from a coordinator
(``Member.renew_lease`` tells the fetchers and the delivery, which check it
themselves).  A watchdog thread calls ``Member.connection_lost`` when the lease
ends without a renewal; the assignment is kept, dormant, and claimed at the next
registration (a channel that stayed open is left for a new one at once): if the
coordinator takes the member back, fetching resumes where it stopped
(``Member.resume_fetchers``); if it refuses the claim, the assignment is dropped and
the member joins as a new one.

``close()`` makes sure the final offsets reach ZooKeeper (003 section 11, done
with the active commit of section 13): the connector thread sends CommitOffsets
with the final offsets and ``leave`` set and waits for the answer, which comes
once the offsets are written; the coordinator then rebalances the others at once.
The whole close is bounded by the session timeout, whatever the cluster does.

The connector knows nothing about fetching: it drives a ``Member`` (the
``Consumer``, the Spark source's members, or a test double).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

from spark_coord.common import TopicPartition
from spark_coord.consumer.channel import ChannelClosed, CoordinatorChannel
from spark_coord.consumer.discovery import ClusterView, Discovery
from spark_coord.errors import ErrorCode, KafkaError
from spark_coord.wire import coordinator as api
from spark_coord.wire.protocol import RequestHeader
from spark_coord.wire.registry import api_name
from spark_coord.wire.types import ProtocolError

log = logging.getLogger(__name__)

__all__ = ["CommitFailed", "ConsumerCoordinatorConnector", "Member", "Registration", "TopicPartition"]


class Member(Protocol):
    """What the connector asks of the consumer it serves (called on the connector's threads,
    never two at once)."""

    def report_offsets(self) -> list[dict]:
        """``[{topic, partition, offset}]`` to put in a Ping/StopFetcher answer (may be empty)."""

    def stop_fetchers(self, partitions: set[TopicPartition] | None = None) -> list[dict] | None:
        """Stop fetching (and drop buffered data of) everything (None: positions are kept, and
        ``report_offsets`` answers), or just ``partitions`` while the others go on: then return the
        ``[{topic, partition, offset}]`` to report for them."""

    def start_fetchers(self, generation_id: int, assignment: dict[TopicPartition, int],
                       threads: dict[TopicPartition, str], brokers: dict[int, tuple[str, int]]) -> None:
        """Adopt the complete assignment (start offset -1: apply auto.offset.reset) and fetch it;
        partitions already being fetched go on from where they are."""

    def connection_lost(self) -> None:
        """The assignment is no longer confirmed by a coordinator (lease over, or a claim refused):
        stop fetching until started or resumed again; positions are kept."""

    def resume_fetchers(self) -> None:
        """A coordinator took the member back into its generation after ``connection_lost``:
        fetch the same assignment again from the kept positions."""

    def renew_lease(self, until: float) -> None:
        """The assignment may be fetched and delivered until ``until`` (``time.monotonic()``)."""


class CommitFailed(KafkaError):
    """An active commit did not reach ZooKeeper (the offsets are still reported with the next
    Ping answer or claim)."""


@dataclass
class Registration:
    """The RegisterConsumer body this member sends (003 section 7)."""

    group_id: str
    consumer_id: str
    topics: dict[str, int] = field(default_factory=dict)   # static subscription: topic -> streams
    pattern: str | None = None                              # wildcard subscription
    pattern_streams: int = 1
    auto_commit: bool = True
    auto_offset_reset: str = "largest"
    session_timeout_ms: int = 30000

    def body(self) -> dict:
        return {"group_id": self.group_id, "consumer_id": self.consumer_id,
                "topics": [{"topic": t, "streams": n} for t, n in sorted(self.topics.items())],
                "pattern": self.pattern, "pattern_streams": self.pattern_streams, "auto_commit": self.auto_commit,
                "auto_offset_reset": self.auto_offset_reset, "session_timeout_ms": self.session_timeout_ms}


class ConsumerCoordinatorConnector(threading.Thread):
    """Discovers the coordinator, registers, and answers its requests until ``close()``."""

    def __init__(self, bootstrap: list[tuple[str, int]], registration: Registration, member: Member, *,
                 client_id: str | None = "spark-coord", socket_timeout_ms: int = 10000,
                 backoff_ms: int = 100, max_backoff_ms: int = 2000, security=None):
        super().__init__(name=f"coordinator-connector-{registration.consumer_id}", daemon=True)
        self.registration = registration
        self.member = member
        self.client_id = client_id
        # A broker that does not answer ClusterMetadata or RegisterConsumer within the session
        # timeout is as good as dead (a paused coordinator still accepts TCP connections):
        # move on to the next one instead of waiting out a long socket timeout.
        self.socket_timeout = min(socket_timeout_ms, registration.session_timeout_ms) / 1000
        self.session_timeout = registration.session_timeout_ms / 1000
        self.backoff = backoff_ms / 1000
        self.max_backoff = max(max_backoff_ms, backoff_ms) / 1000
        self.security = security  # TLS/SASL of every coordinator connection (None: PLAINTEXT)
        self.discovery = Discovery(bootstrap, client_id, self.socket_timeout, security, registration.group_id)
        self.coordinator_epoch = -1            # the newest epoch seen (fencing)
        self.generation_id = api.NO_GENERATION  # generation of the assignment held (-1: none)
        self.coordinator: ClusterView | None = None
        self.registered = threading.Event()    # set while registered with a coordinator
        self.registrations = 0                 # successful registrations so far (tests, metrics)
        self.last_error: int | None = None     # last RegisterConsumer error code
        self._closing = threading.Event()
        self._channel: CoordinatorChannel | None = None
        self._failures = 0
        #: The held assignment per partition -> thread (claimed on re-registration); empty with none.
        self._threads: dict[TopicPartition, str] = {}
        self._member_lock = threading.RLock()  # member calls: the connector thread vs the lease watchdog
        self._lease_until = 0.0
        self._suspended = False                # lease ran out: fetchers stopped, assignment dormant
        self._lease_cond = threading.Condition(self._member_lock)
        self._watchdog = threading.Thread(target=self._watch_lease, name=f"lease-{registration.consumer_id}",
                                          daemon=True)
        self._left = threading.Event()         # the final commit (leave) was answered

    # ------------------------------------------------------------------- lifecycle
    @property
    def closing(self) -> bool:
        """True once ``close()`` was called (the final commit may still be under way)."""
        return self._closing.is_set()

    def start(self) -> None:
        super().start()
        self._watchdog.start()

    def close(self, timeout: float | None = None) -> None:
        """Leave the group: the final offsets are committed (CommitOffsets with ``leave``) if a
        coordinator answers in time; returns within ``timeout`` (default: the session timeout)."""
        self._closing.set()
        with self._lease_cond:
            self._lease_cond.notify_all()
        channel = self._channel
        if channel is not None:
            channel.wake()
        if self.is_alive():
            self.join(self.session_timeout if timeout is None else timeout)
        if self.is_alive():
            log.warning("%s: no coordinator confirmed the final offsets in time; leaving without", self.name)
            channel = self._channel
            if channel is not None:
                channel.close()

    @property
    def left_cleanly(self) -> bool:
        """True once the coordinator confirmed the final commit of ``close()``."""
        return self._left.is_set()

    def run(self) -> None:
        deadline: float | None = None
        try:
            while True:
                if self._closing.is_set():
                    if deadline is None:
                        deadline = time.monotonic() + self.session_timeout
                    if not self._threads and self.generation_id == api.NO_GENERATION and not self.registered.is_set():
                        break  # nothing to hand over and nobody to tell
                    if time.monotonic() >= deadline:
                        break
                view = self._discover(deadline)
                if view is None:
                    if self._closing.is_set():
                        continue
                    break
                try:
                    channel = self._register(view)
                except Exception:  # the channel is closed: the coordinator counts us absent, not here
                    log.exception("%s: registration failed unexpectedly; starting over", self.name)
                    channel = None
                if channel is None:
                    self._wait_backoff()
                    continue
                try:
                    self._serve(channel)
                except Exception:
                    log.exception("%s: serving the coordinator failed unexpectedly; reconnecting", self.name)
                finally:
                    self.registered.clear()
                    self._channel = None
                    channel.close()
                if self._left.is_set():
                    break
                if not self._closing.is_set():
                    self._wait_backoff()
        except Exception:  # never die silently: the member would hang unassigned
            log.exception("%s: unexpected failure", self.name)
        finally:
            self.registered.clear()
            with self._member_lock:
                if self._threads or self.generation_id != api.NO_GENERATION:
                    if not self._suspended:
                        self.member.connection_lost()
                    self._suspended = True
                self._lease_until = 0.0
                self._lease_cond.notify_all()
            log.info("%s: stopped", self.name)

    def _wait_backoff(self) -> None:
        self._failures += 1
        cap = self.max_backoff
        if self.generation_id != api.NO_GENERATION:
            # holding an assignment on a lease: find the next coordinator well before it runs out
            cap = min(cap, max(self.backoff, self.session_timeout / 10))
        delay = min(cap, self.backoff * 2 ** min(self._failures - 1, 16))
        self._closing.wait(delay * (0.8 + 0.4 * random.random()))

    # ------------------------------------------------------------------------ lease
    def _renew_lease(self) -> None:
        with self._member_lock:
            self._lease_until = time.monotonic() + self.session_timeout
            self.member.renew_lease(self._lease_until)
            self._lease_cond.notify_all()

    def _watch_lease(self) -> None:
        """Stop the member's fetching when its lease runs out without a renewal."""
        with self._lease_cond:
            while self.is_alive() or not self._closing.is_set():
                if not self._threads and self.generation_id == api.NO_GENERATION or self._suspended:
                    self._lease_cond.wait(1.0)
                    continue
                left = self._lease_until - time.monotonic()
                if left > 0:
                    self._lease_cond.wait(left)
                    continue
                log.warning("%s: no coordinator confirmed our assignment for %.1f s (session timeout): stopped "
                            "fetching generation %d until one does", self.name, self.session_timeout,
                            self.generation_id)
                self._suspended = True
                self.member.connection_lost()

    # --------------------------------------------------------------------- discovery
    def _discover(self, deadline: float | None = None) -> ClusterView | None:
        while not self._closing.is_set() or (deadline is not None and time.monotonic() < deadline):
            view = self.discovery.one_round()
            if view is not None:
                if view.coordinator_epoch >= 0 and view.coordinator_epoch < self.coordinator_epoch:
                    log.info("discovery named coordinator %d of epoch %d, older than %d: retrying",
                             view.coordinator_id, view.coordinator_epoch, self.coordinator_epoch)
                else:
                    self.coordinator_epoch = max(self.coordinator_epoch, view.coordinator_epoch)
                    return view
            if self._closing.is_set():
                time.sleep(min(self.backoff, max(0.0, (deadline or 0) - time.monotonic())))
            else:
                self._wait_backoff()
        return None

    def _claim(self) -> dict:
        """RegisterConsumer v1's claim: the held generation, partitions per thread, positions."""
        with self._member_lock:
            if self.generation_id == api.NO_GENERATION:
                return {"generation_id": api.NO_GENERATION, "owned": []}
            positions = {(o["topic"], o["partition"]): o["offset"] for o in self.member.report_offsets()}
            owned: dict[str, list[dict]] = {}
            for (t, p), thread in sorted(self._threads.items()):
                owned.setdefault(thread, []).append({"topic": t, "partition": p,
                                                     "offset": positions.get((t, p), api.NO_OFFSET)})
            return {"generation_id": self.generation_id,
                    "owned": [{"consumer_thread_id": th, "partitions": ps} for th, ps in sorted(owned.items())]}

    def _register(self, view: ClusterView) -> CoordinatorChannel | None:
        host, port = view.coordinator_address  # type: ignore[misc]
        try:
            channel = CoordinatorChannel(host, port, self.client_id, self.socket_timeout, security=self.security)
        except ChannelClosed as e:
            log.info("cannot connect to coordinator %d: %s", view.coordinator_id, e)
            return None
        try:
            return self._register_on(channel, view)
        except BaseException:
            # Whatever failed (even after the coordinator took us back), close the channel: a
            # coordinator that counts us registered on a connection nobody reads would ping it in
            # vain while our commits fail as unregistered.  It sees the member go and takes it back
            # at the next registration.
            channel.close()
            raise

    def _register_on(self, channel: CoordinatorChannel, view: ClusterView) -> CoordinatorChannel | None:
        host, port = view.coordinator_address  # type: ignore[misc]
        reg = self.registration
        claim = self._claim()
        try:
            resp = channel.request(api.REGISTER_CONSUMER, dict(reg.body(), **claim), version=api.REGISTER_VERSION)
        except (ChannelClosed, ProtocolError) as e:
            log.info("RegisterConsumer to coordinator %d at %s:%d failed: %s", view.coordinator_id, host, port, e)
            channel.close()
            return None
        code = resp["error_code"]
        self.last_error = code
        if code == ErrorCode.CLAIM_REFUSED:
            log.info("coordinator %d refused our claim of epoch %d (%s): dropping its %d partition(s) and "
                     "registering again", view.coordinator_id, claim["generation_id"], resp["error_message"],
                     len(self._threads))
            channel.close()
            with self._member_lock:
                self._drop_assignment()
            self._failures = 0
            return None
        if code:
            level = logging.INFO if code == ErrorCode.CONSUMER_ID_ALREADY_REGISTERED else logging.WARNING
            log.log(level, "coordinator %d refused %s in group %s: %s%s", view.coordinator_id, reg.consumer_id,
                    reg.group_id, ErrorCode.name_of(code),
                    f" ({resp['error_message']})" if resp["error_message"] else "")
            channel.close()
            return None
        epoch = resp["coordinator_epoch"]
        if 0 <= epoch < self.coordinator_epoch:
            log.warning("coordinator %d registered us at epoch %d, older than %d seen: reconnecting",
                        view.coordinator_id, epoch, self.coordinator_epoch)
            channel.close()
            return None
        self.coordinator_epoch = max(self.coordinator_epoch, epoch)
        claimed = claim["generation_id"]
        with self._member_lock:
            if claimed != api.NO_GENERATION and resp["generation_id"] == claimed:
                log.info("back in generation %d with %d partition(s)", claimed, len(self._threads))
                self._renew_lease()
                if self._suspended:
                    self.member.resume_fetchers()
                    self._suspended = False  # only once it fetches again: a failed resume is retried
            elif claimed != api.NO_GENERATION:
                log.info("coordinator %d did not take back generation %d: dropping its %d partition(s)",
                         view.coordinator_id, claimed, len(self._threads))
                self._drop_assignment()
        self.coordinator = view
        self._channel = channel
        self._failures = 0
        self.registrations += 1
        self.registered.set()
        log.info("registered %s in group %s with coordinator %d (epoch %d) at %s:%d", reg.consumer_id,
                 reg.group_id, view.coordinator_id, self.coordinator_epoch, host, port)
        return channel

    def _drop_assignment(self) -> None:
        """The assignment is over (claim refused): stop fetching it and claim nothing any more."""
        if not self._suspended:
            self.member.connection_lost()
        self._suspended = False
        self._threads = {}
        self.generation_id = api.NO_GENERATION

    # ------------------------------------------------------------------------- serve
    def _serve(self, channel: CoordinatorChannel) -> None:
        """Answer the coordinator until the channel is lost, silent, or the member left."""
        last_heard = time.monotonic()
        while True:
            if self._closing.is_set():
                if self.generation_id != api.NO_GENERATION:
                    self._leave(channel)
                return  # holding nothing: closing the connection is leaving (nothing to wait for)
            silent = time.monotonic() - last_heard
            if silent >= self.session_timeout:
                log.warning("no request from coordinator for %.1f s (session timeout): reconnecting", silent)
                return
            try:
                got = channel.receive_request(self.session_timeout - silent)
            except (ChannelClosed, ProtocolError) as e:
                log.warning("coordinator channel lost: %s", e)
                return
            if self._suspended:
                # The lease ran out while this channel stayed open (a cut that drops packets without
                # resetting the connection): a request arriving late renews nothing; the assignment
                # is claimed on a new registration, which resumes it if the coordinator takes it back.
                log.warning("the lease ran out on an open channel: reconnecting to claim generation %d",
                            self.generation_id)
                return
            if got is None:
                continue
            last_heard = time.monotonic()
            header, body = got
            try:
                self._handle(channel, header, body)
            except ChannelClosed as e:
                log.warning("coordinator channel lost while answering: %s", e)
                return

    def _leave(self, channel: CoordinatorChannel) -> None:
        """The final commit: CommitOffsets with the final offsets and ``leave``, answered once they
        are in ZooKeeper.  Requests arriving meanwhile are answered (a StopFetcher too)."""
        with self._member_lock:
            offsets = self.member.report_offsets() if self.generation_id != api.NO_GENERATION else []
        fut = channel.send_request(api.COMMIT_OFFSETS, {
            "group_id": self.registration.group_id, "consumer_id": self.registration.consumer_id,
            "generation_id": self.generation_id, "leave": True, "offsets": offsets})
        deadline = time.monotonic() + self.session_timeout
        while not fut.done() and time.monotonic() < deadline:
            try:
                got = channel.receive_request(max(0.0, min(0.5, deadline - time.monotonic())))
                if got is not None:
                    self._handle(channel, *got)
            except (ChannelClosed, ProtocolError) as e:
                log.warning("coordinator channel lost while leaving: %s", e)
                return
        if not fut.done():
            log.warning("%s: the coordinator did not confirm the final offsets in time", self.name)
            return
        try:
            answer = fut.result()
        except (ChannelClosed, ProtocolError) as e:
            log.warning("%s: final commit failed: %s", self.name, e)
            return
        bad = {(p["topic"], p["partition"]): ErrorCode.name_of(p["error_code"]) for p in answer["partitions"]
               if p["error_code"]}
        if answer["error_code"] or bad:
            log.warning("%s: final commit refused: %s %s", self.name, ErrorCode.name_of(answer["error_code"]), bad)
        else:
            log.info("%s: final offsets committed (%d partitions); left the group", self.name, len(offsets))
        with self._member_lock:
            self._threads = {}
            self.generation_id = api.NO_GENERATION
        self._left.set()

    def _handle(self, channel: CoordinatorChannel, header: RequestHeader, body: dict) -> None:
        key = header.api_key
        if key not in (api.PING, api.STOP_FETCHER, api.START_FETCHER):
            raise ChannelClosed(f"coordinator sent {api_name(key)}, which a member does not serve")
        epoch = body["coordinator_epoch"]
        answer = {"consumer_id": self.registration.consumer_id, "generation_id": self.generation_id}
        if epoch < self.coordinator_epoch:
            log.warning("refusing %s of coordinator epoch %d: epoch %d is newer", api_name(key), epoch,
                        self.coordinator_epoch)
            channel.respond(header, dict(answer, error_code=ErrorCode.STALE_COORDINATOR_EPOCH))
            return
        self.coordinator_epoch = epoch
        if body["consumer_id"] != self.registration.consumer_id:
            log.warning("%s addressed to consumer %r, we are %r", api_name(key), body["consumer_id"],
                        self.registration.consumer_id)
            channel.respond(header, dict(answer, error_code=ErrorCode.UNKNOWN_CONSUMER))
            return
        with self._member_lock:
            self._renew_lease()
            if key == api.PING:
                log.debug("ping #%d (generation %d)", body["num_retries"], body["generation_id"])
                offsets = self.member.report_offsets() if self.generation_id != api.NO_GENERATION else []
                channel.respond(header, dict(answer, error_code=ErrorCode.NONE, offsets=offsets))
            elif key == api.STOP_FETCHER:
                self._stop_fetchers(channel, header, body, answer)
            else:
                code = ErrorCode.NONE
                if not self._closing.is_set():
                    code = self._start_fetchers(body)
                else:
                    log.info("StartFetcher during close: not starting fetchers")
                channel.respond(header, {"error_code": code, "consumer_id": self.registration.consumer_id,
                                         "generation_id": self.generation_id})

    def _stop_fetchers(self, channel: CoordinatorChannel, header: RequestHeader, body: dict, answer: dict) -> None:
        """StopFetcher: everything (v0, or v1 without a list), or just the partitions named (v1)."""
        named = body.get("partitions")
        if named is None:
            log.info("StopFetcher (epoch %d): everything", body["generation_id"])
            self.member.stop_fetchers()
            offsets = self.member.report_offsets() if self.generation_id != api.NO_GENERATION else []
            self._threads = {}
            self.generation_id = api.NO_GENERATION
            self._suspended = False
            channel.respond(header, dict(answer, error_code=ErrorCode.NONE, offsets=offsets))
            return
        stop = {(e["topic"], p) for e in named for p in e["partitions"]} & set(self._threads)
        log.info("StopFetcher (epoch %d): %d partition(s): %s", body["generation_id"], len(stop),
                 ", ".join(f"{t}-{p}" for t, p in sorted(stop)))
        offsets = self.member.stop_fetchers(stop) if stop else []
        if offsets is None:
            offsets = [o for o in self.member.report_offsets() if (o["topic"], o["partition"]) in stop]
        self._threads = {tp: th for tp, th in self._threads.items() if tp not in stop}
        self.generation_id = body["generation_id"]
        channel.respond(header, dict(answer, error_code=ErrorCode.NONE, generation_id=self.generation_id,
                                     offsets=offsets))

    def _start_fetchers(self, body: dict) -> int:
        assignment: dict[TopicPartition, int] = {}
        threads: dict[TopicPartition, str] = {}
        for owned in body["ownership"]:
            for p in owned["partitions"]:
                tp = (p["topic"], p["partition"])
                if tp in assignment or p["partition"] < 0 or p["offset"] < api.NO_OFFSET:
                    log.warning("StartFetcher with a bad or duplicate partition %s offset %d", tp, p["offset"])
                    return ErrorCode.INVALID_REQUEST
                assignment[tp] = p["offset"]
                threads[tp] = owned["consumer_thread_id"]
        brokers = {b["node_id"]: (b["host"], b["port"]) for b in body["brokers"]}
        log.info("StartFetcher generation %d: %d partitions", body["generation_id"], len(assignment))
        # the generation first: an application thread may commit the moment the assignment shows
        before, self.generation_id = self.generation_id, body["generation_id"]
        try:
            self.member.start_fetchers(body["generation_id"], assignment, threads, brokers)
        except Exception:
            log.exception("starting fetchers failed")
            self.generation_id = before
            return ErrorCode.UNKNOWN_SERVER_ERROR
        self._threads = threads
        self._suspended = False
        return ErrorCode.NONE

    # ---------------------------------------------------------------------- commit
    def commit(self, offsets: list[dict], timeout: float | None = None) -> dict[TopicPartition, int]:
        """Commit ``offsets`` now (CommitOffsets; any thread): returns once they are in ZooKeeper,
        with an error code per partition (0: committed).  Raises ``CommitFailed`` when no
        coordinator is registered right now or the request as a whole failed."""
        channel = self._channel
        if channel is None or not self.registered.is_set() or self._closing.is_set():
            raise CommitFailed(ErrorCode.COORDINATOR_NOT_AVAILABLE, "not registered with a coordinator right now")
        fut = channel.send_request(api.COMMIT_OFFSETS, {
            "group_id": self.registration.group_id, "consumer_id": self.registration.consumer_id,
            "generation_id": self.generation_id, "leave": False, "offsets": offsets})
        try:
            answer = fut.result(self.session_timeout if timeout is None else timeout)
        except (ChannelClosed, ProtocolError) as e:
            raise CommitFailed(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)) from None
        except TimeoutError:
            raise CommitFailed(ErrorCode.REQUEST_TIMED_OUT, "no answer from the coordinator in time") from None
        if answer["error_code"]:
            raise CommitFailed(answer["error_code"], answer.get("error_message") or "")
        return {(p["topic"], p["partition"]): p["error_code"] for p in answer["partitions"]}
