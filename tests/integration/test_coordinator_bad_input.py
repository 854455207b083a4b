"""Hostile and wrong input to the coordinator APIs over raw sockets: the broker keeps
serving, the right error codes come back, and the coordinator's state stays intact."""

from __future__ import annotations

import socket
import struct
import time

from helpers import wait_until
from support import committed

from spark_coord.consumer.channel import CoordinatorChannel
from spark_coord.errors import ErrorCode
from spark_coord.wire import coordinator as api
from spark_coord.wire import protocol
from testkit.zk_history import read_coordinator

GROUP, TOPIC = "g-raw", "raw"


def _register_body(consumer_id: str, session_ms: int = 3000) -> dict:
    return {"group_id": GROUP, "consumer_id": consumer_id, "topics": [{"topic": TOPIC, "streams": 1}],
            "pattern": None, "pattern_streams": 1, "auto_commit": True, "auto_offset_reset": "smallest",
            "session_timeout_ms": session_ms}


class RawMember:
    """A member driven by hand: answers StopFetcher/StartFetcher, and Ping with what the test asks."""

    def __init__(self, address, consumer_id: str):
        self.consumer_id = consumer_id
        self.channel = CoordinatorChannel(*address, "raw-member", 10.0)
        self.generation = -1
        self.assigned: list[tuple[str, int]] = []
        self.ping_answer = lambda body: {"error_code": 0, "consumer_id": consumer_id,
                                         "generation_id": self.generation, "offsets": []}
        self.pings = 0

    def register(self) -> dict:
        return self.channel.request(api.REGISTER_CONSUMER, _register_body(self.consumer_id))

    def serve(self, until, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not until():
            assert time.monotonic() < deadline, "the coordinator did not get there in time"
            got = self.channel.receive_request(0.2)
            if got is None:
                continue
            header, body = got
            if header.api_key == api.STOP_FETCHER:
                self.channel.respond(header, {"error_code": 0, "consumer_id": self.consumer_id,
                                              "generation_id": self.generation, "offsets": []})
            elif header.api_key == api.START_FETCHER:
                self.generation = body["generation_id"]
                self.assigned = [(p["topic"], p["partition"]) for o in body["ownership"] for p in o["partitions"]]
                self.channel.respond(header, {"error_code": 0, "consumer_id": self.consumer_id,
                                              "generation_id": self.generation})
            elif header.api_key == api.PING:
                self.pings += 1
                self.channel.respond(header, self.ping_answer(body))


def _describe(address) -> dict:
    ch = CoordinatorChannel(*address, "describe", 10.0)
    try:
        resp = ch.request(api.DESCRIBE_GROUPS, {"group_ids": [GROUP]})
    finally:
        ch.close()
    assert resp["error_code"] == 0
    return resp["groups"][0]


def _serves(address) -> bool:
    ch = CoordinatorChannel(*address, "check", 10.0)
    try:
        return ch.request(api.CLUSTER_METADATA, {})["error_code"] == 0
    finally:
        ch.close()


def _closed_by_peer(sock: socket.socket, timeout: float = 10.0) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_bad_input_to_the_coordinator(cluster, czk, create):
    create(TOPIC, 2)
    coordinator = wait_until(lambda: (c := read_coordinator(czk)) is not None and (c,), message="a coordinator")[0]
    address = cluster.brokers[coordinator]

    # malformed frames: each closes only its own connection
    frames = [
        struct.pack(">i", 4) + b"\x03\xe9\x00",                                  # size says 4, header cut short
        struct.pack(">i", 0x7FFFFFF0),                                          # size above the maximum
        protocol.encode_request(api.REGISTER_CONSUMER, 0, 1, "x", _register_body("m"))[:-7],  # truncated body
    ]
    for raw in frames:
        frame = b"".join(bytes(p) for p in raw) if isinstance(raw, list) else raw
        with socket.create_connection(address, timeout=10) as s:
            s.sendall(frame)
            if len(frame) > 4 and struct.unpack(">i", frame[:4])[0] > len(frame) - 4:
                s.shutdown(socket.SHUT_WR)  # the rest never comes
            assert _closed_by_peer(s)
        assert _serves(address)
    # a body that lies about an array count
    body = bytearray(b"".join(bytes(p) for p in protocol.encode_request(api.DESCRIBE_GROUPS, 0, 7, "x",
                                                                         {"group_ids": []})))
    body[-4:] = struct.pack(">i", 1_000_000)
    with socket.create_connection(address, timeout=10) as s:
        s.sendall(bytes(body))
        assert _closed_by_peer(s)
    assert _serves(address)

    # a registered raw member
    member = RawMember(address, "raw-1")
    assert member.register()["error_code"] == ErrorCode.NONE
    member.serve(lambda: member.generation >= 0 and member.assigned)
    gen = member.generation

    # duplicate consumer id, too-small session timeout, unknown group name characters
    other = CoordinatorChannel(*address, "dup", 10.0)
    try:
        assert other.request(api.REGISTER_CONSUMER, _register_body("raw-1"))["error_code"] == \
            ErrorCode.CONSUMER_ID_ALREADY_REGISTERED
    finally:
        other.close()
    small = CoordinatorChannel(*address, "small", 10.0)
    try:
        assert small.request(api.REGISTER_CONSUMER, _register_body("raw-2", session_ms=200))["error_code"] == \
            ErrorCode.SESSION_TIMEOUT_TOO_SMALL
    finally:
        small.close()

    # answers for an unknown consumer, and offsets of a stale generation: ignored / refused
    tp = member.assigned[0]
    member.ping_answer = lambda body: {"error_code": 0, "consumer_id": "ghost", "generation_id": member.generation,
                                       "offsets": [{"topic": tp[0], "partition": tp[1], "offset": 3}]}
    before = member.pings
    member.serve(lambda: member.pings >= before + 1)  # one only: a misaddressed answer is no answer, and
    #                                                  unanswered pings fail the member (max.ping.retries)
    member.ping_answer = lambda body: {"error_code": 0, "consumer_id": member.consumer_id,
                                       "generation_id": gen - 1,
                                       "offsets": [{"topic": tp[0], "partition": tp[1], "offset": 5}]}
    before = member.pings
    member.serve(lambda: member.pings >= before + 3)
    # three pings span 2 s; the committer runs every 200 ms, so a wrongly taken offset would be in ZooKeeper
    assert tp not in committed(czk, GROUP), "offsets of an unknown consumer or a stale generation were committed"
    d = _describe(address)
    assert d["generation_id"] == gen and [m["consumer_id"] for m in d["members"]] == ["raw-1"]

    # the same answer with the right generation is taken (the control)
    member.ping_answer = lambda body: {"error_code": 0, "consumer_id": member.consumer_id,
                                       "generation_id": member.generation,
                                       "offsets": [{"topic": tp[0], "partition": tp[1], "offset": 5}]}
    member.serve(lambda: committed(czk, GROUP).get(tp) == 5)
    d = _describe(address)
    assert d["generation_id"] == gen and [m["consumer_id"] for m in d["members"]] == ["raw-1"]
    member.channel.close()
