"""One blocking socket to a broker speaking the coordinator protocol, in both directions.

The member first sends requests (ClusterMetadata, RegisterConsumer) and reads their
answers (``request()``).  After registration frames flow both ways on the same
socket: the coordinator sends requests (Ping, StopFetcher, StartFetcher) that the
member answers (``receive_request()`` / ``respond()``), and the member sends its own
CommitOffsets (``send_request()``, from any thread) whose answers arrive between
the coordinator's requests.  One thread reads (the connector's); it hands each
response frame to the request it answers.  Every correlation id the member uses
is negative, so a frame whose first int32 is negative is a response and any other
is a request (``wire.coordinator.is_response_frame``).

Nothing the peer sends is trusted: a size prefix that is below the smallest
possible frame or above ``max_frame_bytes`` is refused before anything is
allocated, and bodies go through the hostile-input decoders.  Any such failure
raises ``ProtocolError`` (or ``ChannelClosed`` for I/O); the byte stream cannot be
trusted afterwards, so the caller closes the channel and reconnects.  Closing
fails every request still waiting for its answer.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import ssl
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING

from spark_coord.client.transport import SaslAuthenticationFailed, open_socket, recv_frame
from spark_coord.wire import coordinator as api
from spark_coord.wire import protocol
from spark_coord.wire.protocol import RequestHeader
from spark_coord.wire.registry import api_name
from spark_coord.wire.types import ProtocolError

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.security.client import ClientSecurity

log = logging.getLogger(__name__)

__all__ = ["CoordinatorChannel", "ChannelClosed", "DEFAULT_MAX_FRAME_BYTES"]

#: Coordinator messages are small; a StartFetcher for thousands of partitions fits easily.
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
_MIN_FRAME = 4   # a response's correlation id; a request is longer, which its decoder checks


class ChannelClosed(ConnectionError):
    """The connection failed or was closed (by either side)."""


class CoordinatorChannel:
    """A connected socket plus Kafka framing; one reader thread at a time."""

    def __init__(self, host: str, port: int, client_id: str | None = "spark-coord", timeout: float = 10.0,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, security: "ClientSecurity | None" = None):
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout = timeout
        self.max_frame_bytes = max_frame_bytes
        self._correlation = api.correlation_ids()
        self._send_lock = threading.Lock()
        self._pending: dict[int, tuple[int, int, Future]] = {}
        self._pending_lock = threading.Lock()
        self._closed = False
        try:
            self._sock = open_socket(host, port, timeout, security, client_id)
        except SaslAuthenticationFailed as e:
            raise ChannelClosed(f"{host}:{port} refused our credentials: {e}") from e
        except OSError as e:
            raise ChannelClosed(f"cannot connect to {host}:{port}: {e}") from e
        # An SSL socket must not be read and written by two threads at once (OpenSSL's rule): over
        # TLS every read and write of a frame holds this lock; plain sockets need none.
        self._tls_lock = threading.Lock() if isinstance(self._sock, ssl.SSLSocket) else None
        self._wake_r, self._wake_w = socket.socketpair()

    def __repr__(self) -> str:
        return f"CoordinatorChannel({self.host}:{self.port}{', closed' if self._closed else ''})"

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the socket (idempotent, any thread); a blocked ``receive_request`` returns at once
        and every request still waiting for its answer fails with ``ChannelClosed``."""
        if self._closed:
            return
        self._closed = True
        self.wake()
        for s in (self._sock, self._wake_w, self._wake_r):
            try:
                s.close()
            except OSError:
                pass
        with self._pending_lock:
            pending, self._pending = self._pending, {}
        for _, _, fut in pending.values():
            if not fut.done():
                fut.set_exception(ChannelClosed(f"channel to {self.host}:{self.port} closed"))

    def wake(self) -> None:
        """Make a blocked ``receive_request`` return None now."""
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    # --------------------------------------------------------------- member -> broker
    def request(self, api_key: int, body: dict, timeout: float | None = None, version: int = api.VERSION) -> dict:
        """Send a request and read its answer, before anyone reads the channel in the background
        (discovery, registration)."""
        correlation_id = next(self._correlation)
        frame = protocol.encode_request(api_key, version, correlation_id, self.client_id, body)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        self._send(frame)
        answer = self._read_frame(deadline)
        if not api.is_response_frame(answer) or protocol.peek_correlation_id(answer) != correlation_id:
            raise ProtocolError(f"{self.host}:{self.port} answered with something else than correlation id "
                                f"{correlation_id}")
        try:
            return protocol.decode_response(api_key, version, answer)[1]
        except ProtocolError as e:
            raise ProtocolError(f"bad {api_name(api_key)} response from {self.host}:{self.port}: {e}") from e

    def send_request(self, api_key: int, body: dict, version: int = api.VERSION) -> "Future[dict]":
        """Send a request from any thread while another thread reads the channel
        (``receive_request``); the future gets the decoded answer, or ``ChannelClosed``."""
        fut: Future[dict] = Future()
        correlation_id = next(self._correlation)
        frame = protocol.encode_request(api_key, version, correlation_id, self.client_id, body)
        with self._pending_lock:
            if self._closed:
                fut.set_exception(ChannelClosed(f"channel to {self.host}:{self.port} is closed"))
                return fut
            self._pending[correlation_id] = (api_key, version, fut)
        try:
            self._send(frame)
        except ChannelClosed as e:
            with self._pending_lock:
                self._pending.pop(correlation_id, None)
            if not fut.done():
                fut.set_exception(e)
        return fut

    def _take_response(self, frame) -> None:
        correlation_id = protocol.peek_correlation_id(frame)
        with self._pending_lock:
            entry = self._pending.pop(correlation_id, None)
        if entry is None:
            log.info("%s:%d answered correlation id %d, which nothing waits for; dropped", self.host, self.port,
                     correlation_id)
            return
        api_key, version, fut = entry
        try:
            body = protocol.decode_response(api_key, version, frame)[1]
        except ProtocolError as e:
            fut.set_exception(e)
            raise ProtocolError(f"bad {api_name(api_key)} response from {self.host}:{self.port}: {e}") from e
        fut.set_result(body)

    # --------------------------------------------------------------- broker -> member
    def receive_request(self, timeout: float) -> tuple[RequestHeader, dict] | None:
        """The next request the coordinator sends, or None if none started within ``timeout``
        (or ``wake()`` was called, or an answer to ``send_request`` came in and resolved its
        future).  Raises ProtocolError (also for an api we do not serve) and ChannelClosed."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            if self._closed:
                raise ChannelClosed(f"channel to {self.host}:{self.port} is closed")
            try:
                if self._tls_lock is not None and self._sock.pending():
                    readable = [self._sock]  # decrypted bytes wait in the SSL object, select cannot see them
                else:
                    readable, _, _ = select.select([self._sock, self._wake_r], [], [],
                                                   max(0.0, deadline - time.monotonic()))
            except (OSError, ValueError) as e:
                raise ChannelClosed(f"waiting on {self.host}:{self.port}: {e}") from e
            if self._wake_r in readable:
                try:
                    self._wake_r.recv(64)
                except OSError:
                    pass
                if self._sock not in readable:
                    return None
            if not readable:
                return None
            frame = self._read_frame(time.monotonic() + self.timeout)
            if api.is_response_frame(frame):
                self._take_response(frame)
                return None  # whoever waits on that answer sees it now (the caller waits again if it likes)
            try:
                return protocol.decode_request(frame)
            except protocol.UnsupportedRequest as e:
                raise ProtocolError(f"{self.host}:{self.port} sent an unknown request: {e}") from e

    def respond(self, header: RequestHeader, body: dict) -> None:
        """Answer the request ``header`` (same correlation id)."""
        self._send(b"".join(protocol.encode_response(header, body)))  # coordinator bodies carry no file regions

    # ------------------------------------------------------------------------- bytes
    def _send(self, frame: bytes) -> None:
        if self._closed:
            raise ChannelClosed(f"channel to {self.host}:{self.port} is closed")
        with self._send_lock, (self._tls_lock or contextlib.nullcontext()):
            try:
                self._sock.settimeout(self.timeout)
                self._sock.sendall(frame)
            except OSError as e:
                raise ChannelClosed(f"sending to {self.host}:{self.port}: {e}") from e

    def _read_frame(self, deadline: float) -> memoryview:
        try:
            with self._tls_lock or contextlib.nullcontext():
                return recv_frame(self._sock, deadline, _MIN_FRAME, self.max_frame_bytes, f"{self.host}:{self.port}")
        except OSError as e:
            raise ChannelClosed(f"receiving from {self.host}:{self.port}: {e}") from e
