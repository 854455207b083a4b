"""Share groups and transactions on our brokers (KIP-932 on KIP-98): ``share.isolation.level``.

One broker, one partition written by hand (no transaction coordinator yet: the markers are sent with
WriteTxnMarkers, as a coordinator sends them): plain records, an aborted transaction interleaved with
a committed one, and a transaction left open with a plain record after it::

    0-1 p0 p1  plain             6  ABORT marker (A)        9  o0  open (O)
    2-3 a0 a1  aborted (A)       7  COMMIT marker (C)      10  p3  plain
    4   c0     committed (C)     8  p2  plain              11  COMMIT marker (O), written later
    5   a2     aborted (A)

A group with ``share.isolation.level=read_committed`` (set with IncrementalAlterConfigs on the GROUP
resource) gets exactly the committed and plain records below the last stable offset (9), each once --
with confluent-kafka's ``ShareConsumer`` (librdkafka) and with our thin ``ShareConsumer`` -- and its
share-partition start offset passes the aborted records and the markers; once the open transaction
commits, the rest comes.  A read_uncommitted group gets every data record, the open transaction's
included, and never a marker.  A change of the level on a live group applies from its next fetch;
what a read_committed group archived stays archived after the broker restarts."""

from __future__ import annotations

import pytest
from helpers import local_cluster, wait_until

pytestmark = pytest.mark.slow

TOPIC = "rc-share"
PLAIN_AND_COMMITTED = {0: "p0", 1: "p1", 4: "c0", 8: "p2"}
AFTER_COMMIT = {9: "o0", 10: "p3"}
EVERY_DATA_RECORD = {0: "p0", 1: "p1", 2: "a0", 3: "a1", 4: "c0", 5: "a2", 8: "p2", 9: "o0", 10: "p3"}
OVERRIDES = {"group.share.min.record.lock.duration.ms": 1000, "group.share.record.lock.duration.ms": 5000,
             "group.share.min.heartbeat.interval.ms": 100, "group.share.heartbeat.interval.ms": 500}


def _batch(values, pid=-1, epoch=-1, seq=-1) -> bytes:
    from spark_coord.records.builder import BatchBuilder

    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=pid >= 0)
    for v in values:
        b.append(v.encode(), key=v.encode())
    return b.build()


class Writer:
    """Produce and WriteTxnMarkers requests to the partition's leader, by hand."""

    def __init__(self, cc, topic: str):
        from spark_coord.client.admin import AdminClient

        AdminClient(cc).create_topic(topic, 1)
        cc.topic(topic, refresh=True, wait=30)
        self.cc, self.topic = cc, topic

    def _conn(self):
        return self.cc.connection(self.cc.leader(self.topic, 0))

    def producer(self) -> tuple[int, int]:
        from spark_coord.wire.registry import ApiKey

        r = self._conn().request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 60000})
        return r["producer_id"], r["producer_epoch"]

    def produce(self, values, pid=-1, epoch=-1, seq=-1) -> None:
        from spark_coord.wire.registry import ApiKey

        r = self._conn().request(ApiKey.PRODUCE, {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
                                                  "topic_data": [{"name": self.topic, "partition_data": [
                                                      {"index": 0, "records": _batch(values, pid, epoch, seq)}]}]})
        assert r["responses"][0]["partition_responses"][0]["error_code"] == 0

    def marker(self, pid: int, epoch: int, commit: bool) -> None:
        from spark_coord.wire.registry import ApiKey

        r = self._conn().request(ApiKey.WRITE_TXN_MARKERS, {"markers": [
            {"producer_id": pid, "producer_epoch": epoch, "transaction_result": commit, "coordinator_epoch": 0,
             "topics": [{"name": self.topic, "partition_indexes": [0]}]}]})
        assert [p["error_code"] for t in r["markers"][0]["topics"] for p in t["partitions"]] == [0]


def set_group_config(bootstrap: str, group: str, **configs: str) -> None:
    """``share_isolation_level="read_committed"`` -> share.isolation.level, as Kafka users set it:
    AdminClient.incremental_alter_configs on the GROUP resource (one broker: it has it at once)."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer (its handle answers it)
    futures = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                              incremental_configs=entries)])
    for f in futures.values():
        f.result(timeout=30)


class Reader:
    """A share consumer in implicit mode (each poll accepts the last one's records), every delivery
    kept as (offset, value, delivery count): confluent-kafka's or our thin one."""

    def __init__(self, kind: str, bootstrap: str, group: str, topic: str = TOPIC):
        self.kind, self.group, self.topic = kind, group, topic
        if kind == "confluent":
            from confluent_kafka import ShareConsumer

            self.consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": group})
            self.consumer.subscribe([topic])
        else:
            from spark_coord.consumer.share import ShareConsumer as Thin

            self.consumer = Thin(bootstrap, group, [topic], max_wait_ms=200)
        self.deliveries: list[tuple[int, str, int]] = []

    def poll(self) -> None:
        if self.kind == "confluent":
            for m in self.consumer.poll(0.2):
                assert m.error() is None, m.error()
                self.deliveries.append((m.offset(), m.value().decode(), m.delivery_count()))
        else:
            for r in self.consumer.poll(0.2):
                self.deliveries.append((r.offset, r.value.decode(), r.delivery_count))

    def seen(self) -> dict[int, str]:
        return {o: v for o, v, _ in self.deliveries}

    def close(self) -> None:
        self.consumer.close()

    def __repr__(self) -> str:
        return f"{self.kind} in {self.group}: {self.deliveries}"


def _start_offset(zk, group: str, topic: str = TOPIC) -> int | None:
    """The group's share-partition start offset as its leader saved it in ZooKeeper (None: no state)."""
    from spark_coord.share.store import decode
    from spark_coord.zk import paths

    try:
        data, _ = zk.get(paths.share_partition(group, topic, 0))
    except Exception:  # noqa: BLE001 -- no state yet
        return None
    return decode(data)[0]["start"]


def _read_until(zk, readers: list[Reader], want: dict[Reader, tuple[dict[int, str], int]],
                counts: dict[int, int] | None = None) -> None:
    """Poll every reader until each saw exactly its records and its group's share-partition start
    offset is where they put it (everything below accepted or archived); then one more round, in
    which nothing more comes.  Each record came once, with delivery count 1 (or ``counts``)."""
    def done() -> bool:
        for r in readers:
            r.poll()
        return all(r.seen() == records and _start_offset(zk, r.group, r.topic) == start
                   for r, (records, start) in want.items())
    wait_until(done, 60, interval=0, message=lambda: f"{readers}; start offsets "
               f"{[_start_offset(zk, r.group, r.topic) for r in readers]}, wanted {list(want.values())}")
    for r in readers:
        r.poll()
    for r, (records, _) in want.items():
        assert r.seen() == records, r
        assert sorted(o for o, _, _ in r.deliveries) == sorted(records), f"a record came twice: {r}"
        assert {o: c for o, _, c in r.deliveries} == (counts or dict.fromkeys(records, 1)), r


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with local_cluster(zookeeper, tmp_path_factory.mktemp("rc-share"), 1, "share-read-committed",
                       overrides=OVERRIDES) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def state_zk(cluster):
    """A ZooKeeper client on the cluster's chroot: the share state the leader saved."""
    from spark_coord.zk.client import close, connect

    client = connect(cluster.zk_connect)
    try:
        yield client
    finally:
        close(client)


def test_read_committed_share_groups_get_committed_records_only_and_read_uncommitted_every_data_record(
        cluster, state_zk):
    from spark_coord.client.metadata import ClusterClient

    bootstrap = cluster.bootstrap
    with ClusterClient(bootstrap) as cc:
        w = Writer(cc, TOPIC)
        (a, a_epoch), (c, c_epoch), (o, o_epoch) = w.producer(), w.producer(), w.producer()
        w.produce(["p0", "p1"])              # 0-1
        w.produce(["a0", "a1"], a, a_epoch, 0)  # 2-3, aborted
        w.produce(["c0"], c, c_epoch, 0)        # 4, committed
        w.produce(["a2"], a, a_epoch, 2)        # 5, aborted
        w.marker(a, a_epoch, False)             # 6
        w.marker(c, c_epoch, True)              # 7
        w.produce(["p2"])                       # 8
        w.produce(["o0"], o, o_epoch, 0)        # 9, open
        w.produce(["p3"])                       # 10
        for group in ("rc-confluent", "rc-thin"):
            set_group_config(bootstrap, group, share_auto_offset_reset="earliest",
                             share_isolation_level="read_committed")
        for group in ("ru-confluent", "ru-thin"):
            set_group_config(bootstrap, group, share_auto_offset_reset="earliest")
        readers = [Reader("confluent", bootstrap, "rc-confluent"), Reader("thin", bootstrap, "rc-thin"),
                   Reader("confluent", bootstrap, "ru-confluent"), Reader("thin", bootstrap, "ru-thin")]
        rc, ru = readers[:2], readers[2:]
        try:
            # the open transaction holds read_committed at the last stable offset (9); the aborted
            # records (2, 3, 5) and the markers (6, 7) are archived, so the start offset reaches 9
            _read_until(state_zk, readers, {**{r: (PLAIN_AND_COMMITTED, 9) for r in rc},
                                      **{r: (EVERY_DATA_RECORD, 11) for r in ru}})
            w.marker(o, o_epoch, True)              # 11
            # the rest comes to read_committed; read_uncommitted passes the new marker, gets nothing
            _read_until(state_zk, readers, {**{r: ({**PLAIN_AND_COMMITTED, **AFTER_COMMIT}, 12) for r in rc},
                                      **{r: (EVERY_DATA_RECORD, 12) for r in ru}})
        finally:
            for r in readers:
                r.close()


def test_archived_aborted_records_stay_archived_after_a_restart_and_a_change_of_the_level(cluster, state_zk):
    """A read_committed member holds the records around an aborted transaction (the transaction's
    records and marker archived) and goes without acknowledging; the broker restarts (SIGTERM); the
    group is switched to read_uncommitted: the records held come again (delivery count 2), the open
    transaction's and the one after it come at once -- and the aborted ones never: archived is final,
    and it was in ZooKeeper."""
    import signal

    from spark_coord.client.metadata import ClusterClient
    from spark_coord.consumer.share import ShareConsumer

    bootstrap, topic, group = cluster.bootstrap, "rc-share-restart", "rc-restart"
    with ClusterClient(bootstrap) as cc:
        w = Writer(cc, topic)
        (a, a_epoch), (o, o_epoch) = w.producer(), w.producer()
        w.produce(["p0"])                       # 0
        w.produce(["a0", "a1"], a, a_epoch, 0)  # 1-2, aborted
        w.marker(a, a_epoch, False)             # 3
        w.produce(["p1"])                       # 4
        w.produce(["o0"], o, o_epoch, 0)        # 5, open
        w.produce(["p2"])                       # 6
        set_group_config(bootstrap, group, share_auto_offset_reset="earliest", share_isolation_level="read_committed")
        held: dict[int, str] = {}
        with ShareConsumer(bootstrap, group, [topic], acknowledgement_mode="explicit", max_wait_ms=200) as holder:
            def hold() -> bool:
                for r in holder.poll(0.2):
                    held[r.offset] = r.value.decode()
                return len(held) >= 2
            wait_until(hold, 60, interval=0, message=lambda: f"held {held}")
        assert held == {0: "p0", 4: "p1"}
    cluster.kill_broker(0, signal.SIGTERM)
    cluster.start_broker(0)
    with ClusterClient(bootstrap) as cc:
        cc.topic(topic, refresh=True, wait=30)
        set_group_config(bootstrap, group, share_isolation_level="read_uncommitted")
        reader = Reader("confluent", bootstrap, group, topic)
        try:
            _read_until(state_zk, [reader], {reader: ({0: "p0", 4: "p1", 5: "o0", 6: "p2"}, 7)},
                        counts={0: 2, 4: 2, 5: 1, 6: 1})
        finally:
            reader.close()
