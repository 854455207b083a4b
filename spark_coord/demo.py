"""``spark-coord demo``: a whole local cluster in one command.

Starts the embedded ZooKeeper and one broker on free ports (in a temporary
directory), creates a topic, produces sample events, reads them back over the
Kafka protocol, prints them and the partition offsets, and shuts everything down.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile

from spark_coord.client.admin import EARLIEST, LATEST, AdminClient
from spark_coord.client.fetcher import fetch
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.producer import Producer
from spark_coord.records.reader import iter_records
from spark_coord.table import format_table

log = logging.getLogger("spark_coord.demo")

TOPIC = "demo-events"
USERS = ["ada", "grace", "linus", "barbara", "ken"]
PAGES = ["/", "/docs", "/pricing", "/blog", "/signup"]


def sample_events(n: int):
    for i in range(n):
        user = USERS[i % len(USERS)]
        yield user.encode(), json.dumps({"seq": i, "user": user, "page": PAGES[(i * 7) % len(PAGES)]}).encode()


def read_all(cluster: ClusterClient, topic: str) -> list:
    admin = AdminClient(cluster)
    start = admin.list_offsets(topic, None, EARLIEST)
    end = admin.list_offsets(topic, None, LATEST)
    out = []
    for p in sorted(start):
        pos = start[p]
        while pos < end[p]:
            conn = cluster.connection(cluster.leader(topic, p))
            data = fetch(conn, {(topic, p): pos}, max_wait_ms=100)[0]
            for rec in iter_records(data.records or b"", min_offset=pos):
                if rec.offset >= end[p]:
                    break
                out.append((p, rec))
                pos = rec.offset + 1
    return out


def run_cli(args) -> int:
    from spark_coord.cluster import LocalCluster

    with tempfile.TemporaryDirectory(prefix="spark-coord-demo-") as tmp:
        log.info("starting embedded ZooKeeper and 1 broker under %s", tmp)
        with LocalCluster(1, tmp) as cluster:
            log.info("cluster up: ZooKeeper at %s, broker at %s", cluster.zk_connect, cluster.bootstrap)
            with ClusterClient(cluster.bootstrap) as client:
                admin = AdminClient(client)
                n = admin.create_topic(TOPIC, 3)
                log.info("created topic %s with %d partitions", TOPIC, n)
                producer = Producer(client, acks=-1, compression="lz4")
                for key, value in sample_events(args.records):
                    producer.send(TOPIC, value, key=key)
                producer.flush()
                log.info("produced %d records", producer.sent_records)
                records = read_all(client, TOPIC)
                out = sys.stdout
                out.write(f"\n{len(records)} records read back from {TOPIC}:\n")
                rows = [{"partition": p, "offset": r.offset, "key": (r.key or b"").decode(),
                         "value": (r.value or b"").decode()} for p, r in records]
                out.write(format_table(rows, ["partition", "offset", "key", "value"]) + "\n\n")
                out.write(format_table(admin.describe([TOPIC]),
                                       ["topic", "partition", "leader", "earliest", "latest"]) + "\n\n")
                out.flush()
                if len(records) != args.records:
                    log.error("read back %d records, produced %d", len(records), args.records)
                    return 1
            log.info("stopping the cluster")
    return 0
