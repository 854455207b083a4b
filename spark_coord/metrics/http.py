"""The metrics endpoint's HTTP server: ``/metrics``, the status page ``/``, ``/status.json``.

``/metrics`` is prometheus_client's own WSGI application (Prometheus' text format; gzip
when the scraper accepts it; ``name[]`` filters).
The server around it is the standard library's threading WSGI server -- the one
prometheus_client's ``start_http_server`` runs -- set up here rather than through
``start_http_server`` because that one answers metrics on *every* path and does a TLS
client's handshake in its accepting thread (a client that connects and stays silent
would hold every other scraper up).  Here:

* ``/metrics``, ``/`` and ``/status.json`` are served; any other path gets 404, a method
  other than GET or HEAD 405;
* every connection has its own thread, at most ``MAX_CONNECTIONS`` at once (more are
  closed at once), and a socket timeout: a client that sends nothing, or too slowly,
  holds only its own thread, and only for ``TIMEOUT_S``;
* TLS (``metrics.ssl.*``) is negotiated in the connection's own thread, under that
  timeout; a client that fails it is dropped;
* a malformed request gets 400 (a request line over 64 KiB 414, too many or too long
  headers 431) and its connection is closed: nothing else is affected.

None of this runs on the broker's event loop: Kafka clients are served meanwhile.
"""

from __future__ import annotations

import io
import logging
import socket
import ssl
import threading
import time
from socketserver import ThreadingMixIn
from typing import Any, Callable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

log = logging.getLogger(__name__)

#: Connections served at once; more are closed as they come.
MAX_CONNECTIONS = 16
#: Seconds a connection may stay silent (TLS handshake and request included).
TIMEOUT_S = 10.0

WsgiApp = Callable[[dict, Callable[..., Any]], Any]


class _LogStream(io.TextIOBase):
    """wsgiref writes handler errors to a stream: into the log with them."""

    def write(self, text: str) -> int:
        if text.strip():
            log.warning("metrics endpoint: %s", text.rstrip())
        return len(text)


class _Handler(WSGIRequestHandler):
    timeout = None  # the server set the connection's timeout before the TLS handshake

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the standard library's name
        log.debug("metrics endpoint %s: %s", self.client_address[0] if self.client_address else "?", format % args)

    def get_stderr(self) -> Any:
        return _LogStream()


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], family: int, ssl_context: ssl.SSLContext | None,
                 max_connections: int, timeout: float):
        self.address_family = family
        self.ssl_context = ssl_context
        self.connection_timeout = timeout
        self.max_connections = max_connections
        self._slots = threading.BoundedSemaphore(max_connections)
        self._refused_logged = 0.0
        super().__init__(address, _Handler)

    def process_request(self, request: socket.socket, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            now = time.monotonic()
            if now - self._refused_logged > 60:
                self._refused_logged = now
                log.warning("metrics endpoint: more than %d connections at once; closing new ones",
                            self.max_connections)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: socket.socket, client_address: Any) -> None:
        try:
            request.settimeout(self.connection_timeout)
            if self.ssl_context is not None:
                try:
                    request = self.ssl_context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
                    request.do_handshake()
                except (ssl.SSLError, OSError) as e:
                    log.info("metrics endpoint: TLS handshake with %s failed: %s", client_address[0], e)
                    self.shutdown_request(request)
                    return
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.info("metrics endpoint: request from %s failed", client_address[0] if client_address else "?",
                 exc_info=True)


class MetricsHttpServer:
    """``app`` served on ``host:port`` (0: a free port) from a thread of its own until ``stop()``."""

    def __init__(self, host: str, port: int, app: WsgiApp, ssl_context: ssl.SSLContext | None = None,
                 max_connections: int | None = None, timeout: float | None = None):
        self.host = host
        self.requested_port = port
        self.app = app
        self.ssl_context = ssl_context
        self.max_connections = max_connections if max_connections is not None else MAX_CONNECTIONS
        self.timeout = timeout if timeout is not None else TIMEOUT_S
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int | None:
        return self._server.server_address[1] if self._server is not None else None

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"

    def start(self) -> int:
        """Bind and serve; returns the bound port.  ``OSError`` when the address cannot be bound."""
        infos = socket.getaddrinfo(self.host, self.requested_port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        self._server = _Server((address[0], self.requested_port), family, self.ssl_context, self.max_connections,
                               self.timeout)
        self._server.set_app(self.app)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.5},
                                        name=f"metrics-http-{self.port}", daemon=True)
        self._thread.start()
        return self.port  # type: ignore[return-value]

    def stop(self) -> None:
        """Stop accepting (blocking up to half a second) and close the listening socket."""
        if self._server is None:
            return
        server, self._server = self._server, None
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
