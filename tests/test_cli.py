"""Every ``spark-coord`` subcommand answers --help."""

import subprocess
import sys

import pytest

from spark_coord.cli import build_parser

COMMANDS = [["zookeeper"], ["broker"], ["up"], ["topics"], ["topics", "create"], ["topics", "describe"],
            ["produce"], ["tail"], ["demo"], ["consume"], ["groups"], ["groups", "describe"]]


@pytest.mark.parametrize("cmd", COMMANDS, ids=" ".join)
def test_help(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(cmd + ["--help"])
    assert e.value.code == 0
    assert "usage: spark-coord" in capsys.readouterr().out


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "spark_coord.cli", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for cmd in ("zookeeper", "broker", "up", "topics", "produce", "tail"):
        assert cmd in out.stdout


def test_bad_override_is_reported_not_raised(tmp_path):
    out = subprocess.run([sys.executable, "-m", "spark_coord.cli", "broker", "--override", "no.such=1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "no.such" in out.stderr
