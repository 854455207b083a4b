"""Every shell example of README.md and of the docs (docs/**/*.md) runs as written, against a local cluster.

The examples are the indented code blocks and the ``sh``/``bash``/``shell``/``console``
fences of README.md, then of the docs' pages in the order of the site's navigation
(mkdocs.yml; pages it does not list come last, by name).  Each block runs with bash
(``set -eo pipefail``) from the checkout's root with ``.venv/bin`` first on PATH, in that
order, against one 3-broker cluster; the broker address ``127.0.0.1:9092`` in an example
stands for that cluster's bootstrap list.

A block is run unless an HTML comment right before it (blank lines may separate them)
says otherwise -- docs/contributing.md, "Examples are tests", documents this:

- ``<!-- readme-test: skip REASON -->``: not run (set-up commands, a Spark cluster, a
  synopsis that is not a command, a benchmark);
- ``<!-- readme-test: needs TOOL -->``: run only when TOOL is on PATH;
- ``<!-- readme-test: background -->``: each line starts in the background and keeps
  running while the later blocks run (a command that runs until interrupted); at the
  end it gets SIGTERM and must exit cleanly.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import local_cluster

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MKDOCS = ROOT / "mkdocs.yml"
README_BOOTSTRAP = "127.0.0.1:9092"
#: one example may take this long: a pipeline run (a Spark Connect server and two flows) took over
#: 120 s with the suite's four workers on two cores
BLOCK_TIMEOUT = 300
SHELL_FENCES = {"sh", "bash", "shell", "console"}
_MARKER = re.compile(r"^<!--\s*readme-test:\s*(skip|needs|background)\b\s*(.*?)\s*-->\s*$")
_FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")


@dataclass
class Example:
    line: int              # 1-based line of README where the block starts
    text: str              # the commands, dedented
    mode: str = "run"      # run, skip, needs, background
    argument: str = ""     # skip: the reason; needs: the tool
    source: str = "README.md"

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


def documents() -> list[Path]:
    """README.md, then the docs' pages in the navigation's order, then any page it does not list."""
    nav = MKDOCS.read_text().split("\nnav:", 1)[1] if MKDOCS.exists() else ""
    listed = [DOCS / m for m in re.findall(r"^\s*-\s*(?:[^\n]*?:\s*)?([\w./-]+\.md)\s*$", nav, re.M)]
    pages = [p for p in dict.fromkeys(listed) if p.exists()]
    pages += sorted(p for p in DOCS.rglob("*.md") if p not in pages)
    return [README] + pages


def all_examples() -> list[Example]:
    found: list[Example] = []
    for path in documents():
        source = path.relative_to(ROOT).as_posix()
        try:
            page = examples(path.read_text())
        except ValueError as e:
            raise ValueError(f"{source}: {e}") from None
        for e in page:
            e.source = source
        found.extend(page)
    return found


def examples(markdown: str) -> list[Example]:
    """The shell examples of ``markdown`` with their markers; ValueError for a marker that
    precedes no example or lacks its argument."""
    lines = markdown.splitlines()
    found: list[Example] = []
    marker: tuple[int, str, str] | None = None
    i, previous_blank = 0, True
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        m = _MARKER.match(line.strip())
        if m:
            if marker is not None:
                raise ValueError(f"README.md:{marker[0] + 1}: readme-test marker not followed by an example")
            marker = (i, m.group(1), m.group(2))
            if marker[1] in ("skip", "needs") and not marker[2]:
                raise ValueError(f"README.md:{i + 1}: readme-test {marker[1]} needs a "
                                 f"{'reason' if marker[1] == 'skip' else 'tool name'}")
            i += 1
            continue
        if fence:
            closing = fence.group(1)
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(closing)), len(lines))
            if fence.group(2).lower() in SHELL_FENCES:
                found.append(_example(i + 1, lines[i + 1:end], marker))
                marker = None
            elif marker is not None:
                raise ValueError(f"README.md:{marker[0] + 1}: readme-test marker before a {fence.group(2) or 'plain'} "
                                 "fence, which is not a shell example")
            i, previous_blank = end + 1, False
            continue
        if line.startswith("    ") and line.strip() and previous_blank:
            start, block = i, []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                block.append(lines[i][4:])
                i += 1
            found.append(_example(start + 1, block, marker))
            marker = None
            previous_blank = True
            continue
        if line.strip() and marker is not None:
            raise ValueError(f"README.md:{marker[0] + 1}: readme-test marker not followed by an example")
        previous_blank = not line.strip()
        i += 1
    if marker is not None:
        raise ValueError(f"README.md:{marker[0] + 1}: readme-test marker not followed by an example")
    return found


def _example(line: int, body: list[str], marker: tuple[int, str, str] | None) -> Example:
    text = "\n".join(body).strip("\n")
    if marker is None:
        return Example(line, text)
    return Example(line, text, marker[1], marker[2])


# ---------------------------------------------------------------- the convention itself

def test_parser_reads_blocks_markers_and_fences():
    md = "\n".join([
        "Intro", "", "    echo one", "    echo two", "", "text", "",
        "<!-- readme-test: skip needs the moon -->", "", "    moon --land", "",
        "```python", "print('not shell')", "```", "",
        "<!-- readme-test: needs kcat -->", "```sh", "kcat -L", "```", "",
        "<!-- readme-test: background -->", "    sleep 100", "",
        "1. a list item", "   continued", "",
    ])
    got = [(e.line, e.text, e.mode, e.argument) for e in examples(md)]
    assert got == [(3, "echo one\necho two", "run", ""), (10, "moon --land", "skip", "needs the moon"),
                   (17, "kcat -L", "needs", "kcat"), (22, "sleep 100", "background", "")]


@pytest.mark.parametrize("md, problem", [
    ("<!-- readme-test: skip why -->\n\nsome text\n", "not followed by an example"),
    ("<!-- readme-test: skip -->\n\n    ls\n", "needs a reason"),
    ("<!-- readme-test: needs kcat -->\n```python\nx = 1\n```\n", "not a shell example"),
    ("    ls\n\n<!-- readme-test: background -->\n", "not followed by an example"),
])
def test_misplaced_markers_are_errors(md, problem):
    with pytest.raises(ValueError, match=problem):
        examples(md)


def test_readme_markers_are_well_formed():
    found = all_examples()
    assert any(e.mode == "run" for e in found), "README and the docs have no example that the test runs"


def test_docs_are_read_in_navigation_order():
    paths = [p.relative_to(ROOT).as_posix() for p in documents()]
    assert paths[0] == "README.md"
    for page in ("docs/getting-started.md", "docs/groups/kip848.md", "docs/operating/cli.md"):
        assert page in paths, f"{page} is not read for examples"
    assert paths.index("docs/groups/kip848.md") < paths.index("docs/operating/cli.md")


def test_setup_commands_stay_in_readme():
    """The two set-up commands of README.md, each marked so the example run leaves them alone."""
    setup = [e for e in examples(README.read_text()) if e.mode == "skip" and e.argument.startswith("set-up command")]
    assert [e.text for e in setup] == ["./quickstart.sh", "./run-tests.sh"]


# ---------------------------------------------------------------- running README

@pytest.fixture(scope="module")
def readme_cluster(zookeeper, tmp_path_factory):
    with local_cluster(zookeeper, tmp_path_factory.mktemp("readme"), 3, "readme", {"num.partitions": 3}) as c:
        yield c


def _env(tmp_path: Path) -> dict:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(ROOT / ".venv" / "bin"), env.get("PATH", "")])
    env["HOME"] = env.get("HOME", str(tmp_path))
    env.pop("PYTHONPATH", None)
    # what ./spark-connect.sh and ./spark-pipelines.sh keep (pid files, tables, checkpoints): in the
    # test's directory, not the checkout's tmp/, so no run sees an earlier one's
    env["SPARK_CONNECT_DIR"] = str(tmp_path / "spark-connect")
    env["SPARK_PIPELINES_STATE"] = str(tmp_path / "spark-pipelines")
    return env


def _stop_connect_servers(env: dict) -> None:
    """Stop a Spark Connect server an example started and a failed later example left running."""
    for pidfile in sorted(Path(env["SPARK_CONNECT_DIR"]).glob("connect-*.pid")):
        port = pidfile.stem.split("-", 1)[1]
        subprocess.run([str(ROOT / "spark-connect.sh"), "stop", "--port", port], cwd=ROOT, env=env,
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=120)


def _script(example: Example, bootstrap: str) -> str:
    return example.text.replace(README_BOOTSTRAP, bootstrap)


@pytest.mark.timeout(900)  # every example of the README and the docs, Spark runs among them
def test_readme_shell_examples_run(readme_cluster, tmp_path):
    found = all_examples()
    env = _env(tmp_path)
    background: list[tuple[Example, str, subprocess.Popen, Path]] = []
    ran, skipped = [], []
    try:
        for example in found:
            if example.mode == "skip" or (example.mode == "needs" and shutil.which(example.argument) is None):
                skipped.append(example)
                continue
            script = _script(example, readme_cluster.bootstrap)
            if example.mode == "background":
                for n, line in enumerate(script.splitlines()):
                    if not line.strip():
                        continue
                    log = tmp_path / f"background-{example.source.replace('/', '_')}-{example.line}-{n}.log"
                    with open(log, "wb") as out:
                        proc = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=ROOT, env=env,
                                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                                start_new_session=True)
                    background.append((example, line, proc, log))
                ran.append(example)
                continue
            try:
                proc = subprocess.run(["bash", "-c", "set -eo pipefail\n" + script], cwd=ROOT, env=env,
                                      stdin=subprocess.DEVNULL, capture_output=True, timeout=BLOCK_TIMEOUT)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{example.where}: still running after {BLOCK_TIMEOUT} s (mark a command that runs "
                            f"until interrupted with <!-- readme-test: background -->):\n{example.text}")
            err = proc.stderr.decode(errors="replace")
            assert proc.returncode == 0, f"{example.where} exited {proc.returncode}:\n{example.text}\n{err[-3000:]}"
            assert "Traceback" not in err, f"{example.where}:\n{err[-3000:]}"
            ran.append(example)
        for example, line, proc, log in background:
            assert proc.poll() is None, (f"{example.where}: `{line}` ended early ({proc.returncode}):\n"
                                         + log.read_text(errors="replace")[-3000:])
    finally:
        _stop_connect_servers(env)
        for _example, _line, proc, _log in background:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
    for example, line, proc, log in background:
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            pytest.fail(f"{example.where}: `{line}` did not stop on SIGTERM")
        text = log.read_text(errors="replace")
        assert code == 0 and "Traceback" not in text, f"{example.where}: `{line}` exited {code}:\n{text[-3000:]}"
    assert ran, f"no example of README or the docs ran ({len(skipped)} skipped)"
