"""Test support that needs a real ZooKeeper: really expiring a kazoo client's session, and
really cutting a client's connection (``CuttableProxy``).

ZooKeeper gives no "expire this session now" call, so we use the standard trick:
a second client connects with the first one's session id and password (the server
moves the session to the new connection and drops the old one) and then closes
it, which ends the session on the server.  When the first client reconnects the
server answers "session expired": kazoo reports ``KazooState.LOST``, drops the
session's ephemeral nodes and watches, and reconnects with a new session.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError

log = logging.getLogger(__name__)


def _hosts_of(client: KazooClient) -> str:
    return ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in client.hosts)


def expire_session(client: KazooClient, timeout: float = 30.0, wait_reconnect: bool = True) -> int | None:
    """Expire ``client``'s ZooKeeper session on the server and wait until the client sees it.

    Returns once the client observed ``KazooState.LOST`` and (when
    ``wait_reconnect``) is connected again with a new session, whose id is
    returned.  Raises ``TimeoutError`` when that does not happen within
    ``timeout`` seconds, ``RuntimeError`` when the client is not connected.
    """
    cid = client.client_id
    if cid is None:
        raise RuntimeError("cannot expire the session of a client that is not connected")
    session, password = cid
    lost = threading.Event()
    reconnected = threading.Event()

    def listener(state: str) -> None:  # kazoo's connection thread
        if state == KazooState.LOST:
            lost.set()
        elif state == KazooState.CONNECTED and lost.is_set():
            reconnected.set()

    client.add_listener(listener)
    deadline = time.monotonic() + timeout
    hosts = _hosts_of(client)
    try:
        while not lost.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"session 0x{session:x} was not reported LOST within {timeout} s")
            thief = KazooClient(hosts=hosts, client_id=(session, password), timeout=10.0)
            try:
                thief.start(timeout=max(0.5, min(remaining, 10.0)))
                log.debug("expire_session: took over session 0x%x; closing it", session)
            except KazooTimeoutError:
                log.debug("expire_session: could not connect a second client yet; retrying")
            finally:
                thief.stop()
                thief.close()
            # The victim usually notices at once (the server dropped its connection); if it
            # won the session back before the close landed, take it over again.
            lost.wait(max(0.0, min(deadline - time.monotonic(), 5.0)))
        if not wait_reconnect:
            return None
        if not reconnected.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"client did not reconnect with a new session within {timeout} s")
        new_cid = client.client_id
        new_session = new_cid[0] if new_cid else None
        log.debug("expire_session: session 0x%x expired; new session 0x%x", session, new_session or 0)
        return new_session
    finally:
        client.remove_listener(listener)


class CuttableProxy:
    """A TCP proxy between ZooKeeper clients and one server that a test can cut and restore.

    Point a client at ``connect_string`` instead of the server's.  ``cut()`` breaks
    every relayed connection and turns new ones away (closed right after accept),
    so the client sees its connection drop and its reconnects fail -- a network
    cut between this client and ZooKeeper -- while the server and every other
    client carry on.  ``restore()`` lets connections through again.
    """

    def __init__(self, target_host: str, target_port: int, host: str = "127.0.0.1"):
        self.target = (target_host, target_port)
        self.host = host
        self.port = 0
        self._cut = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._accepter: threading.Thread | None = None

    @classmethod
    def to(cls, connect_string: str) -> "CuttableProxy":
        """A started proxy to the first server of ``host:port[,...][/chroot]``."""
        hosts = connect_string.split("/", 1)[0].split(",")[0]
        host, _, port = hosts.rpartition(":")
        return cls(host.strip("[]"), int(port)).start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> "CuttableProxy":
        self._listener = socket.create_server((self.host, 0))
        self.port = self._listener.getsockname()[1]
        self._accepter = threading.Thread(target=self._accept_loop, name=f"zk-proxy-{self.port}", daemon=True)
        self._accepter.start()
        return self

    def cut(self) -> None:
        """Break every relayed connection and refuse new ones until ``restore()``."""
        self._cut.set()
        self._drop_all()
        log.info("proxy %s -> %s:%d cut", self.address, *self.target)

    def restore(self) -> None:
        self._cut.clear()
        log.info("proxy %s -> %s:%d restored", self.address, *self.target)

    def close(self) -> None:
        self._closed.set()
        if self._listener is not None:
            self._listener.close()
        self._drop_all()
        if self._accepter is not None:
            self._accepter.join(5)

    def __enter__(self) -> "CuttableProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ relaying

    def _drop_all(self) -> None:
        with self._lock:
            doomed, self._sockets = self._sockets, set()
        for s in doomed:
            _close_socket(s)

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if self._cut.is_set():
                _close_socket(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError as e:
                log.debug("proxy %s: cannot reach %s:%d: %s", self.address, *self.target, e)
                _close_socket(client)
                continue
            with self._lock:
                self._sockets.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), name=f"zk-proxy-{self.port}-pump",
                                 daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data or self._cut.is_set():
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._sockets.discard(src)
                self._sockets.discard(dst)
            _close_socket(src)
            _close_socket(dst)


def _close_socket(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
