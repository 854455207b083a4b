"""An in-test coordinator: a socket server thread speaking the coordinator protocol with
our wire codec.  It answers ClusterMetadata and RegisterConsumer by itself; after a
successful registration the connection becomes a ``Session`` the test drives: it
sends Ping / StopFetcher / StartFetcher and reads the member's answers, and it reads
the member's own requests (CommitOffsets) and answers them when the test says so."""

from __future__ import annotations

import queue
import socket
import struct
import threading

from spark_coord.errors import ErrorCode
from spark_coord.wire import coordinator as api
from spark_coord.wire import protocol
from spark_coord.wire.protocol import RequestHeader


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed")
        buf += chunk
    return bytes(buf)


def _read_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
    return _recv_exactly(sock, size)


class Session:
    """A registered member's connection, driven by the test."""

    def __init__(self, sock: socket.socket, registration: dict):
        self.sock = sock
        self.registration = registration
        self.consumer_id = registration["consumer_id"]
        self._corr = api.correlation_ids()
        self._versions: dict[int, int] = {}
        #: Requests the member sent (CommitOffsets), waiting for the test: (header, body).
        self.member_requests: "queue.Queue[tuple[RequestHeader, dict]]" = queue.Queue()

    def send(self, api_key: int, body: dict, version: int = 0) -> int:
        cid = next(self._corr)
        self.sock.sendall(protocol.encode_request(api_key, version, cid, "coordinator", body))
        self._versions[cid] = version
        return cid

    def _next_frame(self, timeout: float) -> bytes:
        self.sock.settimeout(timeout)
        return _read_frame(self.sock)

    def answer(self, api_key: int, cid: int, timeout: float = 5.0) -> dict:
        """The member's answer to our request ``cid``; its own requests meanwhile are queued."""
        while True:
            frame = self._next_frame(timeout)
            if api.is_response_frame(frame):
                break
            self.member_requests.put(protocol.decode_request(frame))
        got, body = protocol.decode_response(api_key, self._versions.pop(cid, 0), frame)
        assert got == cid, f"answer carries correlation id {got}, expected {cid}"
        return body

    def member_request(self, timeout: float = 5.0) -> tuple[RequestHeader, dict]:
        """The member's next own request (reading the connection until one arrives)."""
        try:
            return self.member_requests.get_nowait()
        except queue.Empty:
            pass
        frame = self._next_frame(timeout)
        assert not api.is_response_frame(frame), "expected a request from the member"
        return protocol.decode_request(frame)

    def reply(self, header: RequestHeader, body: dict) -> None:
        self.sock.sendall(b"".join(protocol.encode_response(header, body)))

    def commit_answer(self, header: RequestHeader, request: dict, code: int = 0) -> None:
        """Answer a CommitOffsets: every partition ``code``."""
        self.reply(header, {"error_code": 0, "partitions": [
            {"topic": o["topic"], "partition": o["partition"], "error_code": code} for o in request["offsets"]]})

    def call(self, api_key: int, body: dict, timeout: float = 5.0, version: int = 0) -> dict:
        return self.answer(api_key, self.send(api_key, body, version), timeout)

    def ping(self, epoch: int, generation: int = -1, retries: int = 0, **kw) -> dict:
        return self.call(api.PING, {"coordinator_epoch": epoch, "generation_id": generation,
                                    "consumer_id": kw.get("consumer_id", self.consumer_id), "num_retries": retries})

    def stop_fetcher(self, epoch: int, generation: int, partitions=None) -> dict:
        """StopFetcher: v0 (everything), or v1 naming ``partitions`` [(topic, partition)]."""
        body = {"coordinator_epoch": epoch, "generation_id": generation, "consumer_id": self.consumer_id}
        if partitions is None:
            return self.call(api.STOP_FETCHER, body)
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(partitions):
            by_topic.setdefault(t, []).append(p)
        body["partitions"] = [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]
        return self.call(api.STOP_FETCHER, body, version=1)

    def start_fetcher(self, epoch: int, generation: int, partitions: dict, brokers=(), thread: str | None = None,
                      timeout: float = 5.0, version: int = 0) -> dict:
        ownership = [{"consumer_thread_id": thread or f"{self.consumer_id}-0",
                      "partitions": [{"topic": t, "partition": p, "offset": o} for (t, p), o in partitions.items()]}]
        return self.call(api.START_FETCHER, {"coordinator_epoch": epoch, "generation_id": generation,
                                             "consumer_id": self.consumer_id, "ownership": ownership,
                                             "brokers": [{"node_id": i, "host": h, "port": p}
                                                         for i, (h, p) in brokers]}, timeout, version)

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionError:
            return True

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class FakeCoordinator:
    """Listens on a free port; ``sessions`` receives a ``Session`` per successful registration."""

    def __init__(self, epoch: int = 7, coordinator_id: int = 0):
        self.epoch = epoch
        self.coordinator_id = coordinator_id
        self.register_errors: list[int] = []          # popped one per RegisterConsumer
        self.accept_claims = True                     # answer a claim with its generation (taken back)
        self.metadata_requests = 0
        self.registrations: list[dict] = []
        self.groups: list[dict] = []                  # the DescribeGroups answer
        self.sessions: "queue.Queue[Session]" = queue.Queue()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._socks: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="fake-coordinator", daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    def next_session(self, timeout: float = 10.0) -> Session:
        return self.sessions.get(timeout=timeout)

    def close(self) -> None:
        self._server.close()
        for s in self._socks:
            try:
                s.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._server.accept()
            except OSError:
                return
            self._socks.append(sock)
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        try:
            while True:
                header, body = protocol.decode_request(_read_frame(sock))
                if header.api_key == api.CLUSTER_METADATA:
                    self.metadata_requests += 1
                    self._respond(sock, header, {"error_code": 0, "coordinator_id": self.coordinator_id,
                                                 "coordinator_epoch": self.epoch,
                                                 "brokers": [{"node_id": self.coordinator_id, "host": "127.0.0.1",
                                                              "port": self.port}]})
                elif header.api_key == api.REGISTER_CONSUMER:
                    self.registrations.append(body)
                    code = self.register_errors.pop(0) if self.register_errors else ErrorCode.NONE
                    generation = body["generation_id"] if self.accept_claims else -1
                    self._respond(sock, header, {"error_code": code, "coordinator_epoch": self.epoch,
                                                 "error_message": "refused by the test" if code else None,
                                                 "generation_id": generation})
                    if code == ErrorCode.NONE:
                        self.sessions.put(Session(sock, body))
                        return  # the test drives this connection from now on (do not close it)
                elif header.api_key == api.DESCRIBE_GROUPS:
                    wanted = set(body["group_ids"])
                    self._respond(sock, header, {"error_code": 0, "groups": [
                        g for g in self.groups if not wanted or g["group_id"] in wanted]})
                else:
                    break  # not a coordinator API: close, as a broker does
        except (ConnectionError, OSError, protocol.ProtocolError, protocol.UnsupportedRequest):
            pass
        sock.close()

    @staticmethod
    def _respond(sock: socket.socket, header: RequestHeader, body: dict) -> None:
        sock.sendall(b"".join(protocol.encode_response(header, body)))


class RecordingMember:
    """A ``Member`` that records the connector's calls and reports fixed offsets."""

    def __init__(self, offsets: list[dict] | None = None):
        self.offsets = offsets if offsets is not None else []
        self.events: list[tuple] = []
        self.lease_until = 0.0
        self.lock = threading.Lock()

    def report_offsets(self) -> list[dict]:
        with self.lock:
            self.events.append(("report",))
            return list(self.offsets)

    def stop_fetchers(self, partitions=None):
        with self.lock:
            if partitions is None:
                self.events.append(("stop",))
                return None
            self.events.append(("stop", set(partitions)))
            return [o for o in self.offsets if (o["topic"], o["partition"]) in partitions]

    def start_fetchers(self, generation_id, assignment, threads, brokers) -> None:
        with self.lock:
            self.events.append(("start", generation_id, dict(assignment), dict(threads), dict(brokers)))

    def connection_lost(self) -> None:
        with self.lock:
            self.events.append(("lost",))

    def resume_fetchers(self) -> None:
        with self.lock:
            self.events.append(("resume",))

    def renew_lease(self, until: float) -> None:
        with self.lock:
            self.lease_until = until

    def names(self) -> list[str]:
        with self.lock:
            return [e[0] for e in self.events]
