"""A loopback TCP proxy in front of a broker that loses the broker's answers on purpose.

Clients connect to the proxy (the broker advertises the proxy's address, so every
connection of theirs goes through it); each connection is pumped both ways by two
threads that read Kafka frames.  ``drop_answer_of(n...)``: when the n-th Produce request
(counted over all connections, from 1) has been forwarded and the broker's answer to it
arrives, the answer is thrown away and both sockets of that connection are closed -- the
broker applied the request, the client never hears so (Kafka's "lost answer").  Every
request in flight on that connection behind it loses its answer too.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
from typing import Callable

log = logging.getLogger(__name__)

PRODUCE = 0


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _read_frame(sock: socket.socket) -> bytes | None:
    """One size-prefixed frame, prefix included; None when the socket closed."""
    prefix = _read_exactly(sock, 4)
    if prefix is None:
        return None
    body = _read_exactly(sock, struct.unpack(">i", prefix)[0])
    return None if body is None else prefix + body


class AnswerDroppingProxy:
    """``AnswerDroppingProxy(target)`` listens on 127.0.0.1 (``port``) and forwards to ``target()``
    (host, port), looked up per connection."""

    def __init__(self, target: Callable[[], tuple[str, int]]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.produce_requests = 0
        self.dropped: list[int] = []   # numbers of the Produce requests whose answers were dropped
        self._drop: set[int] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def drop_answer_of(self, *numbers: int) -> None:
        with self._lock:
            self._drop.update(numbers)

    def close(self) -> None:
        self._closed = True
        self.listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target(), timeout=10)
                server.settimeout(None)
            except OSError as e:
                log.info("proxy: cannot reach the broker: %s", e)
                client.close()
                continue
            doomed: dict[int, int] = {}  # correlation id -> Produce number, answers to lose
            threading.Thread(target=self._requests, args=(client, server, doomed), daemon=True).start()
            threading.Thread(target=self._answers, args=(client, server, doomed), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket, doomed: dict[int, int]) -> None:
        while True:
            frame = _read_frame(client)
            if frame is None:
                break
            api_key, _, correlation_id = struct.unpack_from(">hhi", frame, 4)
            if api_key == PRODUCE:
                with self._lock:
                    self.produce_requests += 1
                    if self.produce_requests in self._drop:
                        doomed[correlation_id] = self.produce_requests
            try:
                server.sendall(frame)
            except OSError:
                break
        _close(client, server)

    def _answers(self, client: socket.socket, server: socket.socket, doomed: dict[int, int]) -> None:
        while True:
            frame = _read_frame(server)
            if frame is None:
                break
            correlation_id = struct.unpack_from(">i", frame, 4)[0]
            number = doomed.get(correlation_id)
            if number is not None:  # the broker has applied it: the client never hears
                log.info("proxy: dropping the answer to Produce request %d and cutting its connection", number)
                self.dropped.append(number)
                break
            try:
                client.sendall(frame)
            except OSError:
                break
        _close(client, server)


def _close(*socks: socket.socket) -> None:
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()
