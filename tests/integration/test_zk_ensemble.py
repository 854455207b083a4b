"""A three-server ZooKeeper ensemble (real QuorumPeerMain processes) loses its leader to
SIGKILL in mid-stream.

Every ZooKeeper client is cut off while the two survivors elect a new leader, then
reconnects with its session intact.  The brokers and the coordinator ride through:
no resignation, no session expiry, the same epoch and the same generation; the
producer keeps producing (acks=-1) and every acknowledged record is consumed by a
member of the group.
"""

from __future__ import annotations

import threading

import pytest
from helpers import fresh_chroot, wait_until
from support import BROKER_OVERRIDES, consumed_up_to, create_topic, topic_partitions, wait_balanced

from spark_coord.zk import paths
from testkit.member import MemberProcess

TOPIC, PARTITIONS = "ens", 4
#: Brokers' sessions: the new leader restarts every session's clock, so this only has to
#: cover one reconnect after the election; 6 s leaves room on a loaded machine.
SESSION_MS = 6000
ENSEMBLE_SETTINGS = {"tickTime": 500, "initLimit": 10, "syncLimit": 5, "minSessionTimeout": 1000}


class AckedProducer(threading.Thread):
    """Produces small batches (acks=-1) round-robin over the partitions; ``acked`` holds
    (partition, offset) of every record a leader acknowledged."""

    def __init__(self, bootstrap: str):
        super().__init__(name="acked-producer", daemon=True)
        from spark_coord.client.metadata import ClusterClient

        self.cluster = ClusterClient(bootstrap, timeout=5.0)
        self.acked: set[tuple[int, int]] = set()
        self.errors = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        from spark_coord.records.builder import BatchBuilder
        from spark_coord.wire.registry import ApiKey

        n = 0
        while not self._stop_event.is_set():
            p = n % PARTITIONS
            b = BatchBuilder()
            for i in range(5):
                b.append(b"r%d-%d" % (n, i))
            try:
                conn = self.cluster.connection(self.cluster.leader(TOPIC, p))
                out = conn.request(ApiKey.PRODUCE, {"acks": -1, "timeout_ms": 5000, "topic_data": [
                    {"name": TOPIC, "partition_data": [{"index": p, "records": b.build()}]}]})
                answer = out["responses"][0]["partition_responses"][0]
                if answer["error_code"] == 0:
                    self.acked.update((p, answer["base_offset"] + i) for i in range(5))
                else:
                    self.errors += 1
            except (OSError, ValueError) as e:  # counted; the records are not acknowledged
                self.errors += 1
                self.cluster.drop_connection(self.cluster.leader(TOPIC, p))
                print(f"producer: {e}")
            n += 1
            self._stop_event.wait(0.02)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(30)
        self.cluster.close()

    def ends(self) -> dict[tuple[str, int], int]:
        """Per partition: one past the highest acknowledged offset."""
        out: dict[tuple[str, int], int] = {}
        for p, o in list(self.acked):
            out[(TOPIC, p)] = max(out.get((TOPIC, p), 0), o + 1)
        return out


@pytest.fixture
def ensemble(tmp_path):
    from spark_coord.zk.embedded import EmbeddedEnsemble

    e = EmbeddedEnsemble(3, tmp_path / "zookeeper", ENSEMBLE_SETTINGS)
    e.start(timeout=120)
    try:
        yield e
    finally:
        e.stop()


def test_brokers_and_coordinator_ride_through_the_loss_of_the_zookeeper_leader(ensemble, tmp_path):
    from spark_coord.cluster import LocalCluster
    from spark_coord.zk.client import close, connect

    zk_connect = fresh_chroot(ensemble, "ensemble")
    cluster = LocalCluster(2, tmp_path / "cluster", zk_connect=zk_connect,
                           overrides={**BROKER_OVERRIDES, "zookeeper.session.timeout.ms": SESSION_MS})
    zk = None
    members: list[MemberProcess] = []
    producer = None
    try:
        cluster.start()
        zk = connect(zk_connect, session_timeout_ms=10000, connection_timeout_ms=10000)
        create_topic(cluster.bootstrap, TOPIC, PARTITIONS)
        parts = topic_partitions(TOPIC, PARTITIONS)
        members = [MemberProcess(f"z{i}", tmp_path, cluster.bootstrap, "g-ens", topics=[TOPIC],
                                 session_timeout_ms=2000) for i in range(2)]
        gen, _ = wait_balanced(members, parts)
        data, stat = zk.get(paths.shard_leader(0))
        coordinator, epoch = int(data), stat.czxid

        producer = AckedProducer(cluster.bootstrap)
        producer.start()
        wait_until(lambda: len(producer.acked) >= 100, 20, message="the first acknowledged records")
        old_leader = ensemble.leader()
        assert old_leader is not None
        old_leader.kill()
        new_leader = wait_until(ensemble.leader, 30, 0.1, message="the survivors to elect a new ZooKeeper leader")
        assert new_leader is not old_leader
        before = len(producer.acked)
        wait_until(lambda: len(producer.acked) >= before + 100, 30, message="records acknowledged after the election")
        producer.stop()
        ends = producer.ends()
        wait_until(lambda: not consumed_up_to(members, ends), 30,
                   message=lambda: f"the group to consume every acknowledged record; behind: "
                                   f"{consumed_up_to(members, ends)}")
        consumed = {(p, o) for m in members for _, p, o in m.records()}
        assert producer.acked <= consumed, sorted(producer.acked - consumed)[:10]

        # rode through: same coordinator and epoch, no rebalance, no resignation, no expiry
        data, stat = zk.get(paths.shard_leader(0))
        assert (int(data), stat.czxid) == (coordinator, epoch)
        assert {m.last_assignment()["gen"] for m in members} == {gen}
        for broker_id in cluster.brokers:
            text = cluster.log_path(broker_id).read_text(errors="replace")
            for sign in ("resigns as coordinator", "session expired", "re-registered", "Traceback"):
                assert sign not in text, f"broker {broker_id} log has {sign!r}"
    finally:
        if producer is not None and producer.is_alive():
            producer.stop()
        for m in members:
            m.stop(timeout=15) if m.alive() else None
        if zk is not None:
            close(zk)
        cluster.stop()
