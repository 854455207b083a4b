"""A broker process SIGKILLed after a confluent-kafka ShareConsumer's acceptance was answered and before
any ZooKeeper checkpoint of it (group.share.state.checkpoint.interval.ms far away): the acceptance was
made durable by the share-state journal beside the logs, so after the restart the accepted records are
never delivered again, and the others are."""

from __future__ import annotations

import json

import pytest
from helpers import wait_until
from share_support import SHARE_OVERRIDES, ShareReader, produce, set_group_config
from support import BROKER_OVERRIDES, create_topic

N = 60
GROUP, TOPIC = "sg-journal", "share-journal"


@pytest.fixture
def one_broker(zk_connect, tmp_path):
    from spark_coord.cluster import LocalCluster

    overrides = {**BROKER_OVERRIDES, **SHARE_OVERRIDES, "group.share.state.checkpoint.interval.ms": 600_000}
    with LocalCluster(1, tmp_path / "cluster", zk_connect=zk_connect, overrides=overrides) as c:
        yield c


def test_accepted_records_survive_a_sigkill_before_any_checkpoint(one_broker):
    from confluent_kafka import AcknowledgeType, ShareConsumer

    cluster = one_broker
    create_topic(cluster.bootstrap, TOPIC, 1)
    set_group_config(cluster.bootstrap, GROUP, share_auto_offset_reset="earliest")
    produce(cluster.bootstrap, TOPIC, [(0, f"k{i}".encode(), b"v") for i in range(N)], batch=10)

    sc = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP, "client.id": "acceptor",
                        "share.acknowledgement.mode": "explicit", "max.poll.records": 10})
    accepted: set[int] = set()
    reader = None
    try:
        sc.subscribe([TOPIC])

        def accept_some() -> bool:
            msgs = [m for m in sc.poll(0.5) if m.error() is None]
            for m in msgs:
                sc.acknowledge(m, AcknowledgeType.ACCEPT)
            if msgs:
                result = sc.commit_sync(10)
                assert all(e is None for e in result.values()), result
                accepted.update(m.offset() for m in msgs)
            return len(accepted) >= 20

        wait_until(accept_some, timeout=60, message="records accepted and the acceptance answered")
        assert len(accepted) < N, "every record was handed to the acceptor: nothing left to check delivery of"
        state = json.loads(cluster_zk_get(cluster, f"/share-groups/{GROUP}/{TOPIC}/0"))
        assert state["start"] == 0 and not state["ranges"], f"checkpointed already: {state}"  # ZooKeeper lags

        cluster.kill_broker(0)
        cluster.start_broker(0)
        sc.close()
        sc = None
        reader = ShareReader("after", cluster.bootstrap, GROUP, [TOPIC])
        reader.start()
        rest = set(range(N)) - accepted
        wait_until(lambda: rest <= {o for _, o in reader.seen()}, timeout=60,
                   message=lambda: f"the records not accepted before the crash: {sorted(rest)}")
        again = sorted(accepted & {o for _, o in reader.seen()})
        assert not again, f"accepted before the SIGKILL, delivered again after it: {again}"
    finally:
        if reader is not None:
            reader.stop()
        if sc is not None:
            sc.close()


def cluster_zk_get(cluster, path: str) -> bytes:
    from spark_coord.zk.client import close, connect

    client = connect(cluster.zk_connect, session_timeout_ms=10000, connection_timeout_ms=10000)
    try:
        return client.get(path)[0]
    finally:
        close(client)
