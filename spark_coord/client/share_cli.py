"""``spark-coord share-groups``: share groups (KIP-932) as Kafka's ``kafka-share-groups.sh`` shows them.

* ``list``: every share group of the cluster with its state and member count;
* ``describe [GROUP...]``: a group's state and epoch, its members (id, client id, host, assigned
  partitions) and, per partition, its start offset (the first record the group is not done with),
  the log end and the lag (records from the start offset to the log end not yet acknowledged or
  archived, as the coordinator computes it: DescribeShareGroupOffsets v1);
* ``reset-offsets GROUP --topic T[:P,...] --to-earliest|--to-latest|--to-offset N [--execute]``:
  a dry run by default (it prints the new start offsets and changes nothing, as
  ``kafka-share-groups.sh --reset-offsets --dry-run`` does); ``--execute`` applies them
  (AlterShareGroupOffsets).  The group must have no member: stop its consumers first.

What the leaders hold in flight per partition (acquired, available again, archived records) is
not on the wire: the leaders' metrics endpoints export it (``spark_coord_share_partition_*``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from spark_coord.client.admin import EARLIEST, LATEST, AdminClient
from spark_coord.client.cli import _reports_errors
from spark_coord.client.groups import GroupClient, ShareGroupDescription, ShareOffset
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.security_cli import client_security
from spark_coord.errors import ErrorCode, KafkaError
from spark_coord.table import format_table

log = logging.getLogger("spark_coord.cli")


@_reports_errors
def share_groups(args: argparse.Namespace) -> int:
    with ClusterClient(args.bootstrap, security=client_security(args)) as cluster:
        with GroupClient(cluster) as groups:
            if args.action == "list":
                return _list(groups, args)
            if args.action == "describe":
                return _describe(cluster, groups, args)
            return _reset(cluster, groups, args)


def _emit_json(doc) -> None:
    json.dump(doc, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def _list(groups: GroupClient, args) -> int:
    listed = groups.list_share_groups()
    described = groups.describe_share_groups([g.group_id for g in listed]) if listed else {}
    rows = []
    for g in listed:
        d = described.get(g.group_id)
        ok = d is not None and not d.error
        rows.append({"group": g.group_id, "state": d.state if ok else (g.state or ""),
                     "members": len(d.members) if ok else None})
    if getattr(args, "json", False):
        _emit_json(rows)
    else:
        print(format_table(rows, ["group", "state", "members"]))
    return 0


def describe_share_group(cluster: ClusterClient, groups: GroupClient, group: str,
                         description: ShareGroupDescription | None = None) -> dict:
    """One share group as ``share-groups describe`` shows it (the ``--json`` document)."""
    d = description or groups.describe_share_groups([group])[group]
    doc = {"group_id": group, "state": d.state if not d.error else "Dead", "epoch": d.epoch,
           "members": [{"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host,
                        "epoch": m.epoch, "subscribed": m.subscribed,
                        "assignment": [{"topic": t, "partition": p} for t, ps in sorted(m.assignment.items())
                                       for p in ps]} for m in sorted(d.members, key=lambda m: m.member_id)],
           "offsets": []}
    if d.error and d.error != ErrorCode.GROUP_ID_NOT_FOUND:
        raise KafkaError(d.error, d.error_message or f"ShareGroupDescribe {group!r}")
    offsets: dict[tuple[str, int], ShareOffset | None] = dict(groups.share_group_offsets(group))
    for m in d.members:
        for t, ps in m.assignment.items():
            for p in ps:
                offsets.setdefault((t, p), None)
    ends: dict[str, dict[int, int]] = {}
    admin = AdminClient(cluster)
    for topic in sorted({t for t, _ in offsets}):
        try:
            ends[topic] = admin.list_offsets(topic, None, LATEST)
        except (KafkaError, OSError) as e:
            log.warning("log end offsets of %s: %s", topic, e)
            ends[topic] = {}
    if d.error:  # not held by the coordinator (no member since it took the group over): known by its state
        doc["state"] = "Empty" if offsets else "Dead"
    for (t, p), o in sorted(offsets.items()):
        start = o.start_offset if o is not None and o.start_offset >= 0 else None
        lag = o.lag if o is not None and o.lag >= 0 else None
        doc["offsets"].append({"topic": t, "partition": p, "start_offset": start,
                               "log_end": ends.get(t, {}).get(p), "lag": lag})
    return doc


def format_share_group(doc: dict) -> str:
    """A described share group as text: a header line, its members, its partitions with lag."""
    total = sum(o["lag"] for o in doc["offsets"] if o["lag"] is not None)
    out = [f"Share group {doc['group_id']}: {doc['state']}, epoch {doc['epoch']}, {len(doc['members'])} members, "
           f"lag {total}"]
    members = [{"member": m["member_id"], "client": m["client_id"], "host": m["host"],
                "assignment": [f"{a['topic']}-{a['partition']}" for a in m["assignment"]]} for m in doc["members"]]
    if members:
        out.append(format_table(members, ["member", "client", "host", "assignment"],
                                ["MEMBER-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"]))
    if doc["offsets"]:
        out.append(format_table(doc["offsets"], ["topic", "partition", "start_offset", "log_end", "lag"],
                                ["TOPIC", "PARTITION", "START-OFFSET", "LOG-END", "LAG"]))
    return "\n".join(out) + "\n"


def _describe(cluster: ClusterClient, groups: GroupClient, args) -> int:
    wanted = list(args.groups or [g.group_id for g in groups.list_share_groups()])
    described = groups.describe_share_groups(wanted) if wanted else {}
    docs = [describe_share_group(cluster, groups, g, described[g]) for g in wanted]
    if getattr(args, "json", False):
        _emit_json(docs)
        return 0
    for doc in docs:
        print(format_share_group(doc))
    return 0


def _parse_topics(specs: list[str], cluster: ClusterClient) -> list[tuple[str, int]]:
    """``T`` (every partition) or ``T:0,2`` into (topic, partition) pairs."""
    out = []
    for spec in specs:
        topic, _, parts = spec.partition(":")
        if parts:
            try:
                out.extend((topic, int(p)) for p in parts.split(","))
            except ValueError:
                raise ValueError(f"--topic {spec!r}: partitions must be numbers, as in {topic}:0,1") from None
        else:
            out.extend((topic, p) for p in sorted(cluster.topic(topic).partitions))
    return sorted(set(out))


def _reset(cluster: ClusterClient, groups: GroupClient, args) -> int:
    group = args.group
    d = groups.describe_share_groups([group])[group]
    if not d.error and d.members:
        log.error("share group %s is %s with %d member(s): offsets can be reset only while it is empty (stop its "
                  "consumers first)", group, d.state, len(d.members))
        return 1
    try:
        partitions = _parse_topics(args.topic, cluster)
    except ValueError as e:
        log.error("%s", e)
        return 2
    admin = AdminClient(cluster)
    new: dict[tuple[str, int], int] = {}
    for topic in sorted({t for t, _ in partitions}):
        ps = [p for t, p in partitions if t == topic]
        earliest = admin.list_offsets(topic, ps, EARLIEST)
        latest = admin.list_offsets(topic, ps, LATEST)
        for p in ps:
            if args.to_earliest:
                offset = earliest[p]
            elif args.to_latest:
                offset = latest[p]
            else:
                offset = min(max(args.to_offset, earliest[p]), latest[p])
                if offset != args.to_offset:
                    log.warning("%s-%d: offset %d is outside the log (%d-%d); using %d", topic, p, args.to_offset,
                                earliest[p], latest[p], offset)
            new[(topic, p)] = offset
    rows = [{"group": group, "topic": t, "partition": p, "new_offset": o} for (t, p), o in sorted(new.items())]
    if args.execute:
        groups.alter_share_group_offsets(group, new)
    if getattr(args, "json", False):
        _emit_json({"executed": bool(args.execute), "offsets": rows})
    else:
        print(format_table(rows, ["group", "topic", "partition", "new_offset"],
                           ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]))
    if not args.execute:
        log.info("dry run: nothing was changed; add --execute to set these start offsets")
    else:
        log.info("share group %s: %d start offset(s) set", group, len(rows))
    return 0
