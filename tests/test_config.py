"""Properties files: conf/ stays in step with the documented keys; bad input names the key."""

from pathlib import Path

import pytest

from spark_coord import config
from spark_coord.config import ConfigError

CONF = Path(__file__).resolve().parent.parent / "conf"


@pytest.mark.parametrize("name", sorted(config.KEYSETS))
def test_conf_file_documents_every_key_with_its_default(name):
    keyset = config.KEYSETS[name]
    text = (CONF / f"{name}.properties").read_text()
    assert text == keyset.render(), f"conf/{name}.properties is stale: regenerate it from spark_coord.config"
    parsed = config.parse_properties(text)
    assert set(parsed) == set(keyset.keys)
    for key in keyset.keys.values():
        assert key.doc.strip(), f"{key.name} has no documentation"


def test_load_applies_file_then_overrides(tmp_path):
    f = tmp_path / "b.properties"
    f.write_text("broker.id = 4\nlog.segment.bytes: 2048\n# comment\n! also a comment\n")
    cfg = config.load(config.BROKER, f, ["log.segment.bytes=4096", "auto.create.topics.enable=true"])
    assert cfg["broker.id"] == 4
    assert cfg["log.segment.bytes"] == 4096
    assert cfg["auto.create.topics.enable"] is True
    assert cfg["num.partitions"] == 1  # default


@pytest.mark.parametrize("override, fragment", [
    ("no.such.key=1", "no.such.key"),
    ("broker.id=abc", "broker.id"),
    ("broker.id=-1", "broker.id"),
    ("auto.create.topics.enable=maybe", "auto.create.topics.enable"),
    ("justakey", "key=value"),
])
def test_bad_settings_name_the_key(override, fragment):
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        config.load(config.BROKER, None, [override])


def test_zookeeper_settings_pass_unknown_keys_through():
    cfg = config.load(config.ZOOKEEPER, None, ["autopurge.snapRetainCount=5", "server.1=h1:2888:3888"])
    assert cfg["autopurge.snapRetainCount"] == "5" and cfg["server.1"] == "h1:2888:3888"


def test_unreadable_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        config.load(config.BROKER, tmp_path / "missing.properties")


# ------------------------------------------------------------- Java's properties rules

def test_continuation_lines_join_and_drop_the_next_lines_leading_blanks(tmp_path):
    f = tmp_path / "b.properties"
    f.write_text("listeners = PLAINTEXT://127.0.0.1:\\\n       9093\n"
                 "zookeeper.connect=h1:2181,\\\n  h2:2181,\\\n\th3:2181/kafka\n"
                 "broker.id=7\n")
    cfg = config.load(config.BROKER, f)
    assert cfg["listeners"] == "PLAINTEXT://127.0.0.1:9093"
    assert cfg["zookeeper.connect"] == "h1:2181,h2:2181,h3:2181/kafka"
    assert cfg["broker.id"] == 7  # the line after a continuation is a line of its own again


def test_escapes_in_keys_and_values():
    parsed = config.parse_properties("a\\=b=c\\:d\\te\\u00e9\\\\\nsp\\ ace = x\\ny\n")
    assert parsed == {"a=b": "c:d\te\u00e9\\", "sp ace": "x\ny"}


def test_key_value_separated_by_blanks_colon_or_equals_and_bang_comments():
    text = "log.dirs /data/b0\nbroker.id:3\n! a comment\n# another\n   num.partitions   =  5\nflag\n"
    assert config.parse_properties(text) == {"log.dirs": "/data/b0", "broker.id": "3", "num.partitions": "5",
                                             "flag": ""}


def test_a_comment_marker_inside_a_value_is_data_and_a_later_key_wins():
    parsed = config.parse_properties("dataDir=/zk#1\ntickTime=1000\ntickTime=500\n")
    assert parsed == {"dataDir": "/zk#1", "tickTime": "500"}


def test_malformed_unicode_escape_names_file_and_line(tmp_path):
    f = tmp_path / "z.properties"
    f.write_text("clientPort=2181\n# comment\ndataDir=\\\n  /tmp\nbad=\\u12G4\n")
    with pytest.raises(ConfigError, match=r"z\.properties:5: .*\\u12G4"):
        config.load(config.ZOOKEEPER, f)


def test_a_file_that_is_not_utf8_is_read_as_iso_8859_1_like_java(tmp_path):
    f = tmp_path / "z.properties"
    f.write_bytes("dataDir=/data/z\u00f6\n".encode("iso-8859-1"))
    assert config.load(config.ZOOKEEPER, f)["dataDir"] == "/data/z\u00f6"


@pytest.mark.parametrize("name", sorted(config.KEYSETS))
def test_rendered_conf_files_read_back_as_the_defaults(name):
    keyset = config.KEYSETS[name]
    cfg = config.load(keyset, CONF / f"{name}.properties")
    assert dict(cfg) == keyset.defaults()


# ------------------------------------------------- one setting under librdkafka's and Java's names

def test_a_key_is_read_under_its_other_names_too(tmp_path):
    f = tmp_path / "client.properties"
    f.write_text("sasl.mechanisms=SCRAM-SHA-256\nssl.truststore.location=/etc/ca.pem\nrequest.timeout.ms=1234\n")
    cfg = config.load(config.CLIENT, f)
    assert (cfg["sasl.mechanism"], cfg["ssl.ca.location"], cfg["socket.timeout.ms"]) == \
        ("SCRAM-SHA-256", "/etc/ca.pem", 1234)
    assert cfg["sasl.mechanisms"] == "SCRAM-SHA-256"  # looked up by either name
    later = config.load(config.CLIENT, f, ["sasl.mechanism=PLAIN"])  # a later source wins, whichever name
    assert later["sasl.mechanism"] == "PLAIN"
    consumer = config.load(config.CONSUMER, None, ["bootstrap.servers=h:1", "enable.auto.commit=false",
                                                   "fetch.max.wait.ms=7"])
    assert (consumer["bootstrap.brokers"], consumer["auto.commit.enable"], consumer["fetch.wait.max.ms"]) == \
        (["h:1"], False, 7)


def test_one_setting_under_two_names_in_one_place_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="sasl.mechanism: given twice.*sasl.mechanisms"):
        config.load(config.CLIENT, None, ["sasl.mechanism=PLAIN", "sasl.mechanisms=SCRAM-SHA-256"])
    f = tmp_path / "client.properties"
    f.write_text("ssl.ca.location=/a.pem\nssl.truststore.location=/b.pem\n")
    with pytest.raises(ConfigError, match="ssl.ca.location: given twice"):
        config.load(config.CLIENT, f)


def test_client_security_reads_either_name_and_refuses_other_trust_store_types():
    from spark_coord.security.client import ClientSecurity

    s = ClientSecurity.from_settings({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanisms": "PLAIN",
                                      "kafka.sasl.username": "u", "kafka.sasl.password": "p",
                                      "kafka.ssl.truststore.location": "/ca.pem",
                                      "kafka.ssl.truststore.type": "pem"}, prefix="kafka.")
    assert (s.mechanism, s.ca_location) == ("PLAIN", "/ca.pem")
    with pytest.raises(ConfigError, match="kafka.ssl.truststore.type: only PEM"):
        ClientSecurity.from_settings({"kafka.ssl.truststore.type": "JKS"}, prefix="kafka.")
    with pytest.raises(ConfigError, match="given twice"):
        ClientSecurity.from_settings({"sasl.mechanism": "PLAIN", "sasl.mechanisms": "PLAIN"})


def test_share_record_locks_above_kafkas_maximum_are_refused_naming_the_key():
    """80,000 locks were accepted (Kafka's maximum is 10,000) and their fragmented state outgrew
    ZooKeeper's request limit; the broker now refuses the setting at start."""
    with pytest.raises(ConfigError,
                       match=r"group\.share\.partition\.max\.record\.locks: 80000 is above the maximum 10000"):
        config.load(config.BROKER, None, {"group.share.partition.max.record.locks": "80000"})
    assert config.load(config.BROKER, None, {"group.share.partition.max.record.locks": "10000"})[
        "group.share.partition.max.record.locks"] == 10000
