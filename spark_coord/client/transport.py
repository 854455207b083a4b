"""The one client transport: every socket our clients open, its framing, and its log-in.

Everything that talks to a broker or a coordinator as a client goes through here:
``BrokerConnection`` (admin, producer, fetches, the Spark source's executors and
sink) and the consumer's ``CoordinatorChannel``.

- ``open_socket(host, port, timeout, security, client_id)``: TCP (no Nagle), then the
  TLS handshake (the broker's certificate and, by default, its host name verified,
  with the context ``security.client.ClientSecurity`` makes), then SaslHandshake v1
  and SaslAuthenticate v1 rounds of the mechanism ``security.sasl`` implements.
  A refused log-in raises ``SaslAuthenticationFailed`` (a ``KafkaError`` carrying
  SASL_AUTHENTICATION_FAILED and the broker's message), which is not worth
  retrying on another broker: the same credentials would fail there too.
- ``send_parts``: a request's parts sent as one stream (``sendmsg``, no copy).
- ``recv_frame`` / ``recv_exactly``: size-prefixed frames read against a deadline.
  Nothing a peer sends is trusted: a frame's int32 size is checked against the
  caller's bounds before its buffer is allocated.  Failures surface as
  ``ProtocolError`` (a size out of bounds) or ``OSError`` (timeout, reset, the peer
  closing), which each caller turns into its own exception type.

``security/`` keeps the policy (which keys, which protocol, TLS contexts, the SASL
mechanisms' token exchanges); the sockets and bytes on them are this module's.
"""

from __future__ import annotations

import socket
import ssl
import time

from spark_coord.errors import ErrorCode, KafkaError
from spark_coord.secret import reveal
from spark_coord.security.client import PLAINTEXT, ClientSecurity
from spark_coord.security.sasl import SaslClientError, client_tokens
from spark_coord.wire import protocol
from spark_coord.wire.registry import ApiKey
from spark_coord.wire.types import ProtocolError

#: Largest frame the broker may answer during the SASL exchange.
_MAX_SASL_FRAME = 1 << 20


class SaslAuthenticationFailed(KafkaError):
    """The broker refused our credentials (or the exchange broke off)."""


# ------------------------------------------------------------------- connecting

def open_socket(host: str, port: int, timeout: float, security: ClientSecurity | None = None,
                client_id: str | None = "spark-coord") -> socket.socket:
    """A connected socket to ``host:port``: TLS-wrapped and SASL-authenticated as ``security`` says.

    Raises ``OSError`` (connection refused, TLS handshake or certificate failure:
    ``ssl.SSLError`` is one), ``SaslAuthenticationFailed`` for refused credentials.
    """
    security = security or PLAINTEXT
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        context = security.ssl_context()
        if context is not None:
            sock = context.wrap_socket(sock, server_hostname=host)
        if security.sasl:
            _sasl_login(sock, f"{host}:{port}", security, timeout, client_id)
        return sock
    except BaseException:
        sock.close()
        raise


def _sasl_login(sock: socket.socket, peer: str, security: ClientSecurity, timeout: float,
                client_id: str | None) -> None:
    """SaslHandshake v1, then SaslAuthenticate v1 rounds until the mechanism is done."""
    deadline = time.monotonic() + timeout
    correlation = iter(range(1, 1 << 30))

    def call(api_key: int, version: int, body: dict) -> dict:
        cid = next(correlation)
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        sock.sendall(protocol.encode_request(api_key, version, cid, client_id, body))
        try:
            frame = recv_frame(sock, deadline, 4, _MAX_SASL_FRAME, peer)
        except ConnectionResetError:
            raise SaslAuthenticationFailed(ErrorCode.SASL_AUTHENTICATION_FAILED,
                                           f"{peer} closed the connection during SASL authentication") from None
        got, resp = protocol.decode_response(api_key, version, frame)
        if got != cid:
            raise SaslAuthenticationFailed(ErrorCode.ILLEGAL_SASL_STATE,
                                           f"{peer} answered correlation id {got}, expected {cid}")
        return resp

    resp = call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": security.mechanism})
    if resp["error_code"]:
        raise SaslAuthenticationFailed(resp["error_code"], f"{peer}: SASL mechanism {security.mechanism} refused "
                                       f"(the broker offers {', '.join(resp['mechanisms']) or 'none'})")
    exchange = client_tokens(security.mechanism, security.username or "", reveal(security.password) or "")
    token: bytes | None = exchange.first()
    while token is not None:
        resp = call(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": token})
        if resp["error_code"]:
            raise SaslAuthenticationFailed(resp["error_code"], f"{peer}: "
                                           f"{resp.get('error_message') or 'SASL authentication failed'}")
        if exchange.done:
            break
        try:
            token = exchange.respond(bytes(resp["auth_bytes"] or b""))
        except SaslClientError as e:
            raise SaslAuthenticationFailed(ErrorCode.SASL_AUTHENTICATION_FAILED, f"{peer}: {e}") from None
    if not exchange.done:
        raise SaslAuthenticationFailed(ErrorCode.SASL_AUTHENTICATION_FAILED, f"{peer}: SASL exchange incomplete")


# ---------------------------------------------------------------------- framing

#: Buffers one sendmsg call passes (below every system's IOV_MAX).
_IOV_MAX = 512


def send_parts(sock, parts: list) -> None:
    """Send ``parts`` (bytes-like) in order, as one stream: gathered into sendmsg calls on a
    plain socket (no copy into one buffer), one sendall each through TLS (no sendmsg there)."""
    if len(parts) == 1 or isinstance(sock, ssl.SSLSocket):
        for part in parts:
            sock.sendall(part)
        return
    views = [memoryview(p) for p in parts if len(p)]
    while views:
        sent = sock.sendmsg(views[:_IOV_MAX])
        done = 0
        while done < len(views) and sent >= views[done].nbytes:
            sent -= views[done].nbytes
            done += 1
        del views[:done]
        if sent:
            views[0] = views[0][sent:]


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
