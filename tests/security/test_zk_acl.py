"""ZooKeeper ACLs: with ``zookeeper.set.acl`` a broker puts ACLs on the znodes it creates,
so a client without its digest credentials can read the layout (lag tools can) but not
rewrite offsets, owners or the election node, nor read the SCRAM credentials."""

from __future__ import annotations

import pytest
from helpers import wait_until
from kazoo.exceptions import NoAuthError

from spark_coord.client.admin import AdminClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.producer import Producer
from spark_coord.zk import paths

DIGEST = "spark-coord:zk-s3cret"


def test_a_client_without_the_credentials_cannot_write_what_brokers_created(broker_factory, zk_connect):
    from spark_coord.consumer import Consumer
    from spark_coord.zk.client import close, connect

    b = broker_factory(0, **{"zookeeper.set.acl": True, "zookeeper.auth.digest": DIGEST})
    bootstrap = "%s:%d" % b.address
    with ClusterClient(bootstrap) as cc:
        AdminClient(cc).create_topic("acl-t", 2)
        producer = Producer(cc)
        for i in range(10):
            producer.send("acl-t", f"r{i}".encode(), partition=i % 2)
        producer.flush()
    with Consumer(bootstrap, "g-acl", topics=["acl-t"], auto_offset_reset="smallest",
                  session_timeout_ms=3000) as c:
        taken = 0
        for batch in c.batches(timeout=20):
            taken += batch.num_rows
            if taken >= 10:
                break
    offsets = "/consumers/g-acl/offsets/acl-t/0"
    stranger = connect(zk_connect, session_timeout_ms=10000, connection_timeout_ms=10000)
    owner = connect(zk_connect, session_timeout_ms=10000, connection_timeout_ms=10000, auth_digest=DIGEST)
    try:
        wait_until(lambda: stranger.exists(offsets), 20, message="the group's offsets committed")
        wait_until(lambda: stranger.exists(paths.shard_leader(0)), 20, message="shard 0 elected")
        data, _ = stranger.get(offsets)  # world-readable: lag tools read offsets without credentials
        assert int(data) > 0
        for path in (offsets, paths.shard_leader(0), paths.shard(0), paths.SHARDS, paths.coordinator(0),
                     "/brokers/ids/0", "/brokers/topics/acl-t"):
            assert stranger.exists(path), path
            with pytest.raises(NoAuthError):
                stranger.set(path, b"forged")
        with pytest.raises(NoAuthError):
            stranger.delete(offsets)
        # the brokers' own identity still may
        owner.set(offsets, data)
    finally:
        close(stranger)
        close(owner)


def test_set_acl_without_credentials_is_a_configuration_error(zk_connect):
    from spark_coord.config import ConfigError
    from spark_coord.zk.client import connect

    with pytest.raises(ConfigError, match="zookeeper.auth.digest"):
        connect(zk_connect, session_timeout_ms=10000, connection_timeout_ms=10000, set_acl=True)
