"""The broker's TCP server: one listener, a handler table, one ``Connection`` per client.

The handler table is keyed by api_key and built against the wire registry: a
handler is installed only for an API the registry serves, and the ApiVersions
answer lists exactly the installed keys, so a client is never told about an API
that would then close its connection.  Later components (the coordinator) add
their own API keys with ``add_handler``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from spark_coord.broker.connection import Connection
from spark_coord.broker.handlers import Handler
from spark_coord.errors import ErrorCode

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.broker.context import BrokerContext
    from spark_coord.wire.protocol import RequestHeader

log = logging.getLogger(__name__)


class BrokerServer:
    """An asyncio TCP server dispatching Kafka requests to handlers.

    ``max_request_bytes``: ``socket.request.max.bytes``; ``idle_timeout``: seconds
    (``connections.max.idle.ms``).
    """

    def __init__(self, ctx: "BrokerContext", host: str, port: int, max_request_bytes: int, idle_timeout: float):
        self.ctx = ctx
        self.host = host
        self.port = port
        self.max_request_bytes = max_request_bytes
        self.idle_timeout = idle_timeout
        self.handlers: dict[int, Handler] = {}
        self.connections: set[Connection] = set()
        self._tasks: set[asyncio.Task] = set()
        self._server: asyncio.base_events.Server | None = None
        self.bound_port: int | None = None

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
        """Listen; returns the bound port (the chosen one when ``port`` is 0)."""
        self._server = await asyncio.start_server(self._accept, self.host, self.port, reuse_address=True)
        self.bound_port = self._server.sockets[0].getsockname()[1]
        return self.bound_port

    async def stop(self) -> None:
        """Stop listening and close every connection."""
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            await conn.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 5)
            except asyncio.TimeoutError:
                log.warning("listener did not close within 5 s")
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(reader, writer, self._dispatch, self.max_request_bytes, self.idle_timeout,
                          advertised=self.api_versions)
        log.debug("%r: connected", conn)
        self.connections.add(conn)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await conn.run()
        except asyncio.CancelledError:
            pass  # server stopping: end quietly (asyncio's stream callback would log a cancelled task)
        finally:
            self.connections.discard(conn)
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
