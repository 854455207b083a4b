"""An in-memory ``TxnStore`` for the transaction coordinator's unit tests: the znode versions checked as
ZooKeeper checks them, and fenced on demand as a lost election fences the real one."""

from __future__ import annotations

import asyncio

from spark_coord.coordinator.storage.store import Fenced
from spark_coord.coordinator.txn.state import TxnMetadata


class MemoryStore:
    """``TxnStore`` in memory: version-checked, and fenced on demand."""

    def __init__(self):
        self.nodes: dict[str, tuple[TxnMetadata, int]] = {}
        self.fenced = False
        self.writes: list[TxnMetadata] = []

    async def load(self):
        return dict(self.nodes)

    async def write(self, txn, version):
        await asyncio.sleep(0)
        if self.fenced:
            raise Fenced("fenced")
        current = self.nodes.get(txn.transactional_id)
        assert (current[1] if current else None) == version
        new_version = 0 if version is None else version + 1
        self.nodes[txn.transactional_id] = (txn, new_version)
        self.writes.append(txn)
        return new_version

    async def delete(self, tid, version):
        await asyncio.sleep(0)
        if self.fenced:
            raise Fenced("fenced")
        assert self.nodes[tid][1] == version
        del self.nodes[tid]
