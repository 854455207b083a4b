"""Test support that needs a real ZooKeeper: really expiring a kazoo client's session.

ZooKeeper gives no "expire this session now" call, so we use the standard trick:
a second client connects with the first one's session id and password (the server
moves the session to the new connection and drops the old one) and then closes
it, which ends the session on the server.  When the first client reconnects the
server answers "session expired": kazoo reports ``KazooState.LOST``, drops the
session's ephemeral nodes and watches, and reconnects with a new session.
"""

from __future__ import annotations

import logging
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
