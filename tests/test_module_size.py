"""No module of the package grows past 800 lines: a module that large holds more than one idea
(the classic door once held offsets, group admin and the rebalance delay beside the protocol), and
splitting it later, when many depend on its insides, costs more than keeping it small now."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "spark_coord"
MAX_LINES = 800


def test_no_module_is_over_800_lines():
    sizes = {p.relative_to(PACKAGE.parent).as_posix(): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert sizes, "no module found"
    over = {name: n for name, n in sorted(sizes.items()) if n > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines (split each by what it does): {over}"
