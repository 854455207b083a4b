"""Plain-text tables for CLI output (``topics describe``, ``groups describe``)."""

from __future__ import annotations

from typing import Sequence


def format_table(rows: Sequence[dict], columns: Sequence[str], headers: Sequence[str] | None = None) -> str:
    """Left-aligned text columns, right-aligned numbers, one header line and a rule."""
    headers = list(headers or [c.upper() for c in columns])
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]
    numeric = [all(isinstance(r.get(c), (int, float)) for r in rows) and rows for c in columns]

    def line(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric, strict=True)).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out.extend(line(row) for row in cells)
    return "\n".join(out)


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return str(v)
