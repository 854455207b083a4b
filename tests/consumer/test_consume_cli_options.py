"""``spark-coord consume`` with Kafka 4's consumer group protocol: ``--group-protocol``,
``--group-instance-id`` and ``--group-remote-assignor``, or the same keys of ``--config`` (the
options win), reach the consumer; a group that refuses the member for good ends the command with
one error line and exit status 1, not a traceback."""

from __future__ import annotations

import logging

import pytest

from spark_coord.cli import main
from spark_coord.errors import ErrorCode, KafkaError


class RecordingConsumer:
    """Stands in for ``Consumer``: keeps its arguments; ``messages()`` raises ``refusal`` if set."""

    made: list[dict] = []
    refusal: KafkaError | None = None

    def __init__(self, bootstrap, group, **kwargs):
        self.kwargs = dict(kwargs, bootstrap=bootstrap, group=group)
        self.closed = False
        RecordingConsumer.made.append(self.kwargs)

    def messages(self, timeout=None):
        if RecordingConsumer.refusal is not None:
            raise RecordingConsumer.refusal
        return iter(())

    def close(self, timeout=None):
        self.kwargs["closed"] = True


@pytest.fixture
def consumers(monkeypatch):
    import spark_coord.consumer.consumer as consumer_module

    RecordingConsumer.made = []
    RecordingConsumer.refusal = None
    monkeypatch.setattr(consumer_module, "Consumer", RecordingConsumer)
    return RecordingConsumer


BASE = ["consume", "-b", "127.0.0.1:1", "--group", "g1", "--topic", "t", "--count", "0"]


def test_the_options_reach_the_consumer(consumers):
    assert main(BASE + ["--group-protocol", "consumer", "--group-instance-id", "reader-1",
                        "--group-remote-assignor", "range"]) == 0
    (made,) = consumers.made
    assert made["group_protocol"] == "consumer" and made["group_instance_id"] == "reader-1"
    assert made["group_remote_assignor"] == "range" and made["closed"]


def test_without_them_a_dynamic_member_of_the_coordinators_own_protocol(consumers):
    assert main(BASE) == 0
    (made,) = consumers.made
    assert made["group_protocol"] == "coordkafka"
    assert made["group_instance_id"] is None and made["group_remote_assignor"] is None


def test_the_config_files_keys_and_the_options_over_them(consumers, tmp_path):
    props = tmp_path / "consumer.properties"
    props.write_text("group.protocol=consumer\ngroup.instance.id=from-file\ngroup.remote.assignor=uniform\n")
    assert main(BASE + ["--config", str(props)]) == 0
    assert main(BASE + ["--config", str(props), "--group-instance-id", "from-flag",
                        "--group-remote-assignor", "range"]) == 0
    from_file, from_flags = consumers.made
    assert (from_file["group_protocol"], from_file["group_instance_id"], from_file["group_remote_assignor"]) \
        == ("consumer", "from-file", "uniform")
    assert (from_flags["group_protocol"], from_flags["group_instance_id"], from_flags["group_remote_assignor"]) \
        == ("consumer", "from-flag", "range")


def test_a_group_refusing_the_member_is_one_error_line_and_status_1(consumers, caplog):
    consumers.refusal = KafkaError(ErrorCode.UNSUPPORTED_ASSIGNOR, "group g1 member m1: ServerAssignor bogus is not "
                                                                   "supported")
    caplog.set_level(logging.INFO)
    assert main(BASE + ["--count", "5", "--group-protocol", "consumer", "--group-remote-assignor", "bogus"]) == 1
    (made,) = consumers.made
    assert made["closed"]
    last = caplog.records[-1]
    assert last.levelname == "ERROR" and "UNSUPPORTED_ASSIGNOR" in last.getMessage() and "bogus" in last.getMessage()
    assert "\n" not in last.getMessage() and not any(r.exc_info for r in caplog.records)


def test_an_instance_id_without_the_consumer_protocol_is_refused(caplog):
    assert main(BASE + ["--group-instance-id", "reader-1"]) == 2
    assert any("group_instance_id" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)
