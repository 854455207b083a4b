"""Blocking frame reads for our synchronous clients (the admin/producer connection and
the consumer's coordinator channel): nothing a broker sends is trusted.

A frame's int32 size is checked against the caller's bounds before its buffer is
allocated; reads stop at a deadline.  Failures surface as ``ProtocolError`` (a size
out of bounds) or ``OSError`` (timeout, reset, or the peer closing), which each
caller turns into its own exception type.
"""

from __future__ import annotations

import socket
import time

from spark_coord.wire import protocol
from spark_coord.wire.types import ProtocolError


def recv_exactly(sock: socket.socket, n: int, deadline: float, peer: str, into: bytearray | None = None):
    """Exactly ``n`` bytes before ``deadline`` (``time.monotonic()``), or OSError.

    Read into ``into`` when it holds at least ``n`` bytes (the answer is then a view of
    its first ``n`` bytes), else into a new bytearray.
    """
    if into is not None and len(into) >= n:
        buf = memoryview(into)[:n]
    else:
        buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout(f"timed out reading from {peer}")
        sock.settimeout(left)
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionResetError(f"{peer} closed the connection")
        got += k
    return buf


def recv_frame(sock: socket.socket, deadline: float, min_size: int, max_size: int, peer: str,
               into: bytearray | None = None) -> memoryview:
    """One size-prefixed frame (without its prefix); a size outside [min_size, max_size] is refused
    before anything is allocated.  ``into``: a buffer to reuse when it is big enough."""
    size = protocol.frame_size(recv_exactly(sock, 4, deadline, peer))
    if size < min_size or size > max_size:
        raise ProtocolError(f"{peer} announced a frame of {size} bytes (allowed {min_size}..{max_size})")
    return memoryview(recv_exactly(sock, size, deadline, peer, into))
