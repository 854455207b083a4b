"""What every request handler of the broker is: ``Handler`` (see the package docstring), and the
pieces several handlers share (``may_create_topic``, ``partitions_error_response``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.broker.connection import Connection
    from spark_coord.broker.context import BrokerContext
    from spark_coord.wire.protocol import RequestHeader

HandleFn = Callable[["BrokerContext", "Connection", "RequestHeader", dict], Awaitable["dict | None"]]
ErrorFn = Callable[[dict, int], "dict | None"]


@dataclass(frozen=True)
class Handler:
    """How the broker serves one API key."""

    api_key: int
    name: str
    handle: HandleFn
    error_response: ErrorFn


def may_create_topic(ctx: "BrokerContext", conn: "Connection", name: str) -> bool:
    """Kafka's rule: Create on the cluster, or Create on the topic."""
    from spark_coord.security.acl import CLUSTER, AclOperation, Resource

    return ctx.authorized(conn, AclOperation.CREATE, CLUSTER) or \
        ctx.authorized(conn, AclOperation.CREATE, Resource.topic(name))


def partitions_error_response(body: dict, code: int, partition: Callable[[int, int], dict],
                              indexes: Callable[[dict], list[int]] | None = None) -> dict:
    """The answer of a request naming ``topics`` of ``partitions`` (ListOffsets, DeleteRecords,
    DescribeProducers...) that failed as a whole: ``partition(index, code)`` for every partition named.
    ``indexes(topic entry)`` lists a topic's partition indexes (default: ``partitions[].partition_index``)."""
    if indexes is None:
        def indexes(t: dict) -> list[int]:
            return [p.get("partition_index", -1) for p in t.get("partitions") or []]
    return {"throttle_time_ms": 0, "topics": [
        {"name": t.get("name"), "partitions": [partition(i, code) for i in indexes(t)]}
        for t in body.get("topics") or []]}
