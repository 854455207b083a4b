"""The documentation site builds in strict mode, and its generated pages say what the code says.

One strict build (``mkdocs build --strict``, as ``scripts/docs.sh build`` runs it) into a
temporary directory serves every test here: a warning (a broken link or anchor, a page
missing from the navigation, a docstring that does not parse) fails it.  Then: every key of
``conf/*.properties`` is on the configuration page with its default and meaning; every
command's ``--help`` is on the CLI page; the benchmark figures carry their provenance; and
headless Chromium (Debian's ``chromium``, skipped when absent) finds the Spark guide's
option table and the benchmark plots.
"""

from __future__ import annotations

import html
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import javaproperties
import pytest

from metrics_support import dump_dom

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 300


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks_under_test", ROOT / "scripts" / "docs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module       # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    log = done.stdout + done.stderr
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{log[-5000:]}"
    warnings = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert not warnings, "\n".join(warnings)
    return out


def _text(page: Path) -> str:
    """The page's text, tags removed and entities decoded (for looking up values)."""
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))


def test_every_page_is_built(site):
    for page in ("index.html", "getting-started.html", "spark/index.html", "spark/migration.html",
                 "spark/clusters.html", "groups/index.html", "groups/kafka-classic.html", "groups/kip848.html",
                 "groups/share-groups.html", "deploying/zookeeper.html", "deploying/beside-kafka.html",
                 "deploying/security.html", "operating/cli.html", "operating/metrics.html", "operating/storage.html",
                 "admin.html", "topic-configs.html", "reference/configuration.html", "reference/cli.html",
                 "reference/python-api.html", "reference/protocol.html", "reference/zookeeper-layout.html",
                 "reference/package-layout.html", "design.html", "benchmarks/index.html", "contributing.html"):
        assert (site / page).is_file(), f"{page} was not built"


def test_design_page_renders_design_md(site):
    text = _text(site / "design.html")
    for heading in re.findall(r"^## (.+)$", (ROOT / "DESIGN.md").read_text(), re.M):
        assert heading.strip() in text, f"DESIGN.md's section {heading!r} is not on the design page"


def _clean(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _configuration_rows(page: str) -> dict[str, dict[str, tuple[str, str]]]:
    """{file name: {key: (default, meaning)}} from the built page's tables."""
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for section in re.split(r"<h2[^>]*>", page)[1:]:
        title = _clean(section.split("</h2>", 1)[0])
        m = re.match(r"conf/(\S+)", title)
        if not m:
            continue
        rows = out.setdefault(m.group(1), {})
        for row in re.findall(r"<tr>(.*?)</tr>", section, re.S):
            cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
            if len(cells) == 4:
                key = re.search(r"<code>(.*?)</code>", cells[0], re.S)
                if key:
                    rows[html.unescape(key.group(1))] = (_clean(cells[1]), _clean(cells[3]))
    return out


def test_every_configuration_key_is_on_the_reference_page(site):
    hooks = _hooks()
    page = _configuration_rows((site / "reference" / "configuration.html").read_text())
    parsed = {c.name: {k.name: k for k in c.keys} for c in hooks.conf_files()}
    files = sorted((ROOT / "conf").glob("*.properties"))
    assert files
    missing = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            keys = javaproperties.load(f)       # the keys as the brokers read them
        assert path.name in page, f"conf/{path.name} has no table on the configuration page"
        for name, value in keys.items():
            entry = parsed[path.name].get(name)
            if entry is None:
                missing.append(f"{path.name}: {name} (not read by the generator)")
                continue
            if entry.value != value:
                missing.append(f"{path.name}: {name} read as {entry.value!r}, the file says {value!r}")
            if name not in page[path.name]:
                missing.append(f"{path.name}: {name} is not on the page")
                continue
            default, meaning = page[path.name][name]
            want = "(none)" if entry.default in ("", "(none)") else entry.default
            if default != want:
                missing.append(f"{path.name}: {name}'s default on the page is {default!r}, the file says {want!r}")
            if value and want != "(none)" and value != want:
                missing.append(f"{path.name}: {name}'s value {value!r} differs from its documented default {want!r}")
            said = " ".join(" ".join(entry.meaning).split())
            if not said:
                missing.append(f"{path.name}: {name} has no comment saying what it does")
            elif " ".join(said.split()[:8]) not in meaning:
                missing.append(f"{path.name}: {name}'s meaning ({said[:40]!r}...) is not on the page")
    assert not missing, "\n".join(missing)


def test_cli_reference_is_the_parsers_help(site):
    hooks = _hooks()
    page = _text(site / "reference" / "cli.html")
    parser = hooks._cli_parser()
    commands = hooks._subparsers(parser)
    assert len(commands) > 10
    for name, sub in commands.items():
        assert f"spark-coord {name}" in page
        description = (sub.description or "").split(".")[0][:40]
        assert " ".join(description.split()) in " ".join(page.split()), f"{name}'s description is not on the page"
        for action in hooks._subparsers(sub):
            assert f"spark-coord {name} {action}" in page


def test_benchmark_figures_say_where_they_come_from():
    results = sorted((ROOT / "bench" / "results").glob("*.json"))
    names = {p.stem for p in results}
    assert {"spark_source", "coordinator", "rebalance", "chaos", "share"} <= names
    for path in results:
        runs = json.loads(path.read_text())["runs"]
        assert runs, path.name
        for run in runs:
            for key in ("label", "date", "commit", "machine", "command", "figures"):
                assert run.get(key), f"{path.name}: run {run.get('label')!r} has no {key}"


def test_benchmark_plots_are_built(site):
    plots = sorted((site / "benchmarks" / "plots").glob("*.svg"))
    assert len(plots) >= 4, plots
    for svg in plots:
        assert svg.read_text().lstrip().startswith(("<?xml", "<svg")), svg.name


def test_chromium_finds_the_option_table_and_the_plots(site, tmp_path):
    guide = dump_dom(tmp_path, (site / "spark" / "index.html").as_uri(), wait_ms=1000)
    tables = re.findall(r"<table.*?</table>", guide, re.S)
    options = [t for t in tables if "kafka.bootstrap.servers" in t and "startingOffsets" in t]
    assert options, "the Spark guide has no option table"
    assert len(re.findall(r"<tr", options[0])) > 10
    bench = dump_dom(tmp_path, (site / "benchmarks" / "index.html").as_uri(), wait_ms=1000)
    images = re.findall(r"<img[^>]+src=\"([^\"]+\.svg)\"", bench)
    assert len(images) >= 4, f"the benchmarks page shows {len(images)} plots"
    for src in images:
        assert (site / "benchmarks" / src).is_file(), f"the benchmarks page shows {src}, which was not built"
