"""The fencing token of every coordinator write: the election as the writing coordinator won it.

A shard's election is one ZooKeeper multi that creates its ephemeral leader node and bumps the data
version of the shard node (DESIGN, "Coordinator shards"); every later write of that coordinator is a
multi that first checks both, so a deposed coordinator's writes fail (``zk_fenced``).
"""

from __future__ import annotations

from dataclasses import dataclass

from spark_coord.zk import paths

__all__ = ["EpochCheck"]


@dataclass(frozen=True)
class EpochCheck:
    """What a write must find in ZooKeeper to be allowed: the election as this coordinator won it."""

    epoch: int                 #: czxid of our election node (stamped on requests)
    coordinator_version: int   #: data version of the election node as we created it
    consumers_version: int     #: data version of the fencing node after our election bumped it
    #: The election node (a shard's ``/coordinators/shards/<n>/leader``) and the fencing node
    #: whose version the election bumped (``/coordinators/shards/<n>``).
    leader_path: str = paths.COORDINATOR
    fence_path: str = paths.CONSUMERS
