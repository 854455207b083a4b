"""GroupClient's share-group calls (KIP-932) against a scripted Kafka-protocol server: the requests
they send, coordinator errors retried, group and partition errors raised."""

from __future__ import annotations

import pytest
from fake_kafka import ScriptedBroker

from spark_coord.client.groups import GroupClient, ShareOffset
from spark_coord.client.metadata import ClusterClient
from spark_coord.errors import ErrorCode, KafkaError
from spark_coord.wire.registry import ApiKey

TID = b"\x07" * 16


class Coordinator:
    """One scripted broker that coordinates every group; ``errors[api key]`` are answered first."""

    def __init__(self):
        self.errors: dict[int, list[int]] = {}
        self.partition_errors: dict[tuple[str, int], int] = {}
        self.broker = ScriptedBroker(self.handle)

    def close(self) -> None:
        self.broker.close()

    def _next(self, key: int) -> int:
        queue = self.errors.get(key)
        return queue.pop(0) if queue else ErrorCode.NONE

    def handle(self, broker, header, body) -> dict:
        key = header.api_key
        if key == ApiKey.METADATA:
            return {"brokers": [broker.broker_entry()], "cluster_id": "scripted", "controller_id": 0, "topics": []}
        if key == ApiKey.FIND_COORDINATOR:
            entry = {"error_code": 0, "node_id": 0, "host": "127.0.0.1", "port": broker.port}
            if header.api_version >= 4:
                return {"coordinators": [dict(entry, key=k) for k in body["coordinator_keys"]]}
            return entry
        if key == ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS:
            [g] = body["groups"]
            return {"groups": [{"group_id": g["group_id"], "error_code": self._next(key), "topics": [
                {"topic_name": "t", "topic_id": TID, "partitions": [
                    {"partition_index": 0, "start_offset": 40, "leader_epoch": -1, "lag": 2, "error_code": 0},
                    {"partition_index": 1, "start_offset": -1, "leader_epoch": -1, "lag": -1, "error_code": 0}]}]}]}
        if key == ApiKey.ALTER_SHARE_GROUP_OFFSETS:
            code = self._next(key)
            return {"error_code": code, "responses": [{"topic_name": t["topic_name"], "topic_id": TID, "partitions": [
                {"partition_index": p["partition_index"],
                 "error_code": code or self.partition_errors.get((t["topic_name"], p["partition_index"]), 0)}
                for p in t["partitions"]]} for t in body["topics"]]}
        if key == ApiKey.DELETE_SHARE_GROUP_OFFSETS:
            code = self._next(key)
            return {"error_code": code, "responses": [] if code else [
                {"topic_name": t["topic_name"], "topic_id": TID,
                 "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if t["topic_name"] == "nope" else 0}
                for t in body["topics"]]}
        raise AssertionError(f"unexpected request {header}")


@pytest.fixture
def coordinator():
    c = Coordinator()
    yield c
    c.close()


def client(c: Coordinator) -> tuple[ClusterClient, GroupClient]:
    cc = ClusterClient(c.broker.address, timeout=5)
    return cc, GroupClient(cc, retry_backoff_ms=20, retry_backoff_max_ms=50)


def test_share_group_offsets_retry_a_moving_coordinator(coordinator):
    coordinator.errors[ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS] = [ErrorCode.NOT_COORDINATOR,
                                                               ErrorCode.COORDINATOR_LOAD_IN_PROGRESS]
    cc, groups = client(coordinator)
    with cc, groups:
        assert groups.share_group_offsets("sg", [("t", 1), ("t", 0)]) == {
            ("t", 0): ShareOffset(40, -1, 2), ("t", 1): ShareOffset(-1, -1, -1)}
        asked = coordinator.broker.received(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)
        assert len(asked) == 3
        assert asked[-1][1]["groups"] == [{"group_id": "sg", "topics": [{"topic_name": "t", "partitions": [0, 1]}]}]
        groups.share_group_offsets("sg")
        assert coordinator.broker.received(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)[-1][1]["groups"][0]["topics"] is None


def test_alter_raises_the_group_error_or_names_the_partitions_refused(coordinator):
    cc, groups = client(coordinator)
    with cc, groups:
        groups.alter_share_group_offsets("sg", {("t", 0): 5, ("t", 1): 0})
        _, body, _ = coordinator.broker.received(ApiKey.ALTER_SHARE_GROUP_OFFSETS)[-1]
        assert body == {"group_id": "sg", "topics": [{"topic_name": "t", "partitions": [
            {"partition_index": 0, "start_offset": 5}, {"partition_index": 1, "start_offset": 0}]}]}
        coordinator.errors[ApiKey.ALTER_SHARE_GROUP_OFFSETS] = [ErrorCode.NON_EMPTY_GROUP]
        with pytest.raises(KafkaError) as e:
            groups.alter_share_group_offsets("sg", {("t", 0): 5})
        assert e.value.code == ErrorCode.NON_EMPTY_GROUP
        coordinator.partition_errors[("t", 3)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        with pytest.raises(KafkaError, match=r"t-3: UNKNOWN_TOPIC_OR_PARTITION"):
            groups.alter_share_group_offsets("sg", {("t", 0): 5, ("t", 3): 1})


def test_delete_offsets_answers_per_topic(coordinator):
    cc, groups = client(coordinator)
    with cc, groups:
        assert groups.delete_share_group_offsets("sg", ["t", "nope", "t"]) == {
            "t": 0, "nope": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        coordinator.errors[ApiKey.DELETE_SHARE_GROUP_OFFSETS] = [ErrorCode.GROUP_ID_NOT_FOUND]
        with pytest.raises(KafkaError) as e:
            groups.delete_share_group_offsets("sg", ["t"])
        assert e.value.code == ErrorCode.GROUP_ID_NOT_FOUND
