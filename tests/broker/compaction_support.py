"""What the compaction tests share: partition 0's log start and end, every record read back through
Fetch, and the wait for a restarted broker's own ZooKeeper registration."""

from __future__ import annotations

from helpers import wait_until

from spark_coord.client.admin import EARLIEST, LATEST, AdminClient
from spark_coord.client.fetcher import fetch
from spark_coord.client.metadata import ClusterClient
from spark_coord.records.reader import iter_batches, iter_records
from spark_coord.zk import client as zk_client
from spark_coord.zk import paths


def offsets(cluster, topic: str) -> tuple[int, int]:
    """Partition 0's log start and end."""
    with ClusterClient(cluster.bootstrap) as c:
        c.topic(topic, wait=15)  # a restarted broker leads its partitions once it is registered again
        admin = AdminClient(c)
        return admin.list_offsets(topic, [0], EARLIEST)[0], admin.list_offsets(topic, [0], LATEST)[0]


def read_all(cluster, topic: str) -> list:
    """Every record of partition 0 from the log start, with our fetcher, moving on after each batch."""
    out = []
    with ClusterClient(cluster.bootstrap) as c:
        c.topic(topic, wait=15)
        start, end = offsets(cluster, topic)
        pos = start
        while pos < end:
            data = fetch(c.connection(c.leader(topic, 0)), {(topic, 0): pos}, max_wait_ms=100)[0]
            records = data.records if hasattr(data, "records") else data
            batches = [h for h, _ in iter_batches(records)]
            assert batches, f"no batch at offset {pos}"
            out.extend(iter_records(records, pos))
            pos = batches[-1].next_offset
    return out


def registration_session(cluster) -> int | None:
    """The ZooKeeper session that holds broker 0's registration (None: not registered)."""
    zk = zk_client.connect(cluster.zk_connect)
    try:
        stat = zk.exists(paths.broker(0))
        return stat.ephemeralOwner if stat is not None else None
    finally:
        zk_client.close(zk)


def wait_registered_again(cluster, old_session: int | None) -> None:
    """Wait for the restarted broker's own registration: it replaces the one its killed process left (at the
    same address, so ``start_broker`` may return before), and partition 0 has no leader meanwhile."""
    wait_until(lambda: registration_session(cluster) not in (None, old_session), timeout=15,
               message="the restarted broker to replace its previous registration")
