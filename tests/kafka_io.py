"""Raw Kafka-protocol helpers for broker tests (frames over a plain socket)."""

from __future__ import annotations

import socket
import struct

from spark_coord.wire.protocol import decode_response, encode_request


def connect(address: tuple[str, int], timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection(address, timeout=timeout)
    s.settimeout(timeout)
    return s


def recv_exactly(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def roundtrip(s: socket.socket, api_key: int, version: int, body: dict, correlation_id: int = 7) -> dict:
    s.sendall(encode_request(api_key, version, correlation_id, "test", body))
    (size,) = struct.unpack(">i", recv_exactly(s, 4))
    cid, out = decode_response(api_key, version, recv_exactly(s, size))
    assert cid == correlation_id
    return out


def is_closed(s: socket.socket, timeout: float = 10.0) -> bool:
    """True if the peer closes the socket within ``timeout`` (reads until EOF)."""
    s.settimeout(timeout)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
