"""MkDocs hooks (mkdocs.yml ``hooks:``): the reference pages made from the code at build time.

- ``<!-- generated: configuration -->`` on a page becomes a table of every key of
  ``conf/*.properties`` (and ``conf/spark-defaults.conf``): its default, type and the
  comment above it, read from the files themselves, so the page cannot drift from them;
- ``<!-- generated: cli-help -->`` becomes the ``--help`` of every ``spark-coord``
  command, formatted by the argparse parser of ``spark_coord/cli.py``;
- ``benchmarks/plots/*.svg`` are drawn from ``bench/results/*.json`` by ``scripts/plots.py``
  (matplotlib) and added to the site as generated files.

``tests/docs/test_site.py`` builds the site in strict mode and checks these pages.
"""

from __future__ import annotations

import html
import importlib.util
import io
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
CONF_FILES = ["broker.properties", "coordinator.properties", "zookeeper.properties", "consumer.properties",
              "client.properties", "spark-defaults.conf"]
CLI_WIDTH = 100

_TYPE = re.compile(r"^Type:\s*(\w+)\.\s*Default:\s*(.*)$")
_ALSO = re.compile(r"^Also read under the names? (.+?)\.?$")


# ------------------------------------------------------------------ configuration keys

@dataclass
class Key:
    name: str
    value: str                  # as written in the file (the default)
    meaning: list[str]          # the comment lines above it, without "Type:" and "Also read" lines
    type: str = ""
    default: str = ""           # as the "Type: ... Default: ..." line says; else the value
    aliases: list[str] = field(default_factory=list)


@dataclass
class ConfFile:
    name: str
    header: list[str]
    keys: list[Key]
    notes: list[list[str]]      # comment blocks that describe no key


def _split_property(line: str) -> tuple[str, str]:
    """key and value of a properties line, by Java's rules (the first '=', ':' or blank ends the key)."""
    m = re.match(r"^((?:\\.|[^=:\s])+)\s*[=:\s]\s*(.*)$", line.strip())
    if not m:
        return line.strip(), ""
    return m.group(1).replace("\\", ""), m.group(2)


def parse_conf(path: Path) -> ConfFile:
    """The keys of one properties file with the comment block above each."""
    header: list[str] = []
    keys: list[Key] = []
    notes: list[list[str]] = []
    comments: list[str] = []
    first_block = True

    def flush_comments() -> None:
        nonlocal comments, first_block
        if comments:
            if first_block and not keys:
                header.extend(comments)
            else:
                notes.append(comments)
        comments = []
        first_block = False

    for raw in path.read_text().splitlines():
        line = raw.rstrip()
        if not line.strip():
            # a blank line ends a comment block; in spark-defaults.conf comments sit right above their key
            if comments:
                flush_comments()
            continue
        if line.lstrip().startswith(("#", "!")):
            comments.append(line.lstrip()[1:][1:] if line.lstrip()[1:2] == " " else line.lstrip()[1:])
            continue
        name, value = _split_property(line)
        key = Key(name, value, [], default=value)
        for c in comments:
            t, a = _TYPE.match(c.strip()), _ALSO.match(c.strip())
            if t:
                key.type, key.default = t.group(1), t.group(2).strip()
            elif a:
                key.aliases = [x.strip() for x in re.split(r",\s*|\s+and\s+", a.group(1)) if x.strip()]
            else:
                key.meaning.append(c)
        keys.append(key)
        comments = []
        first_block = False
    if comments:
        flush_comments()
    return ConfFile(path.name, header, keys, notes)


def conf_files(root: Path = ROOT) -> list[ConfFile]:
    return [parse_conf(root / "conf" / name) for name in CONF_FILES if (root / "conf" / name).exists()]


def _inline(text: str) -> str:
    """Comment text made safe for one markdown table cell (no HTML, no emphasis, no cell breaks)."""
    text = html.escape(text, quote=False)
    for ch in "*_[]|`":
        text = text.replace(ch, "\\" + ch)
    return text


def _meaning_cell(lines: list[str]) -> str:
    out: list[str] = []
    for line in lines:
        if line.startswith("  ") and line.strip():    # an example line in the comment
            out.append("<br>" + "&nbsp;" * 2 + _inline(line.strip()))
        else:
            out.append(_inline(line.strip()))
    return " ".join(x for x in out if x).replace(" <br>", "<br>")


def _default_cell(key: Key) -> str:
    if key.default in ("", "(none)"):
        return "(none)"
    return f"`{key.default}`" if "`" not in key.default else _inline(key.default)


def configuration_markdown(root: Path = ROOT) -> str:
    out = io.StringIO()
    for conf in conf_files(root):
        out.write(f"## conf/{conf.name}\n\n")
        header = [h for h in conf.header if h.strip()]
        if header:
            out.write(_inline(" ".join(h.strip() for h in header)) + "\n\n")
        out.write("| key | default | type | meaning |\n|---|---|---|---|\n")
        for key in conf.keys:
            name = f"`{key.name}`" + "".join(f"<br>(also `{a}`)" for a in key.aliases)
            out.write(f"| {name} | {_default_cell(key)} | {key.type or ''} | {_meaning_cell(key.meaning)} |\n")
        out.write("\n")
        for note in conf.notes:
            out.write("```properties\n" + "\n".join("# " + n if n else "#" for n in note) + "\n```\n\n")
    return out.getvalue()


# ------------------------------------------------------------------ the command line

def _cli_parser():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from spark_coord.cli import build_parser
    return build_parser()


def _subparsers(parser):
    import argparse
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return {}


def cli_markdown() -> str:
    """Every command's ``--help``, as ``spark-coord [COMMAND [ACTION]] --help`` prints it."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(CLI_WIDTH)
    try:
        parser = _cli_parser()
        out = io.StringIO()

        def emit(p, title: str, level: int) -> None:
            out.write(f"{'#' * level} `{title}`\n\n```text\n{p.format_help().rstrip()}\n```\n\n")

        emit(parser, "spark-coord", 2)
        for name, sub in _subparsers(parser).items():
            emit(sub, f"spark-coord {name}", 2)
            for action, child in _subparsers(sub).items():
                emit(child, f"spark-coord {name} {action}", 3)
        return out.getvalue()
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


# ------------------------------------------------------------------ mkdocs events

def benchmark_runs_markdown(results: Path = ROOT / "bench" / "results") -> str:
    """Where each benchmark figure comes from: a row per run of ``bench/results/*.json``."""
    import json

    out = io.StringIO()
    out.write("| figures | run | date | commit | machine | command |\n|---|---|---|---|---|---|\n")
    for path in sorted(results.glob("*.json")):
        for run in json.loads(path.read_text()).get("runs", []):
            m = run.get("machine", {})
            machine = m.get("description") or f"{m.get('cpus', '?')} CPUs, {m.get('platform', '')}"
            load = m.get("load_average")
            if load:
                machine += f", load average {load if isinstance(load, str) else ' / '.join(map(str, load))}"
            commit = (run.get("commit") or "?") + (" (with uncommitted changes)" if run.get("dirty") else "")
            out.write(f"| `bench/results/{path.name}` | {_inline(run.get('label', ''))} | {run.get('date', '?')} | "
                      f"`{commit}` | {_inline(machine)} | `{run.get('command', '')}` |\n")
    return out.getvalue()


GENERATORS = {
    "configuration": configuration_markdown,
    "cli-help": cli_markdown,
    "benchmark-runs": benchmark_runs_markdown,
}
_MARKER = re.compile(r"^<!--\s*generated:\s*([\w-]+)\s*-->\s*$", re.M)


def on_page_markdown(markdown: str, page, config, files) -> str:
    def replace(m: re.Match) -> str:
        name = m.group(1)
        if name not in GENERATORS:
            raise ValueError(f"{page.file.src_uri}: no generator named {name!r}")
        return GENERATORS[name]()
    return _MARKER.sub(replace, markdown)


def _plots_module():
    spec = importlib.util.spec_from_file_location("spark_coord_plots", ROOT / "scripts" / "plots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def on_files(files, config):
    from mkdocs.structure.files import File

    for name, svg in _plots_module().render_all(ROOT / "bench" / "results").items():
        files.append(File.generated(config, f"benchmarks/plots/{name}.svg", content=svg))
    return files
