"""KIP-848 reconciliation with real clients: five confluent-kafka consumers
(``group.protocol=consumer``) join one after another on three broker processes while the
coordinator withdraws StopFetchers nobody was told of yet, answers StartFetchers when
queued and stops at once what a member never heard of.  By their rebalance callbacks, no
partition is ever held by two members at the same time: a member's assignment callback for a
partition comes after the revocation callback of whoever held it before (invariant 1), while
members join and when one leaves.  ZooKeeper's owners and the callbacks agree at the end."""

from __future__ import annotations

import time

import pytest
from helpers import wait_until
from peers.group_peers import KafkaPeer
from support import topic_partitions
from test_kip848_members import _owners, _settled

PARTITIONS = 10

pytestmark = pytest.mark.slow


def _two_holders(peers: dict[str, KafkaPeer]) -> list[str]:
    """Every moment a partition was held by two members, by their callbacks (in time order)."""
    events = sorted((ts, name, what, p) for name, peer in peers.items()
                    for ts, what, parts in peer.callbacks() for p in parts)
    holder: dict[int, str] = {}
    found = []
    for ts, name, what, p in events:
        if what == "assigned":
            if p in holder and holder[p] != name:
                found.append(f"partition {p} assigned to {name} at {ts:.3f} while {holder[p]} held it")
            holder[p] = name
        elif holder.get(p) == name:
            del holder[p]
    return found


def _everything_owned(czk, group: str, peers: dict[str, KafkaPeer], parts: set):
    """Owners by name once every partition is owned by one of ``peers``, as their callbacks agree."""
    owners = _owners(czk, group, peers)
    if set(owners) != set(peers) or set().union(*owners.values()) != parts:
        return None
    if any({p for _, p in tps} != peers[n].owned() for n, tps in owners.items()):
        return None
    return owners


def test_members_joining_one_after_another_never_share_a_partition(cluster, czk, create, tmp_path):
    group, topic = "g-kip848-reconcile", "k848rec"
    create(topic, PARTITIONS)
    parts = topic_partitions(topic, PARTITIONS)
    peers: dict[str, KafkaPeer] = {}
    try:
        for i in range(5):
            peers[f"m{i}"] = KafkaPeer("confluent", cluster.bootstrap, group, topic, f"m{i}", tmp_path, "consumer")
            time.sleep(0.1)  # staggered joins: the later ones change the target while stops are pending
        wait_until(lambda: _settled(czk, group, peers, parts, set(peers)), timeout=45, interval=0.2,
                   message=lambda: f"five members owning two partitions each: {_owners(czk, group, peers)}")
        assert _two_holders(peers) == []
        t_leave = time.time()
        peers["m0"].stop()
        left = {n: p for n, p in peers.items() if n != "m0"}
        got = wait_until(lambda: _everything_owned(czk, group, left, parts), timeout=45, interval=0.2,
                         message=lambda: f"four members owning every partition: {_owners(czk, group, left)}")
        assert sorted(len(tps) for tps in got.values()) == [2, 2, 3, 3]
        assert _two_holders(peers) == []
        for n, p in left.items():  # the leaver's partitions went to others; nobody else lost one
            assert p.revoked_after(t_leave) == [], (n, p.callbacks())
    finally:
        for p in peers.values():
            p.stop()
