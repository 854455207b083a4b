"""``ConsumerCoordinatorConnector``: the thread that owns a member's coordinator channel.

The algorithm of seeds 001 (Consumer.onStartup / onLostConnection / Connector.*)
and 003 sections 7, 8 and 11:

1. Discovery: ClusterMetadata round-robin over the brokers (``Discovery``),
   retrying with exponential backoff until closed.
2. Connect to the coordinator and send RegisterConsumer.  An error code is logged,
   the channel closed, and after a backoff discovery starts again
   (CONSUMER_ID_ALREADY_REGISTERED is expected for a moment after a reconnect,
   until the coordinator has failed our old session).
3. Serve the channel: read requests FROM the coordinator and answer each with the
   same correlation id -- Ping (offsets when there are any to report), StopFetcher
   (stop the fetchers, then answer with the offsets), StartFetcher (adopt the
   generation, assignment and start offsets, start the fetchers, answer).
   A request stamped with a coordinator epoch older than the newest one seen is
   refused with STALE_COORDINATOR_EPOCH (a deposed coordinator, DESIGN 6).
4. Lost connection, a protocol violation, or silence for a whole session timeout:
   stop the fetchers and go back to 1.

``close()`` makes sure the final offsets reach the coordinator (003 section 11,
handlePingRequest 1.2): answer a Ping (or StopFetcher) with the final offsets,
then wait for the coordinator's next request -- proof that the answer arrived --
each wait bounded by the session timeout; then close.

The connector knows nothing about fetching: it drives a ``Member`` (the
``Consumer``, or a test double) through four calls.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from spark_coord.consumer.channel import ChannelClosed, CoordinatorChannel
from spark_coord.consumer.discovery import ClusterView, Discovery
from spark_coord.errors import ErrorCode
from spark_coord.wire import coordinator as api
from spark_coord.wire.protocol import RequestHeader
from spark_coord.wire.registry import api_name
from spark_coord.wire.types import ProtocolError

log = logging.getLogger(__name__)

__all__ = ["ConsumerCoordinatorConnector", "Member", "Registration", "TopicPartition"]

TopicPartition = tuple[str, int]


class Member(Protocol):
    """What the connector asks of the consumer it serves (all called on the connector's thread)."""

    def report_offsets(self) -> list[dict]:
        """``[{topic, partition, offset}]`` to put in a Ping/StopFetcher answer (may be empty)."""

    def stop_fetchers(self) -> None:
        """Stop fetching and drop buffered data (positions are kept for the answer)."""

    def start_fetchers(self, generation_id: int, assignment: dict[TopicPartition, int],
                       threads: dict[TopicPartition, str], brokers: dict[int, tuple[str, int]]) -> None:
        """Adopt a new assignment (start offset -1: apply auto.offset.reset) and fetch it."""

    def connection_lost(self) -> None:
        """The coordinator is gone: fetchers must be stopped until a new StartFetcher."""


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
    session_timeout_ms: int = 10000

    def body(self) -> dict:
        return {"group_id": self.group_id, "consumer_id": self.consumer_id,
                "topics": [{"topic": t, "streams": n} for t, n in sorted(self.topics.items())],
                "pattern": self.pattern, "pattern_streams": self.pattern_streams, "auto_commit": self.auto_commit,
                "auto_offset_reset": self.auto_offset_reset, "session_timeout_ms": self.session_timeout_ms}


class _Shutdown(Enum):
    RUNNING = 0
    REQUESTED = 1      # close() called: the next Ping/StopFetcher answer carries the final offsets
    FINAL_SENT = 2     # final offsets sent: the next request from the coordinator proves they arrived
    DONE = 3


class ConsumerCoordinatorConnector(threading.Thread):
    """Discovers the coordinator, registers, and answers its requests until ``close()``."""

    def __init__(self, bootstrap: list[tuple[str, int]], registration: Registration, member: Member, *,
                 client_id: str | None = "spark-coord", socket_timeout_ms: int = 10000,
                 backoff_ms: int = 100, max_backoff_ms: int = 2000):
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
        self.discovery = Discovery(bootstrap, client_id, self.socket_timeout)
        self.coordinator_epoch = -1            # the newest epoch seen (fencing)
        self.generation_id = -1
        self.coordinator: ClusterView | None = None
        self.registered = threading.Event()    # set while registered with a coordinator
        self.registrations = 0                 # successful registrations so far (tests, metrics)
        self.last_error: int | None = None     # last RegisterConsumer error code
        self._closing = threading.Event()
        self._state_lock = threading.Lock()
        self._shutdown = _Shutdown.RUNNING
        self._channel: CoordinatorChannel | None = None
        self._failures = 0

    # ------------------------------------------------------------------- lifecycle
    @property
    def closing(self) -> bool:
        """True once ``close()`` was called (the final-offsets handshake may still be running)."""
        return self._closing.is_set()

    def close(self, timeout: float | None = None) -> None:
        """Stop after the final offsets reached the coordinator (bounded by about two session
        timeouts), then close the channel and join the thread."""
        with self._state_lock:
            if self._shutdown is _Shutdown.RUNNING:
                self._shutdown = _Shutdown.REQUESTED
        self._closing.set()
        channel = self._channel
        if channel is not None:
            channel.wake()
        if self.is_alive():
            self.join(timeout if timeout is not None else 2 * self.session_timeout + 2 * self.socket_timeout)
        if self.is_alive():
            log.warning("%s: did not stop in time; closing its channel", self.name)
            if self._channel is not None:
                self._channel.close()

    def run(self) -> None:
        try:
            while not self._closing.is_set():
                view = self._discover()
                if view is None:
                    break
                channel = self._register(view)
                if channel is None:
                    self._wait_backoff()
                    continue
                try:
                    self._serve(channel)
                finally:
                    self.registered.clear()
                    self._channel = None
                    channel.close()
                    self.member.connection_lost()
                if not self._closing.is_set():
                    self._wait_backoff()
        except Exception:  # never die silently: the member would hang unassigned
            log.exception("%s: unexpected failure", self.name)
            self.registered.clear()
            self.member.connection_lost()
        finally:
            log.info("%s: stopped", self.name)

    def _wait_backoff(self) -> None:
        self._failures += 1
        delay = min(self.max_backoff, self.backoff * 2 ** min(self._failures - 1, 16))
        self._closing.wait(delay * (0.8 + 0.4 * random.random()))

    # --------------------------------------------------------------------- discovery
    def _discover(self) -> ClusterView | None:
        while not self._closing.is_set():
            view = self.discovery.one_round()
            if view is not None:
                if view.coordinator_epoch >= 0 and view.coordinator_epoch < self.coordinator_epoch:
                    log.info("discovery named coordinator %d of epoch %d, older than %d: retrying",
                             view.coordinator_id, view.coordinator_epoch, self.coordinator_epoch)
                else:
                    self.coordinator_epoch = max(self.coordinator_epoch, view.coordinator_epoch)
                    return view
            self._wait_backoff()
        return None

    def _register(self, view: ClusterView) -> CoordinatorChannel | None:
        host, port = view.coordinator_address  # type: ignore[misc]
        reg = self.registration
        try:
            channel = CoordinatorChannel(host, port, self.client_id, self.socket_timeout)
        except ChannelClosed as e:
            log.info("cannot connect to coordinator %d: %s", view.coordinator_id, e)
            return None
        try:
            resp = channel.request(api.REGISTER_CONSUMER, reg.body())
        except (ChannelClosed, ProtocolError) as e:
            log.info("RegisterConsumer to coordinator %d at %s:%d failed: %s", view.coordinator_id, host, port, e)
            channel.close()
            return None
        code = resp["error_code"]
        self.last_error = code
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
        self.coordinator = view
        self._channel = channel
        self._failures = 0
        self.registrations += 1
        self.registered.set()
        log.info("registered %s in group %s with coordinator %d (epoch %d) at %s:%d", reg.consumer_id,
                 reg.group_id, view.coordinator_id, self.coordinator_epoch, host, port)
        return channel

    # ------------------------------------------------------------------------- serve
    def _serve(self, channel: CoordinatorChannel) -> None:
        """Answer the coordinator until the channel is lost, silent, or shutdown completes."""
        last_heard = time.monotonic()
        shutdown_since: float | None = None
        while True:
            now = time.monotonic()
            if self._shutdown_state() is not _Shutdown.RUNNING:
                if shutdown_since is None:
                    shutdown_since = now
                    if not self.member.report_offsets():
                        self._set_shutdown(_Shutdown.DONE)  # nothing to hand over: leave at once
                if self._shutdown_state() is _Shutdown.DONE:
                    return
                if now - shutdown_since >= self.session_timeout:
                    log.warning("%s: no request from the coordinator within %.1f s of close(); the last "
                                "offsets may not have been committed", self.name, self.session_timeout)
                    return
                wait = shutdown_since + self.session_timeout - now
            else:
                silent = now - last_heard
                if silent >= self.session_timeout:
                    log.warning("no request from coordinator for %.1f s (session timeout): reconnecting", silent)
                    return
                wait = self.session_timeout - silent
            try:
                got = channel.receive_request(wait)
            except (ChannelClosed, ProtocolError) as e:
                log.warning("coordinator channel lost: %s", e)
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
            if self._shutdown_state() is not _Shutdown.RUNNING:
                shutdown_since = time.monotonic()  # each wait of the close handshake gets a full session timeout

    def _shutdown_state(self) -> _Shutdown:
        with self._state_lock:
            return self._shutdown

    def _set_shutdown(self, state: _Shutdown) -> None:
        with self._state_lock:
            self._shutdown = state

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
        state = self._shutdown_state()
        if state is _Shutdown.FINAL_SENT:
            # the coordinator spoke again after our final answer: that answer arrived
            self._set_shutdown(_Shutdown.DONE)
        if key == api.PING:
            log.debug("ping #%d (generation %d)", body["num_retries"], body["generation_id"])
            channel.respond(header, dict(answer, error_code=ErrorCode.NONE, offsets=self.member.report_offsets()))
        elif key == api.STOP_FETCHER:
            log.info("StopFetcher (generation %d)", body["generation_id"])
            self.member.stop_fetchers()
            channel.respond(header, dict(answer, error_code=ErrorCode.NONE, offsets=self.member.report_offsets()))
        else:
            code = ErrorCode.NONE
            if state is _Shutdown.RUNNING:
                code = self._start_fetchers(body)
            else:
                log.info("StartFetcher during close: not starting fetchers")
            self.generation_id = body["generation_id"] if code == ErrorCode.NONE else self.generation_id
            channel.respond(header, {"error_code": code, "consumer_id": self.registration.consumer_id,
                                     "generation_id": self.generation_id})
            return
        if state is _Shutdown.REQUESTED:
            self._set_shutdown(_Shutdown.FINAL_SENT)

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
        try:
            self.member.start_fetchers(body["generation_id"], assignment, threads, brokers)
        except Exception:
            log.exception("starting fetchers failed")
            return ErrorCode.UNKNOWN_SERVER_ERROR
        return ErrorCode.NONE
