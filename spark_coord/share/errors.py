"""Why a share partition is not served now: the errors ``SharePartitionManager.partition`` raises,
each carrying the error code its fetches and acknowledgements get (``error_code``)."""

from __future__ import annotations

from spark_coord.errors import ErrorCode

__all__ = ["ShareStateUnavailable", "ShareGroupUnknown", "ShareLeaderFenced"]


class ShareStateUnavailable(Exception):
    """A share partition's state could not be read or written in ZooKeeper in time: it is not
    served now (its fetches and acknowledgements get ``error_code`` for it), and is tried again."""

    error_code = ErrorCode.COORDINATOR_NOT_AVAILABLE


class ShareGroupUnknown(ShareStateUnavailable):
    """The share partition has no state and its group has no znode (deleted by DeleteGroups, or never
    joined): as in Kafka, only the group coordinator sets a group's share state up, so the partition is
    not served -- GROUP_ID_NOT_FOUND, the error Kafka's share-partition leader gives when its persister
    answers that -- and the group's znode is not made from this side."""

    error_code = ErrorCode.GROUP_ID_NOT_FOUND


class ShareLeaderFenced(ShareStateUnavailable):
    """Another leader took the share partition over (its state epoch is in the znode) since this broker
    last wrote it: this broker no longer serves it (NOT_LEADER_OR_FOLLOWER) until its view of the
    partition's replicas changes."""

    error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
