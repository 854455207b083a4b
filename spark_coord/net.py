"""Free TCP ports for the processes we start (local clusters, embedded ZooKeeper, tests, benchmarks)."""

from __future__ import annotations

import random
import socket
from pathlib import Path


def ephemeral_range() -> tuple[int, int]:
    """The OS's range of ports for outgoing connections (Linux's ``ip_local_port_range``)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free now (the caller must tolerate losing a race for it), taken from below
    the OS's ephemeral range when possible: a port the OS hands out for bind(0) can also be
    handed to the next outgoing connection (a client's, ZooKeeper's) before our server binds it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    low, _ = ephemeral_range()
    for _ in range(100):
        port = random.randint(20000, max(20001, low - 1))
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
