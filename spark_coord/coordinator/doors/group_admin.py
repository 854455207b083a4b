"""Kafka's group admin APIs for every kind of group on one coordinator: ListGroups, DescribeGroups
and DeleteGroups, as Kafka tools (``kafka-consumer-groups``, admin clients) see our groups.

They read and change the one registry, so every group shows, whatever door its members came in
by: Kafka's classic and KIP-848 consumers show their client id, host, subscription and
assignment (``MemberChannel.describe``), our own members and Spark queries show as ``coordkafka``
members with theirs.  A group whose first members wait for the initial rebalance delay
(``initial_join``) is PreparingRebalance, and cannot be deleted yet (NON_EMPTY_GROUP).

Share groups (KIP-932) are listed with type and protocol type ``share``; DescribeGroups answers
GROUP_ID_NOT_FOUND for them, as Kafka 4 does (ShareGroupDescribe describes them), and DeleteGroups
leaves them to ``share_admin``, which deletes their share-partition state too.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Mapping

from spark_coord.coordinator.core.group import GroupState
from spark_coord.coordinator.doors.common import by_topic, encode_partitions, not_served
from spark_coord.coordinator.storage.store import Fenced, StoreError
from spark_coord.errors import ErrorCode
from spark_coord.wire.consumer_protocol import encode_subscription
from spark_coord.wire.join_group import CONSUMER_PROTOCOL_TYPE

if TYPE_CHECKING:
    from spark_coord.coordinator.core.channel import MemberDescription
    from spark_coord.coordinator.core.group import ConsumerRegistry, GroupRegistry
    from spark_coord.coordinator.core.interface import GroupCoordinator
    from spark_coord.coordinator.doors.initial_join import InitialDelays

__all__ = ["GroupAdmin", "group_type", "kafka_state"]

log = logging.getLogger(__name__)

_STATES = {GroupState.EMPTY: "Empty", GroupState.STABLE: "Stable", GroupState.RESTORING: "PreparingRebalance",
           GroupState.PREPARING_REBALANCE: "PreparingRebalance", GroupState.STOPPING_FETCHERS: "PreparingRebalance",
           GroupState.STARTING_FETCHERS: "CompletingRebalance", GroupState.DEAD: "Dead"}


def group_type(group: "GroupRegistry") -> str:
    """Kafka's group type (ListGroups v5): ``consumer`` once a member of Kafka 4's consumer group
    protocol is in it, else ``classic``."""
    return "consumer" if any(m.kind == "consumer" for m in group.members.values()) else "classic"


def kafka_state(state: GroupState) -> str:
    """Kafka's name of the group state closest to ours (for ListGroups/DescribeGroups)."""
    return _STATES[state]


def _no_group(group_id: str, code: ErrorCode, state: str = "", protocol_type: str = "") -> dict:
    return {"error_code": int(code), "group_id": group_id, "group_state": state, "protocol_type": protocol_type,
            "protocol_data": "", "members": []}


class GroupAdmin:
    """Kafka's group admin APIs on one ``Coordinator`` (answers are version-agnostic response dicts)."""

    def __init__(self, coordinator: "GroupCoordinator", initial: "InitialDelays"):
        self.c = coordinator
        #: The classic door's initial delays: groups whose first members wait there.
        self.initial = initial

    # ------------------------------------------------------------ ListGroups
    def list_groups(self, body: Mapping[str, Any]) -> dict:
        if not self.c.active:
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.NOT_COORDINATOR), "groups": []}
        states = {s.lower() for s in body.get("states_filter") or []}
        types = {s.lower() for s in body.get("types_filter") or []}
        groups = []
        for gid, group in sorted(self.c.groups.items()):
            state = kafka_state(group.state)
            kind = group_type(group)
            if (states and state.lower() not in states) or (types and kind not in types):
                continue
            groups.append({"group_id": gid, "protocol_type": CONSUMER_PROTOCOL_TYPE, "group_state": state,
                           "group_type": kind})
        for gid in sorted(self.initial.groups() - set(self.c.groups)):  # members held by the initial delay
            if (states and "preparingrebalance" not in states) or (types and "classic" not in types):
                continue
            groups.append({"group_id": gid, "protocol_type": CONSUMER_PROTOCOL_TYPE,
                           "group_state": "PreparingRebalance", "group_type": "classic"})
        for gid, share in sorted(self.c.share_groups.items()):  # KIP-932: type "share", protocol type "share"
            if (states and share.state.lower() not in states) or (types and "share" not in types):
                continue
            groups.append({"group_id": gid, "protocol_type": "share", "group_state": share.state,
                           "group_type": "share"})
        return {"throttle_time_ms": 0, "error_code": 0, "groups": groups}

    # ------------------------------------------------------------ DescribeGroups
    def describe_groups(self, body: Mapping[str, Any]) -> dict:
        return {"throttle_time_ms": 0, "groups": [self._describe(gid) for gid in body.get("groups") or []]}

    def _describe(self, gid: str) -> dict:
        if not self.c.active:
            return _no_group(gid, ErrorCode.NOT_COORDINATOR)
        group = self.c.groups.get(gid)
        if group is None and gid in self.c.share_groups:  # as Kafka 4 answers it for a share group
            return _no_group(gid, ErrorCode.GROUP_ID_NOT_FOUND)
        if group is None and gid in self.initial:  # its first members wait for the initial delay
            return _no_group(gid, ErrorCode.NONE, "PreparingRebalance", CONSUMER_PROTOCOL_TYPE)
        if group is None:
            return _no_group(gid, ErrorCode.NONE, "Dead")
        members, protocols = [], []
        for cid, m in sorted(group.members.items()):
            who = m.channel.describe() if m.channel is not None else None
            if who is not None and who.protocol == "classic":
                protocols.append(who.assignment_protocol)
            members.append(self._member(cid, m, who))
        protocol = next((p for p in protocols if p), None) or self.c.config.assignment_strategy
        return {"error_code": 0, "group_id": gid, "group_state": kafka_state(group.state),
                "protocol_type": CONSUMER_PROTOCOL_TYPE, "protocol_data": protocol, "members": members}

    def _member(self, cid: str, m: "ConsumerRegistry", who: "MemberDescription | None") -> dict:
        """A member as DescribeGroups shows it: a classic member with its subscription and assignment
        as it sent and synced them, the others (Kafka 4's consumers, ours) from the registry."""
        if who is not None and who.protocol == "classic":
            metadata = who.subscription or encode_subscription({"topics": m.topic_count.static_topics()}, 0)
            assignment = encode_partitions(who.assignment or {})
        else:
            metadata = encode_subscription({"topics": m.topic_count.topics_in(self.c.topics)
                                            if m.topic_count.is_wildcard else m.topic_count.static_topics()}, 0)
            assignment = encode_partitions(by_topic(tp for tps in (m.assignment or {}).values() for tp in tps))
        if who is None:
            return {"member_id": cid, "group_instance_id": None, "client_id": "coordkafka", "client_host": m.peer,
                    "member_metadata": metadata, "member_assignment": assignment}
        return {"member_id": who.member_id, "group_instance_id": who.instance_id, "client_id": who.client_id,
                "client_host": who.client_host, "member_metadata": metadata, "member_assignment": assignment}

    # ------------------------------------------------------------ DeleteGroups
    async def delete_groups(self, body: Mapping[str, Any]) -> dict:
        results = []
        for gid in body.get("groups_names") or []:
            results.append({"group_id": gid, "error_code": int(await self._delete_group(gid))})
        return {"throttle_time_ms": 0, "results": results}

    async def _delete_group(self, group_id: str) -> ErrorCode:
        if (refused := not_served(self.c, group_id)) is not None:
            return refused
        if self.c.group_type(group_id) == "share":  # the front door deletes share groups (doors.share_admin)
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group_id in self.initial:  # members wait for its first rebalance
            return ErrorCode.NON_EMPTY_GROUP
        try:
            return await self.c.delete_group(group_id)
        except Fenced:
            return ErrorCode.NOT_COORDINATOR
        except StoreError as e:
            log.warning("could not delete group %s: %s", group_id, e)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
