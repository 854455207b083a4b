"""Where share partitions are kept across crashes: one znode each, written by the partition's leader.

``/share-groups/<group>/<topic>/<partition>`` holds the share partition's snapshot
(``SharePartition.snapshot``) and the id of the topic it belongs to (a topic deleted and created
again under its name starts afresh).  Every write is conditional on the znode version the writer
last saw, so a process that lost the partition (it is no longer its leader, or an older
incarnation) cannot overwrite what the current leader wrote: its write fails (``StateFenced``)
and it drops what it held.  Many partitions are written in one ZooKeeper multi (the writer's
batch), so the write rate is bounded by the flush interval, not by the request rate.

Blocking kazoo calls run through ``zk_call`` (off the event loop).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency

from spark_coord.zk import paths

log = logging.getLogger(__name__)

__all__ = ["ShareStateStore", "StateFenced", "Write", "NO_NODE"]

#: The version of a share partition that has no znode yet.
NO_NODE = -1

#: Operations of one ZooKeeper multi at most.
MAX_OPS = 100
#: Bytes of data in one multi at most: ZooKeeper refuses a request over its jute.maxbuffer (1 MB by
#: default) by dropping the connection.  A share partition's state is at most about 200 KB (a window
#: of 10,000 locks -- group.share.partition.max.record.locks' maximum -- split into one range per offset).
MAX_MULTI_BYTES = 512 * 1024


def _batches(writes: list["Write"]) -> list[list["Write"]]:
    """``writes`` cut into multis of at most ``MAX_OPS`` operations and ``MAX_MULTI_BYTES`` of data
    (a single write larger than that goes alone)."""
    out: list[list[Write]] = []
    size = 0
    for w in writes:
        if not out or len(out[-1]) >= MAX_OPS or (out[-1] and size + len(w.data) > MAX_MULTI_BYTES):
            out.append([])
            size = 0
        out[-1].append(w)
        size += len(w.data)
    return out


class StateFenced(Exception):
    """The znode moved on since this writer last saw it: someone else writes this share partition now."""


@dataclass(frozen=True)
class Write:
    group: str
    topic: str
    partition: int
    data: bytes
    #: The znode version this writer last saw (``NO_NODE``: create it).
    version: int
    #: What this writer sent in earlier writes whose answer it never got (the connection dropped):
    #: finding one of them in the znode at a later version means the write was applied, not fenced.
    unsure: tuple[bytes, ...] = ()


def encode(snapshot: dict, topic_id: bytes | None, writer: str | None = None) -> bytes:
    """A znode's bytes: the snapshot, the topic's id, and who wrote it (``writer``: the broker and
    its incarnation), so that a writer never takes another's identical state for its own earlier
    write (``Write.unsure``)."""
    doc = dict(snapshot)
    if topic_id is not None:
        doc["topic_id"] = topic_id.hex()
    if writer is not None:
        doc["writer"] = writer
    return json.dumps(doc, separators=(",", ":")).encode()


def decode(data: bytes) -> tuple[dict, bytes | None]:
    """(snapshot, topic id) from a znode's bytes (ValueError naming what is wrong)."""
    try:
        doc = json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    tid = doc.pop("topic_id", None)
    doc.pop("writer", None)
    try:
        topic_id = bytes.fromhex(tid) if isinstance(tid, str) else None
    except ValueError:
        raise ValueError(f"bad topic_id {tid!r}") from None
    return doc, topic_id


class ShareStateStore:
    """Reads and conditional writes of share-partition znodes."""

    def __init__(self, zk: Any, zk_call: Callable[..., Awaitable[Any]]):
        self.zk = zk
        self.zk_call = zk_call
        #: Multis issued, and znodes written (the benchmark's state writes per second).
        self.multis = 0
        self.writes = 0

    async def load(self, group: str, topic: str, partition: int) -> tuple[bytes | None, int]:
        """(data, version) of the share partition's znode; (None, NO_NODE) when it has none."""
        path = paths.share_partition(group, topic, partition)

        def read() -> tuple[bytes | None, int]:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                return None, NO_NODE
            return data, stat.version

        return await self.zk_call(read)

    async def write(self, writes: list[Write]) -> dict[tuple[str, str, int], int | StateFenced]:
        """Write every entry (in multis of ``MAX_OPS`` and ``MAX_MULTI_BYTES``); per share partition
        its new znode version, or ``StateFenced`` when its version check failed.  Connection errors
        raise (nothing is known written; the caller retries)."""
        out: dict[tuple[str, str, int], int | StateFenced] = {}
        for batch in _batches(writes):
            out.update(await self.zk_call(self._multi, batch))
        return out

    def write_blocking(self, writes: list[Write]) -> dict[tuple[str, str, int], int | StateFenced]:
        """``write`` on the calling thread (a worker thread: it blocks on ZooKeeper)."""
        out: dict[tuple[str, str, int], int | StateFenced] = {}
        for batch in _batches(writes):
            out.update(self._multi(batch))
        return out

    def _multi(self, batch: list[Write]) -> dict[tuple[str, str, int], int | StateFenced]:
        for w in batch:
            if w.version == NO_NODE:
                self.zk.ensure_path(paths.share_topic(w.group, w.topic))
        t = self.zk.transaction()
        for w in batch:
            path = paths.share_partition(w.group, w.topic, w.partition)
            if w.version == NO_NODE:
                t.create(path, w.data)
            else:
                t.set_data(path, w.data, version=w.version)
        results = t.commit()
        self.multis += 1
        out: dict[tuple[str, str, int], int | StateFenced] = {}
        failed = [(w, r) for w, r in zip(batch, results, strict=False) if isinstance(r, Exception)]
        if not failed:
            self.writes += len(batch)
            for w, r in zip(batch, results, strict=False):
                out[(w.group, w.topic, w.partition)] = 0 if w.version == NO_NODE else r.version
            return out
        # A multi is all or nothing: an entry whose own check failed is fenced -- unless what the znode
        # holds is this writer's own earlier write whose answer was lost (then it is written, or written
        # again at the version found); the entries rolled back before it (RolledBackError) and never
        # tried after it (RuntimeInconsistency) go again.
        again = (RolledBackError, RuntimeInconsistency)
        rest: list[Write] = []
        for w, r in zip(batch, results, strict=False):
            if not isinstance(r, Exception) or isinstance(r, again):
                rest.append(w)
                continue
            mine = self._own_earlier_write(w)
            if mine is None:
                log.warning("share state %s/%s-%d: written by someone else meanwhile (%s)", w.group, w.topic,
                            w.partition, type(r).__name__)
                out[(w.group, w.topic, w.partition)] = StateFenced(f"{type(r).__name__}")
            elif mine[0] == w.data:
                out[(w.group, w.topic, w.partition)] = mine[1]
            else:
                rest.append(Write(w.group, w.topic, w.partition, w.data, mine[1]))
        if rest:
            out.update(self._multi(rest))
        return out

    def _own_earlier_write(self, w: Write) -> tuple[bytes, int] | None:
        """(data, version) of ``w``'s znode when it holds what this writer sent in ``w`` or in an earlier
        write whose answer was lost (``w.unsure``), at a version past ``w.version``; else None."""
        try:
            data, stat = self.zk.get(paths.share_partition(w.group, w.topic, w.partition))
        except NoNodeError:
            return None
        if stat.version > w.version and (data == w.data or data in w.unsure):
            log.info("share state %s/%s-%d: an earlier write whose answer was lost had been applied (version %d)",
                     w.group, w.topic, w.partition, stat.version)
            return data, stat.version
        return None

    async def delete_group(self, group: str) -> None:
        """Remove every share partition of ``group`` (DeleteGroups, AlterShareGroupOffsets resets)."""
        path = paths.share_group(group)
        await self.zk_call(lambda: self.zk.delete(path, recursive=True) if self.zk.exists(path) else None)


# the exceptions a failed check gives, for callers that look at results themselves
CHECK_FAILURES = (BadVersionError, NodeExistsError, NoNodeError)
