"""A synchronous, thread-safe, pipelined connection to one broker over the Kafka protocol.

``BrokerConnection`` is the building block of the admin client, the CLI tools, the
consumer's fetchers and the Spark source's executors.  Requests are pipelined:
``send()`` writes a request at once and returns a ``PendingResponse`` (correlation
id -> pending request), so a thread can have a Fetch in flight while it decodes
the previous answer, and a long-poll Fetch of one thread does not keep another
thread from sending its request.  Answers arrive in request order (Kafka's rule,
and our broker's); whichever waiting thread finds no one reading the socket
reads frames and hands each to its request, the others wait on a condition.
``request()`` is ``send().result()``.  On connect it asks ApiVersions (v3, or
whatever the broker's KIP-511 fallback answer allows) and afterwards uses, per
API, the highest version both sides serve, capped by ``CLIENT_MAX``.

It trusts nothing the broker sends: a size prefix that is negative or above
``max_response_bytes`` is refused before anything is allocated, every answer's
correlation id must be the oldest pending one, and the body goes through the
hostile-input decoders.  Any such failure, or an I/O error, closes the
connection and fails every pending request: the byte stream cannot be trusted
afterwards.

``security`` (a ``security.client.ClientSecurity``) makes the connection speak TLS
and/or SASL as the listener wants: the socket comes from ``client.transport.open_socket``,
which completes the TLS handshake and the SASL login before the first request.
"""

from __future__ import annotations

import itertools
import logging
import select
import socket
import ssl
import threading
import time
from typing import TYPE_CHECKING

from spark_coord import __version__
from spark_coord.client.transport import open_socket, recv_frame, send_parts
from spark_coord.errors import ErrorCode, KafkaError
from spark_coord.wire import protocol
from spark_coord.wire.registry import ApiKey, api_name, served_versions
from spark_coord.wire.types import ProtocolError

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.security.client import ClientSecurity

log = logging.getLogger(__name__)

__all__ = ["BrokerConnection", "BrokerConnectionError", "PendingResponse", "CLIENT_MAX", "DEFAULT_MAX_RESPONSE_BYTES"]

DEFAULT_MAX_RESPONSE_BYTES = 256 * 1024 * 1024

# The highest version our clients send per API (the codec may know more).
CLIENT_MAX: dict[int, int] = {
    ApiKey.API_VERSIONS: 3,
    ApiKey.METADATA: 12,
    ApiKey.PRODUCE: 9,
    ApiKey.FETCH: 12,
    ApiKey.LIST_OFFSETS: 7,
    ApiKey.CREATE_TOPICS: 7,
    ApiKey.DELETE_TOPICS: 5,
}


class BrokerConnectionError(ConnectionError):
    """The connection to a broker failed or was closed; the request may or may not have been applied."""


class BrokerConnection:
    """A blocking socket to one broker; ``request()`` may be called from any thread."""

    def __init__(self, host: str, port: int, client_id: str | None = "spark-coord", timeout: float = 30.0,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES, security: "ClientSecurity | None" = None):
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self._send_lock = threading.Lock()
        self._state = threading.Condition()  # guards _pending and _reading
        self._pending: dict[int, PendingResponse] = {}  # in request order
        self._reading = False
        self._correlation = itertools.count(1)
        self._closed = False
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self.security = security
        try:
            self._sock = open_socket(host, port, timeout, security, client_id)
        except OSError as e:
            raise BrokerConnectionError(f"cannot connect to {host}:{port}: {e}") from e
        try:
            self._negotiate()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ lifecycle
    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port}{', closed' if self._closed else ''})"

    @property
    def closed(self) -> bool:
        return self._closed

    def usable(self) -> bool:
        """Whether a connection kept idle can take the next request: open, and, when no request
        waits for an answer, nothing to read (the broker closing it, or anything it sent unasked,
        makes the socket readable).  Closes it when not."""
        if self._closed:
            return False
        with self._state:
            if self._pending:
                return True
        try:
            readable, _, _ = select.select([self._sock], [], [], 0)
            if readable and isinstance(self._sock, ssl.SSLSocket):
                readable = not _only_tls_records(self._sock)
        except (OSError, ValueError):
            readable = True
        if readable:
            log.debug("%s: closed by the broker while idle", self)
            self.close()
            return False
        return True

    def close(self) -> None:
        """Close the socket and fail every pending request (idempotent)."""
        self._closed = True
        sock = getattr(self, "_sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked reading it (close alone does not)
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass
        with self._state:
            pending, self._pending = list(self._pending.values()), {}
            for p in pending:
                if not p.done:
                    p.error = BrokerConnectionError(f"connection to {self.host}:{self.port} closed while "
                                                    f"{api_name(p.api_key)} was waiting for its answer")
                    p.done = True
            self._state.notify_all()

    def __enter__(self) -> "BrokerConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- negotiation
    def _negotiate(self) -> None:
        """ApiVersions v3; on UNSUPPORTED_VERSION retry once at the version the broker's fallback answer names."""
        version = CLIENT_MAX[ApiKey.API_VERSIONS]
        body = {"client_software_name": "spark-coord", "client_software_version": __version__}
        for _ in range(2):
            resp = self._roundtrip(ApiKey.API_VERSIONS, version, body, self.timeout)
            table = {int(a["api_key"]): (a["min_version"], a["max_version"]) for a in resp["api_keys"]}
            if resp["error_code"] == ErrorCode.UNSUPPORTED_VERSION:
                theirs = table.get(ApiKey.API_VERSIONS, (0, 0))
                retry = min(theirs[1], version - 1)
                if retry < theirs[0] or retry < 0:
                    break
                log.debug("%s: ApiVersions v%d unsupported, retrying at v%d", self, version, retry)
                version = retry
                continue
            if resp["error_code"]:
                raise KafkaError(resp["error_code"], f"ApiVersions from {self.host}:{self.port}")
            self.broker_versions = table
            return
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"no common ApiVersions version with {self.host}:{self.port}")

    def version_for(self, api_key: int) -> int | None:
        """The version this connection uses for ``api_key``, or None if there is no common one."""
        ours = served_versions(api_key)
        theirs = self.broker_versions.get(int(api_key))
        if ours is None or theirs is None:
            return None
        high = min(ours[1], theirs[1], CLIENT_MAX.get(api_key, ours[1]))
        low = max(ours[0], theirs[0])
        return high if high >= low else None

    def _pick_version(self, api_key: int, version: int | None) -> int:
        if version is None:
            version = self.version_for(api_key)
            if version is None:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                                 f"{api_name(api_key)}: no version in common with {self.host}:{self.port}")
        return version

    # ------------------------------------------------------------------- requests
    def request(self, api_key: int, body: dict, version: int | None = None, timeout: float | None = None) -> dict:
        """Send one request and return the decoded response body.

        Raises BrokerConnectionError on I/O failure, ProtocolError on a bad answer
        (both close the connection), KafkaError(UNSUPPORTED_VERSION) if the broker
        serves no version we can speak.
        """
        return self.send(api_key, body, version, timeout).result()

    def send(self, api_key: int, body: dict, version: int | None = None, timeout: float | None = None,
             into: bytearray | None = None) -> "PendingResponse":
        """Write one request now; its answer comes from ``result()`` of the returned object.

        ``timeout`` (seconds, default the connection's) bounds the wait for the answer
        from now on.  ``into``: a buffer to receive the answer's frame in when it is
        big enough (a reader that alternates two buffers does not fault in new pages
        for every fetch).
        """
        version = self._pick_version(api_key, version)
        return self._send_request(api_key, version, body, self.timeout if timeout is None else timeout, into)

    def send_only(self, api_key: int, body: dict, version: int | None = None) -> None:
        """Send a request that gets no response (Produce with acks=0)."""
        version = self._pick_version(api_key, version)
        with self._send_lock:
            correlation_id = self._next_correlation_id()
            frame = protocol.encode_request_parts(api_key, version, correlation_id, self.client_id, body)
            self._send(frame, self.timeout)

    def _roundtrip(self, api_key: int, version: int, body: dict, timeout: float) -> dict:
        return self._send_request(api_key, version, body, timeout, None).result()

    def _send_request(self, api_key: int, version: int, body: dict, timeout: float,
                      into: bytearray | None) -> "PendingResponse":
        with self._send_lock:
            correlation_id = self._next_correlation_id()
            frame = protocol.encode_request_parts(api_key, version, correlation_id, self.client_id, body)
            pending = PendingResponse(self, api_key, version, correlation_id, time.monotonic() + timeout, into)
            with self._state:
                self._check_open()
                self._pending[correlation_id] = pending
            try:
                self._send(frame, timeout)
            except BrokerConnectionError:
                self.close()
                raise
        return pending

    def _wait(self, pending: "PendingResponse") -> None:
        """Until ``pending`` has its frame (or error): read frames while no other thread does."""
        with self._state:
            while not pending.done and self._reading:
                left = pending.deadline - time.monotonic()
                if left <= 0:
                    break
                self._state.wait(left)
            if pending.done:
                return
            if self._reading:  # our deadline passed while another thread was reading
                self._state.release()
                try:
                    self.close()
                finally:
                    self._state.acquire()
                pending.error = pending.error or BrokerConnectionError(
                    f"receiving from {self.host}:{self.port}: timed out")
                pending.done = True
                return
            self._reading = True
        try:
            while not pending.done:
                with self._state:
                    oldest = next(iter(self._pending.values()), None)
                if oldest is None:
                    break
                frame = self._receive(oldest.deadline, oldest.into)
                got = protocol.peek_correlation_id(frame)
                if got != oldest.correlation_id:
                    self.close()
                    raise ProtocolError(f"{self.host}:{self.port} answered correlation id {got}, "
                                        f"expected {oldest.correlation_id}")
                with self._state:
                    self._pending.pop(got, None)
                    oldest.frame = frame
                    oldest.done = True
                    self._state.notify_all()
        finally:
            with self._state:
                self._reading = False
                self._state.notify_all()

    def _next_correlation_id(self) -> int:
        """Positive int32 ids, wrapping (called under the send lock)."""
        return next(self._correlation) & 0x7FFFFFFF

    def _check_open(self) -> None:
        if self._closed:
            raise BrokerConnectionError(f"connection to {self.host}:{self.port} is closed")

    def _send(self, frame: list[bytes], timeout: float) -> None:
        self._check_open()
        try:
            self._sock.settimeout(timeout)
            send_parts(self._sock, frame)
        except OSError as e:
            self.close()
            raise BrokerConnectionError(f"sending to {self.host}:{self.port}: {e}") from e

    def _receive(self, deadline: float, into: bytearray | None) -> memoryview:
        peer = f"{self.host}:{self.port}"
        try:
            return recv_frame(self._sock, deadline, 4, self.max_response_bytes, peer, into=into)
        except ProtocolError:
            self.close()
            raise
        except OSError as e:
            self.close()
            raise BrokerConnectionError(f"receiving from {peer}: {e}") from e


def _only_tls_records(sock: ssl.SSLSocket) -> bool:
    """Whether what made an idle TLS socket readable was TLS's own (a TLS 1.3 session ticket), not
    application data or the end of the stream."""
    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        sock.recv(1)
        return False  # application data nobody asked for, or b"": the peer closed
    except ssl.SSLWantReadError:
        return True
    finally:
        sock.settimeout(timeout)


class PendingResponse:
    """A request written to a ``BrokerConnection`` whose answer may not have arrived yet."""

    __slots__ = ("conn", "api_key", "version", "correlation_id", "deadline", "into", "frame", "error", "done")

    def __init__(self, conn: BrokerConnection, api_key: int, version: int, correlation_id: int, deadline: float,
                 into: bytearray | None) -> None:
        self.conn = conn
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.deadline = deadline
        self.into = into
        self.frame: memoryview | None = None
        self.error: BaseException | None = None
        self.done = False

    def result(self) -> dict:
        """The decoded response body; raises as ``BrokerConnection.request`` does."""
        conn = self.conn
        if not self.done:
            conn._wait(self)
        if self.error is not None:
            raise self.error
        if self.frame is None:
            raise BrokerConnectionError(f"connection to {conn.host}:{conn.port} closed before the answer came")
        try:
            _, resp = protocol.decode_response(self.api_key, self.version, self.frame)
        except ProtocolError as e:
            conn.close()
            raise ProtocolError(f"bad {api_name(self.api_key)} v{self.version} response from "
                                f"{conn.host}:{conn.port}: {e}") from e
        return resp
