"""``ZkGroupStore``: the group store in ZooKeeper, in Kafka 0.8's layout, fenced by the election.

Layout (paths from ``zk.paths``)::

    /consumers/<g>/ids/<consumer_id>          member JSON: Kafka 0.8's pattern/subscription
                                              plus auto_commit, auto_offset_reset, session_timeout_ms
    /consumers/<g>/state                      {"version": 1, "generation": N}
    /consumers/<g>/offsets/<t>/<p>            next offset to consume, decimal
    /consumers/<g>/owners/<t>/<p>             owning consumer thread id
    /consumers/<g>/pending/<producer id>      a producer's offsets committed in its open transaction
                                              (TxnOffsetCommit): JSON, until the transaction's marker

Fencing (DESIGN.md "Coordinator shards"): every write is one ZooKeeper multi-op that starts
with two ``check`` operations from the coordinator's ``EpochCheck``:

* ``/consumers/coordinator`` at the version this coordinator created it with --
  fails when the election node is gone;
* ``/consumers`` at the data version this coordinator's election bumped it to --
  fails once anyone else has won an election since, even though their election
  node has the same version number as ours had (a version alone cannot tell two
  incarnations of an ephemeral node apart; ZooKeeper's multi cannot check czxid).

Either failing makes the whole multi fail: the write raises ``Fenced`` and
nothing lands.  A write with nothing left to change still sends the two checks,
so every write call of a deposed coordinator raises ``Fenced``.

Cost (the coordinator writes offsets every second for every busy group): the
store uses kazoo's asynchronous calls only, so no thread blocks on ZooKeeper and
reads are pipelined (``zk_async``); what it read or wrote in the current term is
remembered (``zk_cache``), so a steady-state offset commit is one multi of
set_data ops with no existence checks, unchanged values are not rewritten, and
owners are compared with what this store wrote last instead of re-read.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from spark_coord.coordinator.storage import zk_async
from spark_coord.coordinator.storage.fencing import EpochCheck
from spark_coord.coordinator.storage.store import GroupStore, StoredGroup, StoredMember, StoreError, TopicPartition
from spark_coord.coordinator.storage.zk_cache import ZnodeCache
from spark_coord.coordinator.storage.zk_fenced import MAX_OPS_PER_MULTI, FencedWriter, Op
from spark_coord.zk import model, paths

__all__ = ["EpochCheck", "MAX_OPS_PER_MULTI", "ZkGroupStore", "encode_state", "parse_state", "pending_path",
           "pending_root"]

log = logging.getLogger(__name__)

STATE_VERSION = 1


def _json(data: bytes | None, what: str) -> Any:
    if data is None or len(data) > model.MAX_ZNODE_BYTES:
        raise ValueError(f"{what}: no data or too large")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ValueError(f"{what}: not JSON ({e.__class__.__name__})") from None


def encode_state(generation_id: int) -> bytes:
    return json.dumps({"version": STATE_VERSION, "generation": generation_id}, separators=(",", ":")).encode()


def parse_state(data: bytes | None, group_id: str) -> int:
    doc = _json(data, f"group {group_id!r} state")
    gen = doc.get("generation") if isinstance(doc, dict) else None
    if isinstance(gen, bool) or not isinstance(gen, int) or gen < 0:
        raise ValueError(f"group {group_id!r} state: generation {gen!r} is not an integer >= 0")
    return gen


#: Groups read at once by ``load_groups`` (each one pipelines its own reads).
LOAD_CONCURRENCY = 16

Parse = Callable[[bytes, str], Any]


async def read_partitions(client: KazooClient, group_id: str, root: str, topic_path: Callable[[str, str], str],
                          leaf_path: Callable[[str, str, int], str], parse: Parse,
                          learn: Callable[[str, bytes], Any] | None = None) -> dict[TopicPartition, Any]:
    """``{(topic, partition): parsed}`` below a group's ``root`` (its owners or offsets), pipelined; None
    for content that does not parse; ``learn(path, data)`` for every znode read."""
    topics = []
    for topic in await zk_async.get_children(client, root):
        try:
            topics.append(paths.validate_topic(topic))
        except ValueError:
            log.warning("group %s: ignoring %s/%s (not a topic name)", group_id, root, topic)
    listing = await zk_async.children_many(client, [topic_path(group_id, t) for t in topics])
    leaves: dict[str, tuple[TopicPartition, str]] = {}
    for topic in topics:
        for node in listing[topic_path(group_id, topic)]:
            try:
                p = paths.parse_partition_node(node)
            except ValueError as e:
                log.warning("group %s: ignoring %s/%s/%s: %s", group_id, root, topic, node, e)
                continue
            leaves[leaf_path(group_id, topic, p)] = ((topic, p), f"{root}/{topic}/{node}")
    out: dict[TopicPartition, Any] = {}
    for path, data in (await zk_async.get_many(client, leaves)).items():
        if learn is not None:
            learn(path, data)
        tp, where = leaves[path]
        try:
            out[tp] = parse(data, where)
        except ValueError as e:
            log.warning("group %s: ignoring %s: %s", group_id, where, e)
            out[tp] = None  # listed, so that a rewrite replaces or deletes it
    return out


async def read_committed_offsets(client: KazooClient, group_id: str,
                                 learn: Callable[[str, bytes], Any] | None = None) -> dict[TopicPartition, int]:
    """A group's committed offsets under ``/consumers/<group>/offsets`` (unparsable ones left out), as
    any process reads them: the coordinator loading a group, OffsetFetch where the coordinator is not."""
    offsets = await read_partitions(client, group_id, paths.group_offsets(group_id), paths.topic_offsets,
                                    paths.offset, model.parse_offset, learn)
    return {tp: o for tp, o in offsets.items() if o is not None}


class ZkGroupStore(GroupStore):
    """Kafka 0.8's consumer layout in ZooKeeper, every write fenced.

    ``epoch_check()`` returns the current ``EpochCheck`` (None while this broker is
    not the coordinator: every write then raises ``Fenced`` at once).  Callers
    keep one store call per group at a time (the coordinator's ``store_lock``).
    """

    def __init__(self, client: KazooClient, epoch_check: Callable[[], EpochCheck | None],
                 owns: Callable[[str], bool] | None = None):
        """``owns(group_id)``: whether a group belongs to this store's shard (None: every group);
        ``load_groups`` restores only those."""
        self.client = client
        self.epoch_check = epoch_check
        self.owns = owns
        self.writer = FencedWriter(client, epoch_check)

    # ------------------------------------------------------------------ writes

    async def save_member(self, group_id: str, member: StoredMember) -> None:
        data = json.dumps(member.to_json(), separators=(",", ":")).encode()
        await self.writer.write(f"save member {group_id}/{member.consumer_id}",
                                [("put", paths.member(group_id, member.consumer_id), data)])

    async def remove_member(self, group_id: str, consumer_id: str) -> None:
        await self.writer.write(f"remove member {group_id}/{consumer_id}",
                                [("delete", paths.member(group_id, consumer_id), None)])

    async def save_generation(self, group_id: str, generation_id: int) -> None:
        await self.writer.write(f"save generation of {group_id}",
                                [("put", paths.group_state(group_id), encode_state(generation_id))])

    async def save_assignment(self, group_id: str, generation_id: int, members: list[StoredMember],
                              owners: dict[TopicPartition, str]) -> None:
        cache = self.writer.cache()
        current = await self._current_owners(group_id, cache)
        ops: list[Op] = [("put", paths.group_state(group_id), encode_state(generation_id))]
        ops += [("put", paths.member(group_id, m.consumer_id),
                 json.dumps(m.to_json(), separators=(",", ":")).encode()) for m in members]
        ops += self._owner_ops(group_id, current, owners)
        await self.writer.write(f"save the assignment of {group_id} (generation {generation_id})", ops,
                                planned_in=cache)
        cache.owners[group_id] = dict(owners)

    async def commit_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        if not offsets:
            return
        ops: list[Op] = [("put", paths.offset(group_id, t, p), model.encode_offset(o))
                         for (t, p), o in sorted(offsets.items())]
        await self.writer.write(f"commit {len(ops)} offsets of {group_id}", ops)

    async def commit_offsets_many(self, offsets: dict[str, dict[TopicPartition, int]]) -> None:
        ops: list[Op] = [("put", paths.offset(group_id, t, p), model.encode_offset(o))
                         for group_id, batch in offsets.items() for (t, p), o in sorted(batch.items())]
        if ops:
            await self.writer.write(f"commit {len(ops)} offsets of {len(offsets)} groups", ops)

    async def verify(self) -> None:
        await self.writer.write("verify the election", [])  # just the two checks

    # ------------------------------------------------------------------ offsets in transactions
    async def load_pending(self) -> dict[str, dict[int, bytes]]:
        """The pending transactional offsets of the shard's groups (pipelined reads: the groups'
        ``pending`` children, then their documents); a node that is not a producer id is skipped."""
        try:
            names = [g for g in map(paths.parse_group_node, await zk_async.get_children(self.client, paths.CONSUMERS))
                     if g is not None and (self.owns is None or self.owns(g))]
            parents = {pending_root(g): g for g in names}
            children = await zk_async.children_many(self.client, parents)
            wanted: dict[str, tuple[str, int]] = {}
            for parent, nodes in children.items():
                for node in nodes:
                    if node.isdigit():
                        wanted[f"{parent}/{node}"] = (parents[parent], int(node))
            docs = await zk_async.get_many(self.client, wanted)
        except KazooException as e:
            raise StoreError(f"load pending transactional offsets: {e.__class__.__name__}") from None
        out: dict[str, dict[int, bytes]] = {}
        for path, data in docs.items():
            group_id, producer_id = wanted[path]
            out.setdefault(group_id, {})[producer_id] = data
        return out

    async def write_pending(self, group_id: str, producer_id: int, doc: bytes) -> None:
        await self.writer.write(f"pending offsets of producer {producer_id} in {group_id}",
                                [("put", pending_path(group_id, producer_id), doc)])

    async def end_pending(self, group_id: str, producer_id: int, offsets: dict[TopicPartition, int] | None) -> None:
        ops: list[Op] = [("put", paths.offset(group_id, t, p), model.encode_offset(o))
                         for (t, p), o in sorted((offsets or {}).items())]
        ops.append(("delete", pending_path(group_id, producer_id), None))
        if len(ops) > MAX_OPS_PER_MULTI:  # one multi or none: the offsets land with the delete
            raise StoreError(f"group {group_id}: {len(ops)} operations do not fit one multi")
        await self.writer.write(f"{'commit' if offsets is not None else 'abort'} the offsets of producer "
                                f"{producer_id} in {group_id}", ops)

    async def delete_topic(self, group_id: str, topic: str) -> None:
        ops: list[Op] = []
        try:
            for parent, leaf in ((paths.topic_offsets(group_id, topic), paths.offset),
                                 (paths.topic_owners(group_id, topic), paths.owner)):
                clean = True
                for node in await zk_async.get_children(self.client, parent):
                    try:
                        ops.append(("delete", leaf(group_id, topic, paths.parse_partition_node(node)), None))
                    except ValueError:
                        clean = False  # not ours: leave it (and so its parent) alone
                if clean:
                    ops.append(("delete", parent, None))
        except KazooException as e:
            raise StoreError(f"read offsets of {group_id}/{topic}: {e.__class__.__name__}") from None
        cache = self.writer.cache()
        await self.writer.write(f"drop offsets and owners of {group_id}/{topic}", ops, planned_in=cache)
        owners = cache.owners.get(group_id)
        if owners is not None:
            cache.owners[group_id] = {tp: o for tp, o in owners.items() if tp[0] != topic}

    async def delete_group(self, group_id: str) -> None:
        root = paths.group(group_id)
        nodes: list[str] = []

        async def walk(path: str) -> None:
            for child in await zk_async.get_children(self.client, path):
                await walk(f"{path}/{child}")
            nodes.append(path)  # children first

        try:
            await walk(root)
        except NoNodeError:
            return
        except KazooException as e:
            raise StoreError(f"read group {group_id}: {e.__class__.__name__}") from None
        cache = self.writer.cache()
        await self.writer.write(f"delete group {group_id}", [("delete", n, None) for n in nodes], planned_in=cache)
        for n in nodes:
            cache.forget(n)
        cache.owners.pop(group_id, None)

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> None:
        ops: list[Op] = [("delete", paths.offset(group_id, t, p), None) for t, p in sorted(set(partitions))]
        if ops:  # an offset never committed is skipped by the writer (delete of what does not exist)
            await self.writer.write(f"delete {len(ops)} offsets of {group_id}", ops)

    async def write_owners(self, group_id: str, owners: dict[TopicPartition, str]) -> None:
        cache = self.writer.cache()
        current = await self._current_owners(group_id, cache)
        ops = self._owner_ops(group_id, current, owners)
        await self.writer.write(f"write {len(owners)} owners of {group_id}", ops, planned_in=cache)
        cache.owners[group_id] = dict(owners)

    async def _current_owners(self, group_id: str, cache: ZnodeCache) -> dict[TopicPartition, str | None]:
        """The owner znodes as this store wrote or read them last in this term (read when unknown)."""
        current = cache.owners.get(group_id)
        if current is None:
            try:
                current = await self._read_owner_map(group_id, cache)
            except KazooException as e:
                raise StoreError(f"read owners of {group_id}: {e.__class__.__name__}") from None
        return current

    @staticmethod
    def _owner_ops(group_id: str, current: dict[TopicPartition, str | None],
                   owners: dict[TopicPartition, str]) -> list[Op]:
        """The ops that turn the owner znodes ``current`` into ``owners``."""
        ops: list[Op] = [("delete", paths.owner(group_id, t, p), None) for (t, p) in sorted(current)
                         if (t, p) not in owners]
        ops += [("put", paths.owner(group_id, t, p), model.encode_owner(owner))
                for (t, p), owner in sorted(owners.items()) if current.get((t, p)) != owner]
        return ops

    # ------------------------------------------------------------------- reads

    async def _read_owner_map(self, group_id: str, cache: ZnodeCache) -> dict[TopicPartition, str | None]:
        owners = await read_partitions(self.client, group_id, paths.group_owners(group_id), paths.topic_owners,
                                       paths.owner, model.parse_owner, cache.learn)
        return cache.owners.setdefault(group_id, owners)

    async def _read_offsets(self, group_id: str, cache: ZnodeCache) -> dict[TopicPartition, int]:
        return await read_committed_offsets(self.client, group_id, cache.learn)

    async def read_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        try:
            return await self._read_offsets(group_id, self.writer.cache())
        except KazooException as e:
            raise StoreError(f"read offsets of {group_id}: {e.__class__.__name__}") from None

    async def read_owners(self, group_id: str) -> dict[TopicPartition, str]:
        """The owners this store wrote or read last in this term; read (pipelined) when it has none."""
        owners = await self._current_owners(group_id, self.writer.cache())
        return {tp: o for tp, o in owners.items() if o is not None}

    async def _load_group(self, group_id: str, cache: ZnodeCache) -> StoredGroup:
        group = StoredGroup(group_id)
        member_paths: dict[str, str] = {}
        for cid in await zk_async.get_children(self.client, paths.group_ids(group_id)):
            try:
                member_paths[paths.member(group_id, cid)] = cid
            except ValueError as e:
                log.warning("group %s: ignoring stored member %r: %s", group_id, cid, e)
        state_path = paths.group_state(group_id)
        found = await zk_async.get_many(self.client, [state_path, *member_paths])
        for path, cid in member_paths.items():
            if path not in found:
                continue
            cache.learn(path, found[path])
            try:
                group.members[cid] = StoredMember.from_json(cid, _json(found[path], f"member {group_id}/{cid}"))
            except ValueError as e:
                log.warning("group %s: ignoring stored member %r: %s", group_id, cid, e)
        if state_path in found:
            cache.learn(state_path, found[state_path])
            try:
                group.generation_id = parse_state(found[state_path], group_id)
            except ValueError as e:
                log.warning("%s", e)
        offsets, owners = await zk_async.gather_all([self._read_offsets(group_id, cache),
                                                     self._read_owner_map(group_id, cache)])
        group.offsets = offsets
        group.owners = {tp: o for tp, o in owners.items() if o is not None}
        return group

    async def load_groups(self) -> dict[str, StoredGroup]:
        cache = self.writer.cache()
        limit = asyncio.Semaphore(LOAD_CONCURRENCY)

        async def load(group_id: str) -> StoredGroup:
            async with limit:
                return await self._load_group(group_id, cache)

        try:
            names = [g for g in map(paths.parse_group_node, await zk_async.get_children(self.client, paths.CONSUMERS))
                     if g is not None and (self.owns is None or self.owns(g))]
            return {g.group_id: g for g in await zk_async.gather_all(load(name) for name in names)}
        except KazooException as e:
            raise StoreError(f"load groups: {e.__class__.__name__}") from None

    async def topics(self) -> dict[str, int]:
        topic_paths: dict[str, str] = {}
        try:
            for topic in await zk_async.get_children(self.client, paths.BROKER_TOPICS):
                try:
                    topic_paths[paths.topic(topic)] = topic
                except ValueError as e:
                    log.warning("ignoring topic %r: %s", topic, e)
            found = await zk_async.get_many(self.client, topic_paths)
        except KazooException as e:
            raise StoreError(f"read topics: {e.__class__.__name__}") from None
        out = {}
        for path, data in found.items():
            try:
                out[topic_paths[path]] = len(model.parse_topic_assignment(data, topic_paths[path]))
            except ValueError as e:
                log.warning("ignoring topic %r: %s", topic_paths[path], e)
        return out

    # ------------------------------------------------------------------ share groups (KIP-932)
    # The leaders write ``/share-groups/<g>/<t>/<p>`` themselves (``share.store``, version-checked);
    # the coordinator reads it and, for an empty group's admin APIs, overwrites or deletes it,
    # fenced by its election.  Its term cache must never vouch for these znodes (the leaders change
    # them behind its back): every path written here is dropped from it right after the write.

    async def read_share_states(self, group_id: str) -> dict[TopicPartition, bytes]:
        root = paths.share_group(group_id)
        try:
            topics = []
            for t in await zk_async.get_children(self.client, root):
                try:
                    topics.append((t, paths.share_topic(group_id, t)))
                except ValueError:
                    log.warning("share group %s: ignoring %s/%s (not a topic name)", group_id, root, t)
            children = await zk_async.children_many(self.client, [p for _, p in topics])
            znodes: dict[str, TopicPartition] = {}
            for t, tpath in topics:
                for child in children.get(tpath, []):
                    if child.isdigit():
                        znodes[f"{tpath}/{child}"] = (t, int(child))
            found = await zk_async.get_many(self.client, znodes)
        except KazooException as e:
            raise StoreError(f"read share state of {group_id}: {e.__class__.__name__}") from None
        return {znodes[path]: data for path, data in found.items()}

    async def has_share_state(self, group_id: str) -> bool:
        try:
            return (await zk_async.exists_many(self.client, [paths.share_group(group_id)]))[paths.share_group(group_id)]
        except KazooException as e:
            raise StoreError(f"read share state of {group_id}: {e.__class__.__name__}") from None

    async def write_share_states(self, group_id: str, states: dict[TopicPartition, bytes]) -> None:
        ops: list[Op] = [("put", paths.share_partition(group_id, t, p), data)
                         for (t, p), data in sorted(states.items())]
        try:
            await zk_async.awaitable(self.client.ensure_path_async(paths.SHARE_GROUPS))
        except KazooException as e:
            raise StoreError(f"share state of {group_id}: {e.__class__.__name__}") from None
        cache = self.writer.cache()
        try:
            await self.writer.write(f"share state of {group_id}", ops)
        finally:
            for _, path, _ in ops:
                cache.removed(path)
        await self._notify_share_change(group_id, sorted({t for t, _ in states}))

    async def delete_share_states(self, group_id: str, topics: list[str] | None = None) -> None:
        bases = [paths.share_group(group_id)] if topics is None else [paths.share_topic(group_id, t) for t in topics]
        nodes: list[str] = []

        async def walk(path: str) -> None:
            for child in await zk_async.get_children(self.client, path):
                await walk(f"{path}/{child}")
            nodes.append(path)  # children first

        try:
            for base in bases:
                await walk(base)
        except KazooException as e:
            raise StoreError(f"read share state of {group_id}: {e.__class__.__name__}") from None
        await self.writer.write(f"delete share state of {group_id}", [("delete", n, None) for n in nodes])
        await self._notify_share_change(group_id, topics)

    async def save_share_group(self, group_id: str, doc: bytes) -> None:
        try:  # the writer creates missing parents below the top-level node only
            await zk_async.awaitable(self.client.ensure_path_async(paths.SHARE_GROUPS))
        except KazooException as e:
            raise StoreError(f"save share group {group_id}: {e.__class__.__name__}") from None
        await self.writer.write(f"save share group {group_id}", [("put", paths.share_group(group_id), doc)])

    async def load_share_groups(self) -> dict[str, bytes]:
        try:
            names = [g for g in await zk_async.get_children(self.client, paths.SHARE_GROUPS)
                     if self.owns is None or self.owns(g)]
            found = await zk_async.get_many(self.client, {paths.share_group(g): g for g in names
                                                           if _valid_group(g)})
        except KazooException as e:
            raise StoreError(f"load share groups: {e.__class__.__name__}") from None
        return {path.rsplit("/", 1)[1]: data or b"" for path, data in found.items()}

    async def _notify_share_change(self, group_id: str, topics: list[str] | None) -> None:
        """Tell every broker (``share.changes``); a failure is logged: the state is written, and a
        leader that holds a partition of it still learns at its next write (its version check)."""
        from spark_coord.share.changes import encode_change

        try:
            await zk_async.awaitable(self.client.create_async(
                f"{paths.SHARE_CHANGES}/{paths.SHARE_CHANGE_PREFIX}", encode_change(group_id, topics),
                sequence=True, makepath=True))
        except KazooException as e:
            log.warning("share group %s: state changed, but the brokers were not notified (%s)", group_id,
                        e.__class__.__name__)


def pending_root(group_id: str) -> str:
    """``/consumers/<group>/pending``: the producers' offsets held until their transaction ends."""
    return f"{paths.group(group_id)}/pending"


def pending_path(group_id: str, producer_id: int) -> str:
    """``/consumers/<group>/pending/<producer id>``."""
    return f"{pending_root(group_id)}/{int(producer_id)}"


def _valid_group(name: str) -> bool:
    try:
        paths.share_group(name)
    except ValueError:
        return False
    return True
