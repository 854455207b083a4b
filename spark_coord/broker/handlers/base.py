"""What every request handler of the broker is: ``Handler`` (see the package docstring), and the
checks several handlers share (``may_create_topic``)."""

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
