"""The link proxy (``testkit.linkproxy``) as a real process between real sockets and an echo server:
bytes pass both ways; a delay holds each chunk at least its latency, in order; a bandwidth cap makes
a transfer take at least its size over the cap; a stall passes nothing while keeping every connection
open and accepting new ones, and passes what it held once healed; bad control lines get an error and
the proxy keeps serving.  Timing is asserted as lower bounds only."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from testkit.linkproxy import LinkProxy, LinkProxyClient, parse_mode


class EchoServer:
    """Sends back what it reads, per connection; counts connections accepted and closed by peers."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self.closed = 0
        self.received = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    with self._lock:
                        self.closed += 1
                    return
                with self._lock:
                    self.received += len(data)
                conn.sendall(data)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def link(tmp_path):
    echo = EchoServer()
    proxy = LinkProxy(("127.0.0.1", 0), ("127.0.0.1", echo.port), tmp_path / "control.sock",
                      log_path=tmp_path / "proxy.log").start()
    proxy.port = proxy.stats()["port"]
    yield proxy, echo
    proxy.stop()
    echo.close()


def _connect(proxy: LinkProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=10)


def _echoing(proxy: LinkProxy) -> socket.socket:
    """A connection through the proxy that has passed a first exchange."""
    sock = _connect(proxy)
    sock.sendall(b"hello")
    assert _recv_exactly(sock, 5) == b"hello"
    return sock


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def _wait(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_pass_forwards_both_ways_and_counts(link):
    proxy, _ = link
    payload = bytes(range(256)) * 4096          # 1 MiB
    with _connect(proxy) as s:
        threading.Thread(target=s.sendall, args=(payload,), daemon=True).start()
        assert _recv_exactly(s, len(payload)) == payload
    stats = proxy.stats()
    assert stats["mode"] == "pass"
    assert stats["up_passed"] == stats["down_passed"] == len(payload)
    assert stats["accepted"] == 1 and stats["held"] == 0


def test_delay_holds_each_chunk_at_least_its_latency_in_order(link):
    proxy, _ = link
    assert proxy.mode("delay", 150, 100) == "delay 150 100"
    with _connect(proxy) as s:
        started = time.monotonic()
        s.sendall(b"ping")
        assert _recv_exactly(s, 4) == b"ping"
        assert time.monotonic() - started >= 2 * 0.150        # held once each way
        # chunks sent one after the other come back in order despite the jitter
        for i in range(20):
            s.sendall(b"%03d" % i)
            time.sleep(0.005)
        assert _recv_exactly(s, 60) == b"".join(b"%03d" % i for i in range(20))
    proxy.mode("pass")
    with _connect(proxy) as s:
        s.sendall(b"fast")
        assert _recv_exactly(s, 4) == b"fast"


def test_bandwidth_cap_makes_a_transfer_take_its_size_over_the_cap(link):
    proxy, _ = link
    cap, size = 100_000, 250_000
    proxy.mode("bandwidth", cap)
    payload = b"x" * size
    with _connect(proxy) as s:
        started = time.monotonic()
        threading.Thread(target=s.sendall, args=(payload,), daemon=True).start()
        assert _recv_exactly(s, size) == payload
        elapsed = time.monotonic() - started
    # the cap's bucket holds at most 50 ms of tokens: at least (size - burst) / cap
    assert elapsed >= (size - cap / 20) / cap, elapsed


def test_total_bandwidth_is_shared_by_connections(link):
    proxy, _ = link
    cap, size = 100_000, 100_000
    assert proxy.mode("bandwidth", cap, "total") == "bandwidth 100000 total"
    socks = [_connect(proxy) for _ in range(2)]
    started = time.monotonic()
    for s in socks:
        threading.Thread(target=s.sendall, args=(b"y" * size,), daemon=True).start()
    for s in socks:
        assert _recv_exactly(s, size) == b"y" * size
        s.close()
    assert time.monotonic() - started >= (2 * size - cap / 20) / cap


def test_stall_passes_nothing_keeps_connections_open_and_resumes_at_pass(link):
    proxy, echo = link
    before = _echoing(proxy)
    proxy.mode("stall")
    before.sendall(b"held-1")
    during = _connect(proxy)                 # a new connection is accepted during the stall
    during.sendall(b"held-2")
    _wait(lambda: proxy.stats()["held"] == 12)
    for s in (before, during):
        s.settimeout(0.5)
        with pytest.raises(socket.timeout):
            s.recv(100)
    assert echo.received == 5                # nothing reached the target
    stats = proxy.stats()
    assert stats["mode"] == "stall" and stats["open"] == 2 and stats["stalled_bytes"] == 12
    assert echo.closed == 0                  # no connection was closed on either side
    _heal_and_close(proxy, echo, [(before, b"held-1"), (during, b"held-2")])


def _heal_and_close(proxy: LinkProxy, echo: EchoServer, held: list[tuple[socket.socket, bytes]]) -> None:
    """Back to ``pass``: each socket gets back (echoed) what was held for it, nothing was closed on
    the way; then they close, and the target sees each close."""
    proxy.mode("pass")
    for sock, data in held:
        sock.settimeout(10)
        assert _recv_exactly(sock, len(data)) == data
    stats = proxy.stats()
    assert stats["held"] == 0 and stats["stuck"] == 0 and echo.closed == 0
    for sock, _ in held:
        sock.close()
    _wait(lambda: echo.closed == len(held))


def test_stall_open_sticks_the_open_connections_and_lets_new_ones_through(link):
    """The path of every open connection is gone, no close reaching either end, while a client that
    connects again gets through; at ``pass`` the stuck ones deliver what they held."""
    proxy, echo = link
    old = _echoing(proxy)
    proxy.mode("stall_open")
    old.sendall(b"stuck")
    new = _connect(proxy)                    # accepted after the mode was set: passes
    new.sendall(b"fresh")
    assert _recv_exactly(new, 5) == b"fresh"
    _wait(lambda: proxy.stats()["held"] == 5)
    old.settimeout(0.5)
    with pytest.raises(socket.timeout):
        old.recv(100)
    stats = proxy.stats()
    assert (stats["mode"], stats["open"], stats["stuck"], stats["stalled_bytes"]) == ("stall_open", 2, 1, 5)
    assert echo.received == 10 and echo.closed == 0
    proxy.mode("stall_open")                 # set again: now the second one is stuck too
    assert proxy.stats()["stuck"] == 2
    new.sendall(b"later")
    _wait(lambda: proxy.stats()["held"] == 10)
    _heal_and_close(proxy, echo, [(old, b"stuck"), (new, b"later")])


def test_a_close_during_a_stall_reaches_the_target_after_the_held_bytes(link):
    proxy, echo = link
    s = _connect(proxy)
    _wait(lambda: echo.accepted == 1)
    proxy.mode("stall")
    s.sendall(b"last words")
    s.close()
    _wait(lambda: proxy.stats()["held"] == 10)
    assert echo.closed == 0
    proxy.mode("pass")
    _wait(lambda: echo.closed == 1)
    assert echo.received == 10


def test_bad_control_lines_get_an_error_and_the_proxy_keeps_serving(link):
    proxy, _ = link
    client = LinkProxyClient(proxy.control)
    for line in ("mode warp", "mode delay", "mode delay fast 5", "mode delay -1", "mode bandwidth 0",
                 "mode bandwidth 10 each", "mode stall now", "mode stall_open 5", "stats please", "hello", ""):
        with pytest.raises(RuntimeError, match="linkproxy: "):
            client.request(line)
    assert proxy.stats()["mode"] == "pass"
    with _connect(proxy) as s:
        s.sendall(b"still here")
        assert _recv_exactly(s, 10) == b"still here"


def test_a_target_that_is_down_closes_the_client_and_is_counted(tmp_path):
    dead = socket.create_server(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()
    proxy = LinkProxy(("127.0.0.1", 0), ("127.0.0.1", port), tmp_path / "c.sock").start()
    try:
        with socket.create_connection(("127.0.0.1", proxy.stats()["port"]), timeout=10) as s:
            try:
                assert s.recv(10) == b""
            except ConnectionResetError:
                pass
        assert proxy.stats()["refused"] == 1
    finally:
        proxy.stop()


def test_parse_mode():
    assert str(parse_mode(["delay", "200", "50"])) == "delay 200 50"
    assert parse_mode(["delay", "10"]).jitter_ms == 0
    assert parse_mode(["bandwidth", "32768", "total"]).total
    assert parse_mode(["stall"]).kind == "stall"
    assert str(parse_mode(["stall_open"])) == "stall_open"
    with pytest.raises(ValueError, match="one of pass, delay, bandwidth, stall, stall_open"):
        parse_mode(["slow"])
