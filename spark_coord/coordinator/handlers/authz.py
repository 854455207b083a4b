"""Kafka's ACLs at the front door: what a connection's principal may do with groups and topics."""

from __future__ import annotations

import logging
from typing import Any, Callable

from spark_coord.errors import ErrorCode
from spark_coord.security import coordination as authz
from spark_coord.security.acl import AclOperation, Resource

log = logging.getLogger(__name__)


def refuse_member(ctx: Any, conn: Any, group: Any, topics) -> int:
    """RegisterConsumer / JoinGroup: Read on the group and on every named topic (NONE when allowed)."""
    if not ctx.authorizer.enabled or not isinstance(group, str):
        return ErrorCode.NONE
    code = authz.authorize_group_member(ctx.authorizer, conn.auth.principal, conn.auth.host, group,
                                        [t for t in topics if isinstance(t, str)])
    if code:
        log.info("%s from %s refused: %s", group, conn.auth.principal, ErrorCode.name_of(code))
    return code


def topic_filter(ctx: Any, conn: Any) -> Callable[[str], bool] | None:
    """Whether the connection's principal may Read a topic (None without an authorizer): a member's
    partitions come only from such topics, checked at every rebalance."""
    if not ctx.authorizer.enabled:
        return None
    authorizer, principal, host = ctx.authorizer, conn.auth.principal, conn.auth.host
    return lambda t: not authz.unreadable_topics(authorizer, principal, host, [t])


def refused(door: Any, ctx: Any, conn: Any, group: Any, operation: AclOperation = AclOperation.READ) -> int | None:
    """Why a group request cannot be served here now: this process does not coordinate
    (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS), or the principal may not do
    ``operation`` on the group; None when it can."""
    _, code = door.for_group(group)
    if code is None:
        code = group_refused(ctx, conn, operation, group) or None
    return code


def group_refused(ctx: Any, conn: Any, operation: AclOperation, group: Any) -> int:
    if not ctx.authorizer.enabled:
        return ErrorCode.NONE
    return authz.authorize_group(ctx.authorizer, conn.auth.principal, conn.auth.host, operation,
                                 group if isinstance(group, str) else "")


def topic_codes(ctx: Any, conn: Any, operation: AclOperation, group: Any, topics) -> dict[str, int]:
    """Per topic NONE / TOPIC_AUTHORIZATION_FAILED (all GROUP_AUTHORIZATION_FAILED if the group is refused)."""
    topics = {t for t in topics if isinstance(t, str)}
    if not ctx.authorizer.enabled:
        return {t: ErrorCode.NONE for t in topics}
    return authz.authorize_offsets(ctx.authorizer, conn.auth.principal, conn.auth.host,
                                   group if isinstance(group, str) else "", topics, operation)


def describable_groups(ctx: Any, conn: Any, groups: list[str]) -> list[str]:
    if not ctx.authorizer.enabled:
        return list(groups)
    return list(authz.describable_groups(ctx.authorizer, conn.auth.principal, conn.auth.host, groups))


def topic_refusals(ctx: Any, conn: Any, operation: AclOperation) -> Callable[[Any], int]:
    """``code(topic)``: NONE, or TOPIC_AUTHORIZATION_FAILED when the principal may not do ``operation``
    on the topic (the group is checked apart: the share-group offset APIs check Delete on the group
    and Read on topics)."""
    if not ctx.authorizer.enabled:
        return lambda topic: ErrorCode.NONE
    authorizer, principal, host = ctx.authorizer, conn.auth.principal, conn.auth.host

    def code(topic: Any) -> int:
        if isinstance(topic, str) and authorizer.authorize(principal, host, operation, Resource.topic(topic)):
            return ErrorCode.NONE
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED

    return code
