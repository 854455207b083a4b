"""Connecting to ZooKeeper with kazoo, and handing its events to asyncio.

Connection states (kazoo's ``KazooState``) and what spark-coord does with them;
every component that holds something in ZooKeeper must follow these rules:

``CONNECTED``
    Talking to a server.  After ``SUSPENDED`` this means the *same* session came
    back: ephemeral nodes and watches survived.  After ``LOST`` kazoo reconnects by
    itself with a *new* session: ephemeral nodes are gone and one-shot watches
    have to be set again (kazoo's ``DataWatch``/``ChildrenWatch`` recipes re-arm
    themselves).  ``add_state_hooks`` tells the two apart (``new_session``).
``SUSPENDED``
    The connection dropped; the session may or may not still be alive on the
    servers.  Requests made now wait in kazoo's queue: they go out if the same
    session comes back and fail with ``SessionExpiredError`` if it expired.
    Anything that depends on holding an ephemeral node must stop acting on it
    (kazoo's lock recipe docs say the same) *unless* its actions are fenced: the
    coordinator's writes all check its election node and token, so it keeps
    serving while suspended and resigns only when the session is lost, or when
    no connection came back within the session timeout (the servers have
    expired the session by then).
``LOST``
    The session expired: every ephemeral node of it is gone and another process
    may already own what we owned.  Drop the role and its in-memory state, then
    start over (re-register, re-elect) once connected with the new session.

Authentication: ``auth_digest`` (``user:password``, the broker's ``zookeeper.auth.digest``)
is sent on every connection; ``set_acl`` (``zookeeper.set.acl``) makes every znode the
client creates carry ACLs (``zk.acls``): its creator may do everything, the world
only read, sensitive subtrees only the creator.  ``connect_from_config`` reads both
from a broker ``Config``.

kazoo calls listeners on its own connection thread; a listener must not block
and must not call ZooKeeper.  ``to_loop``/``add_state_hooks`` post the callback
to an asyncio loop with ``loop.call_soon_threadsafe`` so the loop's owner does
the work.  Blocking kazoo calls never run on the event loop thread (use
``loop.run_in_executor``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from typing import Any, Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe import watchers
from kazoo.retry import KazooRetry, RetryFailedError

from spark_coord.config import ConfigError
from spark_coord.zk import paths

log = logging.getLogger(__name__)

DEFAULT_SESSION_TIMEOUT_MS = 18000
DEFAULT_CONNECTION_TIMEOUT_MS = 18000


class ZooKeeperUnavailable(ConnectionError):
    """No ZooKeeper server of the connect string answered within the connection timeout."""


def split_chroot(connect_string: str) -> tuple[str, str | None]:
    """``("h1:2181,h2:2181", "/chroot")`` from ``h1:2181,h2:2181/chroot`` (chroot None when absent).

    Raises ValueError naming the connect string when the hosts part is empty or the
    chroot is not a legal absolute path.
    """
    if not isinstance(connect_string, str) or not connect_string.strip():
        raise ValueError(f"empty ZooKeeper connect string: {connect_string!r}")
    hosts, slash, rest = connect_string.strip().partition("/")
    if not hosts or any(not h.strip() for h in hosts.split(",")):
        raise ValueError(f"ZooKeeper connect string {connect_string!r} has an empty host")
    if not slash or not rest:
        return hosts, None
    return hosts, paths.validate_chroot("/" + rest.rstrip("/"))


def command_retry(session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS) -> KazooRetry:
    """Retry policy for ``client.retry(fn, ...)``: retry connection loss for up to a
    session timeout, but do NOT retry across a session expiry (``SessionExpiredError``
    reaches the caller: whoever held ephemeral state must learn it is gone)."""
    return KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0,
                      deadline=session_timeout_ms / 1000, ignore_expire=False)


def connect(connect_string: str, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
            connection_timeout_ms: int = DEFAULT_CONNECTION_TIMEOUT_MS, *,
            read_only: bool = False, create_chroot: bool = False, auth_digest: Any = None,
            set_acl: bool = False) -> KazooClient:
    """A started ``KazooClient`` for ``connect_string`` (``host:port[,host:port...][/chroot]``).

    The client reconnects forever by itself (connection retry with backoff capped at
    1 s); ``client.retry`` is ``command_retry()``.  Kazoo operations themselves are
    not retried: wrap them in ``client.retry(...)`` where a retry is safe.
    ``create_chroot`` creates the chroot node first (kazoo does not, and every
    operation on a missing chroot fails with ``NoNodeError``).

    ``auth_digest``: ``user:password`` digest credentials (a ``Password`` or string);
    ``set_acl``: create znodes with ACLs (needs ``auth_digest``).

    Raises ``ZooKeeperUnavailable`` when no server answers within
    ``connection_timeout_ms``, ``ValueError`` on a malformed connect string or
    credentials.
    """
    from spark_coord.zk import acls

    split_chroot(connect_string)  # validate before kazoo parses it less strictly
    auth_data = _digest_auth(auth_digest)
    if set_acl and not auth_data:
        raise ConfigError("zookeeper.set.acl needs credentials: set zookeeper.auth.digest=user:password")
    if create_chroot:
        ensure_chroot(connect_string, connection_timeout_ms=connection_timeout_ms, auth_digest=auth_digest,
                      set_acl=set_acl)
    client = KazooClient(
        hosts=connect_string,
        timeout=session_timeout_ms / 1000,
        connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0),
        command_retry=command_retry(session_timeout_ms),
        read_only=read_only,
        auth_data=auth_data or None,
        default_acl=acls.SECURE_ACL if set_acl else None,
    )
    try:
        client.start(timeout=connection_timeout_ms / 1000)
    except KazooTimeoutError:
        client.close()
        raise ZooKeeperUnavailable(
            f"no ZooKeeper server at {connect_string} answered within {connection_timeout_ms} ms") from None
    log.debug("connected to ZooKeeper %s (session 0x%x, timeout %d ms)", connect_string,
              client.client_id[0] if client.client_id else 0, session_timeout_ms)
    return client


def _digest_auth(auth_digest: Any) -> list[tuple[str, str]]:
    """kazoo's ``auth_data`` for ``user:password`` digest credentials (empty: none)."""
    from spark_coord.secret import reveal

    text = reveal(auth_digest)
    if not text:
        return []
    user, sep, password = text.partition(":")
    if not sep or not user or not password:
        raise ConfigError("zookeeper.auth.digest: expected user:password")
    return [("digest", text)]


def connect_from_config(cfg: Any, *, create_chroot: bool = False, connect_string: str | None = None) -> KazooClient:
    """``connect`` with a broker ``Config``'s ZooKeeper keys (connect string, timeouts, credentials, ACLs)."""
    return connect(connect_string or cfg["zookeeper.connect"], cfg["zookeeper.session.timeout.ms"],
                   cfg["zookeeper.connection.timeout.ms"], create_chroot=create_chroot,
                   auth_digest=cfg["zookeeper.auth.digest"], set_acl=cfg["zookeeper.set.acl"])


def session_timeout_ms(client: KazooClient) -> int:
    """The session timeout ``client`` asked for, in ms (the servers grant it within their
    minSessionTimeout..maxSessionTimeout; kazoo does not keep the granted value)."""
    return int(getattr(client, "_session_timeout", DEFAULT_SESSION_TIMEOUT_MS))


def close(client: KazooClient) -> None:
    """Stop and close a client, ignoring a client that was never started or is already closed."""
    try:
        client.stop()
    finally:
        client.close()


def ensure_chroot(connect_string: str, connection_timeout_ms: int = DEFAULT_CONNECTION_TIMEOUT_MS, *,
                  auth_digest: Any = None, set_acl: bool = False) -> str | None:
    """Create the chroot of ``connect_string`` (with its parents) if it is missing; returns it (None: no chroot)."""
    hosts, chroot = split_chroot(connect_string)
    if chroot is None:
        return None
    client = connect(hosts, connection_timeout_ms=connection_timeout_ms, auth_digest=auth_digest, set_acl=set_acl)
    try:
        client.retry(client.ensure_path, chroot)
    finally:
        close(client)
    return chroot


class ChildrenWatch(watchers.ChildrenWatch):
    """kazoo's ``ChildrenWatch``, quiet when the session expires under a re-read.

    The recipe re-reads the children through ``client.retry``, which does not retry
    across a session expiry (``command_retry``), so a child event handled while the
    session expires raised ``SessionExpiredError`` in kazoo's callback thread, which
    logs it with a traceback.  Nothing is lost: the recipe's session listener reads
    again once connected with the new session.  So such failures of a re-read are
    logged in one line and left to that listener.
    """

    def _get_children(self, event: Any = None) -> None:
        try:
            super()._get_children(event)
        except (SessionExpiredError, ConnectionLoss, RetryFailedError) as e:
            log.info("watch on the children of %s: %s; reading them again once connected", self._path,
                     e.__class__.__name__)


# ------------------------------------------------------------------------- asyncio

#: Errors of a ZooKeeper session lost in the middle of a row of calls: starting again may mend them.
SESSION_LOST = (ConnectionLoss, SessionExpiredError, OperationTimeoutError)
#: First and longest wait before a process starts again after its session was lost mid-start (seconds).
START_RETRY_S = (0.5, 10.0)


async def start_until_started(make: Callable[[], Any], what: str, stop: asyncio.Event | None = None) -> Any:
    """``make()`` then its ``start()``, and again with a new one (after backoff) while a start fails on a
    ZooKeeper session lost mid-way (``SESSION_LOST``: a network fault while a broker or coordinator
    starts; ``start`` stops what it opened before raising); the started object, or None once ``stop``
    is set.  Errors another try would not mend (ZooKeeper unreachable at connect, an id taken, a port
    in use) are raised."""
    delay = START_RETRY_S[0]
    while True:
        obj = make()
        try:
            await obj.start()
            return obj
        except SESSION_LOST as e:
            log.warning("%s: ZooKeeper session lost while starting (%s); starting again in %.1f s",
                        what, type(e).__name__, delay)
        if stop is None:
            await asyncio.sleep(delay)
        else:
            try:
                await asyncio.wait_for(stop.wait(), delay)
                return None
            except asyncio.TimeoutError:
                pass
        delay = min(delay * 2, START_RETRY_S[1])


def to_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any]) -> Callable[..., None]:
    """Wrap ``fn`` so that calling the wrapper from any thread (kazoo's) schedules
    ``fn(*args, **kwargs)`` on ``loop``.

    The arguments are checked against ``fn``'s signature in the calling thread, so a
    call that does not fit raises ``TypeError`` right there: kazoo's ``DataWatch``
    calls ``func(data, stat, event)`` and falls back to ``func(data, stat)`` on
    TypeError, and that keeps working through the wrapper.  The wrapper returns
    None at once: for ``DataWatch``/``ChildrenWatch`` this keeps the watch armed
    (returning False would cancel it; cancel by dropping the recipe's use instead).
    Events that arrive after the loop was closed are dropped with a debug log
    line, so a late watch during shutdown cannot raise in kazoo's thread.
    """
    try:
        signature: inspect.Signature | None = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have no introspectable signature
        signature = None

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        if signature is not None:
            signature.bind(*args, **kwargs)  # TypeError here, in the caller's thread
        try:
            loop.call_soon_threadsafe(functools.partial(fn, *args, **kwargs))
        except RuntimeError:  # loop closed
            log.debug("dropping ZooKeeper event for %s: event loop is closed", getattr(fn, "__name__", fn))

    return wrapper


def add_state_hooks(client: KazooClient, loop: asyncio.AbstractEventLoop, *,
                    on_suspended: Callable[[], Any] | None = None,
                    on_lost: Callable[[], Any] | None = None,
                    on_connected: Callable[[bool], Any] | None = None) -> Callable[[], None]:
    """Run the given callbacks on ``loop`` when ``client``'s connection state changes.

    ``on_suspended()``: connection dropped, session maybe alive -- stop acting on
    ephemeral ownership.  ``on_lost()``: session expired -- drop roles and state.
    ``on_connected(new_session)``: connected; ``new_session`` is True when the
    session differs from the one seen before (so ephemeral nodes must be
    re-created), False when the old session resumed.  Returns a function that
    removes the hooks.
    """
    last = {"session": client.client_id[0] if client.client_id else None}

    def listener(state: str) -> None:  # kazoo's connection thread: no blocking, no ZK calls
        if state == KazooState.SUSPENDED:
            if on_suspended:
                to_loop(loop, on_suspended)()
        elif state == KazooState.LOST:
            last["session"] = None
            if on_lost:
                to_loop(loop, on_lost)()
        elif state == KazooState.CONNECTED:
            cid = client.client_id
            session = cid[0] if cid else None
            new = session != last["session"]
            last["session"] = session
            if on_connected:
                to_loop(loop, on_connected)(new)

    client.add_listener(listener)
    return lambda: client.remove_listener(listener)
