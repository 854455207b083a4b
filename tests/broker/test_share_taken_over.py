"""A broker whose share partition another leader took over answers as Kafka's old leader does
(KIP-932): the acknowledgement whose write was refused gets FENCED_STATE_EPOCH and loses nothing
of the new leader's state, later fetches NOT_LEADER_OR_FOLLOWER; its other clients are served
throughout.  Before, it reloaded the znode and went on handing records out beside the new leader."""

from __future__ import annotations

import json

from test_share_bad_input import GROUP, TOPIC, _ack, _acquired, _fetch, _part, conn  # noqa: F401 -- fixture

from spark_coord.errors import ErrorCode
from spark_coord.share.store import identity_of
from spark_coord.wire.registry import ApiKey
from spark_coord.zk import paths


def test_a_share_partition_taken_over_by_another_leader_is_no_longer_served_here(conn, zk):  # noqa: F811
    assert _acquired(_fetch(conn, "m1", 0)) == [(0, 9, 1)]
    path = paths.share_partition(GROUP, TOPIC, 0)
    data, stat = zk.get(path)
    doc = json.loads(data)
    # another broker took the share partition over (its takeover write: its name, the next state epoch)
    theirs = json.dumps({**doc, "writer": "7-elsewhere", "epoch": doc["epoch"] + 1}).encode()
    zk.set(path, theirs, version=stat.version)

    out = _ack(conn, "m1", 1, [{"first_offset": 0, "last_offset": 4, "acknowledge_types": [1]}])
    assert _part(out)["error_code"] == ErrorCode.FENCED_STATE_EPOCH
    again = _fetch(conn, "m1", 2)
    assert _part(again)["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER and _acquired(again) == []
    other = _fetch(conn, "m2", 0)
    assert _part(other)["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER and _acquired(other) == []
    assert zk.get(path)[0] == theirs and identity_of(theirs) == ("7-elsewhere", doc["epoch"] + 1)
    md = conn.request(ApiKey.METADATA, {"topics": [{"name": TOPIC}]}, version=12)  # served throughout
    assert md["topics"][0]["error_code"] == 0
