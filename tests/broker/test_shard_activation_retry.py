"""A coordinator shard whose loading failed is loaded again while it stays elected.

Found by the network nemesis (``bench/nemesis.py``, seed 22): a broker won its shards' elections as
its ZooKeeper link flapped; loading a shard's groups (``Coordinator.activate``) failed on
``ConnectionLoss`` and the task that ran it died.  The shard stayed elected and never active, so
every group of it was answered COORDINATOR_LOAD_IN_PROGRESS -- which Kafka clients retry without
end -- until the broker lost the election for another reason.  Now loading is tried again, with
backoff, for as long as the election it was for is held.
"""

from __future__ import annotations

import pytest
from helpers import wait_until

from spark_coord.coordinator.core.coordinator import Coordinator
from spark_coord.coordinator.storage.store import StoreError


@pytest.fixture
def failing_loads(monkeypatch):
    """Every shard's first two loads fail as the ZooKeeper store fails on a lost connection."""
    real = Coordinator.activate
    failures: dict[int, int] = {}

    async def activate(self, epoch):
        n = failures.get(id(self), 0)
        if n < 2:
            failures[id(self)] = n + 1
            self.epoch = epoch  # as far as the real one gets before its first ZooKeeper read fails
            raise StoreError("read topics: ConnectionLoss")
        return await real(self, epoch)

    monkeypatch.setattr(Coordinator, "activate", activate)
    return failures


def test_a_shard_whose_load_failed_is_loaded_again_while_elected(broker_factory, failing_loads):
    b = broker_factory(0, **{"coordinator.shards": 4})
    service = b.broker.coordination

    def shards_active() -> bool:
        roles = list(service.shards.values())
        return len(roles) == 4 and all(r.elected and r.coordinator.active for r in roles)

    wait_until(shards_active, timeout=30, message="every shard elected and loaded after two failed loads")
    assert len(failing_loads) == 4 and all(n == 2 for n in failing_loads.values())
    assert all(r.not_serving() is None for r in service.shards.values())
