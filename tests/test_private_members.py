"""No module of the package reaches into another's underscore members.

``obj._name`` is the owner's own business: a class's methods use it on ``self``/``cls`` (or on
another instance of a class of the same module, as ``__eq__`` does), and a module's private
functions are used by that module.  Everywhere else, what one part needs from another is a
public name, so a reader of a class sees every way in.  The check is by name, per module: an
underscore attribute reached on anything but ``self``/``cls`` must be one the same module
defines (a method, a ``self._x`` it assigns, a class attribute) -- or a named tuple's or an
enum's own API (``_replace``, ``_make``, ...).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("spark_coord", "pyspark_coordkafka")
#: Underscore names that are the public API of the standard library's types.
STDLIB_API = {"_make", "_replace", "_asdict", "_fields", "_field_defaults", "_value2member_map_",
              "_missing_", "_name_", "_value_", "_generate_next_value_"}


def _defined(tree: ast.AST) -> set[str]:
    """The underscore names a module defines: functions and methods, attributes it assigns on
    ``self``/``cls``, class-level names."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def reaches_in(source: str) -> list[tuple[int, str]]:
    """``(line, expression)`` of each underscore member ``source`` reaches on something it does not own."""
    tree = ast.parse(source)
    own = _defined(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__") or name in STDLIB_API or name in own:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_check_finds_a_reach_into_another_modules_members():
    src = ("import other\n"
           "class A:\n"
           "    def __init__(self):\n"
           "        self._mine = 1\n"
           "    def same(self, a):\n"
           "        return a._mine + self._mine\n"
           "def f(c, p):\n"
           "    return c._theirs(), other._helper, p._replace(x=1)\n")
    assert sorted(reaches_in(src)) == [(8, "c._theirs"), (8, "other._helper")]


def test_no_module_of_the_package_reaches_into_anothers_underscore_members():
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, expr in reaches_in(path.read_text()):
                offenders.append(f"{path.relative_to(ROOT).as_posix()}:{line}: {expr}")
    assert not offenders, "give the owner a public method or attribute instead:\n" + "\n".join(offenders)
