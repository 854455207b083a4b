"""Authorization checks for the coordinator's APIs and Kafka's group APIs, ready to call.

The coordinator's handlers call these with ``ctx.authorizer`` and the connection's
``conn.auth.principal`` / ``conn.auth.host`` (the same ``authorize`` the data
handlers use), so wiring them in is a few lines per handler.  The rules, Kafka's
where Kafka has the API:

=====================  ==================================  ======================================
API                    on the group                        on topics
=====================  ==================================  ======================================
ClusterMetadata        --                                  --
RegisterConsumer       Read                                Read on each subscribed topic; a
                                                           pattern subscription gets only topics
                                                           it may Read (``readable_topics``)
CommitOffsets          Read                                Read on each partition's topic
Ping/StopFetcher       (answers carry offsets: apply only  Read on the topic (an ACL may be
answers                for topics still readable)          removed while a member runs)
DescribeGroups (ours)  Describe (or Describe on cluster)   --
FindCoordinator        Describe                            --
JoinGroup, SyncGroup,  Read                                (JoinGroup: as RegisterConsumer)
Heartbeat, LeaveGroup
OffsetCommit           Read                                Read on each topic
OffsetFetch            Describe                            Describe on each topic (others left out)
ListGroups             Describe on the cluster: all;       --
                       else the groups it may Describe
DescribeGroups         Describe                            --
DeleteGroups           Delete                              --
DescribeShareGroup-    Describe                            Describe on each topic (others left
Offsets                                                    out when all are asked for)
AlterShareGroup-       Read                                Read on each topic
Offsets
DeleteShareGroup-      Delete                              Read on each topic
Offsets
=====================  ==================================  ======================================

Refusals are Kafka's codes: GROUP_AUTHORIZATION_FAILED for the group,
TOPIC_AUTHORIZATION_FAILED for a topic (per partition where the answer has
partitions), CLUSTER_AUTHORIZATION_FAILED for the cluster.
"""

from __future__ import annotations

import re
from typing import Iterable

from spark_coord.errors import ErrorCode
from spark_coord.security.acl import CLUSTER, AclOperation, Resource

READ, DESCRIBE = AclOperation.READ, AclOperation.DESCRIBE


def _allowed(authorizer, principal, host: str, operation: AclOperation, resource: Resource) -> bool:
    return authorizer.authorize(principal, host, operation, resource)


def authorize_group(authorizer, principal, host: str, operation: AclOperation, group: str) -> int:
    """NONE, or GROUP_AUTHORIZATION_FAILED when ``operation`` on ``group`` is refused."""
    if _allowed(authorizer, principal, host, operation, Resource.group(group)):
        return ErrorCode.NONE
    return ErrorCode.GROUP_AUTHORIZATION_FAILED


def authorize_group_member(authorizer, principal, host: str, group: str, topics: Iterable[str] = ()) -> int:
    """RegisterConsumer / JoinGroup with a list of topics: Read on the group, then Read on every
    topic.  NONE, GROUP_AUTHORIZATION_FAILED or TOPIC_AUTHORIZATION_FAILED (the group is checked
    first, as Kafka does, so a client without the group learns nothing about topics)."""
    code = authorize_group(authorizer, principal, host, READ, group)
    if code:
        return code
    if unreadable_topics(authorizer, principal, host, topics):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return ErrorCode.NONE


def unreadable_topics(authorizer, principal, host: str, topics: Iterable[str]) -> list[str]:
    """The topics of ``topics`` the principal may not Read (sorted; empty when it may read all)."""
    return sorted({t for t in topics if not _allowed(authorizer, principal, host, READ, Resource.topic(t))})


def readable_topics(authorizer, principal, host: str, topics: Iterable[str], pattern: str | None = None) -> list[str]:
    """A wildcard subscription's topics: those matching ``pattern`` (all when None) the principal may
    Read.  Call it again whenever topics or ACLs change (the coordinator's topic watcher does)."""
    matcher = re.compile(pattern) if pattern is not None else None
    return sorted(t for t in set(topics)
                  if (matcher is None or matcher.fullmatch(t))
                  and _allowed(authorizer, principal, host, READ, Resource.topic(t)))


def authorize_offsets(authorizer, principal, host: str, group: str, topics: Iterable[str],
                      operation: AclOperation = READ) -> dict[str, int]:
    """CommitOffsets / OffsetCommit (``operation`` Read) and OffsetFetch (Describe): the error code
    of each topic, every one GROUP_AUTHORIZATION_FAILED when the group itself is refused."""
    topics = set(topics)
    group_code = authorize_group(authorizer, principal, host, operation, group)
    if group_code:
        return {t: group_code for t in topics}
    return {t: ErrorCode.NONE if _allowed(authorizer, principal, host, operation, Resource.topic(t))
            else ErrorCode.TOPIC_AUTHORIZATION_FAILED for t in topics}


def describable_groups(authorizer, principal, host: str, groups: Iterable[str]) -> list[str]:
    """ListGroups / ``spark-coord groups list``: every group with Describe on the cluster, else
    those with Describe on the group."""
    groups = sorted(set(groups))
    if _allowed(authorizer, principal, host, DESCRIBE, CLUSTER):
        return groups
    return [g for g in groups if _allowed(authorizer, principal, host, DESCRIBE, Resource.group(g))]
