"""The chaos harness's confluent-kafka member (``testkit.kafka_member``) journals in the thin
member's format, so one set of invariant checks covers a mixed group.

A thin consumer and an eager confluent-kafka member share a 6-partition topic under a live
producer; a third member (eager) joins and, later, leaves cleanly.  From the journals alone:
the callbacks' partitions give disjoint ownership over time (no overlap, no delivery outside
ownership), every record is delivered, every batch was committed, and after the clean close
the group's committed offsets are at the log end.
"""

from __future__ import annotations

from helpers import wait_until
from support import log_end, topic_partitions, wait_caught_up

from testkit import invariants
from testkit.kafka_member import KafkaMemberProcess

PARTITIONS = 6
SESSION_MS = 6000


def test_kafka_member_journal_feeds_the_invariant_checks(cluster, czk, members, producer_factory, create,
                                                         tmp_path):
    group, topic = "g-journal", "journal"
    create(topic, PARTITIONS)
    parts = topic_partitions(topic, PARTITIONS)
    producer = producer_factory(topic, PARTITIONS)
    thin = members("thin", group, topics=[topic], session_timeout_ms=SESSION_MS)
    workdir = tmp_path / "members"
    eager = KafkaMemberProcess("eager", workdir, cluster.bootstrap, group, topics=[topic], strategy="eager",
                               session_timeout_ms=SESSION_MS)
    late = None
    try:
        wait_until(lambda: thin.owned() and eager.owned() and thin.owned() | eager.owned() == parts
                   and not thin.owned() & eager.owned(), timeout=60, interval=0.2,
                   message=lambda: f"thin and eager to share the partitions: {thin.owned()} {eager.owned()}")
        late = KafkaMemberProcess("late", workdir, cluster.bootstrap, group, topics=[topic], strategy="eager",
                                  session_timeout_ms=SESSION_MS)
        wait_until(lambda: late.owned() and any(e["ev"] == "commit" for e in late.events()), timeout=60,
                   interval=0.2, message=lambda: f"the late member to read and commit; its log:\n{late.log_tail()}")
        assert late.stop(30) == 0
        producer.stop()
        ends = log_end(cluster.bootstrap, topic)
        wait_until(lambda: not invariants.at_least_once(_journals(thin, eager, late), ends), timeout=60,
                   interval=0.5, message=lambda: invariants.at_least_once(_journals(thin, eager, late), ends))
        wait_caught_up(czk, group, ends, timeout=60)
    finally:
        for m in (eager, late):
            if m is not None and m.alive():
                m.stop(30)

    journals = _journals(thin, eager, late)
    kinds = {name: next(e.get("kind") for e in evs if e["ev"] == "start") for name, evs in journals.items()}
    assert kinds == {"thin": None, "eager": "eager", "late": "eager"}
    spans = invariants.ownership_intervals(journals)
    assert invariants.one_owner_at_a_time(spans) == []
    assert invariants.delivered_outside_ownership(journals, spans) == []
    assert invariants.at_least_once(journals, ends) == []
    for name in ("eager", "late"):
        evs = journals[name]
        assert [e["ev"] for e in evs if e["ev"] in ("start", "closed")] == ["start", "closed"]
        assert any(e["ev"] == "revoke" for e in evs), f"{name}: no revoke journaled"
        # every batch is followed by its synchronous commit's outcome
        batches = [e for e in evs if e["ev"] == "recs"]
        outcomes = {(e["t"], e["p"], e["off"]) for e in evs if e["ev"] in ("commit", "commit_failed")}
        missing = [b for b in batches if (b["t"], b["p"], b["offs"][-1] + 1) not in outcomes]
        assert batches and not missing, f"{name}: batches without a commit: {missing[:3]}"
        assert sum(e["ev"] == "commit" for e in evs) > sum(e["ev"] == "commit_failed" for e in evs)


def _journals(*ms) -> dict[str, list[dict]]:
    return {m.name: m.events() for m in ms if m is not None}
