"""The broker's TCP server: its listeners, a handler table, one ``Connection`` per client.

Each listener (``security.listeners.Listener``) is its own asyncio server on the same
loop; TLS listeners wrap their sockets with the listener's ``ssl.SSLContext`` (the
handshake runs before a ``Connection`` exists, so a client that sends garbage or
fails the handshake never reaches the request loop, and other clients are not held
up).  ``connection_auth(listener, writer)`` gives each connection its starting
authentication state (``security.principal.ConnectionAuth``).

The handler table is keyed by api_key and built against the wire registry: a
handler is installed only for an API the registry serves, and the ApiVersions
answer lists exactly the installed keys, so a client is never told about an API
that would then close its connection.  Later components (the coordinator) add
their own API keys with ``add_handler``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from spark_coord.broker.connection import Connection
from spark_coord.broker.handlers.base import Handler
from spark_coord.errors import ErrorCode
from spark_coord.metrics.broker import NO_BROKER_METRICS, BrokerMetrics
from spark_coord.security.principal import ConnectionAuth
from spark_coord.wire.registry import ApiKey

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.broker.context import BrokerContext
    from spark_coord.security.listeners import Listener
    from spark_coord.wire.protocol import RequestHeader

log = logging.getLogger(__name__)

#: Seconds a TLS client may take to complete its handshake.
TLS_HANDSHAKE_TIMEOUT = 10.0


@dataclass(frozen=True)
class ServedListener:
    """A listener and the TLS context of its sockets (None: plain TCP)."""

    listener: "Listener"
    ssl_context: ssl.SSLContext | None = None


#: asyncio's stream buffer limit per connection.  Reading pauses once twice this much is
#: buffered; with asyncio's default (64 KiB) every 256 KiB received paused and resumed
#: reading (an epoll registration each way) while a Produce request of a MiB or more came in.
READ_BUFFER_LIMIT = 1048576


class BrokerServer:
    """An asyncio TCP server dispatching Kafka requests to handlers.

    ``max_request_bytes``: ``socket.request.max.bytes``; ``idle_timeout``: seconds
    (``connections.max.idle.ms``).
    """

    def __init__(self, ctx: "BrokerContext", listeners: "list[ServedListener]", max_request_bytes: int,
                 idle_timeout: float,
                 connection_auth: "Callable[[Listener, asyncio.StreamWriter], ConnectionAuth] | None" = None,
                 metrics: BrokerMetrics = NO_BROKER_METRICS):
        if not listeners:
            raise ValueError("a broker needs at least one listener")
        self.ctx = ctx
        self.listeners = list(listeners)
        self.max_request_bytes = max_request_bytes
        self.idle_timeout = idle_timeout
        self.connection_auth = connection_auth
        self.metrics = metrics
        self.handlers: dict[int, Handler] = {}
        self.connections: set[Connection] = set()
        self._tasks: set[asyncio.Task] = set()
        self._servers: list[asyncio.base_events.Server] = []
        self.bound_ports: dict[str, int] = {}  # listener name -> port it listens on

    @property
    def bound_port(self) -> int | None:
        """The port of the first listener (None before ``start()``)."""
        return self.bound_ports.get(self.listeners[0].listener.name)

    # ------------------------------------------------------------------ handlers
    def add_handler(self, handler: Handler) -> None:
        """Install ``handler``; its API must be served by the wire registry and not installed yet."""
        from spark_coord.wire.protocol import served_versions

        if handler.api_key in self.handlers:
            raise ValueError(f"api_key {handler.api_key} ({handler.name}) already has a handler")
        if served_versions(handler.api_key) is None:
            raise ValueError(f"api_key {handler.api_key} ({handler.name}) is not in the wire registry")
        self.handlers[handler.api_key] = handler

    def api_versions(self) -> list[dict]:
        """The ApiVersions answer: the registry's version ranges of the APIs with a handler."""
        from spark_coord.wire.protocol import api_versions_table

        return [dict(e) for e in api_versions_table() if e["api_key"] in self.handlers]

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> int:
        """Listen on every listener; returns the first one's bound port (the chosen one when 0)."""
        for served in self.listeners:
            li = served.listener
            accept = functools.partial(self._accept, li)
            extra = {"ssl": served.ssl_context, "ssl_handshake_timeout": TLS_HANDSHAKE_TIMEOUT} \
                if served.ssl_context is not None else {}
            server = await asyncio.start_server(accept, li.host, li.port, reuse_address=True,
                                                limit=READ_BUFFER_LIMIT, **extra)
            self._servers.append(server)
            self.bound_ports[li.name] = server.sockets[0].getsockname()[1]
            log.debug("listening on %s (%s) port %d", li, li.protocol, self.bound_ports[li.name])
        return self.bound_port

    async def stop(self) -> None:
        """Stop listening and close every connection."""
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            await conn.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self._servers:
            try:
                await asyncio.wait_for(server.wait_closed(), 5)
            except asyncio.TimeoutError:
                log.warning("listener did not close within 5 s")
        self._servers = []

    async def _accept(self, listener: "Listener", reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        if self.connection_auth is not None:
            auth = self.connection_auth(listener, writer)
        else:
            peer = writer.get_extra_info("peername")
            auth = ConnectionAuth(listener, str(peer[0]) if isinstance(peer, tuple) and peer else str(peer))
        conn = Connection(reader, writer, self._dispatch, self.max_request_bytes, self.idle_timeout,
                          advertised=self.api_versions, auth=auth, metrics=self.metrics)
        log.debug("%r: connected", conn)
        self.connections.add(conn)
        self.metrics.connection_opened(listener.name)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await conn.run()
        except asyncio.CancelledError:
            pass  # server stopping: end quietly (asyncio's stream callback would log a cancelled task)
        finally:
            self.connections.discard(conn)
            self.metrics.connection_closed(listener.name)
            if task is not None:
                self._tasks.discard(task)
            log.debug("%r: disconnected", conn)

    # ------------------------------------------------------------------ dispatch
    async def _dispatch(self, conn: Connection, header: "RequestHeader", body: dict) -> dict | None:
        handler = self.handlers.get(header.api_key)
        if handler is None:  # in the registry, but nothing here serves it: as unsupported
            log.warning("%r: no handler for api_key=%d v%d; closing", conn, header.api_key, header.api_version)
            await conn.close()
            return None
        if not self.metrics.enabled:
            return await self._handle(handler, conn, header, body)
        started = time.perf_counter()
        response = await self._handle(handler, conn, header, body)
        self.metrics.request(handler.name, header.api_version, time.perf_counter() - started, response)
        if header.api_key == ApiKey.SASL_AUTHENTICATE and response is not None \
                and (conn.auth.authenticated or response.get("error_code")):
            self.metrics.authentication(conn.auth.listener_name, not response.get("error_code"))
        return response

    async def _handle(self, handler: Handler, conn: Connection, header: "RequestHeader", body: dict) -> dict | None:
        try:
            return await handler.handle(self.ctx, conn, header, body)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%r: %s v%d (correlation %d) failed", conn, handler.name, header.api_version,
                          header.correlation_id)
            try:
                return handler.error_response(body, ErrorCode.UNKNOWN_SERVER_ERROR)
            except Exception:
                log.exception("%r: cannot build an error response for %s; closing", conn, handler.name)
                await conn.close()
                return None
