"""A synchronous, thread-safe connection to one broker over the Kafka protocol.

``BrokerConnection`` is the building block of the admin client, the CLI tools and
the consumer's fetchers.  One lock covers a request's send and its receive, so
threads can share a connection and answers never cross.  On connect it asks
ApiVersions (v3, or whatever the broker's KIP-511 fallback answer allows) and
afterwards uses, per API, the highest version both sides serve, capped by
``CLIENT_MAX``.

It trusts nothing the broker sends: a size prefix that is negative or above
``max_response_bytes`` is refused before anything is allocated, the correlation
id of every answer is checked, and the body goes through the hostile-input
decoders.  Any such failure, or an I/O error, closes the connection: the byte
stream cannot be trusted afterwards.
"""

from __future__ import annotations

import itertools
import logging
import socket
import threading
import time

from spark_coord import __version__
from spark_coord.client.sockio import recv_frame
from spark_coord.errors import ErrorCode, KafkaError
from spark_coord.wire import protocol
from spark_coord.wire.registry import ApiKey, api_name, served_versions
from spark_coord.wire.types import ProtocolError

log = logging.getLogger(__name__)

__all__ = ["BrokerConnection", "BrokerConnectionError", "CLIENT_MAX", "DEFAULT_MAX_RESPONSE_BYTES"]

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
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES):
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self._lock = threading.Lock()
        self._correlation = itertools.count(1)
        self._closed = False
        self.broker_versions: dict[int, tuple[int, int]] = {}
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise BrokerConnectionError(f"cannot connect to {host}:{port}: {e}") from e
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
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

    def close(self) -> None:
        """Close the socket (idempotent)."""
        self._closed = True
        sock = getattr(self, "_sock", None)
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

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
        version = self._pick_version(api_key, version)
        return self._roundtrip(api_key, version, body, self.timeout if timeout is None else timeout)

    def send_only(self, api_key: int, body: dict, version: int | None = None) -> None:
        """Send a request that gets no response (Produce with acks=0)."""
        version = self._pick_version(api_key, version)
        with self._lock:
            correlation_id = self._next_correlation_id()
            frame = protocol.encode_request(api_key, version, correlation_id, self.client_id, body)
            self._send(frame, self.timeout)

    def _roundtrip(self, api_key: int, version: int, body: dict, timeout: float) -> dict:
        with self._lock:
            correlation_id = self._next_correlation_id()
            frame = protocol.encode_request(api_key, version, correlation_id, self.client_id, body)
            deadline = time.monotonic() + timeout
            self._send(frame, timeout)
            answer = self._receive(deadline)
            got = protocol.peek_correlation_id(answer)
            if got != correlation_id:
                self.close()
                raise ProtocolError(f"{self.host}:{self.port} answered correlation id {got}, "
                                    f"expected {correlation_id}")
            try:
                _, resp = protocol.decode_response(api_key, version, answer)
            except ProtocolError as e:
                self.close()
                raise ProtocolError(f"bad {api_name(api_key)} v{version} response from "
                                    f"{self.host}:{self.port}: {e}") from e
            return resp

    def _next_correlation_id(self) -> int:
        """Positive int32 ids, wrapping (called under the lock)."""
        return next(self._correlation) & 0x7FFFFFFF

    def _check_open(self) -> None:
        if self._closed:
            raise BrokerConnectionError(f"connection to {self.host}:{self.port} is closed")

    def _send(self, frame: bytes, timeout: float) -> None:
        self._check_open()
        try:
            self._sock.settimeout(timeout)
            self._sock.sendall(frame)
        except OSError as e:
            self.close()
            raise BrokerConnectionError(f"sending to {self.host}:{self.port}: {e}") from e

    def _receive(self, deadline: float) -> memoryview:
        peer = f"{self.host}:{self.port}"
        try:
            return recv_frame(self._sock, deadline, 4, self.max_response_bytes, peer)
        except ProtocolError:
            self.close()
            raise
        except OSError as e:
            self.close()
            raise BrokerConnectionError(f"receiving from {peer}: {e}") from e
