"""How the suite is spread over pytest-xdist's workers (``./run-tests.sh`` runs four).

Most tests wait on real processes (ZooKeeper, brokers, Spark, Kafka's own JVMs), so four
workers on two cores keep the cores busy while each waits. A worker takes whole files
(``--dist loadfile``): a module-scoped fixture (a broker cluster, an Apache Kafka node) starts
once, on the one worker that runs the module's tests, and tests of one file that share state
stay in order. Two things make the run short rather than merely parallel:

- **Longest first.** The run ends when the last worker's last file does, so the files are handed
  out longest first (``tests/durations.json``: each file's seconds in a measured run; a file
  not in it counts as short). A long file started last would otherwise stand alone at the end.
- **Long files split.** A file whose tests alone take longer than ``SPLIT_ABOVE_S`` (the Spark
  share-group tests, the Spark kill tests) is split into one unit per test, spread over the
  workers like files (a parametrized test's cases too); each worker that takes one of them starts
  the file's module fixtures for itself. A file whose tests depend on each other's order must not
  be split: name it in ``KEEP_WHOLE``.
- **Shared machine-wide resources.** Files that need the same fixed resource of the machine (the
  README's Spark Connect server on Spark's default port 15002, and the pipeline test that holds
  that port to show a pipeline does not need it) run as one unit, one after the other
  (``TOGETHER``).

``--durations-file PATH`` writes each file's seconds (setup, call and teardown of its tests) at
the end of a run: ``./run-tests.sh --durations-file tests/durations.json`` measures them again.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")

#: a file measured above this many seconds is spread over the workers test by test
SPLIT_ABOVE_S = 240.0

#: files split never, whatever their time (their tests build on each other in order)
KEEP_WHOLE = frozenset({
    "tests/test_readme.py",
})

#: files that take the same fixed resource of the machine: one unit, run in turn on one worker
TOGETHER = {
    "tests/test_readme.py": "port 15002",
    "tests/spark/test_spark_pipelines.py": "port 15002",
}


def file_seconds() -> dict[str, float]:
    """``tests/durations.json``: file (relative to the repository) to seconds; empty where missing."""
    try:
        return {k: float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError):
        return {}


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def work_unit(nodeid: str, seconds: dict[str, float]) -> str:
    """The unit a worker takes whole: the file, or the test itself (each parameter its own) in a
    long file."""
    path = file_of(nodeid)
    if path in TOGETHER:
        return TOGETHER[path]
    if seconds.get(path, 0.0) <= SPLIT_ABOVE_S or path in KEEP_WHOLE:
        return path
    return nodeid


def longest_first(items: list, seconds: dict[str, float]) -> list:
    """``items`` with the files in order of their measured seconds, longest first; the tests of a
    file keep their order. Stable, so every worker orders its collection the same way."""
    def weight(path: str) -> float:
        together = [f for f, unit in TOGETHER.items() if unit == TOGETHER.get(path)]
        return sum(seconds.get(f, 0.0) for f in together) if together else seconds.get(path, 0.0)

    rank = {}
    for item in items:
        rank.setdefault(file_of(item.nodeid), len(rank))
    return sorted(items, key=lambda i: (-weight(file_of(i.nodeid)), rank[file_of(i.nodeid)]))


def pytest_addoption(parser):
    parser.addoption("--durations-file", metavar="PATH", default=None,
                     help="write each test file's seconds (setup, call and teardown) as JSON at the end")


def pytest_collection_modifyitems(config, items):
    # in xdist's workers only: the scheduler hands units out in the order the workers collected them
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items[:] = longest_first(items, file_seconds())


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadFileScheduling

    seconds = file_seconds()

    class LongestFirstScheduling(LoadFileScheduling):
        """xdist's load-by-file, with long files split (``work_unit``); ``--no-loadscope-reorder``
        keeps the workers' longest-first collection order."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid, seconds)

    if config.getoption("dist") != "loadfile":
        return None
    config.option.loadscopereorder = False  # xdist's own reorder puts the files with most tests first
    return LongestFirstScheduling(config, log)


class DurationRecorder:
    def __init__(self, path: str):
        self.path = Path(path)
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report):
        self.seconds[file_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session):
        if os.environ.get("PYTEST_XDIST_WORKER"):
            return  # the controller sees every worker's reports
        ordered = dict(sorted(((k, round(v, 1)) for k, v in self.seconds.items()), key=lambda kv: -kv[1]))
        self.path.write_text(json.dumps(ordered, indent=1) + "\n")


def pytest_configure(config):
    path = config.getoption("--durations-file")
    if path:
        config.pluginmanager.register(DurationRecorder(path), "spark-coord-durations")
