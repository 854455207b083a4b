"""The cluster's coordinator shard count is fixed by the first coordinator; the others use it."""

from __future__ import annotations

import json
import logging

from helpers import wait_until

from spark_coord.zk import paths


def test_a_coordinator_configured_otherwise_warns_and_uses_the_stored_count(broker_factory, zk, caplog):
    first = broker_factory(0, **{"coordinator.shards": 4})
    assert json.loads(zk.get(paths.SHARDS)[0]) == {"version": 1, "count": 4}
    with caplog.at_level(logging.WARNING, logger="spark_coord.broker.coordination"):
        second = broker_factory(1, **{"coordinator.shards": 8})
    assert "coordinator.shards=8, but the cluster has 4 coordinator shards" in caplog.text
    assert second.broker.coordination.shard_count == first.broker.coordination.shard_count == 4
    assert json.loads(zk.get(paths.SHARDS)[0])["count"] == 4
    # the four shards, two each, and no fifth
    wait_until(lambda: sorted(zk.get(paths.shard_leader(n))[0] for n in range(4)
                              if zk.exists(paths.shard_leader(n))) == [b"0", b"0", b"1", b"1"], 30,
               message="the four shards spread over both brokers")
    assert zk.exists(paths.shard(4)) is None
