"""The broker's ephemeral registration ``/brokers/ids/<id>`` (Kafka's JSON).

At start-up an id already registered by ANOTHER session is either a live broker
(its endpoint accepts TCP connections: refuse to start, with a clear error) or
the leftover of a crashed one (its ephemeral node vanishes when that session
expires: wait for it, bounded; a leftover at our own address is removed at once).
After a session expiry the node is gone with the old session; ``BrokerRegistration``
re-creates it when kazoo reconnects with a new session, and keeps trying (backing off
up to ``RETRY_MAX_S``) while connected and not registered: a reconnect to the same
session after a failed attempt (a cut that flaps while the registration is being
written) tries again too.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, ConnectionLoss, KazooException, NodeExistsError, NoNodeError

from spark_coord.zk import model, paths
from spark_coord.zk.client import add_state_hooks

log = logging.getLogger(__name__)

#: How long ``stop()`` waits for ZooKeeper to delete the registration.
STOP_TIMEOUT_S = 5.0
#: Backoff between failed re-registrations: from RETRY_MIN_S, doubling, up to RETRY_MAX_S.
RETRY_MIN_S = 0.2
RETRY_MAX_S = 5.0


class BrokerIdTaken(RuntimeError):
    """Another live broker holds this broker id."""


class BrokerRegistration:
    """Keeps ``/brokers/ids/<broker_id>`` registered for this process's ZooKeeper session."""

    def __init__(self, zk: KazooClient, loop: asyncio.AbstractEventLoop, broker_id: int, host: str, port: int,
                 stale_wait: float = 30.0, endpoints: list[tuple[str, str, str, int]] | None = None,
                 path: str | None = None):
        self.zk = zk
        self.loop = loop
        self.broker_id = broker_id
        self.host = host
        self.port = port
        # (listener, protocol, host, port) of every listener; None: one PLAINTEXT listener at host:port
        self.endpoints = endpoints
        self.path = path or paths.broker(broker_id)  # a standalone coordinator registers elsewhere
        self.stale_wait = stale_wait
        self.registered = False
        self._stopping = False
        self._remove_hooks = None
        self._lock = threading.Lock()
        self._retrying = threading.Lock()  # held by the one thread re-registering
        self._wake = threading.Event()     # set on stop: a backoff ends at once

    async def start(self) -> None:
        """Register (raising ``BrokerIdTaken`` if a live broker has the id) and keep registered."""
        await self.loop.run_in_executor(None, self._register, True)
        self._remove_hooks = add_state_hooks(self.zk, self.loop, on_connected=self._on_connected,
                                             on_lost=self._on_lost)

    def _on_lost(self) -> None:
        if not self._stopping:
            self.registered = False
            log.warning("ZooKeeper session expired: broker %d registration lost; re-registering on reconnect",
                        self.broker_id)

    def _on_connected(self, new_session: bool) -> None:
        if (new_session or not self.registered) and not self._stopping:
            self.loop.run_in_executor(None, self._reregister)

    def _reregister(self) -> None:
        """Register again until it succeeds, the connection drops (the next connect tries
        again) or the broker stops; one thread at a time."""
        if not self._retrying.acquire(blocking=False):
            return
        try:
            wait = RETRY_MIN_S
            while not self._stopping and self.zk.connected:
                try:
                    self._register(False)
                    return
                except Exception as e:  # noqa: BLE001 -- logged; tried again
                    log.warning("broker %d: re-registration failed (%s: %s); trying again in %.1f s", self.broker_id,
                                e.__class__.__name__, e, wait)
                if self._wake.wait(wait):
                    return
                wait = min(wait * 2, RETRY_MAX_S)
        finally:
            self._retrying.release()

    def _register(self, first: bool) -> None:
        """Create the ephemeral node (blocking; never on the loop thread)."""
        with self._lock:
            data = model.broker_registration(self.broker_id, self.host, self.port, endpoints=self.endpoints)
            self.zk.ensure_path(self.path.rsplit("/", 1)[0])
            deadline = time.monotonic() + self.stale_wait
            while True:
                try:
                    self.zk.create(self.path, data, ephemeral=True)
                    break
                except NodeExistsError:
                    if self._owned_by_us():
                        self.zk.set(self.path, data)
                        break
                    self._check_not_live()
                    if time.monotonic() >= deadline:
                        raise BrokerIdTaken(
                            f"broker id {self.broker_id} is registered at {self.path} by another ZooKeeper "
                            f"session that did not expire within {self.stale_wait:.0f} s") from None
                    self._wait_gone(deadline)
            self.registered = True
            log.info("%s broker %d at %s:%d", "registered" if first else "re-registered", self.broker_id,
                     self.host, self.port)

    def _owned_by_us(self) -> bool:
        try:
            _, stat = self.zk.get(self.path)
        except NoNodeError:
            return False
        return stat.ephemeralOwner == self.zk.client_id[0]

    def _check_not_live(self) -> None:
        """Raise ``BrokerIdTaken`` if the registered endpoint accepts connections.

        A registration with OUR address is the leftover of this broker's previous run
        (killed before its session expired): we hold the listening socket at that
        address now, so its owner is dead; delete it instead of waiting for expiry.
        """
        try:
            data, stat = self.zk.get(self.path)
            info = model.parse_broker(self.broker_id, data)
        except (NoNodeError, ValueError):
            return
        if (info.host, info.port) == (self.host, self.port):
            log.info("broker id %d: removing the stale registration of a previous run at %s", self.broker_id,
                     info.address)
            try:
                self.zk.delete(self.path, version=stat.version)
            except (NoNodeError, BadVersionError):
                pass
            return
        try:
            with socket.create_connection((info.host, info.port), timeout=1.0):
                pass
        except OSError:
            log.info("broker id %d is registered at %s by a session that looks dead; waiting for it to expire",
                     self.broker_id, info.address)
            return
        raise BrokerIdTaken(f"broker id {self.broker_id} is already registered by a live broker at {info.address}")

    def _wait_gone(self, deadline: float) -> None:
        gone = threading.Event()

        def watch(event) -> None:
            gone.set()

        if self.zk.exists(self.path, watch=watch) is None:
            return
        gone.wait(max(0.0, min(deadline - time.monotonic(), 1.0)))

    async def stop(self) -> None:
        """Delete the registration (clean shutdown: clients see the broker go at once).  Without a
        ZooKeeper connection it gives up after ``STOP_TIMEOUT_S``: the node goes with the session."""
        self._stopping = True
        self._wake.set()
        if self._remove_hooks:
            self._remove_hooks()
        if self.registered:
            try:
                if not self.zk.connected:
                    raise ConnectionLoss("not connected")
                await asyncio.wait_for(self.loop.run_in_executor(None, self._delete), STOP_TIMEOUT_S)
            except Exception as e:  # noqa: BLE001 -- stopping anyway: the registration goes with the session
                log.warning("could not deregister broker %d (%s); the registration goes with the ZooKeeper "
                            "session", self.broker_id, e.__class__.__name__,
                            exc_info=not isinstance(e, (KazooException, asyncio.TimeoutError)))
            self.registered = False

    def _delete(self) -> None:
        if self._owned_by_us():
            self.zk.delete(self.path)
