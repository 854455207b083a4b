"""ClusterClient: connecting to one broker does not hold up the others."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from test_connection import TinyBroker

from spark_coord.client.connection import BrokerConnectionError
from spark_coord.client.metadata import ClusterClient


@pytest.fixture
def broker():
    b = TinyBroker()
    yield b
    b.close()


@pytest.fixture
def silent():
    """A listener that accepts connections but never answers (ApiVersions hangs); ``.connected``
    is set once a client is in."""
    sock = socket.create_server(("127.0.0.1", 0))
    connected = threading.Event()
    accepted = []

    def accept():
        try:
            accepted.append(sock.accept()[0])
            connected.set()
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()
    yield sock.getsockname()[1], connected
    sock.close()
    for c in accepted:
        c.close()


def test_a_hanging_broker_does_not_block_connections_to_others(broker, silent):
    cc = ClusterClient(f"127.0.0.1:{broker.port}", timeout=3)
    port, connected = silent
    cc.brokers = {1: ("127.0.0.1", port), 2: ("127.0.0.1", broker.port)}
    errors = []
    hanging = threading.Thread(target=lambda: errors.append(pytest.raises(BrokerConnectionError, cc.connection, 1)))
    hanging.start()
    try:
        assert connected.wait(5)  # the other thread now waits for ApiVersions from broker 1
        started = time.monotonic()
        conn = cc.connection(2)
        assert not conn.closed and time.monotonic() - started < 2
        assert hanging.is_alive()
    finally:
        hanging.join(10)
        cc.close()
    assert len(errors) == 1


def test_threads_racing_for_one_broker_share_one_connection(broker):
    cc = ClusterClient(f"127.0.0.1:{broker.port}", timeout=5)
    cc.brokers = {2: ("127.0.0.1", broker.port)}
    got = []
    threads = [threading.Thread(target=lambda: got.append(cc.connection(2))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len({id(c) for c in got}) == 1 and not got[0].closed
    cc.close()
