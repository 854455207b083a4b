"""kazoo's asynchronous calls as asyncio awaitables, and pipelined reads built on them.

kazoo runs its own connection thread; its ``*_async`` calls queue a request and
return at once, so they may be made on the event loop thread (nothing blocks).
``awaitable`` hands the result back into the loop thread-safely.  Issuing many
requests before awaiting any of them pipelines them on the one ZooKeeper
connection: a thousand reads cost about one round trip instead of a thousand,
and no executor thread is held while they are in flight.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.interfaces import IAsyncResult

log = logging.getLogger(__name__)

#: Most requests one pipelined batch keeps in flight (bounds memory, not correctness).
MAX_IN_FLIGHT = 1000


def awaitable(result: IAsyncResult) -> "asyncio.Future[Any]":
    """An asyncio future (of the running loop) settled with ``result``'s value or exception."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(outcome: Any, error: BaseException | None) -> None:
        if future.done():  # the awaiting task was cancelled meanwhile
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(outcome)

    def on_done(res: IAsyncResult) -> None:  # on kazoo's callback thread
        try:
            outcome, error = res.get_nowait(), None
        except Exception as e:  # noqa: BLE001 -- handed over to the awaiting coroutine
            outcome, error = None, e
        try:
            loop.call_soon_threadsafe(settle, outcome, error)
        except RuntimeError:  # the loop was closed: nobody is waiting any more
            log.debug("ZooKeeper answer arrived after its event loop closed")

    result.rawlink(on_done)
    return future


async def gather_all(awaitables: Iterable[Any]) -> list[Any]:
    """``asyncio.gather`` that lets every request finish, then raises the first failure (if any)."""
    outcomes = await asyncio.gather(*awaitables, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return outcomes


async def get_children(client: KazooClient, path: str) -> list[str]:
    """Children of ``path``; [] when it does not exist."""
    try:
        return await awaitable(client.get_children_async(path))
    except NoNodeError:
        return []


async def get_many(client: KazooClient, znodes: Iterable[str]) -> dict[str, bytes]:
    """``{path: data}`` of every znode in ``znodes`` that exists, read pipelined."""
    out: dict[str, bytes] = {}
    batch: list[str] = list(znodes)
    for start in range(0, len(batch), MAX_IN_FLIGHT):
        chunk = batch[start:start + MAX_IN_FLIGHT]
        futures = [awaitable(client.get_async(p)) for p in chunk]
        for path, outcome in zip(chunk, await asyncio.gather(*futures, return_exceptions=True), strict=True):
            if isinstance(outcome, NoNodeError):
                continue
            if isinstance(outcome, BaseException):
                raise outcome
            out[path] = outcome[0]
    return out


async def children_many(client: KazooClient, parents: Iterable[str]) -> dict[str, list[str]]:
    """``{parent: children}`` for every parent (absent ones map to []), read pipelined."""
    batch = list(parents)
    out: dict[str, list[str]] = {}
    for start in range(0, len(batch), MAX_IN_FLIGHT):
        chunk = batch[start:start + MAX_IN_FLIGHT]
        for parent, children in zip(chunk, await gather_all(get_children(client, p) for p in chunk), strict=True):
            out[parent] = children
    return out


async def exists_many(client: KazooClient, znodes: Iterable[str]) -> dict[str, bool]:
    """``{path: exists}`` for every znode, asked pipelined."""
    batch = list(znodes)
    out: dict[str, bool] = {}
    for start in range(0, len(batch), MAX_IN_FLIGHT):
        chunk = batch[start:start + MAX_IN_FLIGHT]
        stats = await gather_all(awaitable(client.exists_async(p)) for p in chunk)
        out.update((p, s is not None) for p, s in zip(chunk, stats, strict=True))
    return out
