"""A standalone coordinator and a broker share ``/coordinators/ids``: one id, one live coordinator.

A standalone coordinator started with the id of a live coordinator-enabled broker refuses to
start, naming the id and the broker holding it; the broker's registration and its groups are
untouched."""

from __future__ import annotations

import json
import uuid

from helpers import local_cluster, wait_until

from spark_coord.client.admin import AdminClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.consumer import Consumer
from spark_coord.zk import paths
from spark_coord.zk.client import close, connect
from testkit.coordinator_process import CoordinatorProcess


def test_a_standalone_coordinator_refuses_an_id_a_live_broker_holds(zookeeper, tmp_path):
    with local_cluster(zookeeper, tmp_path / "cluster", 1, "coordinator-id-clash", {"num.partitions": 2}) as c:
        broker_id, (host, port) = next(iter(c.brokers.items()))
        zk = connect(c.zk_connect)
        try:
            # the broker registers as a coordinator just after it registers as a broker (what the cluster waits for)
            wait_until(lambda: zk.exists(paths.coordinator(broker_id)), timeout=30,
                       message=f"broker {broker_id} to register in /coordinators/ids")
            before, stat = zk.get(paths.coordinator(broker_id))
            clash = CoordinatorProcess(broker_id, c.bootstrap, c.zk_connect, tmp_path)
            try:
                code = clash.proc.wait(60)
            finally:
                clash.stop()
            log = clash.log.read_text()
            assert code == 1, log[-3000:]
            assert f"coordinator {broker_id} cannot start" in log, log[-3000:]
            assert f"already registered by a live broker at {host}:{port}" in log, log[-3000:]
            after, stat_after = zk.get(paths.coordinator(broker_id))
            assert (after, stat_after.ephemeralOwner, stat_after.version) == (before, stat.ephemeralOwner,
                                                                              stat.version)
            assert json.loads(after)["port"] == port
        finally:
            close(zk)
        # the broker still coordinates: a member registers and is given every partition
        topic = f"clash-{uuid.uuid4().hex[:6]}"
        with ClusterClient(c.bootstrap) as client:
            AdminClient(client).create_topic(topic, 2)
        consumer = Consumer(c.bootstrap, f"g-{topic}", topics=[topic], auto_offset_reset="smallest",
                            session_timeout_ms=10000)
        try:
            wait_until(lambda: len(consumer.assignment()) == 2, timeout=60,
                       message="the member's assignment from the broker's coordinator")
        finally:
            consumer.close()
