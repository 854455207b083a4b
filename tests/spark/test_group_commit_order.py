"""The order of a KIP-848 query member's commits (``spark.group``, no Spark needed): a revocation's
commit goes out after any active commit of that member already under way, never before it.
Kafka keeps a group's last commit even when it goes backwards, so an older active commit landing
after the revocation's would send the partition's next owner back to the query's last batch."""

from __future__ import annotations

import threading

from spark_coord.consumer.kip848 import Kip848Member, MemberState
from spark_coord.spark.group import GroupPartitionSource
from spark_coord.spark.options import parse_source_options

TP = ("t", 0)


class HeldCommitIo:
    """``MemberIo`` whose first OffsetCommit is held until ``release`` is set; commits are recorded
    in the order they land."""

    def __init__(self):
        self.landed: list[dict] = []
        self.entered, self.release = threading.Event(), threading.Event()

    def commit(self, offsets, member_id, epoch) -> None:
        if not self.landed and not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(10), "the held commit was never released"
        self.landed.append(dict(offsets))

    def heartbeat(self, body):  # not reached: the test drives the reconciliation itself
        raise AssertionError("no heartbeat expected")

    def coordinator_lost(self) -> None:
        pass

    def committed(self, partitions, member_id, epoch):
        return {}

    def topic_names(self, topic_ids, subscribed):
        return {}

    def topic_ids(self, names):
        return {}

    def close(self) -> None:
        pass


def test_a_revocation_commits_after_the_active_commit_under_way():
    opts = parse_source_options({"bootstrap.brokers": "127.0.0.1:9092", "subscribe": "t", "group.id": "g",
                                 "kafka.group.protocol": "consumer", "session.timeout.ms": "4000"}, streaming=True)
    source = GroupPartitionSource(opts)
    query_member = source.members[0]
    query_member.kip848 = True
    io = HeldCommitIo()
    member = Kip848Member(io, "g", query_member, topics=["t"], member_id="m", auto_commit_interval_ms=None)
    member.epoch, member.owned, member.target = 3, {TP}, set()
    member.state = MemberState.STABLE
    member.assigned.set()
    source.connectors = [member]
    query_member.owned = {TP: 0}
    source.on_batch_planned({TP: 10})
    source.on_batch_committed({TP: 10})

    active = threading.Thread(target=source._commit_now, name="active-commit")
    active.start()
    assert io.entered.wait(10), "the active commit of 10 never went out"
    source.on_batch_planned({TP: 12})   # the next batch commits while that commit is still on the wire
    source.on_batch_committed({TP: 12})
    revoking = threading.Thread(target=member.reconcile, name="revocation")
    revoking.start()
    revoking.join(1.0)  # the revocation that does not wait for the active commit lands 12 at once
    assert io.landed == [], f"the revocation committed {io.landed} while the active commit of 10 was on the wire"
    io.release.set()
    active.join(10)
    revoking.join(10)
    assert not revoking.is_alive() and not active.is_alive()
    assert io.landed == [{TP: 10}, {TP: 12}]
    assert member.owned == set() and member.state is MemberState.ACKNOWLEDGING
