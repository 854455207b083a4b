"""A broker whose share partition another leader took over answers as Kafka's old leader does
(KIP-932): the acknowledgement whose write was refused gets FENCED_STATE_EPOCH and loses nothing
of the new leader's state, later fetches NOT_LEADER_OR_FOLLOWER; its other clients are served
throughout.  Before, it reloaded the znode and went on handing records out beside the new leader."""

from __future__ import annotations

import json

import pytest
from helpers import wait_until
from test_share_bad_input import GROUP, TOPIC, _ack, _acquired, _fetch, _part, _set_up

from spark_coord.client.connection import BrokerConnection
from spark_coord.errors import ErrorCode
from spark_coord.share.store import identity_of
from spark_coord.wire.registry import ApiKey
from spark_coord.zk import paths


@pytest.fixture(params=[False, True], ids=["zookeeper", "journal"])
def journal(request) -> bool:
    """The share-state journal off (acknowledgements wait for ZooKeeper) or on."""
    return request.param


@pytest.fixture
def conn(journal, broker_factory):
    broker = broker_factory(0, **{"group.share.state.journal.enable": journal})
    with BrokerConnection(*broker.address, timeout=10) as c:
        _set_up(c)
        yield c


def test_a_share_partition_taken_over_by_another_leader_is_no_longer_served_here(conn, zk, journal):
    """With the journal the acknowledgement is answered from it (the broker has not heard of the takeover
    yet: the window DESIGN.md names, which a takeover by another incarnation -- only after this one's
    ZooKeeper session is gone -- never opens) and its checkpoint is refused within the interval."""
    assert _acquired(_fetch(conn, "m1", 0)) == [(0, 9, 1)]
    path = paths.share_partition(GROUP, TOPIC, 0)
    data, stat = zk.get(path)
    doc = json.loads(data)
    # another broker took the share partition over (its takeover write: its name, the next state epoch)
    theirs = json.dumps({**doc, "writer": "7-elsewhere", "epoch": doc["epoch"] + 1}).encode()
    zk.set(path, theirs, version=stat.version)

    out = _ack(conn, "m1", 1, [{"first_offset": 0, "last_offset": 4, "acknowledge_types": [1]}])
    if not journal:
        assert _part(out)["error_code"] == ErrorCode.FENCED_STATE_EPOCH
        again = _fetch(conn, "m1", 2)
    else:
        assert _part(out)["error_code"] == ErrorCode.NONE
        epochs = iter(range(2, 1000))

        def refused():
            r = _fetch(conn, "m1", next(epochs))  # nothing to say of the partition yet: no responses
            return r if r["responses"] and _part(r)["error_code"] != ErrorCode.NONE else None

        again = wait_until(refused, 10, 0.05, "the checkpoint refused")
    assert _part(again)["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER and _acquired(again) == []
    other = _fetch(conn, "m2", 0)
    assert _part(other)["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER and _acquired(other) == []
    assert zk.get(path)[0] == theirs and identity_of(theirs) == ("7-elsewhere", doc["epoch"] + 1)
    md = conn.request(ApiKey.METADATA, {"topics": [{"name": TOPIC}]}, version=12)  # served throughout
    assert md["topics"][0]["error_code"] == 0
