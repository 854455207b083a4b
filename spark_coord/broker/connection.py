"""One client connection of the broker: framing, request loop, ordered responses.

Kafka's framing: every frame is an int32 size followed by that many bytes.  The
size is checked against ``socket.request.max.bytes`` BEFORE anything is read or
allocated; a negative or oversized prefix closes the connection with a log line.

Requests of one connection are processed one at a time, in order (as Kafka
mutes a channel while a request is in flight), so responses are written in
request order without a reorder queue.  Response parts that are ``FileRegion``\\ s
(Fetch record sets) are written with ``loop.sendfile`` on a private descriptor of
the segment file, so the bytes go from the page cache to the socket.

Server-initiated requests (the seam for a coordinator that pushes Ping /
StopFetcher / StartFetcher to a connected member): ``send_request()`` writes a
request frame with a negative correlation id of the broker's own and returns a
future.  An incoming frame whose first int32 is negative is a RESPONSE (a request
starts with ``api_key << 16 | api_version``, never negative; see
``wire.coordinator``): it resolves the pending request with that id, or is
dropped with a log line when nothing waits for it.  Every pending future fails
when the connection closes.

A handler may answer later: it returns ``DEFERRED`` and writes its response itself
with ``write_response`` (the coordinator's CommitOffsets answers once ZooKeeper has
the offsets, while the member's ping answers keep being read).

Authentication (``auth``, a ``security.principal.ConnectionAuth``): on a SASL listener
nothing but ApiVersions, SaslHandshake and SaslAuthenticate is served until the
client has authenticated; any other request closes the connection unanswered, and
frames are bounded by ``sasl.server.max.receive.size`` until then.  A handler that
sets ``close_after_response`` (a failed authentication) has its answer written and
the connection closed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import struct
from typing import Any, Awaitable, Callable

from spark_coord.metrics.broker import NO_BROKER_METRICS, BrokerMetrics
from spark_coord.records.region import FileRegion
from spark_coord.security.principal import ConnectionAuth
from spark_coord.wire.coordinator import correlation_id as nth_correlation_id
from spark_coord.wire.protocol import (
    ProtocolError,
    RequestHeader,
    UnsupportedRequest,
    decode_request,
    decode_response,
    encode_api_versions_fallback,
    encode_request,
    encode_response,
    peek_correlation_id,
)
from spark_coord.wire.registry import ApiKey, api_name

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")

#: ``dispatch(connection, header, body) -> response body | None`` (None: no response, e.g. acks=0).
Dispatch = Callable[["Connection", RequestHeader, dict], Awaitable["dict | None"]]
#: A handler's "no response now": it writes its answer later with ``Connection.write_response``.
DEFERRED = None


class ConnectionClosed(ConnectionError):
    """The connection closed while a server-initiated request was waiting for its answer."""


class Connection:
    """A client connection: reads request frames, dispatches them, writes responses.

    ``max_request_bytes`` bounds a frame (``socket.request.max.bytes``);
    ``idle_timeout`` (seconds, ``connections.max.idle.ms``) closes a connection that
    sends nothing for that long.  ``on_close`` callbacks run once when it ends.
    ``advertised()`` gives the api list of the KIP-511 fallback answer (default: the
    whole wire registry).
    """

    _ids = itertools.count(1)

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, dispatch: Dispatch,
                 max_request_bytes: int, idle_timeout: float,
                 advertised: Callable[[], list[dict]] | None = None, auth: ConnectionAuth | None = None,
                 metrics: BrokerMetrics = NO_BROKER_METRICS):
        self.id = next(self._ids)
        self.reader = reader
        self.writer = writer
        self._dispatch = dispatch
        self._advertised = advertised  # the ApiVersions list the fallback answer carries
        self.max_request_bytes = max_request_bytes
        self.idle_timeout = idle_timeout
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)
        self._tls = writer.get_extra_info("ssl_object") is not None
        host = str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)
        self.auth = auth if auth is not None else ConnectionAuth(None, host)
        self.metrics = metrics
        self.close_after_response = False  # set by a handler whose answer ends the connection
        self.closed = False
        self._write_lock = asyncio.Lock()
        self._pending: dict[int, tuple[int, int, asyncio.Future]] = {}
        self._queued_sends = 0   # server-initiated requests waiting for the write lock, in order
        self._next_correlation = itertools.count(0)
        self._on_close: list[Callable[["Connection"], Any]] = []

    def __repr__(self) -> str:
        return f"Connection#{self.id}({self.peer})"

    def add_close_callback(self, fn: Callable[["Connection"], Any]) -> None:
        """Call ``fn(connection)`` once when the connection ends (immediately if it already has)."""
        if self.closed:
            fn(self)
        else:
            self._on_close.append(fn)

    # ------------------------------------------------------------------ reading
    async def _read_frame(self) -> bytes | None:
        """The next frame (after the size prefix), or None on a clean EOF between frames."""
        try:
            prefix = await self.reader.readexactly(4)
        except asyncio.IncompleteReadError as e:
            if e.partial:
                log.warning("%r: connection closed inside a size prefix", self)
            return None
        (size,) = _SIZE.unpack(prefix)
        limit = self.auth.frame_limit(self.max_request_bytes)
        if size < 0 or size > limit:
            setting = "socket.request.max.bytes" if self.auth.authenticated else "sasl.server.max.receive.size"
            log.warning("%r: refusing frame of %d bytes (%s=%d); closing", self, size, setting, limit)
            return None
        try:
            return await self.reader.readexactly(size)
        except asyncio.IncompleteReadError as e:
            log.warning("%r: connection closed inside a frame (%d of %d bytes); closing", self, len(e.partial), size)
            return None

    async def run(self) -> None:
        """Serve the connection until the peer closes, misbehaves or goes idle."""
        try:
            while not self.closed:
                try:
                    frame = await asyncio.wait_for(self._read_frame(), self.idle_timeout)
                except asyncio.TimeoutError:
                    log.info("%r: idle for %.1f s (connections.max.idle.ms); closing", self, self.idle_timeout)
                    return
                if frame is None:
                    return
                if self.auth.expects_raw_token:
                    if not await self._raw_sasl_token(frame):
                        return
                    continue
                if len(frame) >= 1 and frame[0] >= 0x80:  # a negative first int32: a response
                    self._take_response(frame)
                    continue
                try:
                    header, body = decode_request(frame)
                except ProtocolError as e:
                    log.warning("%r: malformed request (%s); closing this connection", self, e)
                    return
                except UnsupportedRequest as e:
                    if not await self._unsupported(e):
                        return
                    continue
                if not self.auth.allows(header.api_key):
                    log.warning("%r: %s request before SASL authentication on listener %s; closing", self,
                                api_name(header.api_key), self.auth.listener_name)
                    return
                response = await self._dispatch(self, header, body)
                if response is not None and not await self._write_response(header, response):
                    return
                if self.close_after_response:
                    return
        except (ConnectionError, OSError) as e:
            log.debug("%r: %s", self, e)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug of ours: never kill the server, but this connection is unusable
            log.exception("%r: unexpected error; closing this connection", self)
        finally:
            await self.close()

    async def _raw_sasl_token(self, frame: bytes) -> bool:
        """One SASL token framed raw (after SaslHandshake v0): answer with the server's token,
        also size-prefixed; a failure closes the connection unanswered, as Kafka does."""
        step = await self.auth.sasl.authenticate(bytes(frame))
        if step.error_code:
            self.metrics.authentication(self.auth.listener_name, False)
            return False
        if step.principal is not None:
            self.auth.authenticated_as(step.principal)
            self.metrics.authentication(self.auth.listener_name, True)
            log.info("%r: authenticated as %s (%s, SaslHandshake v0, on %s)", self, step.principal,
                     self.auth.sasl.mechanism, self.auth.listener_name)
        return await self.write_parts([_SIZE.pack(len(step.token)), step.token])

    async def _unsupported(self, e: Exception) -> bool:
        """ApiVersions at an unknown version gets Kafka's v0 fallback answer (KIP-511);
        any other unsupported (api_key, version) closes the connection, as Kafka does."""
        header = e.header
        if header.api_key == ApiKey.API_VERSIONS:
            log.info("%r: ApiVersions v%d not served; answering with the v0 fallback", self, header.api_version)
            advertised = self._advertised() if self._advertised is not None else None
            return await self.write_parts(encode_api_versions_fallback(header.correlation_id, advertised))
        log.warning("%r: unsupported request api_key=%d version=%d (client %r); closing",
                    self, header.api_key, header.api_version, header.client_id)
        return False

    # ------------------------------------------------------------------ writing
    async def _write_response(self, header: RequestHeader, body: dict) -> bool:
        return await self.write_parts(encode_response(header, body))

    async def write_response(self, header: "RequestHeader", body: dict) -> bool:
        """Answer a request whose handler returned ``DEFERRED`` (False if the connection is gone)."""
        return await self._write_response(header, body)

    async def write_parts(self, parts: list) -> bool:
        """Write one whole frame (bytes and FileRegion parts) atomically w.r.t. other frames.

        Returns False if the connection is (or became) unusable.
        """
        if self.closed:
            return False
        async with self._write_lock:
            try:
                for part in parts:
                    if isinstance(part, FileRegion):
                        if part.length:
                            await self._send_region(part)
                    elif part:
                        self.writer.write(part)
                await self.writer.drain()
                return True
            except (ConnectionError, OSError) as e:
                log.debug("%r: write failed: %s", self, e)
                return False

    async def _send_region(self, region: FileRegion) -> None:
        """Send a file region with sendfile on a private descriptor (loop.sendfile moves the
        file position of the descriptor it is given; the log's own descriptor must not move)."""
        loop = asyncio.get_running_loop()  # loop.sendfile first flushes the transport's buffer: order kept
        if self._tls:  # no sendfile through TLS: one read and one write beat asyncio's 256 KiB fallback loop
            self.writer.write(region.read())
            return
        fd = _private_fd(region.fileobj)
        if fd is None:
            self.writer.write(region.read())
            return
        try:
            with os.fdopen(fd, "rb", buffering=0) as f:
                sent = await loop.sendfile(self.writer.transport, f, region.offset, region.length)
        except NotImplementedError:  # transport without sendfile support
            self.writer.write(region.read())
            return
        except RuntimeError as e:  # "transport is closing"
            raise ConnectionError(str(e)) from None
        if sent != region.length:
            raise ConnectionError(f"sendfile sent {sent} of {region.length} bytes (file shrank?)")

    # ------------------------------------------------- server-initiated requests
    def send_request(self, api_key: int, api_version: int, body: dict,
                     client_id: str | None = "spark-coord-broker") -> asyncio.Future:
        """Send a request TO the client on this connection; the returned future resolves to
        the decoded response body (or fails with ``ConnectionClosed``).  The caller owns the
        timeout (``asyncio.wait_for``); a cancelled future's late answer is dropped."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        if self.closed:
            fut.set_exception(ConnectionClosed(f"{self!r} is closed"))
            return fut
        correlation_id = nth_correlation_id(next(self._next_correlation))
        self._pending[correlation_id] = (api_key, api_version, fut)
        frame = encode_request(api_key, api_version, correlation_id, client_id, body)
        if not self._write_lock.locked() and not self._queued_sends:
            # No frame half-written and none waiting before it: write it now.  A coordinator sends
            # one of these per member every few seconds (pings), and a task, a lock and a drain per
            # frame cost more than encoding it.  The transport buffers what the socket does not take.
            self.writer.write(frame)
            return fut

        async def _send() -> None:
            try:
                if not await self.write_parts([frame]):
                    self._fail_pending_one(correlation_id)
            finally:
                self._queued_sends -= 1

        self._queued_sends += 1
        loop.create_task(_send())
        return fut

    def _take_response(self, frame: bytes) -> bool:
        """Resolve the pending server-initiated request ``frame`` answers; False (logged) if none waits."""
        try:
            cid = peek_correlation_id(frame)
        except ProtocolError:
            return False
        entry = self._pending.pop(cid, None)
        if entry is None:
            log.info("%r: response with correlation id %d answers nothing pending; dropped", self, cid)
            return False
        api_key, api_version, fut = entry
        if fut.done():
            return True
        try:
            _, body = decode_response(api_key, api_version, frame)
        except ProtocolError as e:
            fut.set_exception(e)
        else:
            fut.set_result(body)
        return True

    def _fail_pending_one(self, cid: int) -> None:
        entry = self._pending.pop(cid, None)
        if entry and not entry[2].done():
            entry[2].set_exception(ConnectionClosed(f"{self!r}: could not send request"))

    # ------------------------------------------------------------------ closing
    async def close(self) -> None:
        """Close the socket, fail pending server-initiated requests, run close callbacks."""
        if self.closed:
            return
        self.closed = True
        for _, _, fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionClosed(f"{self!r} closed"))
        self._pending.clear()
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001 -- already broken; the close callbacks must run all the same
            log.debug("%r: closing the socket failed", self, exc_info=True)
        callbacks, self._on_close = self._on_close, []
        for fn in callbacks:
            try:
                fn(self)
            except Exception:
                log.exception("%r: close callback failed", self)


def _private_fd(fileobj: Any) -> int | None:
    """A new descriptor on the same open file (its own file position), or None if the
    platform cannot do that (no /proc/self/fd): the caller then reads and writes."""
    try:
        return os.open(f"/proc/self/fd/{fileobj.fileno()}", os.O_RDONLY)
    except (OSError, AttributeError, ValueError):
        return None
