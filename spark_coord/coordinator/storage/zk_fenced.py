"""Fenced ZooKeeper writes: every change is a multi-op that first checks the election.

``FencedWriter.write(what, ops)`` applies ``ops`` -- ``("put", path, data)``
(create with missing parents, or set_data) and ``("delete", path, None)`` --
in multis of at most ``MAX_OPS_PER_MULTI`` operations, each starting with
the two checks of the coordinator's ``EpochCheck`` (see ``zk_store``).  Either
check failing raises ``Fenced`` and nothing of that multi lands.

Planning uses the term's ``ZnodeCache``: a node known to exist gets set_data,
an unknown one is asked about (pipelined, all at once), and parents are
looked up only for nodes found missing.  A put of the data the node is known
to hold is dropped; when nothing is left, the multi carries just the two
checks, so a deposed coordinator still learns that it was fenced.  When
ZooKeeper disagrees with the cache (NoNode, NodeExists, BadVersion) the path is
forgotten and the multi planned again, up to ``ATTEMPTS`` times.
"""

from __future__ import annotations

import logging
from typing import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    SessionExpiredError,
)

from spark_coord.coordinator.storage import zk_async
from spark_coord.coordinator.storage.fencing import EpochCheck
from spark_coord.coordinator.storage.store import Fenced, StoreError
from spark_coord.coordinator.storage.zk_cache import ZnodeCache, ancestors

log = logging.getLogger(__name__)

#: Most operations per multi (ZooKeeper bounds a request by jute.maxbuffer, ~1 MB).
MAX_OPS_PER_MULTI = 500
#: Plans per chunk when ZooKeeper keeps disagreeing with what we knew.
ATTEMPTS = 3

Op = tuple[str, str, "bytes | None"]  #: (put | delete, path, data)


class _Conflict(Exception):
    """ZooKeeper found ``path`` not as planned (another writer, or a stale hint)."""

    def __init__(self, path: str, error: Exception):
        super().__init__(f"{path}: {error.__class__.__name__}")
        self.path = path


class FencedWriter:
    """Plans and commits fenced multis, keeping the term's ``ZnodeCache`` up to date."""

    def __init__(self, client: KazooClient, epoch_check: Callable[[], EpochCheck | None]):
        self.client = client
        self.epoch_check = epoch_check
        self._cache = ZnodeCache(None)

    def cache(self) -> ZnodeCache:
        """The knowledge of the current term (a throwaway one while not coordinator)."""
        check = self.epoch_check()
        if check is None:
            return ZnodeCache(None)
        if self._cache.check != check:
            self._cache = ZnodeCache(check)
        return self._cache

    async def write(self, what: str, ops: list[Op], planned_in: ZnodeCache | None = None) -> None:
        """Apply ``ops`` fenced.  Raises Fenced / StoreError.

        ``planned_in``: the cache the caller computed ``ops`` from; if a new term began
        since, the plan may be wrong for it, so the write is refused as fenced."""
        check = self.epoch_check()
        if check is None:
            raise Fenced(f"{what}: this broker is not the coordinator")
        cache = self.cache()
        if planned_in is not None and planned_in is not cache:
            raise Fenced(f"{what}: the election changed while the write was planned")
        todo = [op for op in ops if not (op[0] == "put" and op[2] is not None and cache.holds(op[1], op[2]))]
        if not todo:
            await self._commit(what, check, cache, [])  # nothing to change: still prove we are not fenced
            return
        for start in range(0, len(todo), MAX_OPS_PER_MULTI):
            chunk = todo[start:start + MAX_OPS_PER_MULTI]
            for attempt in range(1, ATTEMPTS + 1):
                try:
                    planned = await self._plan(cache, chunk)
                except SessionExpiredError:
                    raise Fenced(f"{what}: ZooKeeper session expired") from None
                except KazooException as e:
                    raise StoreError(f"{what}: {e.__class__.__name__} while planning") from None
                try:
                    await self._commit(what, check, cache, planned)
                    break
                except _Conflict as e:
                    cache.forget(e.path)
                    if attempt == ATTEMPTS:
                        raise StoreError(f"{what}: ZooKeeper kept changing under us ({e})") from None

    async def _plan(self, cache: ZnodeCache, ops: list[Op]) -> list[tuple[str, str, bytes]]:
        """Kazoo operations (create | set | delete, path, data) for ``ops``, parents first."""
        unknown = [path for _, path, _ in ops if cache.exists(path) is None]
        found = await zk_async.exists_many(self.client, dict.fromkeys(unknown)) if unknown else {}
        missing = [path for kind, path, _ in ops if kind == "put" and not (cache.exists(path) or found.get(path))]
        parents = dict.fromkeys(a for path in missing for a in ancestors(path) if cache.exists(a) is None)
        parent_found = await zk_async.exists_many(self.client, parents) if parents else {}
        planned: list[tuple[str, str, bytes]] = []
        created: set[str] = set()
        for kind, path, data in ops:
            exists = bool(cache.exists(path) or found.get(path))
            if kind == "delete":
                if exists:
                    planned.append(("delete", path, b""))
                continue
            if exists or path in created:
                planned.append(("set", path, data or b""))
                continue
            for parent in ancestors(path):
                if parent not in created and not (cache.exists(parent) or parent_found.get(parent)):
                    planned.append(("create", parent, b""))
                    created.add(parent)
            planned.append(("create", path, data or b""))
            created.add(path)
        return planned

    async def _commit(self, what: str, check: EpochCheck, cache: ZnodeCache,
                      planned: list[tuple[str, str, bytes]]) -> None:
        """One multi: the two election checks, then ``planned``; records the outcome in ``cache``."""
        try:
            txn = self.client.transaction()
            txn.check(check.leader_path, check.coordinator_version)
            txn.check(check.fence_path, check.consumers_version)
            for kind, path, data in planned:
                if kind == "create":
                    txn.create(path, data)
                elif kind == "set":
                    txn.set_data(path, data)
                else:
                    txn.delete(path)
            results = await zk_async.awaitable(txn.commit_async())
        except SessionExpiredError:
            cache.reset()
            raise Fenced(f"{what}: ZooKeeper session expired") from None
        except KazooException as e:  # ConnectionLoss and the like: the outcome is unknown
            cache.reset()
            raise StoreError(f"{what}: {e.__class__.__name__}") from None
        for i, result in enumerate(results):
            if not isinstance(result, Exception) or isinstance(result, RolledBackError):
                continue
            if i < 2:
                cache.reset()
                raise Fenced(f"{what}: the election changed ({check.leader_path if i == 0 else check.fence_path}: "
                             f"{result.__class__.__name__}); not writing")
            path = planned[i - 2][1]
            if isinstance(result, (NoNodeError, NodeExistsError, BadVersionError)):
                raise _Conflict(path, result)
            raise StoreError(f"{what}: {path}: {result.__class__.__name__}")
        for kind, path, data in planned:
            if kind == "delete":
                cache.removed(path)
            else:
                cache.mark(path, data)
