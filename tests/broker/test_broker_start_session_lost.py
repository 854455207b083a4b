"""A broker whose ZooKeeper session is lost while it starts starts again instead of dying.

Found by the network nemesis (``bench/nemesis.py``, seed 22): a broker restarted while its links
were being cut had its ZooKeeper session expire between its registration and the coordinator's
watches; ``Broker.start`` raised ``SessionExpiredError`` and the process exited with a traceback.
Nothing restarted it, so its partitions had no leader for the rest of the run.  ``start_broker``
(what ``spark-coord broker`` runs) now starts a new ``Broker`` after such a loss, with backoff; a
ZooKeeper that cannot be reached at all is still a clear error.
"""

from __future__ import annotations

import asyncio

import pytest
from helpers import TEST_BROKER_DEFAULTS
from kazoo.exceptions import SessionExpiredError

from spark_coord import config
from spark_coord.broker import main
from spark_coord.broker.coordination import CoordinationService
from spark_coord.zk import paths


def _cfg(zk_connect: str, tmp_path, **extra):
    settings = {"broker.id": 7, "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "logs"),
                "zookeeper.connect": zk_connect, "zookeeper.session.timeout.ms": 4000, **TEST_BROKER_DEFAULTS}
    settings.update(extra)
    return config.load(config.BROKER, None, settings)


def test_a_session_lost_while_starting_starts_the_broker_again(zk_connect, zk, tmp_path, monkeypatch):
    real = CoordinationService.start
    calls = []

    async def start(self):
        calls.append(self)
        if len(calls) <= 2:
            raise SessionExpiredError()   # what kazoo raises mid-start when the session expired
        return await real(self)

    monkeypatch.setattr(CoordinationService, "start", start)

    async def body():
        broker = await main.start_broker(_cfg(zk_connect, tmp_path))
        try:
            assert broker.started
            assert zk.exists(paths.broker(7)) is not None
            host, port = broker.advertised
            _, writer = await asyncio.open_connection(host, port)
            writer.close()
        finally:
            await broker.stop()

    asyncio.run(body())
    assert len(calls) == 3 and len({id(c) for c in calls}) == 3   # a new broker each time


def test_an_unreachable_zookeeper_is_still_an_error(tmp_path):
    from spark_coord.zk.client import ZooKeeperUnavailable

    cfg = _cfg("127.0.0.1:1", tmp_path, **{"zookeeper.connection.timeout.ms": 1000})
    with pytest.raises(ZooKeeperUnavailable):
        asyncio.run(main.start_broker(cfg))
