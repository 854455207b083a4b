"""Every ``spark-coord`` subcommand answers --help."""

import subprocess
import sys

import pytest

from spark_coord.cli import build_parser

COMMANDS = [["zookeeper"], ["broker"], ["up"], ["topics"], ["topics", "create"], ["topics", "describe"],
            ["topics", "add-partitions"], ["topics", "delete-records"],
            ["produce"], ["tail"], ["demo"], ["consume"], ["groups"], ["groups", "describe"],
            ["share-groups"], ["share-groups", "list"], ["share-groups", "describe"], ["share-groups", "reset-offsets"]]


@pytest.mark.parametrize("cmd", COMMANDS, ids=" ".join)
def test_help(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(cmd + ["--help"])
    assert e.value.code == 0
    assert "usage: spark-coord" in capsys.readouterr().out


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "spark_coord.cli", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0
    for cmd in ("zookeeper", "broker", "up", "topics", "produce", "tail"):
        assert cmd in out.stdout


def test_bad_override_is_reported_not_raised(tmp_path):
    out = subprocess.run([sys.executable, "-m", "spark_coord.cli", "broker", "--override", "no.such=1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "no.such" in out.stderr


# ------------------------------------------------- options anywhere after the subcommand
B = "10.0.0.1:9093"

#: Each command as a user might type it, with the options that can come before or after the action.
#: (command words, action words, options); the action words include the action's own arguments.
ACTION_COMMANDS = [
    (["topics"], ["create", "t1", "--partitions", "3"], ["-b", B]),
    (["topics"], ["list"], ["-b", B]),
    (["topics"], ["describe", "t1", "t2"], ["--bootstrap", B]),
    (["topics"], ["delete", "t1"], ["-b", B]),
    (["topics"], ["add-partitions", "t1", "--partitions", "6"], ["-b", B]),
    (["topics"], ["delete-records", "t1", "--partition", "0", "--before", "100"], ["-b", B]),
    (["groups"], ["list"], ["-b", B, "--json"]),
    (["groups"], ["describe", "g1"], ["-b", B, "--json"]),
    (["groups"], ["describe"], ["--json"]),
    (["topics"], ["list"], ["-b", B, "-X", "security.protocol=SSL", "--command-config", "client.properties"]),
    (["share-groups"], ["list"], ["-b", B, "--json"]),
    (["share-groups"], ["describe", "g1"], ["-b", B]),
    (["share-groups"], ["reset-offsets", "g1", "--topic", "t1", "--to-earliest"], ["-b", B, "--json"]),
    (["users"], ["list"], ["--zookeeper", "127.0.0.1:2181/kafka", "--config", "conf/broker.properties"]),
    (["users"], ["delete", "alice"], ["--zookeeper", "127.0.0.1:2181"]),
]


def _parse(argv: list[str]) -> dict:
    return vars(build_parser().parse_args(argv))


@pytest.mark.parametrize("command, action, options", ACTION_COMMANDS, ids=lambda v: " ".join(v))
def test_options_before_or_after_the_action_mean_the_same(command, action, options):
    before = _parse(command + options + action)
    after = _parse(command + action + options)
    split = _parse(command + options[:2] + action + options[2:])
    assert before == after == split
    if "-b" in options or "--bootstrap" in options:
        assert before["bootstrap"] == B
    assert before["json"] is True if "--json" in options else before.get("json") in (None, False)


@pytest.mark.parametrize("action", [["list"], ["describe", "g1"]], ids=" ".join)
def test_defaults_hold_when_options_are_left_out(action):
    args = _parse(["groups"] + action)
    assert args["bootstrap"] == "127.0.0.1:9092" and args["json"] is False and args["log_level"] == "INFO"


@pytest.mark.parametrize("argv", [
    ["produce", "-t", "x", "-b", B], ["produce", "-b", B, "-t", "x", "--partition", "2"],
    ["tail", "-t", "x", "--offset", "latest", "-b", B], ["consume", "--group", "g", "--topic", "x", "-b", B],
], ids=" ".join)
def test_bootstrap_anywhere_after_other_subcommands(argv):
    assert _parse(argv)["bootstrap"] == B


@pytest.mark.parametrize("argv", [["topics", "list"], ["groups", "describe", "g1"], ["produce", "-t", "x"],
                                  ["broker"], ["up", "--brokers", "2"], ["demo"], ["users", "list"]], ids=" ".join)
def test_log_level_before_or_after_the_subcommand(argv):
    assert _parse(["--log-level", "ERROR"] + argv)["log_level"] == "ERROR"
    assert _parse(argv + ["--log-level", "DEBUG"])["log_level"] == "DEBUG"
    assert _parse(argv)["log_level"] == "INFO"


def test_an_option_given_twice_keeps_the_last():
    assert _parse(["topics", "-b", "a:1", "list", "-b", B])["bootstrap"] == B


def test_produce_compression_choices_are_the_codecs():
    from spark_coord.records.compression import CODEC_IDS
    for name in CODEC_IDS:
        assert _parse(["produce", "-t", "x", "--compression", name])["compression"] == name
    with pytest.raises(SystemExit):
        _parse(["produce", "-t", "x", "--compression", "brotli"])


def test_an_unreachable_zookeeper_is_one_clear_line(caplog):
    from spark_coord.cli import main
    from spark_coord.net import free_port

    code = main(["users", "list", "--zookeeper", f"127.0.0.1:{free_port()}",
                 "--override", "zookeeper.connection.timeout.ms=1000"])
    assert code == 1
    assert any("no ZooKeeper server" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)
    assert not any(r.exc_info for r in caplog.records)


def test_share_groups_reset_offsets_is_a_dry_run_unless_executed():
    args = _parse(["share-groups", "reset-offsets", "g", "--topic", "t:0,1", "--topic", "u", "--to-offset", "5"])
    assert (args["group"], args["topic"], args["to_offset"], args["execute"]) == ("g", ["t:0,1", "u"], 5, False)
    assert _parse(["share-groups", "reset-offsets", "g", "-t", "t", "--to-latest", "--execute"])["execute"]
    for missing in (["--topic", "t"], ["--to-earliest"], ["--topic", "t", "--to-earliest", "--to-latest"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["share-groups", "reset-offsets", "g", *missing])
