"""Topic administration against ZooKeeper: create (explicit and automatic), add partitions, delete.

A topic is the znode ``/brokers/topics/<topic>`` holding Kafka's assignment JSON
(Kafka 2.8+'s version 3, with the topic id a new topic is given here); every
broker's ``ClusterView`` picks it up by watch, and the leader of each partition
creates its log.  One replica per partition.  A topic deleted and created again
is a new topic with a new id.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from spark_coord.errors import ErrorCode
from spark_coord.zk import model, paths

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicResult:
    """Outcome of one create or delete: error code, message, partition count, topic id
    (the zero UUID when there is none to report)."""

    code: int
    message: str | None = None
    num_partitions: int = -1
    topic_id: bytes = model.ZERO_TOPIC_ID


def check_name(name) -> str | None:
    """None if ``name`` is a legal Kafka topic name, else the reason."""
    try:
        paths.validate_topic(name)
        return None
    except ValueError as e:
        return str(e)


def plan_assignment(ctx, num_partitions: int, replication_factor: int,
                    assignments: list[dict] | None) -> tuple[dict[int, list[int]] | None, TopicResult | None]:
    """The partition -> replicas map for a new topic, or the error explaining why not."""
    live = sorted(ctx.view.brokers)
    if assignments:
        if num_partitions != -1 or replication_factor != -1:
            return None, TopicResult(ErrorCode.INVALID_REQUEST,
                                     "num_partitions and replication_factor must be -1 with explicit assignments")
        plan: dict[int, list[int]] = {}
        for a in assignments:
            p, replicas = a.get("partition_index"), list(a.get("broker_ids") or [])
            if p in plan or p is None or p < 0:
                return None, TopicResult(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                         f"partition {p} is invalid or listed twice")
            if len(replicas) != 1:
                return None, TopicResult(ErrorCode.INVALID_REPLICATION_FACTOR if replicas else
                                         ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                         f"partition {p} lists {len(replicas)} replicas; exactly one replica "
                                         "per partition is supported")
            unknown = [b for b in replicas if b not in ctx.view.brokers]
            if unknown:
                return None, TopicResult(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                         f"partition {p}: unknown broker(s) {unknown}")
            plan[p] = replicas
        if sorted(plan) != list(range(len(plan))):
            return None, TopicResult(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                     f"partitions must be 0..{len(plan) - 1} without gaps, got {sorted(plan)}")
        return plan, None
    if num_partitions == -1:
        num_partitions = ctx.config["num.partitions"]
    if num_partitions < 1:
        return None, TopicResult(ErrorCode.INVALID_PARTITIONS,
                                 f"number of partitions must be at least 1, got {num_partitions}")
    if replication_factor not in (-1, 1):
        return None, TopicResult(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 f"replication factor {replication_factor} is not supported: "
                                 "one replica per partition is supported (use 1 or -1)")
    if not live:
        return None, TopicResult(ErrorCode.BROKER_NOT_AVAILABLE, "no live brokers")
    return model.assign_partitions(num_partitions, live), None


async def create_topic(ctx, name: str, num_partitions: int = -1, replication_factor: int = -1,
                       assignments: list[dict] | None = None, validate_only: bool = False,
                       timeout_ms: int = 30000, configs: dict[str, str] | None = None) -> TopicResult:
    """Create ``name`` in ZooKeeper with a new topic id and wait (up to ``timeout_ms``) until this
    broker's view has it.  ``configs`` (the topic's own settings) are validated as AlterConfigs
    validates them (INVALID_CONFIG naming the key) and stored at ``/config/topics/<topic>`` before
    the topic znode is created, as Kafka does."""
    reason = check_name(name)
    if reason is not None:
        return TopicResult(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)
    if name in ctx.view.topics:
        return TopicResult(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
    plan, error = plan_assignment(ctx, num_partitions, replication_factor, assignments)
    if error is not None:
        return error
    dynamic = getattr(ctx, "dynamic_configs", None)
    if configs and dynamic is not None:
        from spark_coord.configs.model import InvalidConfig

        try:
            dynamic.validate_topic(configs)
        except InvalidConfig as e:
            return TopicResult(ErrorCode.INVALID_CONFIG, str(e))
    if validate_only:
        return TopicResult(ErrorCode.NONE, None, len(plan))
    if dynamic is not None and (configs or dynamic.topic_overrides(name)):
        # stored first (a leftover of a deleted topic of that name is replaced), then the topic
        await asyncio.get_running_loop().run_in_executor(None, dynamic.create_topic_configs, name,
                                                         dict(configs or {}))
    topic_id = model.new_topic_id()
    try:
        await ctx.zk_call(ctx.zk.create, paths.topic(name), model.topic_assignment(plan, topic_id), makepath=True)
    except NodeExistsError:
        return TopicResult(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
    log.info("created topic %s (id %s): %s", name, model.format_topic_id(topic_id), plan)
    if timeout_ms > 0 and not await ctx.view.wait_for(lambda v: v.topic_id(name) == topic_id, timeout_ms / 1000):
        return TopicResult(ErrorCode.REQUEST_TIMED_OUT, f"topic {name!r} created but not yet visible", len(plan),
                           topic_id)
    return TopicResult(ErrorCode.NONE, None, len(plan), topic_id)


async def auto_create(ctx, name: str) -> int:
    """Create ``name`` with num.partitions (auto.create.topics.enable); an existing topic is fine."""
    result = await create_topic(ctx, name, timeout_ms=5000)
    if result.code == ErrorCode.TOPIC_ALREADY_EXISTS:
        return ErrorCode.NONE
    if result.code != ErrorCode.NONE:
        log.info("auto-creating topic %r failed: %s", name, result.message)
    return result.code


async def delete_topic(ctx, name: str, timeout_ms: int = 30000, topic_id: bytes | None = None) -> TopicResult:
    """Delete ``name``'s znode; every broker drops its logs when its view loses the topic.

    With ``topic_id``, only the topic of that id: the znode is deleted at the version whose
    id was checked, so a topic created again under the name meanwhile is left alone and the
    answer is UNKNOWN_TOPIC_ID.  The result carries the id of the topic deleted."""
    if not ctx.config["delete.topic.enable"]:
        return TopicResult(ErrorCode.TOPIC_DELETION_DISABLED, "delete.topic.enable is false")
    if check_name(name) is not None:
        return TopicResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
    path = paths.topic(name)
    for _ in range(5):
        try:
            data, stat = await ctx.zk_call(ctx.zk.get, path)
        except NoNodeError:
            break
        try:
            found = model.parse_topic(data, name).topic_id
        except ValueError:
            found = None
        found = found or ctx.view.topic_id(name)
        if topic_id is not None and found != topic_id:
            return TopicResult(ErrorCode.UNKNOWN_TOPIC_ID, f"no topic with id {model.format_topic_id(topic_id)}")
        try:
            # a plain delete of the (childless) topic znode, at the version just read
            await ctx.zk_call(ctx.zk.delete, path, version=stat.version)
        except NoNodeError:
            break
        except BadVersionError:
            continue  # rewritten since the read (an id given, a partition added): read again
        except NotEmptyError:  # a child appeared (a tool's partition state): delete it all
            await ctx.zk_call(ctx.zk.delete, path, recursive=True)
        log.info("deleted topic %s (id %s)", name, model.format_topic_id(found) if found else "none")
        if getattr(ctx, "dynamic_configs", None) is not None:
            try:
                await ctx.dynamic_configs.delete_topic(name)
            except Exception as e:  # noqa: BLE001 -- the topic is gone; its configs are replaced on re-creation
                log.warning("could not delete the configs of deleted topic %s: %r", name, e)

        def gone(v, found=found) -> bool:  # or replaced by a topic of the same name and another id
            return name not in v.topics or (found is not None and v.topic_id(name) not in (None, found))

        if timeout_ms > 0 and not await ctx.view.wait_for(gone, timeout_ms / 1000):
            return TopicResult(ErrorCode.REQUEST_TIMED_OUT, f"topic {name!r} deleted but still visible",
                               topic_id=found or model.ZERO_TOPIC_ID)
        return TopicResult(ErrorCode.NONE, topic_id=found or model.ZERO_TOPIC_ID)
    else:  # five reads, each followed by a change: give up rather than delete what was not checked
        return TopicResult(ErrorCode.REQUEST_TIMED_OUT, f"topic {name!r} kept changing while being deleted")
    if topic_id is not None:
        return TopicResult(ErrorCode.UNKNOWN_TOPIC_ID, f"no topic with id {model.format_topic_id(topic_id)}")
    return TopicResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")


def _plan_new_partitions(ctx, current: dict[int, list[int]], count: int,
                         assignments: list[dict] | None) -> tuple[dict[int, list[int]] | None, TopicResult | None]:
    """Replicas of partitions ``len(current)..count-1``, as Kafka's ``AdminZkClient.createPartitions``
    checks them: one assignment per new partition, as many replicas as the topic has (one), known
    brokers only; without assignments, leaders continue round-robin after the last partition's."""
    n_old = len(current)
    if count < n_old:
        return None, TopicResult(ErrorCode.INVALID_PARTITIONS,
                                 f"Topic currently has {n_old} partitions, which is higher than the requested {count}.")
    if count == n_old:
        return None, TopicResult(ErrorCode.INVALID_PARTITIONS, f"Topic already has {n_old} partitions.")
    new = range(n_old, count)
    if assignments is not None:
        if len(assignments) != len(new):
            return None, TopicResult(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                     f"Increasing the number of partitions by {len(new)} but {len(assignments)} "
                                     "assignments provided.")
        plan: dict[int, list[int]] = {}
        for p, a in zip(new, assignments, strict=True):
            replicas = list(a.get("broker_ids") or [])
            if len(replicas) != 1:
                return None, TopicResult(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                         f"partition {p} lists {len(replicas)} replicas; the topic has one replica "
                                         "per partition")
            unknown = [b for b in replicas if b not in ctx.view.brokers]
            if unknown:
                return None, TopicResult(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                         f"Unknown broker(s) in replica assignment: {unknown}.")
            plan[p] = replicas
        return plan, None
    live = sorted(ctx.view.brokers)
    if not live:
        return None, TopicResult(ErrorCode.BROKER_NOT_AVAILABLE, "no live brokers")
    last_leader = (current.get(n_old - 1) or [None])[0]
    start = live.index(last_leader) + 1 if last_leader in live else None
    spread = model.assign_partitions(len(new), live, start)
    return {p: spread[i] for i, p in enumerate(new)}, None


async def add_partitions(ctx, name: str, count: int, assignments: list[dict] | None = None,
                         validate_only: bool = False, timeout_ms: int = 30000) -> TopicResult:
    """Grow ``name`` to ``count`` partitions: the topic znode is rewritten (same topic id) at the
    version read, so a concurrent change is read again, never overwritten; every broker's view, the
    new partitions' leaders (their logs) and the coordinator (a rebalance of the groups reading the
    topic) follow its watch.  Waits up to ``timeout_ms`` until this broker's view has them."""
    if check_name(name) is not None:
        return TopicResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
    path = paths.topic(name)
    for _ in range(5):
        try:
            data, stat = await ctx.zk_call(ctx.zk.get, path)
        except NoNodeError:
            return TopicResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        try:
            znode = model.parse_topic(data, name)
        except ValueError as e:
            return TopicResult(ErrorCode.UNKNOWN_SERVER_ERROR, f"topic {name!r} has unreadable metadata: {e}")
        added, error = _plan_new_partitions(ctx, znode.partitions, count, assignments)
        if error is not None:
            return error
        if validate_only:
            return TopicResult(ErrorCode.NONE, None, count, znode.topic_id or model.ZERO_TOPIC_ID)
        topic_id = znode.topic_id or ctx.view.topic_id(name)
        content = model.topic_assignment({**znode.partitions, **added}, topic_id)
        try:
            await ctx.zk_call(ctx.zk.set, path, content, version=stat.version)
        except BadVersionError:
            continue  # changed since the read: check again against what is there now
        except NoNodeError:
            return TopicResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        log.info("topic %s: %d -> %d partitions: %s", name, len(znode.partitions), count, added)
        if timeout_ms > 0 and not await ctx.view.wait_for(lambda v: len(v.topics.get(name, {})) >= count,
                                                          timeout_ms / 1000):
            return TopicResult(ErrorCode.REQUEST_TIMED_OUT, f"partitions of {name!r} added but not yet visible", count)
        return TopicResult(ErrorCode.NONE, None, count, topic_id or model.ZERO_TOPIC_ID)
    return TopicResult(ErrorCode.REQUEST_TIMED_OUT, f"topic {name!r} kept changing while partitions were added")
