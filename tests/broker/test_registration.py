"""Broker registration in ZooKeeper: Kafka's JSON, duplicate ids refused, re-registration
after a session expiry, deregistration on stop."""

from __future__ import annotations

import json

import pytest
from helpers import wait_until

from spark_coord.broker.registration import BrokerIdTaken
from spark_coord.zk import paths
from spark_coord.zk.testing import expire_session


def test_registration_json_and_cluster_id(broker_factory, zk):
    b = broker_factory(3)
    data, stat = zk.get(paths.broker(3))
    doc = json.loads(data)
    assert doc["port"] == b.port and doc["host"] == "127.0.0.1"
    assert doc["endpoints"] == [f"PLAINTEXT://127.0.0.1:{b.port}"]
    assert stat.ephemeralOwner == b.broker.zk.client_id[0]
    cluster = json.loads(zk.get("/cluster/id")[0])
    assert cluster["version"] == "1" and cluster["id"] == b.broker.ctx.cluster_id


def test_duplicate_live_broker_id_is_refused(broker_factory, zk):
    broker_factory(1)
    second = broker_factory(1, start=False)
    with pytest.raises(BrokerIdTaken, match="already registered by a live broker"):
        second.start()
    assert json.loads(zk.get(paths.broker(1))[0])["port"] != second.broker.bound_port


def test_reregisters_after_session_expiry(broker_factory, zk):
    b = broker_factory(2)
    old_session = b.broker.zk.client_id[0]
    expire_session(b.broker.zk)
    def registered_anew():
        stat = zk.exists(paths.broker(2))
        return stat is not None and stat.ephemeralOwner not in (0, old_session)
    wait_until(registered_anew, timeout=20, message="broker 2 re-registered with a new session")
    assert json.loads(zk.get(paths.broker(2))[0])["port"] == b.port
    # the view healed too: the broker still sees itself and serves Metadata
    wait_until(lambda: 2 in b.broker.view.brokers, timeout=10, message="broker sees itself again")


def test_stop_deregisters(broker_factory, zk):
    b = broker_factory(4)
    assert zk.exists(paths.broker(4))
    b.stop()
    assert zk.exists(paths.broker(4)) is None


def test_stop_without_a_zookeeper_connection_gives_up_on_the_znodes_instead_of_hanging(broker_factory, zk_connect,
                                                                                       zk):
    import time

    from spark_coord.zk.client import split_chroot
    from spark_coord.zk.testing import CuttableProxy

    hosts, chroot = split_chroot(zk_connect)
    with CuttableProxy.to(hosts) as proxy:
        b = broker_factory(5, **{"zookeeper.connect": f"{proxy.address}{chroot}"})
        coordination = b.broker.coordination
        wait_until(lambda: 0 in coordination.shards and coordination.shards[0].elected, 10,
                   message="the broker to coordinate shard 0")
        elector = coordination.shards[0].elector
        assert zk.exists(paths.broker(5))
        proxy.cut()
        wait_until(lambda: elector.suspended, 10, message="the broker to see its connection drop")
        t0 = time.monotonic()
        b.stop()
        took = time.monotonic() - t0
    assert took < 5, f"stopping took {took:.1f} s"
    # its session (4 s) expires on the server, taking the registrations and the election node along
    wait_until(lambda: zk.exists(paths.broker(5)) is None and zk.exists(paths.shard_leader(0)) is None
               and zk.exists(paths.coordinator(5)) is None, 15,
               message="the znodes to go with the session")


def test_a_failed_re_registration_is_tried_again_on_the_same_session(broker_factory, zk_connect, zk, caplog):
    """Found by the network nemesis: a broker whose re-registration after a session expiry
    failed stayed out of /brokers/ids for minutes, as kazoo's later reconnects resumed the same
    session.  Here the failure is a live broker holding the id when the broker comes back (its
    session expired behind a cut); once that one goes, the broker registers again by itself."""
    import logging
    import socket

    from spark_coord.zk import model
    from spark_coord.zk.client import split_chroot
    from spark_coord.zk.testing import CuttableProxy

    caplog.set_level(logging.WARNING, logger="spark_coord.broker.registration")
    hosts, chroot = split_chroot(zk_connect)
    with CuttableProxy.to(hosts) as proxy, socket.create_server(("127.0.0.1", 0)) as other:
        b = broker_factory(6, **{"zookeeper.connect": f"{proxy.address}{chroot}"})
        old_session = b.broker.zk.client_id[0]
        proxy.cut()
        wait_until(lambda: zk.exists(paths.broker(6)) is None, 20, message="the broker's session to expire")
        # another broker, live at another address, takes the id while this one is away
        zk.create(paths.broker(6), model.broker_registration(6, "127.0.0.1", other.getsockname()[1]), ephemeral=True)
        proxy.restore()
        wait_until(lambda: any("re-registration failed" in r.getMessage() for r in caplog.records), 20,
                   message="the broker's re-registration on its new session to fail")
        new_session = b.broker.zk.client_id[0]
        assert new_session != old_session and not b.broker.registration.registered
        zk.delete(paths.broker(6))  # the other broker goes

        def ours():
            stat = zk.exists(paths.broker(6))
            return stat is not None and stat.ephemeralOwner == b.broker.zk.client_id[0]

        wait_until(ours, 20, message="the broker to register again by itself")
        assert json.loads(zk.get(paths.broker(6))[0])["port"] == b.port
