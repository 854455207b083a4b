"""How the suite is spread over xdist's workers (tests/scheduling.py): the units a worker takes
whole, and the order they are handed out in."""

from __future__ import annotations

import json
from types import SimpleNamespace

import scheduling
from scheduling import TOGETHER, file_seconds, longest_first, work_unit

SECONDS = {"tests/a.py": 10.0, "tests/long.py": scheduling.SPLIT_ABOVE_S + 1, "tests/test_readme.py": 900.0}


def items(*nodeids: str) -> list:
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_a_file_is_one_unit_and_a_long_one_is_split_by_test_and_parameter():
    assert work_unit("tests/a.py::test_x", SECONDS) == "tests/a.py"
    assert work_unit("tests/a.py::Case::test_x", SECONDS) == "tests/a.py"
    assert work_unit("tests/unmeasured.py::test_x", SECONDS) == "tests/unmeasured.py"
    assert work_unit("tests/long.py::test_x[1-a]", SECONDS) == "tests/long.py::test_x[1-a]"
    assert work_unit("tests/long.py::test_x[2-b]", SECONDS) == "tests/long.py::test_x[2-b]"
    assert work_unit("tests/long.py::test_y", SECONDS) == "tests/long.py::test_y"


def test_files_kept_whole_or_sharing_a_resource_are_never_split():
    assert all(work_unit(f"{path}::test_x", SECONDS) == unit for path, unit in TOGETHER.items())
    assert len(set(TOGETHER.values())) < len(TOGETHER)  # a unit of several files
    assert work_unit("tests/test_readme.py::test_a", SECONDS) == work_unit("tests/test_readme.py::test_b", SECONDS)


def test_files_are_handed_out_longest_first_and_a_files_tests_keep_their_order():
    got = longest_first(items("tests/a.py::t1", "tests/new.py::t1", "tests/long.py::t1", "tests/a.py::t2",
                              "tests/long.py::t0"), SECONDS)
    assert [i.nodeid for i in got] == ["tests/long.py::t1", "tests/long.py::t0", "tests/a.py::t1", "tests/a.py::t2",
                                       "tests/new.py::t1"]


def test_the_committed_durations_name_files_that_exist(request):
    root = request.config.rootpath
    seconds = file_seconds()
    assert seconds, "tests/durations.json is missing or empty"
    missing = [path for path in seconds if not (root / path).is_file()]
    assert not missing, f"tests/durations.json names files that are gone: {missing} (measure again: --durations-file)"
    assert all(v >= 0 for v in json.loads(scheduling.DURATIONS.read_text()).values())
