"""Golden bytes of the group requests real clients send, read by our codecs.

Each client joins a group on a scripted coordinator (``fake_kafka.OneMemberGroup``),
consumes, heartbeats, commits and leaves; its admin client lists, describes and
deletes groups and reads their offsets.  The first frame of each API is kept, as
hex with its correlation id zeroed, in ``golden/group_requests.json`` with the
client's version (regenerate with ``python tests/wire/test_wire_golden_groups.py``).

- The stored frames decode, re-encode to the same bytes, and carry what the client
  was asked to send (the consumer-protocol metadata included).
- The clients installed now are captured again: same bytes where the client version
  is the one recorded, the same content otherwise.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, when run as a script

from fake_kafka import OneMemberGroup, ScriptedBroker  # noqa: E402

from spark_coord.wire import consumer_protocol, protocol  # noqa: E402
from spark_coord.wire.registry import ApiKey, api_name  # noqa: E402

FIXTURES = Path(__file__).with_name("golden") / "group_requests.json"
TOPIC, GROUP = "golden", "golden-group"
CONSUMER_APIS = [ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT,
                 ApiKey.OFFSET_FETCH, ApiKey.OFFSET_COMMIT, ApiKey.LEAVE_GROUP]
ADMIN_APIS = [ApiKey.LIST_GROUPS, ApiKey.DESCRIBE_GROUPS, ApiKey.DELETE_GROUPS, ApiKey.OFFSET_FETCH]
CLIENT_IDS = {"confluent-kafka": "golden-rd", "kafka-python": "golden-kp", "kcat": "golden-kcat",
              "kafkajs": "golden-js"}


def normalized(frame: bytes) -> bytes:
    """The frame (after the size prefix) with its correlation id zeroed."""
    return frame[:4] + b"\x00\x00\x00\x00" + frame[8:]


def _first(broker: ScriptedBroker, keys, timeout: float = 20.0) -> dict[str, str]:
    out = {}
    for key in keys:
        _, _, frame = broker.wait_for(key, timeout)[0]
        out[api_name(key)] = normalized(frame).hex()
    return out


def _last_admin_fetch(broker: ScriptedBroker, consumer_fetches: int) -> str:
    got = broker.wait_for(ApiKey.OFFSET_FETCH, count=consumer_fetches + 1)
    return normalized(got[consumer_fetches][2]).hex()


# ------------------------------------------------------------------ captures
def capture_confluent_kafka() -> dict:
    from importlib.metadata import version

    import confluent_kafka
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    broker = ScriptedBroker(OneMemberGroup(TOPIC, [b"one", b"two"]))
    try:
        consumer = Consumer({"bootstrap.servers": broker.address, "group.id": GROUP, "client.id": "golden-rd",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False,
                             "heartbeat.interval.ms": 100, "session.timeout.ms": 6000, "log_level": 3})
        consumer.subscribe([TOPIC])
        _consume(lambda: consumer.poll(0.2), lambda m: m is not None and not m.error())
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 2, "md")], asynchronous=False)
        broker.wait_for(ApiKey.HEARTBEAT)
        consumer.close()
        frames = _first(broker, CONSUMER_APIS)
        fetches = len(broker.received(ApiKey.OFFSET_FETCH))
        admin = AdminClient({"bootstrap.servers": broker.address, "client.id": "golden-rd", "log_level": 3})
        admin.list_consumer_groups().result(20)
        for f in admin.describe_consumer_groups([GROUP]).values():
            f.result(20)
        for f in admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)]).values():
            f.result(20)
        for f in admin.delete_consumer_groups([GROUP]).values():
            f.result(20)
        admin_frames = _first(broker, ADMIN_APIS[:3])
        admin_frames["OffsetFetch"] = _last_admin_fetch(broker, fetches)
        client = f"confluent-kafka {version('confluent-kafka')} (librdkafka {confluent_kafka.libversion()[0]})"
        return {"client": client, "consumer": frames, "admin": admin_frames}
    finally:
        broker.close()


def capture_kafka_python() -> dict:
    import kafka
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata

    broker = ScriptedBroker(OneMemberGroup(TOPIC, [b"one", b"two"]))
    try:
        consumer = KafkaConsumer(TOPIC, bootstrap_servers=broker.address, group_id=GROUP, client_id="golden-kp",
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 heartbeat_interval_ms=100, session_timeout_ms=6000)
        _consume(lambda: consumer.poll(200), bool)
        consumer.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(2, "md", -1)})
        broker.wait_for(ApiKey.HEARTBEAT)
        consumer.close()
        frames = _first(broker, CONSUMER_APIS)
        fetches = len(broker.received(ApiKey.OFFSET_FETCH))
        admin = KafkaAdminClient(bootstrap_servers=broker.address, client_id="golden-kp")
        try:
            admin.list_groups()
            admin.describe_groups([GROUP])
            admin.list_group_offsets({GROUP: None})
            admin.delete_groups([GROUP])
        finally:
            admin.close()
        admin_frames = _first(broker, ADMIN_APIS[:3])
        admin_frames["OffsetFetch"] = _last_admin_fetch(broker, fetches)
        return {"client": f"kafka-python {kafka.__version__}", "consumer": frames, "admin": admin_frames}
    finally:
        broker.close()


def capture_kcat() -> dict:
    """kcat (librdkafka 2.0) as a balanced consumer with auto commit; it has no group admin."""
    broker = ScriptedBroker(OneMemberGroup(TOPIC, [b"one", b"two"]))
    try:
        proc = subprocess.Popen(["kcat", "-b", broker.address, "-G", GROUP, "-q", "-X", "client.id=golden-kcat",
                                 "-X", "auto.offset.reset=earliest", "-X", "auto.commit.interval.ms=100",
                                 "-X", "heartbeat.interval.ms=100", "-X", "session.timeout.ms=6000", TOPIC],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            broker.wait_for(ApiKey.OFFSET_COMMIT)
            broker.wait_for(ApiKey.HEARTBEAT)
        finally:
            proc.terminate()  # kcat leaves the group on SIGTERM
            out, err = proc.communicate(timeout=20)
        assert out == b"one\ntwo\n", (out, err)
        version = subprocess.run(["kcat", "-V"], capture_output=True, text=True).stdout
        words = version.replace(",", " ").split()
        lib = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "librdkafka"]
        kcat = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "Version"]
        return {"client": f"kcat {kcat[0] if kcat else '?'} (librdkafka {lib[0] if lib else '?'})",
                "consumer": _first(broker, CONSUMER_APIS)}
    finally:
        broker.close()


def capture_kafkajs() -> dict:
    from peers.kafkajs import KAFKAJS_VERSION, KafkaJS, install_kafkajs

    js = KafkaJS(install_kafkajs())
    broker = ScriptedBroker(OneMemberGroup(TOPIC, [b"one", b"two"]))
    try:
        common = {"brokers": [broker.address], "clientId": "golden-js"}
        js.run("consume", **common, topic=TOPIC, groupId=GROUP, count=2, sessionTimeout=6000, heartbeatInterval=100,
               lingerMs=500)
        frames = _first(broker, CONSUMER_APIS)
        fetches = len(broker.received(ApiKey.OFFSET_FETCH))
        js.run("list-groups", **common)
        js.run("describe-groups", **common, groupIds=[GROUP])
        js.run("fetch-offsets", **common, groupId=GROUP, topics=[TOPIC])
        js.run("delete-groups", **common, groupIds=[GROUP])
        admin_frames = _first(broker, ADMIN_APIS[:3])
        admin_frames["OffsetFetch"] = _last_admin_fetch(broker, fetches)
        return {"client": f"kafkajs {KAFKAJS_VERSION}", "consumer": frames, "admin": admin_frames}
    finally:
        broker.close()


def _consume(poll, is_record, want: int = 2, timeout: float = 30.0) -> None:
    got, deadline = 0, time.monotonic() + timeout
    while got < want and time.monotonic() < deadline:
        out = poll()
        if isinstance(out, dict):
            got += sum(len(v) for v in out.values())
        elif is_record(out):
            got += 1
    assert got >= want, f"consumed {got} of {want} records"


CAPTURES = {"confluent-kafka": capture_confluent_kafka, "kafka-python": capture_kafka_python, "kcat": capture_kcat,
            "kafkajs": capture_kafkajs}


# -------------------------------------------------------------------- checks
def check_frame(client: str, name: str, frame: bytes, admin: bool = False) -> tuple[int, dict]:
    """Decode one frame, re-encode it to the same bytes, and check what the client was asked to send."""
    header, body = protocol.decode_request(frame)
    assert api_name(header.api_key) == name and header.client_id == CLIENT_IDS[client]
    again = protocol.encode_request(header.api_key, header.api_version, 0, header.client_id, body)[4:]
    assert again == frame, f"{client} {name} v{header.api_version}: re-encoding changed the bytes"
    member = f"{CLIENT_IDS[client]}-member"
    v = header.api_version
    if name == "FindCoordinator":
        assert (body["coordinator_keys"] if v >= 4 else [body["key"]]) == [GROUP]
        assert body["key_type"] == 0
    elif name == "JoinGroup":
        assert body["group_id"] == GROUP and body["protocol_type"] == "consumer"
        assert body["session_timeout_ms"] == 6000 and body["member_id"] == ""
        for p in body["protocols"]:
            subscription = consumer_protocol.decode_subscription(p["metadata"])
            assert subscription["topics"] == [TOPIC], (p["name"], subscription)
    elif name == "SyncGroup":
        assert (body["group_id"], body["generation_id"], body["member_id"]) == (GROUP, 1, member)
        [proposal] = body["assignments"]
        assert proposal["member_id"] == member
        assigned = consumer_protocol.decode_assignment(proposal["assignment"])["assigned_partitions"]
        assert consumer_protocol.partitions_by_topic(assigned) == {TOPIC: [0]}
    elif name == "Heartbeat":
        assert (body["group_id"], body["generation_id"], body["member_id"]) == (GROUP, 1, member)
    elif name == "OffsetFetch":
        groups = body["groups"] if v >= 8 else [body]
        assert [g["group_id"] for g in groups] == [GROUP]
        if not admin:
            assert [(t["name"], t["partition_indexes"]) for t in groups[0]["topics"]] == [(TOPIC, [0])]
    elif name == "OffsetCommit":
        assert body["group_id"] == GROUP
        if v >= 1:
            assert (body["generation_id_or_member_epoch"], body["member_id"]) == (1, member)
        [t] = body["topics"]
        [p] = t["partitions"]
        assert (t["name"], p["partition_index"], p["committed_offset"]) == (TOPIC, 0, 2)
        if client not in ("kcat", "kafkajs"):  # (confluent-kafka sends the C terminator too: "md\0")
            assert p["committed_metadata"].rstrip("\x00") == "md"
    elif name == "LeaveGroup":
        members = [m["member_id"] for m in body["members"]] if v >= 3 else [body["member_id"]]
        assert body["group_id"] == GROUP and members == [member]
    elif name in ("DescribeGroups", "DeleteGroups"):
        assert body["groups" if name == "DescribeGroups" else "groups_names"] == [GROUP]
    return v, body


def _fixtures() -> dict:
    return json.loads(FIXTURES.read_text())


def _frames(entry: dict):
    for kind in ("consumer", "admin"):
        for name, hex_frame in entry.get(kind, {}).items():
            yield kind, name, bytes.fromhex(hex_frame)


FIXTURE_CASES = [(client, kind, name, frame) for client, entry in _fixtures().items()
                 for kind, name, frame in _frames(entry)]


@pytest.mark.parametrize("client,kind,name,frame", FIXTURE_CASES,
                         ids=[f"{c}-{k}-{n}" for c, k, n, _ in FIXTURE_CASES])
def test_stored_frames_decode_and_re_encode(client, kind, name, frame):
    check_frame(client, name, frame, admin=kind == "admin")


def test_every_client_sends_every_group_api():
    for client, entry in _fixtures().items():
        assert set(entry["consumer"]) == {api_name(k) for k in CONSUMER_APIS}, client
        if client != "kcat":  # kcat has no group admin
            assert set(entry["admin"]) == {api_name(k) for k in ADMIN_APIS}, client


#: The versions each recorded client sent (each API module's docstring says the same).
SENT = {
    "confluent-kafka": {"FindCoordinator": 2, "JoinGroup": 5, "SyncGroup": 3, "Heartbeat": 3, "OffsetFetch": 9,
                        "OffsetCommit": 9, "LeaveGroup": 1, "admin ListGroups": 5, "admin DescribeGroups": 5,
                        "admin DeleteGroups": 2, "admin OffsetFetch": 9},
    "kafka-python": {"FindCoordinator": 6, "JoinGroup": 7, "SyncGroup": 5, "Heartbeat": 4, "OffsetFetch": 8,
                     "OffsetCommit": 8, "LeaveGroup": 5, "admin ListGroups": 5, "admin DescribeGroups": 5,
                     "admin DeleteGroups": 2, "admin OffsetFetch": 8},
    "kafkajs": {"FindCoordinator": 2, "JoinGroup": 5, "SyncGroup": 3, "Heartbeat": 3, "OffsetFetch": 4,
                "OffsetCommit": 5, "LeaveGroup": 3, "admin ListGroups": 2, "admin DescribeGroups": 2,
                "admin DeleteGroups": 1, "admin OffsetFetch": 4},
    "kcat": {"FindCoordinator": 2, "JoinGroup": 5, "SyncGroup": 3, "Heartbeat": 3, "OffsetFetch": 7,
             "OffsetCommit": 7, "LeaveGroup": 1},
}


def test_versions_each_client_sends():
    """What each client sent when offered every version we serve; all within the served ranges."""
    for client, entry in _fixtures().items():
        sent = {("admin " if kind == "admin" else "") + name: protocol.decode_request(frame)[0].api_version
                for kind, name, frame in _frames(entry)}
        assert sent == SENT[client], client
        for what, version in sent.items():
            low, high = protocol.served_versions(getattr(ApiKey, _key_name(what.split()[-1])))
            assert low <= version <= high, (client, what, version)


def _key_name(name: str) -> str:
    import re
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name).upper()


def _installed(client: str) -> str | None:
    """Why ``client`` cannot be captured here, or None if it can."""
    if client == "kcat":
        return None if shutil.which("kcat") else "kcat is not on PATH"
    if client == "kafkajs":
        from peers.kafkajs import KafkaJSUnavailable, install_kafkajs
        try:
            install_kafkajs()
        except KafkaJSUnavailable as e:
            return str(e)
        return None
    module = {"confluent-kafka": "confluent_kafka", "kafka-python": "kafka"}[client]
    try:
        __import__(module)
    except ImportError:
        return f"{client} is not installed"
    return None


@pytest.mark.parametrize("client", sorted(CAPTURES))
def test_installed_clients_send_what_was_recorded(client):
    reason = _installed(client)
    if reason:
        pytest.skip(reason)
    stored = _fixtures()[client]
    live = CAPTURES[client]()
    same_version = live["client"] == stored["client"]
    for kind in ("consumer", "admin"):
        assert set(live.get(kind, {})) == set(stored.get(kind, {}))
        for name, hex_frame in live.get(kind, {}).items():
            frame = bytes.fromhex(hex_frame)
            check_frame(client, name, frame, admin=kind == "admin")
            if same_version:
                assert hex_frame == stored[kind][name], f"{client} {kind} {name} changed within {live['client']}"


def regenerate(clients: list[str]) -> None:
    data = _fixtures() if FIXTURES.exists() else {}
    for client in clients:
        data[client] = CAPTURES[client]()
        print(f"captured {data[client]['client']}")
    FIXTURES.parent.mkdir(exist_ok=True)
    FIXTURES.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    regenerate(sys.argv[1:] or sorted(CAPTURES))
