"""Every DESIGN.md heading the code cites exists, so renaming a heading fails here.

Code, tests and benchmarks cite the design by a heading of DESIGN.md, quoted as written after
its ``## ``: ``DESIGN.md`` followed by the heading in double quotes (whitespace inside the
quotes may wrap).  The file has no numbered sections, so a citation by number ("DESIGN
section 6", "DESIGN 9, invariant 1") says nothing to a reader and fails the test.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "DESIGN.md"
#: Where the code lives (those of these directories that exist).
CODE_DIRS = ("spark_coord", "pyspark_coordkafka", "testkit", "tests", "bench", "scripts", "jobs")
CITATION = re.compile(r'DESIGN\.md\s+"([^"]+)"')
OLD_FORM = re.compile(r"\bDESIGN (?:sections? )?\d")


def headings() -> set[str]:
    return {" ".join(m.split()) for m in re.findall(r"^#{1,6} (.+?)\s*$", DESIGN.read_text(), re.M)}


def sources() -> list[Path]:
    me = Path(__file__).resolve()
    return sorted(p for d in CODE_DIRS if (ROOT / d).is_dir() for p in (ROOT / d).rglob("*.py")
                  if p.resolve() != me and ".venv" not in p.parts)


def _where(path: Path, text: str, offset: int) -> str:
    return f"{path.relative_to(ROOT).as_posix()}:{text.count(chr(10), 0, offset) + 1}"


def test_design_md_has_the_headings_we_read():
    assert "One holder at a time (invariant 1)" in headings()


def test_every_cited_design_heading_exists():
    known = headings()
    cited, missing = 0, []
    for path in sources():
        text = path.read_text(errors="replace")
        for m in CITATION.finditer(text):
            cited += 1
            heading = " ".join(m.group(1).split())
            if heading not in known:
                missing.append(f"{_where(path, text, m.start())}: DESIGN.md has no heading {heading!r}")
    assert cited, "no DESIGN.md citation found: has the citation form changed?"
    assert not missing, "\n".join(missing + ["DESIGN.md's headings: " + ", ".join(sorted(known))])


def test_no_design_citation_by_section_number():
    failing = []
    for path in sources():
        text = path.read_text(errors="replace")
        for m in OLD_FORM.finditer(text):
            line = text[text.rfind("\n", 0, m.start()) + 1:text.find("\n", m.start())].strip()
            failing.append(f"{_where(path, text, m.start())}: {line}")
    assert not failing, ("DESIGN.md has no numbered sections; cite its heading instead, as "
                         'DESIGN.md "One holder at a time (invariant 1)":\n' + "\n".join(failing))
