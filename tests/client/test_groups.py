"""GroupClient against scripted Kafka-protocol servers: coordinator moves and retries,
bounded backoff, versions without batching, and coordinators outside the metadata.
(Against a real Kafka-compatible broker: tests/peers/test_tansu.py.)"""

from __future__ import annotations

import time

import pytest
from fake_kafka import ScriptedBroker

from spark_coord.client.groups import CommittedOffset, GroupClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.errors import ErrorCode, KafkaError
from spark_coord.wire import protocol
from spark_coord.wire.registry import ApiKey


class Cluster:
    """Scripted brokers that share one metadata answer and a queue of error codes per API."""

    def __init__(self, n: int = 2, coordinator: int = 0, api_keys: list[dict] | None = None):
        self.errors: dict[tuple[int, int], list[int]] = {}  # (node, api key) -> codes to answer first
        self.coordinator = coordinator
        self.committed: dict[tuple[str, str, int], int] = {}
        self.brokers = [ScriptedBroker(self.handle, api_keys=api_keys, node_id=i) for i in range(n)]
        self.outside: ScriptedBroker | None = None  # a coordinator the metadata does not list
        self.topics: dict[str, int] = {}  # topic -> partitions, in the metadata answer

    @property
    def bootstrap(self) -> str:
        return self.brokers[0].address

    def close(self) -> None:
        for b in self.brokers + ([self.outside] if self.outside else []):
            b.close()

    def _next_error(self, node: int, api_key: int) -> int:
        queue = self.errors.get((node, api_key))
        return queue.pop(0) if queue else ErrorCode.NONE

    def handle(self, broker: ScriptedBroker, header, body) -> dict:
        key, node = header.api_key, broker.node_id
        if key == ApiKey.METADATA:
            asked = None if body.get("topics") is None else {t["name"] for t in body["topics"]}
            topics = [{"error_code": 0, "name": name, "is_internal": False, "partitions": [
                {"error_code": 0, "partition_index": i, "leader_id": 0, "replica_nodes": [0], "isr_nodes": [0],
                 "offline_replicas": []} for i in range(n)]}
                for name, n in self.topics.items() if asked is None or name in asked]
            return {"brokers": [b.broker_entry() for b in self.brokers], "cluster_id": "scripted",
                    "controller_id": 0, "topics": topics}
        if key == ApiKey.FIND_COORDINATOR:
            code = self._next_error(node, key)
            target = self.outside if self.outside is not None else self.brokers[self.coordinator]
            entry = {"error_code": code, "node_id": target.node_id, "host": "127.0.0.1", "port": target.port}
            if header.api_version >= 4:
                return {"coordinators": [dict(entry, key=k) for k in body["coordinator_keys"]]}
            return entry
        if key == ApiKey.OFFSET_COMMIT:
            code = self._next_error(node, key)
            topics = []
            for t in body["topics"]:
                for p in t["partitions"]:
                    if not code:
                        self.committed[(body["group_id"], t["name"], p["partition_index"])] = p["committed_offset"]
                topics.append({"name": t["name"], "partitions": [
                    {"partition_index": p["partition_index"], "error_code": code} for p in t["partitions"]]})
            return {"topics": topics}
        if key == ApiKey.OFFSET_FETCH:
            code = self._next_error(node, key)
            groups = body["groups"] if header.api_version >= 8 else [body]
            answers = []
            for g in groups:
                mine = {(t, p): o for (gid, t, p), o in self.committed.items() if gid == g["group_id"]}
                by_topic: dict[str, list] = {}
                for (t, p), o in sorted(mine.items()):
                    by_topic.setdefault(t, []).append({"partition_index": p, "committed_offset": o, "metadata": ""})
                answers.append({"group_id": g["group_id"], "error_code": code,
                                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
            if header.api_version >= 8:
                return {"groups": answers}
            return {"error_code": answers[0]["error_code"], "topics": answers[0]["topics"]}
        if key == ApiKey.DELETE_GROUPS:
            code = self._next_error(node, key)
            return {"results": [{"group_id": g, "error_code": code} for g in body["groups_names"]]}
        raise AssertionError(f"unexpected request {header}")


@pytest.fixture
def cluster():
    c = Cluster()
    yield c
    c.close()


def _client(c: Cluster, **kw) -> tuple[ClusterClient, GroupClient]:
    cc = ClusterClient(c.bootstrap, timeout=5)
    cc.refresh([])
    kw.setdefault("retry_backoff_ms", 20)
    kw.setdefault("retry_backoff_max_ms", 100)
    return cc, GroupClient(cc, **kw)


def test_commit_follows_a_moved_coordinator_and_waits_out_loading(cluster):
    cc, groups = _client(cluster)
    with cc, groups:
        assert groups.coordinator("g").node_id == 0
        cluster.coordinator = 1  # the group moves to broker 1; broker 0 still believes it has it...
        cluster.errors[(0, ApiKey.OFFSET_COMMIT)] = [ErrorCode.NOT_COORDINATOR]
        # ...and broker 1 is still loading the group's offsets, twice
        cluster.errors[(1, ApiKey.OFFSET_COMMIT)] = [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS] * 2
        groups.commit_offsets("g", {("t", 0): 12, ("t", 1): CommittedOffset(34, "meta")})
        assert cluster.committed == {("g", "t", 0): 12, ("g", "t", 1): 34}
        assert len(cluster.brokers[0].received(ApiKey.OFFSET_COMMIT)) == 1
        assert len(cluster.brokers[1].received(ApiKey.OFFSET_COMMIT)) == 3
        assert groups.coordinator("g").node_id == 1
        # a standalone commit: generation -1, empty member id
        _, body, _ = cluster.brokers[1].received(ApiKey.OFFSET_COMMIT)[-1]
        assert body["generation_id_or_member_epoch"] == -1 and body["member_id"] == ""
        assert body["topics"][0]["partitions"][1]["committed_metadata"] == "meta"


def test_find_coordinator_not_available_is_retried(cluster):
    cluster.errors[(0, ApiKey.FIND_COORDINATOR)] = [ErrorCode.COORDINATOR_NOT_AVAILABLE] * 3
    cc, groups = _client(cluster)
    with cc, groups:
        groups.commit_offsets("g", {("t", 0): 1})
        assert groups.fetch_offsets("g") == {("t", 0): CommittedOffset(1, "")}
        assert len(cluster.brokers[0].received(ApiKey.FIND_COORDINATOR)) == 4


def test_gives_up_after_the_timeout_with_bounded_backoff(cluster):
    cluster.errors[(0, ApiKey.FIND_COORDINATOR)] = [ErrorCode.COORDINATOR_NOT_AVAILABLE] * 1000
    cc, groups = _client(cluster, timeout=1.0, retry_backoff_ms=50, retry_backoff_max_ms=200)
    with cc, groups:
        start = time.monotonic()
        with pytest.raises(KafkaError) as info:
            groups.fetch_offsets("g")
        elapsed = time.monotonic() - start
    assert info.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE and "gave up" in str(info.value)
    assert 0.9 <= elapsed < 3.0
    # 50, 100, 200, 200, ... ms: a handful of attempts, not a busy loop
    assert 4 <= len(cluster.brokers[0].received(ApiKey.FIND_COORDINATOR)) <= 10


def test_other_errors_are_raised_at_once_naming_the_partitions(cluster):
    cluster.errors[(0, ApiKey.OFFSET_COMMIT)] = [ErrorCode.ILLEGAL_GENERATION]
    cc, groups = _client(cluster)
    with cc, groups:
        with pytest.raises(KafkaError, match=r"t-0: ILLEGAL_GENERATION, t-1: ILLEGAL_GENERATION") as info:
            groups.commit_offsets("g", {("t", 0): 1, ("t", 1): 2})
        assert info.value.code == ErrorCode.ILLEGAL_GENERATION
        assert len(cluster.brokers[0].received(ApiKey.OFFSET_COMMIT)) == 1


def test_a_commit_to_a_topic_the_coordinator_has_not_seen_yet_is_retried(cluster):
    """What a CI run saw: a topic created through one broker, a commit at once to the group's
    coordinator (another broker, whose view of the topics had not caught up) refused with
    UNKNOWN_TOPIC_OR_PARTITION.  Kafka's commitSync retries that code; so does the client, while the
    cluster's metadata has the partitions -- one nobody knows is refused at once."""
    cluster.topics = {"t": 2}
    cluster.errors[(0, ApiKey.OFFSET_COMMIT)] = [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2
    cc, groups = _client(cluster)
    with cc, groups:
        groups.commit_offsets("g", {("t", 0): 1, ("t", 1): 2})
        assert cluster.committed == {("g", "t", 0): 1, ("g", "t", 1): 2}
        assert len(cluster.brokers[0].received(ApiKey.OFFSET_COMMIT)) == 3
        for missing in [("gone", 0), ("t", 2)]:
            cluster.errors[(0, ApiKey.OFFSET_COMMIT)] = [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
            start = time.monotonic()
            with pytest.raises(KafkaError, match=f"{missing[0]}-{missing[1]}: UNKNOWN_TOPIC_OR_PARTITION") as info:
                groups.commit_offsets("g", {missing: 1})
            assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and time.monotonic() - start < 2
        assert len(cluster.brokers[0].received(ApiKey.OFFSET_COMMIT)) == 5


def test_delete_groups_reports_codes_and_retries_coordinator_errors(cluster):
    cluster.errors[(0, ApiKey.DELETE_GROUPS)] = [ErrorCode.NOT_COORDINATOR, ErrorCode.NON_EMPTY_GROUP]
    cc, groups = _client(cluster)
    with cc, groups:
        assert groups.delete_groups(["a", "b"]) == {"a": ErrorCode.NON_EMPTY_GROUP, "b": ErrorCode.NON_EMPTY_GROUP}
        assert len(cluster.brokers[0].received(ApiKey.DELETE_GROUPS)) == 2


def test_batched_versions_ask_once_for_many_groups(cluster):
    cc, groups = _client(cluster)
    with cc, groups:
        groups.commit_offsets("a", {("t", 0): 5})
        groups.commit_offsets("b", {("t", 1): 6})
        groups.forget("a")
        groups.forget("b")
        got = groups.fetch_offsets_many({"a": None, "b": [("t", 1)], "c": None})
        assert got == {"a": {("t", 0): CommittedOffset(5, "")}, "b": {("t", 1): CommittedOffset(6, "")}, "c": {}}
        finds = cluster.brokers[0].received(ApiKey.FIND_COORDINATOR)
        assert finds[-1][0].api_version == 6 and finds[-1][1]["coordinator_keys"] == ["a", "b", "c"]
        fetches = cluster.brokers[0].received(ApiKey.OFFSET_FETCH)
        assert len(fetches) == 1 and fetches[0][0].api_version == 9
        assert [g["group_id"] for g in fetches[0][1]["groups"]] == ["a", "b", "c"]
        assert fetches[0][1]["groups"][0]["topics"] is None


def test_older_coordinator_gets_one_group_per_request():
    table = [dict(row, max_version=3) if row["api_key"] in (ApiKey.FIND_COORDINATOR, ApiKey.OFFSET_FETCH) else row
             for row in protocol.api_versions_table()]
    c = Cluster(api_keys=table)
    try:
        cc, groups = _client(c)
        with cc, groups:
            groups.commit_offsets("a", {("t", 0): 5})
            assert groups.fetch_offsets_many({"a": None, "b": None}) == {"a": {("t", 0): CommittedOffset(5, "")},
                                                                         "b": {}}
            finds = c.brokers[0].received(ApiKey.FIND_COORDINATOR)
            assert [(h.api_version, b["key"]) for h, b, _ in finds] == [(3, "a"), (3, "b")]
            assert [b["group_id"] for _, b, _ in c.brokers[0].received(ApiKey.OFFSET_FETCH)] == ["a", "b"]
    finally:
        c.close()


def test_coordinator_outside_the_metadata_is_reached_directly(cluster):
    cluster.outside = ScriptedBroker(cluster.handle, node_id=77)
    cc, groups = _client(cluster)
    with cc, groups:
        groups.commit_offsets("g", {("t", 0): 9})
        assert groups.fetch_offsets("g") == {("t", 0): CommittedOffset(9, "")}
        assert len(cluster.outside.received(ApiKey.OFFSET_COMMIT)) == 1
        assert not cluster.brokers[0].received(ApiKey.OFFSET_COMMIT)


def test_a_cluster_without_group_apis_is_refused_at_once():
    """Our brokers (today) advertise no group API: no retrying, a clear error."""
    table = [row for row in protocol.api_versions_table() if row["api_key"] not in (8, 9, 10, 15, 16, 42)]
    c = Cluster(api_keys=table)
    try:
        cc, groups = _client(c, timeout=30)
        with cc, groups:
            start = time.monotonic()
            with pytest.raises(KafkaError, match="FindCoordinator: no version in common") as info:
                groups.commit_offsets("g", {("t", 0): 1})
            assert info.value.code == ErrorCode.UNSUPPORTED_VERSION and time.monotonic() - start < 5
            assert not c.brokers[0].received(ApiKey.FIND_COORDINATOR)
    finally:
        c.close()
