"""A scripted Kafka-protocol server for tests: real sockets, our codec, answers from a function.

``ScriptedBroker(handler)`` listens on a free loopback port, records every request
frame, answers ApiVersions with ``api_keys`` (default: the whole wire registry, so
clients negotiate the group APIs too) and every other request with
``handler(broker, header, body)``: a response body dict, raw bytes, or None to
close that connection.  A request the registry cannot decode closes its connection.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Callable

from helpers import read_exactly
from spark_coord.wire import protocol
from spark_coord.wire.protocol import RequestHeader, UnsupportedRequest
from spark_coord.wire.registry import ApiKey

Handler = Callable[["ScriptedBroker", RequestHeader, dict], "dict | bytes | None"]


class ScriptedBroker:
    def __init__(self, handler: Handler, api_keys: list[dict] | None = None, node_id: int = 0):
        self.handler = handler
        self.api_keys = protocol.api_versions_table() if api_keys is None else api_keys
        self.node_id = node_id
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.log: list[tuple[bytes, RequestHeader | None, dict | None]] = []  # frame, decoded header and body
        self.cond = threading.Condition()
        self.stopped = False
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name=f"scripted-broker-{self.port}").start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def broker_entry(self) -> dict:
        """This server as a Metadata ``brokers`` element."""
        return {"node_id": self.node_id, "host": "127.0.0.1", "port": self.port, "rack": None}

    def _accept(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.cond:
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                while not self.stopped:
                    size = struct.unpack(">i", read_exactly(conn, 4))[0]
                    frame = read_exactly(conn, size)
                    try:
                        header, body = protocol.decode_request(frame)
                    except UnsupportedRequest as e:
                        self._record(frame, None, None)
                        if e.header.api_key != ApiKey.API_VERSIONS:
                            return
                        conn.sendall(b"".join(protocol.encode_api_versions_fallback(e.header.correlation_id,
                                                                                    self.api_keys)))
                        continue
                    self._record(frame, header, body)
                    if header.api_key == ApiKey.API_VERSIONS:
                        out = {"api_keys": self.api_keys}
                    else:
                        out = self.handler(self, header, body)
                    if out is None:
                        return
                    conn.sendall(out if isinstance(out, bytes) else b"".join(protocol.encode_response(header, out)))
            except (EOFError, OSError):
                return

    def _record(self, frame: bytes, header: RequestHeader | None, body: dict | None) -> None:
        with self.cond:
            self.log.append((frame, header, body))
            self.cond.notify_all()

    def received(self, api_key: int) -> list[tuple[RequestHeader, dict, bytes]]:
        """Every decoded request with ``api_key`` so far, with its frame (after the size prefix)."""
        with self.cond:
            return [(h, b, f) for f, h, b in self.log if h is not None and h.api_key == api_key]

    def wait_for(self, api_key: int, timeout: float = 20.0, count: int = 1) -> list[tuple[RequestHeader, dict, bytes]]:
        """Wait until ``count`` requests with ``api_key`` arrived; returns them."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                got = self.received(api_key)
                if len(got) >= count:
                    return got
                left = deadline - time.monotonic()
                assert left > 0, (f"{count} request(s) with api key {api_key} did not arrive; got keys "
                                  f"{[struct.unpack('>h', f[:2])[0] for f, _, _ in self.log]}")
                self.cond.wait(left)

    def close(self) -> None:
        self.stopped = True
        self.sock.close()
        with self.cond:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
