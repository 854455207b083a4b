"""Transactional ids in ZooKeeper: ``/transactions/ids/<id>``, one znode each, written fenced.

Each change of a transactional id is one multi: the two checks of the shard's election
(``EpochCheck``: its leader node's version and its fencing node's version, as every coordinator write
is), then the id's node, created, or set at the version this coordinator last read or wrote.  A
deposed coordinator's write fails on the election checks (``Fenced``); a write that finds the node
at another version (no coordinator of this shard but us should write it) fails as ``StoreError``.
An id's node name is the id percent-encoded (``urllib.parse.quote`` with nothing safe), so ids with
``/`` or the names ZooKeeper refuses (``.``, ``..``) fit.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError, RolledBackError, SessionExpiredError

from spark_coord.coordinator.storage import zk_async
from spark_coord.coordinator.storage.fencing import EpochCheck
from spark_coord.coordinator.storage.store import Fenced, StoreError
from spark_coord.coordinator.txn.state import TxnMetadata

log = logging.getLogger(__name__)

__all__ = ["TRANSACTIONS", "TRANSACTION_IDS", "id_path", "TxnStore"]

TRANSACTIONS = "/transactions"
TRANSACTION_IDS = "/transactions/ids"


def node_name(transactional_id: str) -> str:
    name = quote(transactional_id, safe="")
    return {".": "%2E", "..": "%2E%2E"}.get(name, name)


def id_path(transactional_id: str) -> str:
    """The znode of ``transactional_id``."""
    return f"{TRANSACTION_IDS}/{node_name(transactional_id)}"


class TxnStore:
    """Loads a shard's transactional ids and writes their changes, fenced by the shard's election."""

    def __init__(self, client: KazooClient, epoch_check: Callable[[], EpochCheck | None],
                 owns: Callable[[str], bool]):
        self.client = client
        self.epoch_check = epoch_check
        self.owns = owns

    async def load(self) -> dict[str, tuple[TxnMetadata, int]]:
        """Every transactional id of the shard with its node's version (pipelined reads); an unreadable
        node is logged and left out (its id starts again at its next InitProducerId)."""
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.client.ensure_path, TRANSACTION_IDS)
            names = await zk_async.awaitable(self.client.get_children_async(TRANSACTION_IDS))
        except KazooException as e:
            raise StoreError(f"transactions: {e.__class__.__name__} while listing") from None
        ids = [unquote(n) for n in names]
        ids = [i for i in ids if self.owns(i)]
        futures = [zk_async.awaitable(self.client.get_async(id_path(i))) for i in ids]
        out: dict[str, tuple[TxnMetadata, int]] = {}
        for tid, fut in zip(ids, futures, strict=True):
            try:
                data, stat = await fut
            except NoNodeError:
                continue
            except KazooException as e:
                raise StoreError(f"transactions: {e.__class__.__name__} while loading {tid!r}") from None
            try:
                out[tid] = (TxnMetadata.from_json(tid, data), stat.version)
            except ValueError as e:
                log.error("%s", e)
        return out

    async def delete(self, transactional_id: str, version: int) -> None:
        """Remove the id's node at ``version`` (an expired id, ``state.expired``), in the same fenced
        multi as every write.  Raises Fenced (the election changed: nothing removed) or StoreError (the
        node changed or is gone)."""
        await self._fenced(transactional_id, "removed", f"removing version {version}",
                           lambda t: t.delete(id_path(transactional_id), version))

    async def write(self, txn: TxnMetadata, version: int | None) -> int:
        """Write ``txn`` over the node at ``version`` (None: create it); returns the node's new version.
        Raises Fenced (the election changed: nothing written) or StoreError."""
        path, data = id_path(txn.transactional_id), txn.to_json()

        def op(t: Any) -> None:
            if version is None:
                t.create(path, data)
            else:
                t.set_data(path, data, version)

        results = await self._fenced(txn.transactional_id, "written", f"at version {version}", op)
        return 0 if version is None else results[2].version

    async def _fenced(self, transactional_id: str, done: str, where: str, op: Callable[[Any], None]) -> list:
        """One multi: the shard's election checked (leader and fence znodes), then ``op``'s change of the
        id's node; its results.  Fenced when the election changed (nothing ``done``), StoreError when
        the node's own change failed (``where`` says what it was)."""
        check = self.epoch_check()
        what = f"transactional id {transactional_id!r}"
        if check is None:
            raise Fenced(f"{what}: this process does not hold the shard")
        try:
            t = self.client.transaction()
            t.check(check.leader_path, check.coordinator_version)
            t.check(check.fence_path, check.consumers_version)
            op(t)
            results = await zk_async.awaitable(t.commit_async())
        except SessionExpiredError:
            raise Fenced(f"{what}: ZooKeeper session expired") from None
        except KazooException as e:
            raise StoreError(f"{what}: {e.__class__.__name__}") from None
        for i, result in enumerate(results):
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                if i < 2:
                    raise Fenced(f"{what}: the election changed ({result.__class__.__name__}); not {done}")
                raise StoreError(f"{what}: {result.__class__.__name__} {where}")
        return results
