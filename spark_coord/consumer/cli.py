"""``spark-coord consume`` and ``spark-coord groups``.

consume: join a group through the coordinator and print one record per line
(``key<sep>value`` with ``--key-separator``) until Ctrl-C or SIGTERM, then leave
cleanly (the final offsets reach the coordinator before the process exits); with
``--share-group``, as a member of a share group (``consumer.share.ShareConsumer``).  With
``--group-protocol consumer`` (or group.protocol in ``--config``) it joins with Kafka 4's consumer
group protocol; a group that refuses the member for good (UNSUPPORTED_ASSIGNOR,
UNRELEASED_INSTANCE_ID, ...) ends it with one error line and exit status 1.

groups: ``list`` the coordinator's groups, or ``describe`` them: members with
their partitions, and per partition the committed offset, the log end offset
(ListOffsets) and the lag, as a table or ``--json``.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading

from spark_coord.client.metadata import parse_bootstrap

log = logging.getLogger(__name__)

__all__ = ["consume", "groups", "describe_groups"]


def _text(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", errors="backslashreplace")


def consume(args) -> int:
    """Print records of the group's assigned partitions until interrupted."""
    from spark_coord import config
    from spark_coord.consumer.consumer import Consumer
    from spark_coord.errors import KafkaError
    from spark_coord.security.client import ALIASES
    from spark_coord.security.client import KEYS as SECURITY_KEYS

    overrides: dict = {}
    try:
        # later sources win, whichever of a setting's names they use (sasl.mechanism, sasl.mechanisms)
        if getattr(args, "command_config", None):  # a client properties file: its security keys
            overrides.update({config.CONSUMER.canonical(k): v
                              for k, v in config.read_properties_file(args.command_config).items()
                              if k in SECURITY_KEYS or k in ALIASES})
        for pairs in (getattr(args, "client_option", None), getattr(args, "override", None)):  # -X, --override
            overrides.update({config.CONSUMER.canonical(k): v for k, v in config.parse_overrides(pairs or []).items()})
        cfg = config.load(config.CONSUMER, getattr(args, "config", None), overrides)
    except config.ConfigError as e:
        log.error("%s", e)
        return 2
    topics = [t for t in (getattr(args, "topic", None) or "").split(",") if t] or None
    pattern = getattr(args, "pattern", None)
    if getattr(args, "share_group", None):
        return _consume_share(args, cfg, topics, pattern)
    reset = "smallest" if getattr(args, "from_beginning", False) else cfg["auto.offset.reset"]
    bootstrap = getattr(args, "bootstrap", None) or cfg["bootstrap.brokers"]
    group = getattr(args, "group", None) or cfg["group.id"]
    if not group:
        log.error("a group is required (--group or group.id)")
        return 2
    sep = getattr(args, "key_separator", None)
    limit = getattr(args, "count", None)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        consumer = Consumer(bootstrap, group, topics=topics, pattern=pattern, consumer_id=cfg["consumer.id"],
                            session_timeout_ms=cfg["session.timeout.ms"], auto_commit=cfg["auto.commit.enable"],
                            auto_offset_reset=reset, config=cfg,
                            isolation_level=getattr(args, "isolation_level", None) or cfg["isolation.level"],
                            coordinator_bootstrap=getattr(args, "coordinator", None),
                            group_protocol=getattr(args, "group_protocol", None) or cfg["group.protocol"],
                            group_instance_id=getattr(args, "group_instance_id", None) or cfg["group.instance.id"]
                            or None,
                            group_remote_assignor=getattr(args, "group_remote_assignor", None)
                            or cfg["group.remote.assignor"] or None)
    except ValueError as e:
        log.error("%s", e)
        signal.signal(signal.SIGTERM, previous)
        return 2
    printed = 0
    refused: KafkaError | None = None
    try:
        while not stop.is_set() and (limit is None or printed < limit):
            for record in consumer.messages(timeout=0.2):
                line = _text(record.value) if sep is None else f"{_text(record.key)}{sep}{_text(record.value)}"
                sys.stdout.write(line + "\n")
                printed += 1
                if stop.is_set() or (limit is not None and printed >= limit):
                    break
            sys.stdout.flush()
    except KeyboardInterrupt:
        pass
    except KafkaError as e:  # the group refused the member for good (UNSUPPORTED_ASSIGNOR, UNRELEASED_INSTANCE_ID, ...)
        refused = e
    finally:
        signal.signal(signal.SIGTERM, previous)
        log.info("closing: %d records printed", printed)
        consumer.close()
    if refused is not None:
        log.error("%s", refused)
        return 1
    return 0


def _consume_share(args, cfg, topics: list[str] | None, pattern: str | None) -> int:
    """``consume --share-group``: print the records handed to this member until interrupted; each
    printed record is accepted with the next fetch, and close() closes the share sessions."""
    from spark_coord.consumer.share import ShareConsumer

    if pattern is not None or not topics:
        log.error("a share group member subscribes to topics by name (--topic), not --pattern")
        return 2
    if getattr(args, "from_beginning", False):
        log.error("--from-beginning does not apply to a share group: where a new share group starts is its "
                  "share.auto.offset.reset config (set it with any admin client's incremental_alter_configs)")
        return 2
    bootstrap = getattr(args, "bootstrap", None) or cfg["bootstrap.brokers"]
    sep = getattr(args, "key_separator", None)
    limit = getattr(args, "count", None)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    consumer = ShareConsumer(bootstrap, args.share_group, topics)
    printed = 0
    try:
        while not stop.is_set() and (limit is None or printed < limit):
            for record in consumer.poll(0.2):
                line = _text(record.value) if sep is None else f"{_text(record.key)}{sep}{_text(record.value)}"
                sys.stdout.write(line + "\n")
                printed += 1
            sys.stdout.flush()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        log.info("closing: %d records printed", printed)
        consumer.close()
    return 0


def _coordinator_call(bootstrap, api_key: int, body: dict, timeout: float = 10.0, security=None,
                      version: int | None = None, group_id: str | None = None) -> dict:
    """One request to the coordinator of ``group_id``'s shard (found by ClusterMetadata; None: shard 0's)."""
    from spark_coord.consumer.channel import CoordinatorChannel
    from spark_coord.consumer.discovery import Discovery

    discovery = Discovery(parse_bootstrap(bootstrap), "spark-coord-groups", timeout, security, group_id)
    view = discovery.one_round()
    if view is None:
        raise ConnectionError("no broker knows a reachable coordinator")
    host, port = view.coordinator_address  # type: ignore[misc]
    channel = CoordinatorChannel(host, port, "spark-coord-groups", timeout, security=security)
    try:
        answer = channel.request(api_key, body) if version is None else channel.request(api_key, body, version=version)
    finally:
        channel.close()
    answer["_coordinator"] = (view.coordinator_id, f"{host}:{port}")
    return answer


def _describe_everywhere(bootstrap, group_ids: list[str], timeout: float = 10.0, security=None) -> list[dict]:
    """The coordinator's DescribeGroups from every coordinator holding one of the groups (all of them:
    every live coordinator), each group with the coordinator (id, host:port) that holds it."""
    from spark_coord.consumer.channel import ChannelClosed, CoordinatorChannel
    from spark_coord.consumer.discovery import Discovery
    from spark_coord.errors import ErrorCode, KafkaError
    from spark_coord.wire import coordinator as api

    if group_ids:
        out = []
        for g in group_ids:
            resp = _coordinator_call(bootstrap, api.DESCRIBE_GROUPS, {"group_ids": [g]}, timeout, security,
                                     api.DESCRIBE_VERSION, group_id=g)
            if resp["error_code"]:
                raise KafkaError(resp["error_code"], "DescribeGroups")
            node, address = resp["_coordinator"]
            out.extend(dict(d, coordinator_id=node, coordinator=address) for d in resp["groups"])
        return out
    view = Discovery(parse_bootstrap(bootstrap), "spark-coord-groups", timeout, security).one_round()
    if view is None:
        raise ConnectionError("no broker knows a reachable coordinator")
    found: dict[str, dict] = {}
    for node, (host, port) in sorted(view.brokers.items()):
        try:
            channel = CoordinatorChannel(host, port, "spark-coord-groups", timeout, security=security)
        except ChannelClosed as e:
            log.warning("coordinator %d: %s", node, e)
            continue
        try:
            resp = channel.request(api.DESCRIBE_GROUPS, {"group_ids": []}, version=api.DESCRIBE_VERSION)
        finally:
            channel.close()
        if resp["error_code"] == ErrorCode.NOT_COORDINATOR:
            continue  # holds no shard
        if resp["error_code"]:
            raise KafkaError(resp["error_code"], "DescribeGroups")
        for d in resp["groups"]:
            found.setdefault(d["group_id"], dict(d, coordinator_id=node, coordinator=f"{host}:{port}"))
    return [found[g] for g in sorted(found)]


def describe_groups(bootstrap, group_ids: list[str] | None = None, with_lag: bool = True,
                    security=None, coordinator: str | None = None) -> list[dict]:
    """The coordinators' DescribeGroups answers (each group from the coordinator of its shard, which
    ``coordinator_id`` / ``coordinator`` name), each offset row extended with log_end and lag."""
    from spark_coord.client.admin import LATEST, AdminClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.errors import KafkaError

    groups = _describe_everywhere(coordinator or bootstrap, list(group_ids or []), security=security)
    if with_lag and any(g["offsets"] for g in groups):
        with ClusterClient(bootstrap, security=security) as cc:
            admin = AdminClient(cc)
            ends: dict[str, dict[int, int]] = {}
            for topic in sorted({o["topic"] for g in groups for o in g["offsets"]}):
                try:
                    ends[topic] = admin.list_offsets(topic, None, LATEST)
                except (KafkaError, OSError) as e:
                    log.warning("log end offsets of %s: %s", topic, e)
                    ends[topic] = {}
            for g in groups:
                for o in g["offsets"]:
                    end = ends.get(o["topic"], {}).get(o["partition"])
                    o["log_end"] = end
                    o["lag"] = end - o["committed_offset"] if end is not None and o["committed_offset"] >= 0 else None
    return groups


def groups(args) -> int:
    """``groups list`` / ``groups describe [GROUP...]``."""
    from spark_coord.client.security_cli import client_security
    from spark_coord.config import ConfigError
    from spark_coord.table import format_table

    wanted = list(getattr(args, "groups", None) or [])
    try:
        described = describe_groups(args.bootstrap, wanted, with_lag=args.action == "describe",
                                    security=client_security(args), coordinator=getattr(args, "coordinator", None))
    except (ConnectionError, OSError, ConfigError) as e:
        log.error("%s", e)
        return 1
    if getattr(args, "json", False):
        json.dump(described, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    if args.action == "list":
        rows = [{"group": g["group_id"], "state": g["state"], "generation": g["generation_id"],
                 "members": len(g["members"]), "coordinator": _coordinator_label(g)} for g in described]
        print(format_table(rows, ["group", "state", "generation", "members", "coordinator"]))
        return 0
    for g in described:
        print(format_group(g))
    return 0


def _coordinator_label(g: dict) -> str:
    """``<id> (host:port)``: the coordinator holding a described group."""
    return f"{g['coordinator_id']} ({g['coordinator']})" if "coordinator_id" in g else ""


def format_group(g: dict) -> str:
    """One described group as text: a header line, its members, and its offsets with lag."""
    from spark_coord.table import format_table

    out = [f"Group {g['group_id']}: {g['state']}, generation {g['generation_id']}, {len(g['members'])} members"
           + (f", coordinator {_coordinator_label(g)}" if "coordinator_id" in g else "")]
    members = [{"consumer": m["consumer_id"], "protocol": m.get("protocol", "coordinator"), "host": m["host"],
                "partitions": [f"{a['topic']}-{a['partition']}" for a in m["assigned"]]} for m in g["members"]]
    if members:
        out.append(format_table(members, ["consumer", "protocol", "host", "partitions"]))
    rows = [{"topic": o["topic"], "partition": o["partition"],
             "committed": o["committed_offset"] if o["committed_offset"] >= 0 else None,
             "log_end": o.get("log_end"), "lag": o.get("lag"), "owner": o["owner"]}
            for o in sorted(g["offsets"], key=lambda o: (o["topic"], o["partition"]))]
    if rows:
        out.append(format_table(rows, ["topic", "partition", "committed", "log_end", "lag", "owner"],
                                ["TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG", "OWNER"]))
    return "\n".join(out) + "\n"
