"""Config administration shared by DescribeConfigs, AlterConfigs and IncrementalAlterConfigs.

Per resource, in Kafka's order: authorization (DESCRIBE_CONFIGS or ALTER_CONFIGS
on the cluster for a BROKER, on the topic for a TOPIC, on the group for a GROUP;
refused: CLUSTER_/TOPIC_/GROUP_AUTHORIZATION_FAILED), then the resource itself:

- GROUP: described from this broker's cache (``configs.store.GroupConfigs``);
  altered in ZooKeeper after Kafka's checks: a resource listed twice and a key
  listed twice are INVALID_REQUEST, so is a null value (other than a DELETE), an
  empty group name and an unknown operation; APPEND and SUBTRACT are refused with
  INVALID_CONFIG (no group config is a list, Kafka's answer), and so is an unknown
  key or a value Kafka would refuse, with a message naming the key and the reason.
  ``validate_only`` checks all of it and writes nothing.  AlterConfigs replaces the
  group's whole set; IncrementalAlterConfigs SETs and DELETEs keys.
- TOPIC: described with the topic's own configs (DYNAMIC_TOPIC_CONFIG) over the
  broker's settings under Kafka's names (``configs.topic``); a name that is not a
  legal topic name answers INVALID_TOPIC_EXCEPTION, a topic that does not exist
  UNKNOWN_TOPIC_OR_PARTITION.  Altered in ``/config/topics/<topic>`` (plus a
  ``/config/changes`` notification) after Kafka's validation: INVALID_CONFIG naming
  the key for an unknown name, a bad value or a value out of range.
- BROKER: described when named by this broker's id, with the dynamic levels
  (``configs.broker``); the empty name describes (and alters) the cluster-wide
  dynamic defaults at ``/config/brokers/<default>``; another id, or one that is not
  an integer, answers INVALID_REQUEST (Kafka describes a broker only at it).  Only
  the dynamic keys may be altered (INVALID_CONFIG for the others).
- IncrementalAlterConfigs on a TOPIC or a BROKER: SET, DELETE, and APPEND/SUBTRACT
  for list keys (cleanup.policy, log.cleanup.policy) starting from the stored value,
  else the value in effect; APPEND/SUBTRACT of any other key is INVALID_CONFIG.
- Any other resource type (BROKER_LOGGER, CLIENT_METRICS, codes Kafka does not
  have, the ACL code 3 for a group) answers INVALID_REQUEST.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from kazoo.exceptions import KazooException

from spark_coord.configs.broker import describe_broker
from spark_coord.configs.dynamic import BROKERS, TOPICS
from spark_coord.configs.model import AlterConfigOp, ConfigResourceType, InvalidConfig
from spark_coord.configs.topic import TOPIC_KEYS, describe_topic
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import CLUSTER, AclOperation, Resource
from spark_coord.zk import paths

log = logging.getLogger(__name__)

Outcome = tuple[int, "str | None"]

_UNAUTHORIZED = {
    ConfigResourceType.TOPIC: (ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."),
    ConfigResourceType.BROKER: (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."),
    ConfigResourceType.GROUP: (ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."),
}


def _acl_resource(rtype: ConfigResourceType, name: str) -> Resource:
    if rtype == ConfigResourceType.TOPIC:
        return Resource.topic(name)
    if rtype == ConfigResourceType.GROUP:
        return Resource.group(name)
    return CLUSTER


def _unsupported(code: int) -> Outcome:
    rtype = ConfigResourceType.of(code)
    what = rtype.name if rtype != ConfigResourceType.UNKNOWN else f"code {code}"
    return (ErrorCode.INVALID_REQUEST,
            f"Unsupported resource type {what}: this broker serves the configs of TOPIC (2), BROKER (4) "
            "and GROUP (32) resources")


def _check_broker_name(ctx, name: str) -> Outcome | None:
    """None when ``name`` is this broker's id or empty, else Kafka's INVALID_REQUEST."""
    if name == "":
        return None
    try:
        broker_id = int(name)
    except ValueError:
        return ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
    if broker_id != ctx.broker_id:
        return (ErrorCode.INVALID_REQUEST,
                f"Unexpected broker id, expected {ctx.broker_id} or empty string, but received {name}")
    return None


def _check_topic(ctx, name: str) -> Outcome | None:
    try:
        paths.validate_topic(name)
    except ValueError as e:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, str(e)
    if name not in ctx.view.topics:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
    return None


def _check_group(name: str) -> Outcome | None:
    if not name:
        return ErrorCode.INVALID_REQUEST, "Group name must not be empty"
    try:
        paths.group_config(name)
    except ValueError as e:
        return ErrorCode.INVALID_REQUEST, str(e)
    return None


# ------------------------------------------------------------------ DescribeConfigs

def describe(ctx, conn, resource: dict, include_synonyms: bool, include_documentation: bool) -> dict:
    """One ``DescribeConfigsResult``."""
    code, name = resource.get("resource_type", 0), resource.get("resource_name") or ""
    keys = resource.get("configuration_keys") or None  # null or empty: every config
    out = {"resource_type": code, "resource_name": name, "error_code": ErrorCode.NONE, "error_message": None,
           "configs": []}
    rtype = ConfigResourceType.of(code)
    if rtype not in _UNAUTHORIZED:
        out["error_code"], out["error_message"] = _unsupported(code)
        return out
    if not ctx.authorized(conn, AclOperation.DESCRIBE_CONFIGS, _acl_resource(rtype, name)):
        out["error_code"], out["error_message"] = _UNAUTHORIZED[rtype]
        return out
    dynamic = getattr(ctx, "dynamic_configs", None)
    if rtype == ConfigResourceType.TOPIC:
        refused = _check_topic(ctx, name)
        if refused is not None:
            entries = []
        elif dynamic is not None:
            entries = dynamic.describe_topic(name, keys)
        else:
            entries = describe_topic(ctx.config, keys)
    elif rtype == ConfigResourceType.BROKER:
        refused = _check_broker_name(ctx, name)
        if refused is not None:
            entries = []
        elif dynamic is not None:
            entries = dynamic.describe_broker(default=not name, names=keys)
        else:
            entries = describe_broker(ctx.config, keys) if name else []
    else:
        refused = _check_group(name)
        entries = ctx.group_configs.describe(name, keys) if refused is None else []
    if refused is not None:
        out["error_code"], out["error_message"] = refused
        return out
    out["configs"] = [e.to_wire(include_synonyms, include_documentation) for e in entries]
    return out


# ------------------------------------------------------------------ AlterConfigs, IncrementalAlterConfigs

async def alter(ctx, conn, body: dict, incremental: bool) -> list[dict]:
    """The ``AlterConfigsResourceResponse`` of every resource of an (Incremental)AlterConfigs request."""
    resources = body.get("resources") or []
    validate_only = bool(body.get("validate_only"))
    listed = Counter((r.get("resource_type"), r.get("resource_name")) for r in resources)
    out = []
    for r in resources:
        if listed[(r.get("resource_type"), r.get("resource_name"))] > 1:
            code, message = ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."
        else:
            code, message = await _alter_one(ctx, conn, r, incremental, validate_only)
        out.append({"error_code": code, "error_message": message, "resource_type": r.get("resource_type", 0),
                    "resource_name": r.get("resource_name") or ""})
    return out


async def _alter_one(ctx, conn, resource: dict, incremental: bool, validate_only: bool) -> Outcome:
    code, name = resource.get("resource_type", 0), resource.get("resource_name") or ""
    configs: list[dict] = resource.get("configs") or []
    rtype = ConfigResourceType.of(code)
    if rtype not in _UNAUTHORIZED:
        return _unsupported(code)
    if not ctx.authorized(conn, AclOperation.ALTER_CONFIGS, _acl_resource(rtype, name)):
        return _UNAUTHORIZED[rtype]
    names = Counter(c.get("name") for c in configs)
    if any(n > 1 for n in names.values()):
        return ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys"
    nulls = [c.get("name") for c in configs
             if c.get("value") is None and not (incremental and c.get("config_operation") == AlterConfigOp.DELETE)]
    if nulls:
        return ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(map(str, nulls))
    if incremental:
        for c in configs:
            op = c.get("config_operation")
            if op not in AlterConfigOp._value2member_map_:
                return ErrorCode.INVALID_REQUEST, f"Unknown config operation {op} for {c.get('name')}"
    if rtype == ConfigResourceType.TOPIC:
        return _check_topic(ctx, name) or await _alter_entity(ctx, conn, TOPICS, name, configs, incremental,
                                                              validate_only)
    if rtype == ConfigResourceType.BROKER:
        return _check_broker_name(ctx, name) or await _alter_entity(
            ctx, conn, BROKERS, name or paths.BROKER_DEFAULT_ENTITY, configs, incremental, validate_only)
    refused = _check_group(name)
    if refused is not None:
        return refused
    if incremental:
        for c in configs:
            op = c.get("config_operation")
            if op not in AlterConfigOp._value2member_map_:
                return ErrorCode.INVALID_REQUEST, f"Unknown config operation {op} for {c.get('name')}"
            if op in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
                return (ErrorCode.INVALID_CONFIG,
                        f"Can't {AlterConfigOp(op).name} to key {c.get('name')} because its type is not LIST.")
    return await _alter_group(ctx, conn, name, configs, incremental, validate_only)


async def _alter_group(ctx, conn, group: str, configs: list[dict], incremental: bool,
                       validate_only: bool) -> Outcome:
    model = ctx.group_configs.model

    def change(current: dict[str, str]) -> dict[str, str]:
        if incremental:
            new = dict(current)
            for c in configs:
                if c["config_operation"] == AlterConfigOp.DELETE:
                    new.pop(c["name"], None)
                else:
                    new[c["name"]] = c["value"]
        else:
            new = {c["name"]: c["value"] for c in configs}
        model.validate(new)
        return new

    try:
        new = await ctx.group_configs.alter(group, change, validate_only)
    except InvalidConfig as e:
        return ErrorCode.INVALID_CONFIG, str(e)
    except ValueError as e:  # a group id that cannot be a znode, or unreadable JSON in ZooKeeper
        return ErrorCode.INVALID_REQUEST, str(e)
    except KazooException as e:  # ZooKeeper trouble
        log.error("altering the configs of group %r failed: %r", group, e)
        return ErrorCode.UNKNOWN_SERVER_ERROR, "could not store the group's configs"
    if not validate_only:
        log.info("%r: %s set the configs of group %r to %s", conn, conn.auth.principal, group,
                 ", ".join(f"{k}={v}" for k, v in sorted(new.items())) or "the broker's defaults")
    return ErrorCode.NONE, None


#: List-typed keys (APPEND and SUBTRACT apply to them only).
_LIST_KEYS = {TOPICS: frozenset({"cleanup.policy"}), BROKERS: frozenset({"log.cleanup.policy"})}


def _split(value: str | None) -> list[str]:
    return [p.strip() for p in (value or "").split(",") if p.strip()]


def _current(dynamic, kind: str, name: str, key: str) -> str | None:
    """The value in effect of a list key (APPEND/SUBTRACT without a stored value start from it)."""
    if kind == TOPICS:
        topic_key = TOPIC_KEYS.get(key)
        if topic_key is None:
            return None
        value = dynamic.broker_config.get(topic_key.broker_key)
    else:
        value = dynamic.broker_config.get(key)
    return ",".join(value) if isinstance(value, (list, tuple)) else value


async def _alter_entity(ctx, conn, kind: str, name: str, configs: list[dict], incremental: bool,
                        validate_only: bool) -> Outcome:
    """AlterConfigs / IncrementalAlterConfigs of a topic or of dynamic broker configs."""
    dynamic = getattr(ctx, "dynamic_configs", None)
    if dynamic is None:
        return ErrorCode.INVALID_REQUEST, "this broker has not loaded its dynamic configs yet"
    if incremental:
        for c in configs:
            op = c["config_operation"]
            if op in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT) and c.get("name") not in _LIST_KEYS[kind]:
                if kind == TOPICS and c.get("name") not in TOPIC_KEYS:
                    return ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {c.get('name')}"
                return (ErrorCode.INVALID_CONFIG,
                        f"Can't {AlterConfigOp(op).name} to key {c.get('name')} because its type is not LIST.")

    def change(current: dict[str, str]) -> dict[str, str]:
        if incremental:
            new = dict(current)
            for c in configs:
                op, key = c["config_operation"], c["name"]
                if op == AlterConfigOp.DELETE:
                    new.pop(key, None)
                elif op == AlterConfigOp.SET:
                    new[key] = c["value"]
                else:
                    items = _split(new[key] if key in new else _current(dynamic, kind, name, key))
                    given = _split(c["value"])
                    if op == AlterConfigOp.APPEND:
                        items += [v for v in given if v not in items]
                    else:
                        items = [v for v in items if v not in given]
                    new[key] = ",".join(items)
        else:
            new = {c["name"]: c["value"] for c in configs}
        if kind == TOPICS:
            dynamic.validate_topic(new)
        else:
            dynamic.validate_broker(name, new)
        return new

    what = f"topic {name!r}" if kind == TOPICS else f"broker {name}"
    try:
        new = await dynamic.alter(kind, name, change, validate_only)
    except InvalidConfig as e:
        return ErrorCode.INVALID_CONFIG, str(e)
    except ValueError as e:
        return ErrorCode.INVALID_REQUEST, str(e)
    except KazooException as e:  # ZooKeeper trouble
        log.error("altering the configs of %s failed: %r", what, e)
        return ErrorCode.UNKNOWN_SERVER_ERROR, f"could not store the configs of {what}"
    if not validate_only:
        log.info("%r: %s set the configs of %s to %s", conn, conn.auth.principal, what,
                 ", ".join(f"{k}={v}" for k, v in sorted(new.items())) or "the defaults")
    return ErrorCode.NONE, None


def error_responses(body: dict, code: int, message: Any = None) -> list[dict]:
    """Every resource of an alter request answered with one error."""
    return [{"error_code": code, "error_message": message, "resource_type": r.get("resource_type", 0),
             "resource_name": r.get("resource_name") or ""} for r in body.get("resources") or []]
