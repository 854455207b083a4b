"""One blocking socket to a broker speaking the coordinator protocol, in both directions.

The member first sends requests (ClusterMetadata, RegisterConsumer) and reads their
answers; after registration the coordinator sends requests (Ping, StopFetcher,
StartFetcher) on the same socket and the member answers them.  ``CoordinatorChannel``
does both: ``request()`` for the first phase, ``receive_request()`` / ``respond()``
for the second.

Nothing the peer sends is trusted: a size prefix that is below the smallest
possible frame or above ``max_frame_bytes`` is refused before anything is
allocated, and bodies go through the hostile-input decoders.  Any such failure
raises ``ProtocolError`` (or ``ChannelClosed`` for I/O); the byte stream cannot be
trusted afterwards, so the caller closes the channel and reconnects.
"""

from __future__ import annotations

import itertools
import logging
import select
import socket
import threading
import time

from spark_coord.client.sockio import recv_frame
from spark_coord.wire import protocol
from spark_coord.wire.protocol import RequestHeader
from spark_coord.wire.registry import api_name
from spark_coord.wire.types import ProtocolError

log = logging.getLogger(__name__)

__all__ = ["CoordinatorChannel", "ChannelClosed", "DEFAULT_MAX_FRAME_BYTES"]

#: Coordinator messages are small; a StartFetcher for thousands of partitions fits easily.
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
_MIN_REQUEST_FRAME = 10   # api_key, api_version, correlation_id, client_id length
_MIN_RESPONSE_FRAME = 4   # correlation_id


class ChannelClosed(ConnectionError):
    """The connection failed or was closed (by either side)."""


class CoordinatorChannel:
    """A connected socket plus Kafka framing; one reader thread at a time."""

    def __init__(self, host: str, port: int, client_id: str | None = "spark-coord", timeout: float = 10.0,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES):
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout = timeout
        self.max_frame_bytes = max_frame_bytes
        self._correlation = itertools.count(1)
        self._send_lock = threading.Lock()
        self._closed = False
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise ChannelClosed(f"cannot connect to {host}:{port}: {e}") from e
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._wake_r, self._wake_w = socket.socketpair()

    def __repr__(self) -> str:
        return f"CoordinatorChannel({self.host}:{self.port}{', closed' if self._closed else ''})"

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the socket (idempotent, any thread); a blocked ``receive_request`` returns at once."""
        if self._closed:
            return
        self._closed = True
        self.wake()
        for s in (self._sock, self._wake_w, self._wake_r):
            try:
                s.close()
            except OSError:
                pass

    def wake(self) -> None:
        """Make a blocked ``receive_request`` return None now (used on shutdown)."""
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    # --------------------------------------------------------------- member -> broker
    def request(self, api_key: int, body: dict, timeout: float | None = None) -> dict:
        """Send a request and read its answer (the first phase of the channel's life)."""
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        frame = protocol.encode_request(api_key, 0, correlation_id, self.client_id, body)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        self._send(frame)
        answer = self._read_frame(deadline, _MIN_RESPONSE_FRAME)
        got = protocol.peek_correlation_id(answer)
        if got != correlation_id:
            raise ProtocolError(f"{self.host}:{self.port} answered correlation id {got}, expected {correlation_id}")
        try:
            return protocol.decode_response(api_key, 0, answer)[1]
        except ProtocolError as e:
            raise ProtocolError(f"bad {api_name(api_key)} response from {self.host}:{self.port}: {e}") from e

    # --------------------------------------------------------------- broker -> member
    def receive_request(self, timeout: float) -> tuple[RequestHeader, dict] | None:
        """The next request the coordinator sends, or None if none started within ``timeout``
        (or ``wake()`` was called).  Raises ProtocolError (also for an api we do not serve)
        and ChannelClosed."""
        if self._closed:
            raise ChannelClosed(f"channel to {self.host}:{self.port} is closed")
        try:
            readable, _, _ = select.select([self._sock, self._wake_r], [], [], max(0.0, timeout))
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
        frame = self._read_frame(time.monotonic() + self.timeout, _MIN_REQUEST_FRAME)
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
        with self._send_lock:
            try:
                self._sock.settimeout(self.timeout)
                self._sock.sendall(frame)
            except OSError as e:
                raise ChannelClosed(f"sending to {self.host}:{self.port}: {e}") from e

    def _read_frame(self, deadline: float, min_size: int) -> memoryview:
        try:
            return recv_frame(self._sock, deadline, min_size, self.max_frame_bytes, f"{self.host}:{self.port}")
        except OSError as e:
            raise ChannelClosed(f"receiving from {self.host}:{self.port}: {e}") from e
