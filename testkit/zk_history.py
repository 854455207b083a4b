"""``ZkHistory``: samples a group's generation, owners and committed offsets in ZooKeeper.

A background thread reads ``/consumers/<g>/state``, ``.../owners`` and
``.../offsets`` every ``interval`` seconds.  A sample is kept only when the
generation read before and after the owners and offsets is the same, so every
sample belongs to one generation.  Watches would see every write but would need
one per partition node; sampling is enough for the invariants, which compare
consecutive samples.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from spark_coord.common import TopicPartition
from spark_coord.zk import model, paths

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sample:
    ts: float
    generation: int
    owners: dict[TopicPartition, str] = field(default_factory=dict)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    coordinator: int | None = None


def _children(zk: KazooClient, path: str) -> list[str]:
    try:
        return zk.get_children(path)
    except NoNodeError:
        return []


def _generation(zk: KazooClient, group: str) -> int:
    try:
        data, _ = zk.get(paths.group_state(group))
    except NoNodeError:
        return -1
    from spark_coord.coordinator.storage.zk_store import parse_state

    return parse_state(data, group)


def read_partitions(zk: KazooClient, group: str, kind: str) -> dict[TopicPartition, str | int]:
    """``kind`` "owners" or "offsets": every ``/consumers/<g>/<kind>/<t>/<p>`` parsed."""
    root = paths.group_owners(group) if kind == "owners" else paths.group_offsets(group)
    leaf = paths.owner if kind == "owners" else paths.offset
    parse = model.parse_owner if kind == "owners" else model.parse_offset
    out: dict[TopicPartition, str | int] = {}
    for topic in _children(zk, root):
        for node in _children(zk, f"{root}/{topic}"):
            p = int(node)
            try:
                data, _ = zk.get(leaf(group, topic, p))
            except NoNodeError:
                continue
            out[(topic, p)] = parse(data)
    return out


def read_shard_count(zk: KazooClient) -> int | None:
    """The cluster's coordinator shard count (None before the first coordinator wrote it)."""
    try:
        data, _ = zk.get(paths.SHARDS)
    except NoNodeError:
        return None
    return json.loads(data)["count"]


def read_coordinator(zk: KazooClient, group: str | None = None) -> int | None:
    """The coordinator id holding ``group``'s shard (None: shard 0), as its election node says
    (None while nobody holds it)."""
    from spark_coord.coordinator.core.shards import shard_of

    count = read_shard_count(zk)
    if count is None:
        return None
    try:
        data, _ = zk.get(paths.shard_leader(0 if group is None else shard_of(group, count)))
    except NoNodeError:
        return None
    return int(data.decode())


def read_shard_holders(zk: KazooClient) -> dict[int, int | None]:
    """Each shard's holder (None: free)."""
    out: dict[int, int | None] = {}
    for n in range(read_shard_count(zk) or 0):
        try:
            data, _ = zk.get(paths.shard_leader(n))
            out[n] = int(data.decode())
        except NoNodeError:
            out[n] = None
    return out


class ZkHistory(threading.Thread):
    """Samples one group until ``stop()``; ``samples`` is the history, oldest first."""

    def __init__(self, zk: KazooClient, group: str, interval: float = 0.05):
        super().__init__(name=f"zk-history-{group}", daemon=True)
        self.zk = zk
        self.group = group
        self.interval = interval
        self.samples: list[Sample] = []
        self.errors = 0
        self._stop_event = threading.Event()

    def sample(self) -> Sample | None:
        """One consistent sample now (None if the generation changed while reading)."""
        before = _generation(self.zk, self.group)
        owners = read_partitions(self.zk, self.group, "owners")
        offsets = read_partitions(self.zk, self.group, "offsets")
        coordinator = read_coordinator(self.zk)
        if _generation(self.zk, self.group) != before:
            return None
        return Sample(time.time(), before, owners, offsets, coordinator)  # type: ignore[arg-type]

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                s = self.sample()
                if s is not None:
                    self.samples.append(s)
            except Exception as e:  # noqa: BLE001 -- a torn read while nodes change, a dropped connection: next time
                self.errors += 1
                log.debug("zk history sample failed: %s", e)
            self._stop_event.wait(self.interval)

    def stop(self) -> list[Sample]:
        self._stop_event.set()
        self.join(10)
        try:
            s = self.sample()
            if s is not None:
                self.samples.append(s)
        except Exception as e:  # noqa: BLE001 -- the samples taken so far are the history all the same
            log.debug("final zk history sample failed: %s", e)
        return self.samples
