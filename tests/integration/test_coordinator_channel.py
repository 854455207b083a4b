"""The member's side of the coordinator channel, against a real coordinator."""

from __future__ import annotations

import time

from helpers import wait_until

from spark_coord.consumer.channel import CoordinatorChannel
from spark_coord.errors import ErrorCode
from spark_coord.wire import coordinator as api
from testkit.zk_history import read_coordinator

GROUP, TOPIC = "g-channel", "channel"


def test_an_answer_read_while_waiting_for_a_request_ends_the_wait(cluster, czk, create):
    """A member waiting for the coordinator's next request (``receive_request``) reads the answers
    to its own requests on the way.  It kept waiting after one, until a request came or its wait
    ran out: a member leaving the group sent its final commit and then waited up to half a second
    more (every coordkafka query's stop, every thin consumer's close), however fast the answer
    came.  The wait now ends with the answer, so whoever waits on it sees it at once."""
    create(TOPIC, 2)
    # broker 0 can win the election: wait on a tuple, since the id alone is falsy then
    coordinator = wait_until(lambda: (c := read_coordinator(czk)) is not None and (c,), message="a coordinator")[0]
    channel = CoordinatorChannel(*cluster.brokers[coordinator], "channel-member", 10.0)
    try:
        answer = channel.request(api.REGISTER_CONSUMER, {
            "group_id": GROUP, "consumer_id": "c0", "topics": [{"topic": TOPIC, "streams": 1}], "pattern": None,
            "pattern_streams": 1, "auto_commit": True, "auto_offset_reset": "smallest", "session_timeout_ms": 30000})
        assert answer["error_code"] == ErrorCode.NONE
        generation = -1
        deadline = time.monotonic() + 30
        while generation < 0:
            assert time.monotonic() < deadline, "no StartFetcher from the coordinator"
            got = channel.receive_request(1.0)
            if got is None:
                continue
            header, body = got
            reply = {"error_code": 0, "consumer_id": "c0", "generation_id": body.get("generation_id", generation)}
            if header.api_key == api.START_FETCHER:
                generation = body["generation_id"]
                reply["generation_id"] = generation
            elif header.api_key in (api.PING, api.STOP_FETCHER):
                reply["offsets"] = []
            channel.respond(header, reply)
        commit = channel.send_request(api.COMMIT_OFFSETS, {
            "group_id": GROUP, "consumer_id": "c0", "generation_id": generation, "leave": False,
            "offsets": [{"topic": TOPIC, "partition": 0, "offset": 0}]})
        # pings come every 10 s (a third of the session): what ends this wait is the commit's answer
        got = channel.receive_request(25.0)
        assert got is None and commit.done(), f"the wait went on past the answer: {got}"
        assert commit.result()["error_code"] == ErrorCode.NONE
    finally:
        channel.close()
