"""The standalone coordinator beside a secured data cluster: our brokers with SSL, SASL_PLAINTEXT or
SASL_SSL listeners (SCRAM users in their ZooKeeper), the coordinator in a ZooKeeper of its own with
the data cluster's client security settings (``-X``, ``--command-config`` or ``kafka.*`` keys).

Members (thin consumers, and ``spark-coord consume -X ...``, with one set of client settings for the
data cluster and the coordinator's listener of the same protocol) read everything through it;
offsets land in the coordinator's ZooKeeper and, mirrored, in the data cluster's own offset store
(OffsetFetch by confluent-kafka over the secured listener shows them); the lag reader's ListOffsets
reach both data brokers (the lag exported is the log end minus the committed offset).  A refused
log-in or an untrusted certificate is logged as such and the coordinator keeps trying (served once
the password is right); a bad setting stops it at start, naming the key.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid

import pytest
from helpers import fresh_chroot, group_offsets, wait_until

from spark_coord.consumer import Consumer
from testkit.coordinator_process import CoordinatorProcess

PARTITIONS = 4
USER, PASSWORD = "alice", "alice-s3cret-pw"


def set_password(zk_connect: str, password: str = PASSWORD) -> None:
    """SCRAM credentials of ``USER`` (both mechanisms) in that ZooKeeper; running brokers pick them up at once."""
    from spark_coord.security.credentials import UserStore
    from spark_coord.zk.client import close, connect

    zk = connect(zk_connect)
    try:
        UserStore(zk).set_password(USER, password)
    finally:
        close(zk)


def client_settings(protocol: str, mechanism: str | None, pki, password: str = PASSWORD) -> dict[str, str]:
    """Client keys as every client here takes them (and librdkafka: confluent-kafka reads the same)."""
    out = {"security.protocol": protocol}
    if protocol.startswith("SASL"):
        out.update({"sasl.mechanism": mechanism, "sasl.username": USER, "sasl.password": password})
    if protocol.endswith("SSL"):
        out["ssl.ca.location"] = str(pki.ca_path)
    return out


def listener_settings(protocol: str, mechanism: str | None, server_cert, port: int = 0) -> dict:
    """A broker's or a coordinator's listener of ``protocol`` (beside PLAINTEXT for a broker)."""
    out = {"ssl.keystore.location": str(server_cert.keystore)}
    if mechanism:
        out["sasl.enabled.mechanisms"] = mechanism
    return out


class DataCluster:
    """Two of our brokers with a ``protocol`` listener beside PLAINTEXT, and their own coordinator
    (so they keep offsets of their own: the mirror's destination)."""

    def __init__(self, broker_factory, zk_connect, protocol, mechanism, server_cert):
        set_password(zk_connect)
        self.brokers = [broker_factory(i, listeners=f"PLAINTEXT://127.0.0.1:0,{protocol}://127.0.0.1:0",
                                       **listener_settings(protocol, mechanism, server_cert),
                                       **{"num.partitions": PARTITIONS})
                        for i in range(2)]
        self.bootstrap = ",".join(f"127.0.0.1:{b.broker.bound_ports[protocol]}" for b in self.brokers)
        self.zk_connect = zk_connect


def create_and_produce(bootstrap: str, settings: dict, n: int) -> str:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"sec-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **settings})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(timeout=30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **settings})
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0
    return topic


def mirrored(bootstrap: str, settings: dict, group: str, topic: str) -> dict[int, int]:
    """The group's offsets in the data cluster's own store: OffsetFetch by confluent-kafka over the secured listener."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **settings})
    [future] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    return {tp.partition: tp.offset for tp in future.result(timeout=20).topic_partitions
            if tp.topic == topic and tp.offset >= 0}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape_lag(port: int, group: str) -> dict[int, float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {int(s.labels["partition"]): s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "kafka_consumergroup_lag" and s.labels.get("consumergroup") == group}


def start_coordinator(cluster: DataCluster, coordinator_zk: str, workdir, protocol, mechanism, server_cert,
                      data_settings: dict, how: str, **overrides) -> CoordinatorProcess:
    """A coordinator whose own listener speaks ``protocol`` too (members use one set of settings for
    both), given the data cluster's settings ``how``: -X, --command-config or kafka.* overrides."""
    args: list[str] = []
    if how == "-X":
        for k, v in data_settings.items():
            args += ["-X", f"{k}={v}"]
    elif how == "--command-config":
        path = workdir / "data-cluster.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in data_settings.items()))
        args += ["--command-config", str(path)]
    else:
        overrides.update({f"kafka.{k}": v for k, v in data_settings.items()})
    port = free_port()
    return CoordinatorProcess(1001, cluster.bootstrap, coordinator_zk, workdir, port=port, args=tuple(args),
                              listeners=f"{protocol}://127.0.0.1:{port}",
                              **listener_settings(protocol, mechanism, server_cert), **overrides)


CASES = [  # protocol, mechanism, how the coordinator is given the data cluster's settings
    pytest.param("SASL_SSL", "SCRAM-SHA-512", "-X", id="SASL_SSL-SCRAM-SHA-512"),
    pytest.param("SSL", None, "kafka.*", id="SSL"),
    pytest.param("SASL_PLAINTEXT", "SCRAM-SHA-256", "--command-config", id="SASL_PLAINTEXT-SCRAM-SHA-256"),
]


@pytest.mark.parametrize("protocol,mechanism,how", CASES)
def test_members_read_everything_through_a_coordinator_beside_a_secured_cluster(
        broker_factory, zk_connect, zookeeper, pki, server_cert, tmp_path, protocol, mechanism, how):
    n, group = 200, f"sec-g-{uuid.uuid4().hex[:6]}"
    cluster = DataCluster(broker_factory, zk_connect, protocol, mechanism, server_cert)
    settings = client_settings(protocol, mechanism, pki)
    topic = create_and_produce(cluster.bootstrap, settings, n)
    coordinator_zk = fresh_chroot(zookeeper, "sec-coord")
    set_password(coordinator_zk)  # the coordinator's own SASL listener checks its own ZooKeeper's users
    metrics_port = free_port()
    coordinator = start_coordinator(cluster, coordinator_zk, tmp_path, protocol, mechanism, server_cert, settings,
                                    how, **{"coordinator.offsets.mirror": True, "metrics.port": metrics_port,
                                            "metrics.lag.sample.ms": 500}).wait_listening()
    members = []
    try:
        members = [Consumer(cluster.bootstrap, group, topics=[topic], auto_offset_reset="smallest",
                            session_timeout_ms=6000, coordinator_bootstrap=coordinator.address, config=settings)
                   for _ in range(2)]
        got: list = []

        def drain() -> bool:
            for m in members:
                got.extend((r.partition, r.offset) for r in m.messages(timeout=0.3))
            return len(got) >= n

        wait_until(drain, timeout=90, message=lambda: f"{n} records through the coordinator; have {len(got)}")
        assert sorted(got) == sorted((p, o) for p in range(PARTITIONS) for o in range(n // PARTITIONS))
        wait_until(lambda: all(m.assignment() for m in members), timeout=30, message="both members own partitions")
        for m in members:
            m.commit(m.positions(), timeout=10)
        ends = {p: n // PARTITIONS for p in range(PARTITIONS)}
        assert group_offsets(coordinator_zk, group, topic) == ends
        wait_until(lambda: mirrored(cluster.bootstrap, settings, group, topic) == ends, timeout=30,
                   message=lambda: f"offsets mirrored into the data cluster over {protocol}: "
                                   f"{mirrored(cluster.bootstrap, settings, group, topic)} (want {ends})")
        # spark-coord consume as a member: its -X settings for the data cluster and the coordinator alike
        x = [a for k, v in settings.items() for a in ("-X", f"{k}={v}")]
        proc = subprocess.run([sys.executable, "-m", "spark_coord.cli", "consume", "-b", cluster.bootstrap,
                               "--coordinator", coordinator.address, "--group", group + "-cli", "--topic", topic,
                               "--from-beginning", "--count", str(n), *x], capture_output=True, timeout=120)
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        assert sorted(proc.stdout.decode().split()) == sorted(f"v{i}" for i in range(n))
        assert PASSWORD.encode() not in proc.stderr
        # the lag reader's ListOffsets reach both data brokers: a member that commits 10 of 50 per partition
        lagging = Consumer(cluster.bootstrap, group + "-lag", topics=[topic], auto_commit=False,
                           session_timeout_ms=6000, coordinator_bootstrap=coordinator.address, config=settings)
        members.append(lagging)
        wait_until(lambda: len(lagging.assignment()) == PARTITIONS, timeout=60, message="the member's partitions")
        lagging.commit({(topic, p): 10 for p in range(PARTITIONS)}, timeout=10)
        want = {p: n // PARTITIONS - 10 for p in range(PARTITIONS)}
        wait_until(lambda: scrape_lag(metrics_port, group + "-lag") == want, timeout=30,
                   message=lambda: f"lag {scrape_lag(metrics_port, group + '-lag')} (want {want})")
    finally:
        for m in members:
            m.close()
        coordinator.stop()
    text = coordinator.log.read_text()
    assert PASSWORD not in text
    assert f"over {protocol}" in text, "the coordinator says how it reaches the data cluster"
    for failure in ("metadata failed", "to the data cluster failed", "reading log ends"):
        assert failure not in text, text[-3000:]


def test_a_refused_password_is_logged_and_the_coordinator_serves_once_it_is_right(
        broker_factory, zk_connect, zookeeper, pki, server_cert, tmp_path):
    protocol, mechanism, wrong = "SASL_SSL", "SCRAM-SHA-512", "not-alices-password"
    cluster = DataCluster(broker_factory, zk_connect, protocol, mechanism, server_cert)
    topic = create_and_produce(cluster.bootstrap, client_settings(protocol, mechanism, pki), 40)
    coordinator_zk = fresh_chroot(zookeeper, "sec-coord")
    set_password(coordinator_zk)
    coordinator = start_coordinator(cluster, coordinator_zk, tmp_path, protocol, mechanism, server_cert,
                                    client_settings(protocol, mechanism, pki, password=wrong), "-X")
    member = None
    try:
        wait_until(lambda: "SASL authentication failed" in coordinator.log.read_text(), timeout=30,
                   message=lambda: f"the refusal logged:\n{coordinator.log.read_text()[-2000:]}")
        text = coordinator.log.read_text()
        assert f"SCRAM-SHA-512 as {USER}; check kafka.sasl.*" in text
        assert coordinator.proc.poll() is None, "the coordinator keeps trying"
        set_password(cluster.zk_connect, wrong)  # the data cluster now takes that password (rotated late)
        set_password(coordinator_zk, wrong)  # and so does the coordinator's listener, for the member
        coordinator.wait_listening()
        member = Consumer(cluster.bootstrap, f"sec-w-{uuid.uuid4().hex[:6]}", topics=[topic],
                          auto_offset_reset="smallest", session_timeout_ms=6000,
                          coordinator_bootstrap=coordinator.address,
                          config=client_settings(protocol, mechanism, pki, password=wrong))
        got: list = []
        wait_until(lambda: got.extend(member.messages(timeout=0.3)) or len(got) >= 40, timeout=60,
                   message=lambda: f"40 records once the password is right; have {len(got)}")
    finally:
        if member is not None:
            member.close()
        coordinator.stop()
    assert wrong not in coordinator.log.read_text()


def test_an_untrusted_certificate_is_logged_and_the_coordinator_keeps_trying(
        broker_factory, zk_connect, zookeeper, pki, server_cert, tmp_path):
    from testkit.tls import TestPki

    other_ca = TestPki(tmp_path / "other-pki")
    cluster = DataCluster(broker_factory, zk_connect, "SSL", None, server_cert)
    coordinator = start_coordinator(cluster, fresh_chroot(zookeeper, "sec-coord"), tmp_path, "PLAINTEXT", None,
                                    server_cert, {"security.protocol": "SSL", "ssl.ca.location": str(other_ca.ca_path)},
                                    "kafka.*")
    try:
        wait_until(lambda: "certificate is not trusted (check kafka.ssl.ca.location)" in coordinator.log.read_text(),
                   timeout=30, message=lambda: f"the TLS failure logged:\n{coordinator.log.read_text()[-2000:]}")
        assert coordinator.proc.poll() is None, "the coordinator keeps trying"
        coordinator.kill(signal.SIGTERM)  # and stops when told to, while it waits for the data cluster
        assert coordinator.proc.returncode == 0
    finally:
        coordinator.stop()


@pytest.mark.parametrize("options,named", [
    (["-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanism=GSSAPI", "-X", "sasl.username=a",
      "-X", "sasl.password=p"], "kafka.sasl.mechanism: expected one of"),
    (["-X", "security.protocol=SASL_SSL", "-X", "sasl.username=a"], "needs sasl.username and sasl.password"),
    (["-X", "security.protocol=SSL", "-X", "ssl.ca.location=/nonexistent/ca.pem"],
     "kafka.ssl.ca.location: the data cluster's TLS files cannot be used"),
    (["-X", "security.protocol=TLS"], "kafka.security.protocol: expected one of"),
    (["-X", "coordinator.id=3"], "-X coordinator.id: the coordinator takes the data cluster's client security"),
    (["-X", "sasl.mechanism=PLAIN", "-X", "sasl.mechanisms=PLAIN"], "given twice"),
])
def test_a_bad_data_cluster_setting_stops_the_coordinator_naming_it(caplog, options, named):
    from spark_coord.cli import main

    with caplog.at_level(logging.ERROR):
        assert main(["coordinator", "--override", "zookeeper.connect=127.0.0.1:1", *options]) == 2
    assert named in caplog.text


def test_the_data_cluster_settings_under_either_name_and_source(tmp_path):
    from spark_coord import config
    from spark_coord.secret import reveal
    from spark_coord.standalone import data_cluster_overrides, data_cluster_security

    f = tmp_path / "client.properties"
    f.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanisms=SCRAM-SHA-256\nsasl.username=alice\n"
                 "sasl.password=from-file\nclient.id=ignored\n")
    cfg = config.load(config.COORDINATOR, None, {"kafka.sasl.username": "bob"})
    cfg = cfg.with_overrides(data_cluster_overrides(str(f), ["sasl.password=from-x"]))
    security = data_cluster_security(cfg)
    assert (security.protocol, security.mechanism, security.username, reveal(security.password)) == \
        ("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "from-x")
    assert "from-x" not in repr(cfg) and "from-x" not in repr(security)
    assert data_cluster_security(config.load(config.COORDINATOR)) is None
