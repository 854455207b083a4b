"""Where share partitions are kept across crashes: one znode each, written by the partition's leader.

``/share-groups/<group>/<topic>/<partition>`` holds the share partition's snapshot
(``SharePartition.snapshot``), the id of the topic it belongs to (a topic deleted and created
again under its name starts afresh) and who wrote it: the writer (a broker and its incarnation)
and its state epoch (one more at each takeover of the share partition).  Every write is
conditional on the znode version the writer last saw, so a process that lost the partition (it
is no longer its leader, or an older incarnation) cannot overwrite what the current leader wrote:
its write fails (``StateFenced``, naming the writer found) and it drops what it held.  A writer
recognises its own earlier write whose answer was lost by its identity in the znode, never by
the bytes.  A share partition's first write (a create) is conditional on its group's znode being
the one the writer saw when it chose the state (``Write.group_created``) -- a group with no znode
gets none: only its coordinator makes it, when a member joins -- and so is the topic's
znode under it (``Write.topic_created``), in the same multi, so neither a DeleteGroups nor a
DeleteShareGroupOffsets of the topic is undone by a create in flight.  Many partitions are written in one ZooKeeper
multi (the writer's batch), so the write rate is bounded by the flush interval, not by the
request rate.

Each state also carries its sequence number (``seq``: the ``SharePartition.version`` it is a snapshot
of).  The znode is a checkpoint: an acknowledgement is made durable first by the share-state journal
(``journal.ShareJournal``), whose entries carry the same bytes, and a journal entry of the znode's
lineage (writer and state epoch) with a higher sequence number is newer than the znode.

Blocking kazoo calls run through ``zk_call`` (off the event loop).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import Any, Awaitable, Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency

from spark_coord.zk import paths

log = logging.getLogger(__name__)

__all__ = ["ShareStateStore", "StateFenced", "Write", "NO_NODE", "Identity", "identity_of", "seq_of"]

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
    """The znode moved on since this writer last saw it: someone else writes this share partition now.

    ``writer`` and ``epoch`` say who wrote what the znode holds now (None: nobody -- the znode is
    gone, or an admin wrote it: a coordinator's AlterShareGroupOffsets); ``group_gone``: the write
    created the share partition's first state and its group has no znode (deleted, or never made by
    its coordinator) or was deleted since the writer chose it."""

    def __init__(self, reason: str, writer: str | None = None, epoch: int = 0, group_gone: bool = False):
        super().__init__(reason)
        self.writer = writer
        self.epoch = epoch
        self.group_gone = group_gone


#: Who wrote a znode: (writer, state epoch); the writer is a broker and its incarnation.
Identity = tuple[str, int]


@dataclass(frozen=True)
class Write:
    group: str
    topic: str
    partition: int
    data: bytes
    #: The znode version this writer last saw (``NO_NODE``: create it).
    version: int
    #: The writer's identity, which ``data`` carries too (``encode``): finding it in the znode at a later
    #: version means an earlier write of this writer whose answer was lost was applied, not that someone
    #: else wrote.  None: an anonymous write (any failed check fences it).
    identity: Identity | None = None
    #: For a create (``NO_NODE``): the creation zxid of the group's znode when the writer chose this
    #: state (None: not known; a group with no znode at the write fences it anyway).  The group deleted
    #: since (its znode gone or created again) fences the create, so a DeleteGroups is never undone by a
    #: first write in flight.
    group_created: int | None = None
    #: For a create: the creation zxid of the topic's znode under the group when the writer chose this
    #: state (None: the topic had none).  That znode gone or created again since (a DeleteShareGroupOffsets
    #: of the topic) fences the create the same way; one that exists is checked in the multi.
    topic_created: int | None = None


def encode(snapshot: dict, topic_id: bytes | None, writer: str | None = None, epoch: int = 0,
           seq: int | None = None) -> bytes:
    """A znode's bytes (and a journal entry's, ``journal.ShareJournal``): the snapshot, the topic's id,
    and who wrote it (``writer``: the broker and its incarnation; ``epoch``: the state epoch of its hold
    on the share partition, one more at each takeover), so a writer recognises its own earlier writes by
    identity and a leader that was taken over from is refused (``StateFenced.writer``); ``seq``: the
    snapshot's ``SharePartition.version`` -- monotonic within one (writer, epoch), as a takeover makes a
    new SharePartition -- so a journal entry is known newer than the znode of its lineage."""
    doc = dict(snapshot)
    if topic_id is not None:
        doc["topic_id"] = topic_id.hex()
    if writer is not None:
        doc["writer"] = writer
        doc["epoch"] = epoch
    if seq is not None:
        doc["seq"] = seq
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
    doc.pop("epoch", None)
    doc.pop("seq", None)
    try:
        topic_id = bytes.fromhex(tid) if isinstance(tid, str) else None
    except ValueError:
        raise ValueError(f"bad topic_id {tid!r}") from None
    return doc, topic_id


def identity_of(data: bytes | None) -> tuple[str | None, int]:
    """(writer, state epoch) a znode's bytes name; (None, its epoch or 0) for an admin's write or
    bytes that are not a state."""
    try:
        doc = json.loads((data or b"").decode())
    except (UnicodeDecodeError, ValueError):
        return None, 0
    if not isinstance(doc, dict):
        return None, 0
    writer, epoch = doc.get("writer"), doc.get("epoch")
    epoch = epoch if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 0 else 0
    return (writer if isinstance(writer, str) else None), epoch


def seq_of(data: bytes | None) -> int:
    """The sequence number a state's bytes carry (``encode``'s ``seq``); -1 when they carry none (a znode
    written before sequence numbers, an admin's write, bytes that are not a state)."""
    try:
        doc = json.loads((data or b"").decode())
    except (UnicodeDecodeError, ValueError):
        return -1
    seq = doc.get("seq") if isinstance(doc, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0 else -1


#: Rounds of one ``write`` at most when parents of new share partitions change meanwhile.
MAX_ROUNDS = 10


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

    async def group_created(self, group: str) -> int | None:
        """The creation zxid of the group's znode (None: it has none), read before a new share
        partition's state is chosen (``Write.group_created``)."""
        path = paths.share_group(group)

        def read() -> int | None:
            stat = self.zk.exists(path)
            return None if stat is None else stat.czxid

        return await self.zk_call(read)

    async def topic_created(self, group: str, topic: str) -> int | None:
        """The creation zxid of the topic's znode under the group (None: it has none), read with
        ``group_created`` before a new share partition's state is chosen (``Write.topic_created``)."""
        path = paths.share_topic(group, topic)

        def read() -> int | None:
            stat = self.zk.exists(path)
            return None if stat is None else stat.czxid

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
        out: dict[tuple[str, str, int], int | StateFenced] = {}
        for _ in range(MAX_ROUNDS):
            batch = self._round(batch, out)
            if not batch:
                return out
        raise RuntimeError(f"share state: {len(batch)} write(s) kept meeting changes of their parents")

    def _parents(self, batch: list[Write], out: dict) -> tuple[list[Write], list[tuple[str, Any]]]:
        """The parents of the creates in ``batch``, as ops of the multi: the group's znode checked at the
        version it has now -- unless it has none, or was deleted since the writer chose the state (the
        write is fenced, into ``out``): it is the group coordinator's, made when a member joins, and a
        share partition's write never makes it (a DeleteGroups stays done, as Kafka serves no share
        partition whose state its coordinator did not initialize); the topic's znode checked at the
        version it has now unless it was deleted since the writer chose the state (DeleteShareGroupOffsets
        of the topic: fenced), created when it has none.  A parent that
        changes between this read and the multi fails the multi, and its writes go round again.  The
        writes left, and the parent ops with the path each concerns."""
        ops: list[tuple[str, Any]] = []
        seen: dict[str, Any] = {}
        added: set[str] = set()
        keep = []
        for w in batch:
            if w.version != NO_NODE:
                keep.append(w)
                continue
            gpath, tpath = paths.share_group(w.group), paths.share_topic(w.group, w.topic)
            if gpath not in seen:
                seen[gpath] = self.zk.exists(gpath)
            stat = seen[gpath]
            tstat = None if stat is None else seen[tpath] if tpath in seen else self.zk.exists(tpath)
            seen.setdefault(tpath, tstat)
            if stat is None or (w.group_created is not None and stat.czxid != w.group_created):
                log.warning("share state %s/%s-%d: the group %s; not created", w.group, w.topic, w.partition,
                            "has no znode" if stat is None else "was deleted since its first state was chosen")
                out[(w.group, w.topic, w.partition)] = StateFenced("the group was deleted", group_gone=True)
                continue
            if w.topic_created is not None and (tstat is None or tstat.czxid != w.topic_created):
                log.warning("share state %s/%s-%d: the topic's state was deleted since its first state was chosen; "
                            "not created", w.group, w.topic, w.partition)
                out[(w.group, w.topic, w.partition)] = StateFenced("the topic's state was deleted")
                continue
            keep.append(w)
            if gpath not in added:
                added.add(gpath)
                ops.append((gpath, ("check", stat.version)))
            if tpath not in added:
                added.add(tpath)
                ops.append((tpath, ("check", tstat.version) if tstat is not None else ("create", None)))
        return keep, ops

    def _round(self, batch: list[Write], out: dict) -> list[Write]:
        """One multi of ``batch`` (its results into ``out``); the writes to try again."""
        batch, parents = self._parents(batch, out)
        if not batch:
            return []
        t = self.zk.transaction()
        for path, (kind, version) in parents:
            if kind == "check":
                t.check(path, version)
            else:
                t.create(path, b"")
        for w in batch:
            path = paths.share_partition(w.group, w.topic, w.partition)
            if w.version == NO_NODE:
                t.create(path, w.data)
            else:
                t.set_data(path, w.data, version=w.version)
        results = t.commit()
        self.multis += 1
        head, results = results[:len(parents)], results[len(parents):]
        failed = [r for r in results if isinstance(r, Exception)]
        if not failed and not any(isinstance(r, Exception) for r in head):
            self.writes += len(batch)
            for w, r in zip(batch, results, strict=True):
                out[(w.group, w.topic, w.partition)] = 0 if w.version == NO_NODE else r.version
            return []
        # A multi is all or nothing.  A parent that changed meanwhile (a group saved, created or deleted, a
        # topic created by another writer) sends its writes round again (their group checked again).  An entry
        # whose own check failed is fenced -- unless the znode holds this writer's own earlier write whose
        # answer was lost (then it is written, or written again at the version found); the entries rolled
        # back before it (RolledBackError) and never tried after it (RuntimeInconsistency) go again.
        again = (RolledBackError, RuntimeInconsistency)
        rest: list[Write] = []
        for w, r in zip(batch, results, strict=True):
            if not isinstance(r, Exception) or isinstance(r, again):
                rest.append(w)
                continue
            data, version = self._current(w)
            writer, epoch = identity_of(data)
            if data is not None and w.identity is not None and (writer, epoch) == w.identity \
                    and version > w.version:
                log.info("share state %s/%s-%d: an earlier write of this writer whose answer was lost had been "
                         "applied (version %d)", w.group, w.topic, w.partition, version)
                if data == w.data:
                    out[(w.group, w.topic, w.partition)] = version
                else:
                    rest.append(replace(w, version=version))
                continue
            log.warning("share state %s/%s-%d: written by someone else meanwhile (%s; now %s, epoch %d)", w.group,
                        w.topic, w.partition, type(r).__name__, writer or "no writer", epoch)
            out[(w.group, w.topic, w.partition)] = StateFenced(type(r).__name__, writer, epoch)
        return rest

    def _current(self, w: Write) -> tuple[bytes | None, int]:
        try:
            data, stat = self.zk.get(paths.share_partition(w.group, w.topic, w.partition))
        except NoNodeError:
            return None, NO_NODE
        return data, stat.version

    async def delete_group(self, group: str) -> None:
        """Remove every share partition of ``group`` (DeleteGroups, AlterShareGroupOffsets resets)."""
        path = paths.share_group(group)
        await self.zk_call(lambda: self.zk.delete(path, recursive=True) if self.zk.exists(path) else None)


# the exceptions a failed check gives, for callers that look at results themselves
CHECK_FAILURES = (BadVersionError, NodeExistsError, NoNodeError)
