"""A scripted Kafka-protocol server for tests: real sockets, our codec, answers from a function.

``ScriptedBroker(handler)`` listens on a free loopback port, records every request
frame, answers ApiVersions with ``api_keys`` (default: the whole wire registry, so
clients negotiate the group APIs too) and every other request with
``handler(broker, header, body)``: a response body dict, raw bytes, or None to
close that connection.  A request the registry cannot decode closes its connection.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Callable

from helpers import read_exactly

from spark_coord.wire import protocol
from spark_coord.wire.protocol import RequestHeader, UnsupportedRequest
from spark_coord.wire.registry import ApiKey

Handler = Callable[["ScriptedBroker", RequestHeader, dict], "dict | bytes | None"]


class ScriptedBroker:
    def __init__(self, handler: Handler, api_keys: list[dict] | None = None, node_id: int = 0):
        self.handler = handler
        # by default what our brokers serve but Kafka 4's consumer group APIs (no script here answers
        # them, and a client offered them prefers them: confluent-kafka's admin describes groups with them)
        self.api_keys = [row for row in protocol.api_versions_table() if row["api_key"] not in (
            ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE)] if api_keys is None else api_keys
        self.node_id = node_id
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.log: list[tuple[bytes, RequestHeader | None, dict | None]] = []  # frame, decoded header and body
        self.cond = threading.Condition()
        self.stopped = False
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name=f"scripted-broker-{self.port}").start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def broker_entry(self) -> dict:
        """This server as a Metadata ``brokers`` element."""
        return {"node_id": self.node_id, "host": "127.0.0.1", "port": self.port, "rack": None}

    def _accept(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.cond:
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                while not self.stopped:
                    size = struct.unpack(">i", read_exactly(conn, 4))[0]
                    frame = read_exactly(conn, size)
                    try:
                        header, body = protocol.decode_request(frame)
                    except UnsupportedRequest as e:
                        self._record(frame, None, None)
                        if e.header.api_key != ApiKey.API_VERSIONS:
                            return
                        conn.sendall(b"".join(protocol.encode_api_versions_fallback(e.header.correlation_id,
                                                                                    self.api_keys)))
                        continue
                    self._record(frame, header, body)
                    if header.api_key == ApiKey.API_VERSIONS:
                        out = {"api_keys": self.api_keys}
                    else:
                        out = self.handler(self, header, body)
                    if out is None:
                        return
                    conn.sendall(out if isinstance(out, bytes) else b"".join(protocol.encode_response(header, out)))
            except (EOFError, OSError):
                return

    def _record(self, frame: bytes, header: RequestHeader | None, body: dict | None) -> None:
        with self.cond:
            self.log.append((frame, header, body))
            self.cond.notify_all()

    def received(self, api_key: int) -> list[tuple[RequestHeader, dict, bytes]]:
        """Every decoded request with ``api_key`` so far, with its frame (after the size prefix)."""
        with self.cond:
            return [(h, b, f) for f, h, b in self.log if h is not None and h.api_key == api_key]

    def wait_for(self, api_key: int, timeout: float = 20.0, count: int = 1) -> list[tuple[RequestHeader, dict, bytes]]:
        """Wait until ``count`` requests with ``api_key`` arrived; returns them."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                got = self.received(api_key)
                if len(got) >= count:
                    return got
                left = deadline - time.monotonic()
                assert left > 0, (f"{count} request(s) with api key {api_key} did not arrive; got keys "
                                  f"{[struct.unpack('>h', f[:2])[0] for f, _, _ in self.log]}")
                self.cond.wait(left)

    def close(self) -> None:
        self.stopped = True
        self.sock.close()
        with self.cond:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()


class OneMemberGroup:
    """A handler for ``ScriptedBroker``: one broker that leads a one-partition topic holding
    ``records`` and coordinates every group, far enough for a real consumer to join a
    group, get the partition, fetch, heartbeat, commit and leave.

    Each JoinGroup without a member id gets MEMBER_ID_REQUIRED (v4+, KIP-394) with
    ``<client id>-member``; the member is made the leader of generation 1, and SyncGroup
    answers with the whole partition (the leader's own proposal is recorded, not used).
    Offsets are not stored: OffsetFetch answers "nothing committed".  ListGroups lists
    ``golden-group``, DescribeGroups describes any group as empty, DeleteGroups deletes any.
    """

    def __init__(self, topic: str, records: list[bytes]):
        from spark_coord.records.builder import BatchBuilder

        self.topic = topic
        builder = BatchBuilder()
        for value in records:
            builder.append(value, timestamp_ms=1_700_000_000_000)
        self.batch = builder.build() if records else b""
        self.end = len(records)

    def __call__(self, broker: ScriptedBroker, header: RequestHeader, body: dict):
        from spark_coord.errors import ErrorCode
        from spark_coord.wire import consumer_protocol as cp

        key, v = header.api_key, header.api_version
        if key == ApiKey.METADATA:
            return {"brokers": [broker.broker_entry()], "cluster_id": "scripted", "controller_id": broker.node_id,
                    "topics": [{"name": self.topic, "error_code": 0, "partitions": [
                        {"partition_index": 0, "leader_id": broker.node_id, "leader_epoch": 0,
                         "replica_nodes": [broker.node_id], "isr_nodes": [broker.node_id]}]}]}
        if key == ApiKey.FIND_COORDINATOR:
            me = {"error_code": 0, "node_id": broker.node_id, "host": "127.0.0.1", "port": broker.port}
            return {"coordinators": [dict(me, key=k) for k in body["coordinator_keys"]]} if v >= 4 else me
        if key == ApiKey.JOIN_GROUP:
            if not body["member_id"] and v >= 4:
                return {"error_code": ErrorCode.MEMBER_ID_REQUIRED, "member_id": f"{header.client_id}-member"}
            member = body["member_id"] or f"{header.client_id}-member"
            protocol = body["protocols"][0]
            return {"error_code": 0, "generation_id": 1, "protocol_type": body["protocol_type"],
                    "protocol_name": protocol["name"], "leader": member, "member_id": member,
                    "members": [{"member_id": member, "group_instance_id": body["group_instance_id"],
                                 "metadata": protocol["metadata"]}]}
        if key == ApiKey.SYNC_GROUP:
            assignment = cp.encode_assignment({"assigned_partitions": [{"topic": self.topic, "partitions": [0]}]})
            return {"error_code": 0, "protocol_type": body["protocol_type"], "protocol_name": body["protocol_name"],
                    "assignment": assignment}
        if key == ApiKey.HEARTBEAT:
            return {"error_code": 0}
        if key == ApiKey.OFFSET_FETCH:
            def topics(requested):
                return [{"name": t["name"], "partitions": [
                    {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": 0}
                    for p in t["partition_indexes"]]} for t in requested or []]
            if v >= 8:
                return {"groups": [{"group_id": g["group_id"], "topics": topics(g["topics"])} for g in body["groups"]]}
            return {"topics": topics(body["topics"])}
        if key == ApiKey.LIST_OFFSETS:
            return {"topics": [{"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": 0, "timestamp": -1,
                 "offset": 0 if p["timestamp"] == -2 else self.end, "old_style_offsets": [0], "leader_epoch": 0}
                for p in t["partitions"]]} for t in body["topics"]]}
        if key == ApiKey.FETCH:
            parts = []
            for t in body["topics"]:
                for p in t["partitions"]:
                    data = self.batch if p["fetch_offset"] == 0 else b""
                    parts.append((t["topic"], {"partition_index": p["partition"], "error_code": 0,
                                               "high_watermark": self.end, "last_stable_offset": self.end,
                                               "log_start_offset": 0, "records": data}))
            if not any(p["records"] for _, p in parts):
                time.sleep(min(body["max_wait_ms"], 200) / 1000)  # a long poll, briefly
            return {"responses": [{"topic": t, "partitions": [p]} for t, p in parts]}
        if key == ApiKey.OFFSET_COMMIT:
            return {"topics": [{"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": 0} for p in t["partitions"]]}
                for t in body["topics"]]}
        if key == ApiKey.LIST_GROUPS:
            return {"groups": [{"group_id": "golden-group", "protocol_type": "consumer", "group_state": "Stable",
                                "group_type": "classic"}]}
        if key == ApiKey.DESCRIBE_GROUPS:
            return {"groups": [{"group_id": g, "group_state": "Empty", "protocol_type": "consumer"}
                               for g in body["groups"]]}
        if key == ApiKey.DELETE_GROUPS:
            return {"results": [{"group_id": g, "error_code": 0} for g in body["groups_names"]]}
        if key == ApiKey.LEAVE_GROUP:
            return {"error_code": 0, "members": [{"member_id": m["member_id"],
                                                  "group_instance_id": m["group_instance_id"], "error_code": 0}
                                                 for m in body["members"]]}
        return None
