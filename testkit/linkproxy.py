"""A TCP proxy whose link can be made slow, narrow or stuck at run time: faults of a link, not a cut.

This machine's kernel has no netem, so latency, a bandwidth cap and a connection that stops
passing bytes without closing can only come from a process in the path.  The nemesis
(``testkit.nemesis``) puts one in front of each broker: the broker listens on loopback in its
namespace and advertises the proxy's address, so every client connection goes through it.

    python -m testkit.linkproxy --listen 10.77.0.4:9092 --target 127.0.0.1:9092 \\
        --control proxy-b0.sock

Every accepted connection gets a connection to ``--target``; bytes are forwarded both ways.  The
proxy's mode applies to every connection, open or new, and is switched at run time without
closing any:

- ``pass``: bytes go straight through (the writer of the other side, no queue);
- ``delay LATENCY_MS JITTER_MS``: each chunk read is held ``LATENCY + uniform(0, JITTER)`` ms
  (so LATENCY is the minimum), never overtaking the chunk before it in the same direction;
- ``bandwidth BYTES_PER_S [total]``: each direction of each connection passes at most that many
  bytes a second (``total``: all connections of a direction share one cap);
- ``stall``: nothing passes, in either direction, on any connection; sockets stay open and new
  connections are accepted (and connected to the target) but pass nothing either.  Bytes read
  meanwhile are held (up to ``HOLD_LIMIT`` per direction of a connection, after which the proxy
  stops reading and TCP's own flow control holds the rest in the sender).  On leaving the stall
  the held bytes are passed on, in order: a path that was stuck and comes back, as TCP resumes
  after an outage shorter than its retransmission timeout.  A client that gave up on the
  connection meanwhile has closed it, and that close is passed on after the held bytes; the
  connections are not dropped at heal, because a client that still waits would then see a
  reset the fault did not cause.
- ``stall_open``: the connections open when it is set pass nothing (held as in ``stall``), the
  ones accepted since pass as in ``pass``: the path of each open connection is gone without a
  close reaching either end (a NAT or firewall that lost its state, a peer's silent reboot) while
  a client that connects again gets through.  A client notices only by its own timeouts.

A close (end of stream) of one side is held and passed on like bytes: it reaches the other side
after whatever was read before it.  A client accepted while the target does not accept (a broker
being restarted) is reset at once and counted as ``refused``.  One asyncio loop serves every
connection; in ``pass`` mode a read is written straight to the other socket.

Control: one line per request on a unix socket (``--control PATH``) or a loopback TCP port
(``--control PORT``), one line back, ``ok ...`` or ``error <why>``::

    mode pass | mode delay 200 50 | mode bandwidth 65536 [total] | mode stall | mode stall_open | stats

``stats`` answers ``ok <json>``: the mode, connections open and accepted, those of them stuck
(``stall_open``), bytes read and passed per direction (``up``: client to target), bytes held now,
the most ever held, and the bytes read while stalled.  ``LinkProxyClient`` speaks it;
``LinkProxy`` starts the process and waits until it answers.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from testkit import child_env

log = logging.getLogger(__name__)

#: Bytes held per direction of a connection before the proxy stops reading that side.
HOLD_LIMIT = 4 << 20
MODES = ("pass", "delay", "bandwidth", "stall", "stall_open")
_EOF = None   # the queue entry of a closed side


@dataclass(frozen=True)
class Mode:
    kind: str = "pass"
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    rate: float = 0.0          # bytes a second (bandwidth)
    total: bool = False        # one cap shared by every connection of a direction

    def __str__(self) -> str:
        if self.kind == "delay":
            return f"delay {self.latency_ms:g} {self.jitter_ms:g}"
        if self.kind == "bandwidth":
            return f"bandwidth {self.rate:g}" + (" total" if self.total else "")
        return self.kind


_PASS, _STALL = Mode("pass"), Mode("stall")


def parse_mode(words: list[str]) -> Mode:
    """The mode of ``mode ...`` words (after ``mode``); ValueError saying what is wrong."""
    if not words or words[0] not in MODES:
        raise ValueError(f"mode: one of {', '.join(MODES)}")
    kind, args = words[0], words[1:]
    try:
        if kind == "delay":
            if not 1 <= len(args) <= 2:
                raise ValueError
            latency, jitter = float(args[0]), float(args[1]) if len(args) > 1 else 0.0
            if latency < 0 or jitter < 0:
                raise ValueError
            return Mode(kind, latency_ms=latency, jitter_ms=jitter)
        if kind == "bandwidth":
            if not 1 <= len(args) <= 2 or (len(args) == 2 and args[1] != "total"):
                raise ValueError
            rate = float(args[0])
            if rate <= 0:
                raise ValueError
            return Mode(kind, rate=rate, total=len(args) == 2)
    except ValueError:
        usage = {"delay": "delay LATENCY_MS [JITTER_MS], both >= 0",
                 "bandwidth": "bandwidth BYTES_PER_S [total], a rate > 0"}[kind]
        raise ValueError(f"mode {usage}") from None
    if args:
        raise ValueError(f"mode {kind} takes no arguments")
    return Mode(kind)


class _Bucket:
    """A token bucket of ``rate`` bytes a second: ``take(n)`` spends n, going into debt; ``wait()``
    is how long until the debt is paid.  Holds at most 50 ms of tokens, so a cap is a cap."""

    def __init__(self, rate: float):
        self.rate = rate
        self.burst = max(1024.0, rate / 20)
        self.tokens = 0.0
        self.stamp = time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def piece(self, n: int) -> int:
        return max(1, min(n, int(self.burst)))

    def take(self, n: int) -> None:
        self._refill()
        self.tokens -= n

    def wait(self) -> float:
        self._refill()
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate


class _Side(asyncio.Protocol):
    """One socket of a proxied connection: what it reads goes into ``out`` (the pipe towards the
    other socket); its write buffer's fullness pauses the pipe that writes into it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.out: _Pipe | None = None      # bytes read here go there
        self.into: _Pipe | None = None     # the pipe that writes here
        self.early: list[bytes | None] = []

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.out is None:
            self.early.append(data)
        else:
            self.out.feed(data)

    def eof_received(self) -> bool:
        self._closed()
        return False

    def connection_lost(self, exc) -> None:
        self._closed()
        if self.into is not None:
            self.into.dst_gone()

    def _closed(self) -> None:
        if self.out is None:
            self.early.append(_EOF)
        else:
            self.out.feed(_EOF)

    def pause_writing(self) -> None:
        if self.into is not None:
            self.into.set_dst_paused(True)

    def resume_writing(self) -> None:
        if self.into is not None:
            self.into.set_dst_paused(False)


class _Pipe:
    """One direction of one connection: reads of ``src`` written to ``dst`` as the mode says."""

    def __init__(self, proxy: "Proxy", src: _Side, dst: _Side, direction: str, conn_id: int):
        self.proxy, self.src, self.dst, self.direction = proxy, src, dst, direction
        self.conn_id = conn_id     # the connection's number in the order accepted (from 1)
        self.queue: collections.deque[list] = collections.deque()   # [ready_at, bytes | _EOF]
        self.queued = 0
        self.last_ready = 0.0
        self.dst_paused = False
        self.ended = False
        self.wake = asyncio.Event()
        self.bucket: _Bucket | None = None
        self.task = asyncio.get_running_loop().create_task(self._pump())

    def mode(self) -> Mode:
        """The proxy's mode as it applies to this connection (``stall_open``: stall or pass)."""
        mode = self.proxy.mode
        if mode.kind == "stall_open":
            return _STALL if self.stuck() else _PASS
        return mode

    def stuck(self) -> bool:
        """Open when ``stall_open`` was set."""
        return self.proxy.mode.kind == "stall_open" and self.conn_id <= self.proxy.stuck_upto

    # ---------------------------------------------------------------- input
    def feed(self, data: bytes | None) -> None:
        if self.ended:
            return
        proxy, mode = self.proxy, self.mode()
        if data is not _EOF:
            proxy.count(self.direction, "read", len(data))
            if mode.kind == "stall":
                proxy.stalled_bytes += len(data)
            if mode.kind == "pass" and not self.queue and not self.dst_paused:
                self._write(data)
                return
        elif self.queue and self.queue[-1][1] is _EOF:
            return
        ready = time.monotonic()
        if mode.kind == "delay" and data is not _EOF:
            ready += (mode.latency_ms + random.uniform(0, mode.jitter_ms)) / 1000
        self.last_ready = max(self.last_ready, ready)
        self.queue.append([self.last_ready, data])
        if data is not _EOF:
            self.queued += len(data)
            proxy.held_changed(len(data))
        self._flow()
        self.wake.set()

    def set_dst_paused(self, paused: bool) -> None:
        self.dst_paused = paused
        self._flow()
        self.wake.set()

    def dst_gone(self) -> None:
        """The socket written to is closed: drop what is held for it."""
        self.ended = True
        self.proxy.held_changed(-self.queued)
        self.queue.clear()
        self.queued = 0
        self.task.cancel()
        self._flow()

    def _flow(self) -> None:
        """Stop reading ``src`` while ``dst`` is backed up or too much is held for it."""
        t = self.src.transport
        if t is None or t.is_closing():
            return
        if self.dst_paused or self.queued > HOLD_LIMIT:
            t.pause_reading()
        else:
            t.resume_reading()

    # ---------------------------------------------------------------- output
    def _write(self, data: bytes) -> None:
        t = self.dst.transport
        if t is not None and not t.is_closing():
            t.write(data)
            self.proxy.count(self.direction, "passed", len(data))

    async def _pump(self) -> None:
        while True:
            mode = self.mode()
            if not self.queue or mode.kind == "stall" or self.dst_paused:
                self.wake.clear()
                await self.wake.wait()
                continue
            ready, data = self.queue[0]
            if data is _EOF:
                self.queue.popleft()
                self.ended = True
                if self.dst.transport is not None:
                    self.dst.transport.close()
                return
            if mode.kind == "delay" and ready > time.monotonic():
                await self._sleep(ready - time.monotonic())
                continue
            if mode.kind == "bandwidth":
                bucket = self.proxy.bucket(self, mode)
                pause = bucket.wait()
                if pause > 0:
                    await self._sleep(pause)
                    continue
                n = bucket.piece(len(data))
                bucket.take(n)
            else:
                n = len(data)
            if n < len(data):
                self.queue[0][1] = data[n:]
                data = data[:n]
            else:
                self.queue.popleft()
            self.queued -= len(data)
            self.proxy.held_changed(-len(data))
            self._write(data)
            self._flow()

    async def _sleep(self, seconds: float) -> None:
        """Sleep, waking early on a change of mode or of the destination's flow control."""
        self.wake.clear()
        try:
            await asyncio.wait_for(self.wake.wait(), seconds)
        except asyncio.TimeoutError:
            pass


class Proxy:
    """The proxy inside one event loop: ``await start()``, then ``set_mode`` / ``stats``."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]):
        self.listen, self.target = listen, target
        self.mode = Mode()
        self.pipes: set[_Pipe] = set()
        self.server: asyncio.AbstractServer | None = None
        self.port = 0
        self.accepted = 0
        self.refused = 0
        self.bytes = {(d, what): 0 for d in ("up", "down") for what in ("read", "passed")}
        self.held = 0
        self.held_max = 0
        self.stalled_bytes = 0
        self.stuck_upto = 0        # ``stall_open``: connections numbered up to this one are stuck
        self._shared: dict[str, _Bucket] = {}

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(self._accept, *self.listen, reuse_address=True)
        self.port = self.server.sockets[0].getsockname()[1]

    def _accept(self) -> _Side:
        client = _Side()
        self.accepted += 1
        asyncio.get_running_loop().create_task(self._connect(client, self.accepted))
        return client

    async def _connect(self, client: _Side, conn_id: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, server = await loop.create_connection(_Side, *self.target)
        except OSError as e:
            self.refused += 1
            log.info("cannot reach %s:%d: %s", *self.target, e)
            if client.transport is not None:
                client.transport.abort()
            return
        up, down = _Pipe(self, client, server, "up", conn_id), _Pipe(self, server, client, "down", conn_id)
        client.out, server.into, server.out, client.into = up, up, down, down
        self.pipes.update((up, down))
        for pipe in (up, down):
            pipe.task.add_done_callback(lambda _, p=pipe: self.pipes.discard(p))
        for side in (client, server):
            early, side.early = side.early, []
            for data in early:
                side.out.feed(data)

    def count(self, direction: str, what: str, n: int) -> None:
        self.bytes[direction, what] += n

    def held_changed(self, n: int) -> None:
        self.held += n
        self.held_max = max(self.held_max, self.held)

    def bucket(self, pipe: _Pipe, mode: Mode) -> _Bucket:
        if mode.total:
            b = self._shared.get(pipe.direction)
            if b is None or b.rate != mode.rate:
                b = self._shared[pipe.direction] = _Bucket(mode.rate)
            return b
        if pipe.bucket is None or pipe.bucket.rate != mode.rate:
            pipe.bucket = _Bucket(mode.rate)
        return pipe.bucket

    def set_mode(self, mode: Mode) -> None:
        log.info("mode %s (was %s)", mode, self.mode)
        self.mode = mode
        if mode.kind == "stall_open":
            self.stuck_upto = self.accepted
        self._shared.clear()
        for pipe in self.pipes:
            pipe.bucket = None
            pipe.wake.set()

    def stats(self) -> dict:
        clients = {p.src if p.direction == "up" else p.dst: p.stuck() for p in self.pipes}  # both pipes agree
        return {"mode": str(self.mode), "port": self.port, "open": len(clients), "stuck": sum(clients.values()),
                "accepted": self.accepted,
                "refused": self.refused, "held": self.held, "held_max": self.held_max,
                "stalled_bytes": self.stalled_bytes,
                **{f"{d}_{what}": n for (d, what), n in self.bytes.items()}}

    def answer(self, line: str) -> str:
        """The answer to one control line."""
        words = line.split()
        if words[:1] == ["stats"] and len(words) == 1:
            return "ok " + json.dumps(self.stats())
        if words[:1] == ["mode"]:
            try:
                mode = parse_mode(words[1:])
            except ValueError as e:
                return f"error {e}"
            self.set_mode(mode)
            return f"ok {mode}"
        return (f"error unknown request {line.strip()[:80]!r}: "
                "mode pass|delay MS [MS]|bandwidth B/S [total]|stall|stall_open, or stats")

    async def serve_control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    line = await reader.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    writer.write(b"error line too long\n")
                    break
                if not line:
                    break
                writer.write((self.answer(line.decode("utf-8", "replace")) + "\n").encode())
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


async def _main(args: argparse.Namespace) -> None:
    proxy = Proxy(args.listen, args.target)
    await proxy.start()
    if args.control.isdigit():
        control = await asyncio.start_server(proxy.serve_control, "127.0.0.1", int(args.control))
    else:
        try:
            os.unlink(args.control)
        except FileNotFoundError:
            pass
        control = await asyncio.start_unix_server(proxy.serve_control, args.control)
    log.info("proxy %s:%d -> %s:%d, control %s", args.listen[0], proxy.port, *args.target, args.control)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with control:
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", type=_address, required=True, help="HOST:PORT to accept clients on (port 0: any)")
    p.add_argument("--target", type=_address, required=True, help="HOST:PORT every connection is forwarded to")
    p.add_argument("--control", required=True, help="unix socket path, or a loopback port, for control lines")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s linkproxy: %(message)s")
    asyncio.run(_main(args))


# ====================================================================== clients
class LinkProxyClient:
    """Speaks the control protocol of one proxy: ``mode("delay", 200, 50)``, ``stats()``.  ``control``
    is the proxy's ``--control``: a unix socket path or a loopback port."""

    def __init__(self, control: str | int, timeout: float = 5.0):
        self.control, self.timeout = str(control), timeout

    def request(self, line: str) -> str:
        """Send one line, return the answer (without ``ok``); ``RuntimeError`` on ``error ...``."""
        if self.control.isdigit():
            sock = socket.create_connection(("127.0.0.1", int(self.control)), timeout=self.timeout)
        else:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            sock.connect(self.control)
        with sock, sock.makefile("rwb") as f:
            f.write(line.encode() + b"\n")
            f.flush()
            answer = f.readline().decode().rstrip("\n")
        if not answer:
            raise ConnectionError(f"linkproxy at {self.control} closed without an answer")
        status, _, rest = answer.partition(" ")
        if status != "ok":
            raise RuntimeError(f"linkproxy: {rest}")
        return rest

    def mode(self, kind: str, *args: float | str) -> str:
        return self.request(" ".join(["mode", kind, *(f"{a:g}" if isinstance(a, float) else str(a) for a in args)]))

    def stats(self) -> dict:
        return json.loads(self.request("stats"))


class LinkProxy:
    """A proxy process: ``start()`` runs ``python -m testkit.linkproxy`` (in the caller's
    network namespace) and waits until its control socket answers; ``stop()`` ends it."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int], control: str | Path,
                 log_path: str | Path | None = None):
        self.listen, self.target, self.control = listen, target, str(control)
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.client = LinkProxyClient(self.control)

    def start(self, timeout: float = 15.0) -> "LinkProxy":
        argv = [sys.executable, "-m", "testkit.linkproxy", "--listen", "%s:%d" % self.listen,
                "--target", "%s:%d" % self.target, "--control", self.control]
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         env=child_env(), start_new_session=True)
        finally:
            if self.log_path:
                out.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"linkproxy exited with code {self.proc.returncode} (log: {self.log_path})")
            try:
                self.stats()
                return self
            except OSError as e:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"linkproxy did not answer on {self.control} within {timeout:.0f} s") from e
                time.sleep(0.05)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def mode(self, kind: str, *args: float | str) -> str:
        return self.client.mode(kind, *args)

    def stats(self) -> dict:
        return self.client.stats()

    def stop(self, timeout: float = 5.0) -> None:
        """End the process (SIGTERM, SIGKILL after ``timeout``) and remove its control socket."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        if not self.control.isdigit():
            Path(self.control).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
