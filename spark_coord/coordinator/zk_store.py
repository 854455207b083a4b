"""``ZkGroupStore``: the group store in ZooKeeper, in Kafka 0.8's layout, fenced by the election.

Layout (paths from ``zk.paths``)::

    /consumers/<g>/ids/<consumer_id>          member JSON: Kafka 0.8's pattern/subscription
                                              plus auto_commit, auto_offset_reset, session_timeout_ms
    /consumers/<g>/state                      {"version": 1, "generation": N}
    /consumers/<g>/offsets/<t>/<p>            next offset to consume, decimal
    /consumers/<g>/owners/<t>/<p>             owning consumer thread id

Fencing (DESIGN section 6): every write is one ZooKeeper multi-op that starts
with two ``check`` operations from the coordinator's ``EpochCheck``:

* ``/consumers/coordinator`` at the version this coordinator created it with --
  fails when the election node is gone;
* ``/consumers`` at the data version this coordinator's election bumped it to --
  fails once anyone else has won an election since, even though their election
  node has the same version number as ours had (a version alone cannot tell two
  incarnations of an ephemeral node apart; ZooKeeper's multi cannot check czxid).

Either failing makes the whole multi fail: the write raises ``Fenced`` and
nothing lands.  Blocking kazoo calls run in the default executor, never on the
event loop thread.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from dataclasses import dataclass
from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.exceptions import (NoNodeError, NodeExistsError, RolledBackError,
                              SessionExpiredError, ZookeeperError)

from spark_coord.coordinator.store import Fenced, GroupStore, StoredGroup, StoredMember, StoreError, TopicPartition
from spark_coord.zk import model, paths

log = logging.getLogger(__name__)

#: Most operations per multi (ZooKeeper bounds a request by jute.maxbuffer, ~1 MB).
MAX_OPS_PER_MULTI = 500
STATE_VERSION = 1


@dataclass(frozen=True)
class EpochCheck:
    """What a write must find in ZooKeeper to be allowed: the election as this coordinator won it."""

    epoch: int                 #: czxid of our election node (stamped on requests)
    coordinator_version: int   #: data version of /consumers/coordinator as we created it
    consumers_version: int     #: data version of /consumers after our election bumped it


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


class ZkGroupStore(GroupStore):
    """Kafka 0.8's consumer layout in ZooKeeper, every write fenced.

    ``epoch_check()`` returns the current ``EpochCheck`` (None while this broker is
    not the coordinator: every write then raises ``Fenced`` at once).
    """

    def __init__(self, client: KazooClient, epoch_check: Callable[[], EpochCheck | None]):
        self.client = client
        self.epoch_check = epoch_check

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(fn, *args))

    # ------------------------------------------------------------------ writes

    def _missing_parents(self, path: str, planned: set[str]) -> list[str]:
        """Ancestors of ``path`` below /consumers that neither exist nor are already planned."""
        parts = path.strip("/").split("/")
        out = []
        for i in range(2, len(parts)):  # /consumers always exists
            parent = "/" + "/".join(parts[:i])
            if parent in planned:
                continue
            if self.client.exists(parent) is None:
                out.append(parent)
                planned.add(parent)
        return out

    def _multi(self, what: str, ops: list[tuple[str, str, bytes | None]]) -> None:
        """Apply ``ops`` = [(kind, path, data)] (kind: put | delete) fenced, in chunks; blocking."""
        for start in range(0, max(1, len(ops)), MAX_OPS_PER_MULTI):
            chunk = ops[start:start + MAX_OPS_PER_MULTI]
            for attempt in range(3):
                try:
                    self._multi_chunk(what, chunk)
                    break
                except NodeExistsError:
                    # a parent or node appeared between our exists() and the multi: plan again
                    if attempt == 2:
                        raise StoreError(f"{what}: nodes kept appearing concurrently") from None

    def _multi_chunk(self, what: str, ops: list[tuple[str, str, bytes | None]]) -> None:
        check = self.epoch_check()
        if check is None:
            raise Fenced(f"{what}: this broker is not the coordinator")
        txn = self.client.transaction()
        txn.check(paths.COORDINATOR, check.coordinator_version)
        txn.check(paths.CONSUMERS, check.consumers_version)
        planned: set[str] = set()
        for kind, path, data in ops:
            exists = self.client.exists(path) is not None
            if kind == "put":
                for parent in self._missing_parents(path, planned):
                    txn.create(parent, b"")
                if exists:
                    txn.set_data(path, data or b"")
                elif path not in planned:
                    txn.create(path, data or b"")
                    planned.add(path)
            elif exists:
                txn.delete(path)
        try:
            results = txn.commit()
        except SessionExpiredError:
            raise Fenced(f"{what}: ZooKeeper session expired") from None
        except ZookeeperError as e:
            raise StoreError(f"{what}: {e.__class__.__name__}") from None
        for i, result in enumerate(results):
            if not isinstance(result, Exception) or isinstance(result, RolledBackError):
                continue
            if i < 2:
                raise Fenced(f"{what}: the election changed ({'/consumers/coordinator' if i == 0 else '/consumers'}: "
                             f"{result.__class__.__name__}); not writing")
            if isinstance(result, NodeExistsError):
                raise result
            raise StoreError(f"{what}: {result.__class__.__name__}")

    async def save_member(self, group_id: str, member: StoredMember) -> None:
        data = json.dumps(member.to_json(), separators=(",", ":")).encode()
        await self._run(self._multi, f"save member {group_id}/{member.consumer_id}",
                        [("put", paths.member(group_id, member.consumer_id), data)])

    async def remove_member(self, group_id: str, consumer_id: str) -> None:
        await self._run(self._multi, f"remove member {group_id}/{consumer_id}",
                        [("delete", paths.member(group_id, consumer_id), None)])

    async def save_generation(self, group_id: str, generation_id: int) -> None:
        await self._run(self._multi, f"save generation of {group_id}",
                        [("put", paths.group_state(group_id), encode_state(generation_id))])

    async def commit_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        if not offsets:
            return
        ops = [("put", paths.offset(group_id, t, p), model.encode_offset(o)) for (t, p), o in sorted(offsets.items())]
        await self._run(self._multi, f"commit {len(ops)} offsets of {group_id}", ops)

    async def write_owners(self, group_id: str, owners: dict[TopicPartition, str]) -> None:
        def plan_and_write() -> None:
            current = self._read_partitions(group_id, paths.group_owners(group_id), paths.topic_owners, paths.owner,
                                            lambda data, where: model.parse_owner(data, where), tolerant=True)
            ops: list[tuple[str, str, bytes | None]] = [
                ("delete", paths.owner(group_id, t, p), None) for (t, p) in sorted(current) if (t, p) not in owners]
            ops += [("put", paths.owner(group_id, t, p), model.encode_owner(owner))
                    for (t, p), owner in sorted(owners.items()) if current.get((t, p)) != owner]
            if ops:
                self._multi(f"write {len(owners)} owners of {group_id}", ops)
        await self._run(plan_and_write)

    # ------------------------------------------------------------------- reads

    def _children(self, path: str) -> list[str]:
        try:
            return self.client.get_children(path)
        except NoNodeError:
            return []

    def _get(self, path: str) -> bytes | None:
        try:
            return self.client.get(path)[0]
        except NoNodeError:
            return None

    def _read_partitions(self, group_id: str, root: str, topic_path: Callable[[str, str], str],
                         leaf_path: Callable[[str, str, int], str], parse: Callable[[bytes | None, str], Any],
                         tolerant: bool = False) -> dict[TopicPartition, Any]:
        out: dict[TopicPartition, Any] = {}
        for topic in self._children(root):
            try:
                paths.validate_topic(topic)
            except ValueError:
                log.warning("group %s: ignoring %s/%s (not a topic name)", group_id, root, topic)
                continue
            for node in self._children(topic_path(group_id, topic)):
                try:
                    p = paths.parse_partition_node(node)
                except ValueError as e:
                    log.warning("group %s: ignoring %s/%s/%s: %s", group_id, root, topic, node, e)
                    continue
                data = self._get(leaf_path(group_id, topic, p))
                if data is None:
                    continue
                try:
                    out[(topic, p)] = parse(data, f"{root}/{topic}/{node}")
                except ValueError as e:
                    log.warning("group %s: ignoring %s/%s/%s: %s", group_id, root, topic, node, e)
                    if tolerant:  # listed as None, so a rewrite replaces or deletes it
                        out[(topic, p)] = None
        return out

    def _read_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        return self._read_partitions(group_id, paths.group_offsets(group_id), paths.topic_offsets, paths.offset,
                                     model.parse_offset)

    def _read_owners(self, group_id: str) -> dict[TopicPartition, str]:
        return self._read_partitions(group_id, paths.group_owners(group_id), paths.topic_owners, paths.owner,
                                     model.parse_owner)

    async def read_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        return await self._run(self._read_offsets, group_id)

    async def read_owners(self, group_id: str) -> dict[TopicPartition, str]:
        return await self._run(self._read_owners, group_id)

    def _load_group(self, group_id: str) -> StoredGroup:
        group = StoredGroup(group_id)
        for cid in self._children(paths.group_ids(group_id)):
            try:
                data = self._get(paths.member(group_id, cid))
                group.members[cid] = StoredMember.from_json(cid, _json(data, f"member {group_id}/{cid}"))
            except ValueError as e:
                log.warning("group %s: ignoring stored member %r: %s", group_id, cid, e)
        state = self._get(paths.group_state(group_id))
        if state is not None:
            try:
                group.generation_id = parse_state(state, group_id)
            except ValueError as e:
                log.warning("%s", e)
        group.offsets = self._read_offsets(group_id)
        group.owners = self._read_owners(group_id)
        return group

    def _load_groups(self) -> dict[str, StoredGroup]:
        groups = {}
        for node in self._children(paths.CONSUMERS):
            g = paths.parse_group_node(node)
            if g is not None:
                groups[g] = self._load_group(g)
        return groups

    async def load_groups(self) -> dict[str, StoredGroup]:
        return await self._run(self._load_groups)

    def _topics(self) -> dict[str, int]:
        out = {}
        for topic in self._children(paths.BROKER_TOPICS):
            try:
                data = self._get(paths.topic(topic))
                if data is not None:
                    out[topic] = len(model.parse_topic_assignment(data, topic))
            except ValueError as e:
                log.warning("ignoring topic %r: %s", topic, e)
        return out

    async def topics(self) -> dict[str, int]:
        return await self._run(self._topics)
