"""DescribeLogDirs (key 35): this broker's log directory and the size of every partition in it.

Versions served per the wire registry (0-4).  One log directory (``log.dirs`` is one
path here); per partition log the bytes of its segments, offset lag 0 (one replica:
the log end is the high watermark) and no future logs; v4 adds the file system's
total and usable bytes.  A null topic list means every partition of this broker; a
named partition this broker has no log for is left out, as Kafka does.  Describe on
the cluster is needed, else CLUSTER_AUTHORIZATION_FAILED (top-level from v3; before,
as in Kafka, no log dirs at all).  Sizes and the file system are read on the log I/O threads.
"""

from __future__ import annotations

import logging
import shutil

from spark_coord.broker.handlers.base import Handler
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import CLUSTER, AclOperation
from spark_coord.wire.registry import ApiKey

log = logging.getLogger(__name__)

API_KEY = ApiKey.DESCRIBE_LOG_DIRS


def _wanted(body: dict) -> set[tuple[str, int]] | None:
    topics = body.get("topics")
    if topics is None:
        return None
    return {(t.get("topic"), p) for t in topics for p in t.get("partitions") or []}


def _describe(logs, wanted: set[tuple[str, int]] | None) -> dict:
    """The log dir's answer (blocking: sizes, statvfs)."""
    by_topic: dict[str, list[dict]] = {}
    for topic, partition in logs.partitions():
        if wanted is not None and (topic, partition) not in wanted:
            continue
        plog = logs.get(topic, partition)
        if plog is None:
            continue
        try:
            size = plog.size_bytes
        except Exception:  # noqa: BLE001 -- closed or deleted meanwhile: not on this broker any more
            continue
        by_topic.setdefault(topic, []).append({"partition_index": partition, "partition_size": size,
                                               "offset_lag": 0, "is_future_key": False})
    total = usable = -1
    try:
        usage = shutil.disk_usage(logs.log_dir)
        total, usable = usage.total, usage.free
    except OSError as e:
        log.warning("cannot read the file system of %s: %s", logs.log_dir, e)
    return {"error_code": ErrorCode.NONE, "log_dir": str(logs.log_dir.resolve()),
            "topics": [{"name": t, "partitions": parts} for t, parts in sorted(by_topic.items())],
            "total_bytes": total, "usable_bytes": usable}


async def handle(ctx, conn, header, body: dict) -> dict:
    if not ctx.authorized(conn, AclOperation.DESCRIBE, CLUSTER):
        return error_response(body, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    result = await ctx.logs.run_io(_describe, ctx.logs, _wanted(body))
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": [result]}


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "results": []}


HANDLER = Handler(API_KEY, "DescribeLogDirs", handle, error_response)
