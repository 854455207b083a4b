"""The package graph (scripts/import-graph.py): no import reaches up a layer, no packages import
each other in a circle; and the checker itself finds both when they are there."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "import-graph.py"


@pytest.fixture(scope="module")
def graph():
    spec = importlib.util.spec_from_file_location("import_graph", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["import_graph"] = module
    spec.loader.exec_module(module)
    return module


def test_the_package_graph_is_layered_and_has_no_circle():
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "client (layer" in proc.stdout and not proc.stderr


def test_every_package_has_a_layer(graph):
    found = graph.imports()
    packages = {graph.package_of(i.source) for i in found}
    assert {"client", "security", "records", "spark", "broker"} <= packages
    assert packages <= set(graph.layer_of(graph.LAYERS))


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checker_finds_upward_imports_lazy_ones_included(graph, tmp_path):
    _write(tmp_path, {"spark_coord/__init__.py": "", "spark_coord/records/__init__.py": "",
                      "spark_coord/client/__init__.py": "",
                      "spark_coord/records/builder.py": "def f():\n    from spark_coord.client.producer import x\n",
                      "spark_coord/client/producer.py": "from spark_coord.records import builder\n"})
    problems = graph.violations(graph.imports(tmp_path, ("spark_coord",)), [("records",), ("client",)])
    assert any("upward import: spark_coord/records/builder.py:2" in p for p in problems), problems
    assert any("import circle between client, records" in p for p in problems), problems


def test_the_checker_finds_circles_within_a_layer_and_unplaced_packages(graph, tmp_path):
    _write(tmp_path, {"spark_coord/__init__.py": "", "spark_coord/a/__init__.py": "from spark_coord.b import y\n",
                      "spark_coord/b/__init__.py": "from spark_coord import a\n",
                      "spark_coord/c.py": "import spark_coord.a\n"})
    problems = graph.violations(graph.imports(tmp_path, ("spark_coord",)), [("a", "b")])
    assert any("import circle between a, b" in p for p in problems), problems
    assert any("package 'c' is in no layer" in p for p in problems), problems
    (tmp_path / "spark_coord/b/__init__.py").write_text("")  # the circle broken: c -> a -> b is layered
    assert graph.violations(graph.imports(tmp_path, ("spark_coord",)), [("spark_coord", "b"), ("a",), ("c",)]) == []


def test_dot_output_has_every_layer(graph):
    text = graph.dot(graph.imports())
    assert text.startswith("digraph") and text.count("rank=same") == len(graph.LAYERS)
    assert '"spark" -> "client"' in text


def test_relative_imports_count(graph, tmp_path):
    _write(tmp_path, {"spark_coord/__init__.py": "", "spark_coord/records/__init__.py": "",
                      "spark_coord/log/__init__.py": "from . import segment\n",
                      "spark_coord/log/segment.py": "from ..records import header\nfrom .names import x\n",
                      "spark_coord/log/names.py": "", "spark_coord/records/header.py": "from ..log import segment\n"})
    found = graph.imports(tmp_path, ("spark_coord",))
    assert {(i.source, i.target) for i in found} == {
        ("spark_coord.log", "spark_coord.log.segment"), ("spark_coord.log.segment", "spark_coord.records.header"),
        ("spark_coord.log.segment", "spark_coord.log.names"), ("spark_coord.records.header", "spark_coord.log.segment")}
    problems = graph.violations(found, [("records",), ("log",)])
    assert any("upward import: spark_coord/records/header.py:1" in p for p in problems), problems


def test_the_checker_finds_circles_inside_a_package_type_only_imports_included(graph, tmp_path):
    _write(tmp_path, {"spark_coord/__init__.py": "", "spark_coord/core/__init__.py": "",
                      "spark_coord/core/a.py": "from spark_coord.core import b\n",
                      "spark_coord/core/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                              "    from spark_coord.core.a import A\n",
                      "spark_coord/core/c.py": "from spark_coord.core import a\n"})
    problems = graph.violations(graph.imports(tmp_path, ("spark_coord",)), [("core",)])
    assert problems == ["import circle inside core: spark_coord.core.a, spark_coord.core.b: "
                        "spark_coord.core.a->spark_coord.core.b (spark_coord/core/a.py:1); "
                        "spark_coord.core.b->spark_coord.core.a (spark_coord/core/b.py:3)"], problems


def test_the_checker_refuses_an_import_of_the_harness_from_the_package(graph, tmp_path):
    """testkit is not installed: a module of the package that imports it would fail in a wheel."""
    _write(tmp_path, {"spark_coord/__init__.py": "", "spark_coord/cli.py": "def f():\n    from testkit import chaos\n",
                      "testkit/__init__.py": "", "testkit/chaos.py": "from spark_coord import cli\n"})
    found = graph.imports(tmp_path, ("spark_coord", "testkit"))
    problems = graph.violations(found, [("cli",), ("testkit",)])
    assert any("upward import: spark_coord/cli.py:2 spark_coord.cli imports testkit.chaos" in p for p in problems), \
        problems
    assert any("import circle between cli, testkit" in p for p in problems), problems
