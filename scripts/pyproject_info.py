"""What the set-up scripts need from pyproject.toml, so they never repeat it.

    python scripts/pyproject_info.py requirements [--extra test] [--without pyspark]
        print the project's dependencies (and an extra's), one requirement a line
    python scripts/pyproject_info.py launchers BINDIR
        write a launcher in BINDIR for each ``[project.scripts]`` entry, run by this Python

Standard library only (``tomllib``; on Python 3.10 the ``tomli`` backport).
"""

from __future__ import annotations

import argparse
import os
import re
import stat
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

LAUNCHER = """#!{python}
import sys
from {module} import {function}
sys.exit({function}())
"""


def project() -> dict:
    with open(PYPROJECT, "rb") as f:
        return tomllib.load(f)["project"]


def requirements(extras: list[str], without: list[str]) -> list[str]:
    meta = project()
    reqs = list(meta["dependencies"])
    pending, seen = list(extras), set()
    while pending:              # an extra may name another of this project's: "spark-coord[docs]"
        extra = pending.pop(0)
        if extra in seen:
            continue
        seen.add(extra)
        for req in meta["optional-dependencies"][extra]:
            own = re.match(rf"^{re.escape(meta['name'])}\[([\w,\s-]+)\]$", req.strip(), re.I)
            if own:
                pending += [x.strip() for x in own.group(1).split(",")]
            else:
                reqs.append(req)
    unwanted = {name.lower() for name in without}
    return [r for r in reqs if re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() not in unwanted]


def write_launchers(bindir: Path) -> list[Path]:
    written = []
    for name, target in project().get("scripts", {}).items():
        module, _, function = target.partition(":")
        path = bindir / name
        path.write_text(LAUNCHER.format(python=sys.executable, module=module, function=function))
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("requirements")
    r.add_argument("--extra", action="append", default=[])
    r.add_argument("--without", action="append", default=[], help="leave out this distribution")
    s = sub.add_parser("launchers")
    s.add_argument("bindir", type=Path)
    args = p.parse_args(argv)
    if args.what == "requirements":
        sys.stdout.write("".join(req + os.linesep for req in requirements(args.extra, args.without)))
    else:
        write_launchers(args.bindir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
