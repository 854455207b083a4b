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
    cfg = config.load(config.ZOOKEEPER, None, ["syncLimit=5"])
    assert cfg["syncLimit"] == "5"


def test_unreadable_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        config.load(config.BROKER, tmp_path / "missing.properties")
