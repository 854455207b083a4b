"""``spark-coord consume --isolation-level`` and the ``isolation.level`` key of ``--config`` reach the
consumer (the option wins; read_uncommitted by default, Kafka's Java default); anything else is refused
by argparse naming the option."""

from __future__ import annotations

import pytest

from spark_coord.cli import main


class RecordingConsumer:
    """Stands in for ``Consumer``: keeps its arguments, reads nothing."""

    made: list[dict] = []

    def __init__(self, bootstrap, group, **kwargs):
        RecordingConsumer.made.append(dict(kwargs, bootstrap=bootstrap, group=group))

    def messages(self, timeout=None):
        return iter(())

    def close(self, timeout=None):
        pass


@pytest.fixture
def consumers(monkeypatch):
    import spark_coord.consumer.consumer as consumer_module

    RecordingConsumer.made = []
    monkeypatch.setattr(consumer_module, "Consumer", RecordingConsumer)
    return RecordingConsumer


BASE = ["consume", "-b", "127.0.0.1:1", "--group", "g1", "--topic", "t", "--count", "0"]


def test_read_uncommitted_by_default(consumers):
    assert main(BASE) == 0
    assert [m["isolation_level"] for m in consumers.made] == ["read_uncommitted"]


def test_the_option_and_the_config_key_reach_the_consumer(consumers, tmp_path):
    assert main(BASE + ["--isolation-level", "read_committed"]) == 0
    config = tmp_path / "consumer.properties"
    config.write_text("isolation.level=read_committed\n")
    assert main(BASE + ["--config", str(config)]) == 0
    assert main(BASE + ["--config", str(config), "--isolation-level", "read_uncommitted"]) == 0
    assert [m["isolation_level"] for m in consumers.made] == ["read_committed", "read_committed", "read_uncommitted"]


def test_another_level_is_refused_naming_the_option(consumers, capsys):
    with pytest.raises(SystemExit):
        main(BASE + ["--isolation-level", "snapshot"])
    assert "--isolation-level" in capsys.readouterr().err and not consumers.made
