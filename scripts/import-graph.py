"""The package graph of spark_coord (and of testkit, the chaos harness above it): which package
imports which, checked against its layers.

    python scripts/import-graph.py            # edges between packages, and any violation
    python scripts/import-graph.py --dot      # Graphviz: ... --dot | dot -Tsvg > packages.svg
    python scripts/import-graph.py --modules  # every import that crosses packages, file:line

Every ``import`` of a ``spark_coord`` or ``testkit`` module counts, wherever it stands:
at module level, inside a function (a lazy import is still a dependency) or under
``TYPE_CHECKING``.  A package is a subpackage of ``spark_coord`` (``client``,
``records``, ...), a top-level module (``config``, ``cluster``, ...), or a top-level
package of the checkout (``pyspark_coordkafka``, ``testkit``).  ``LAYERS`` lists them
from the bottom up; a package may import its own layer and the layers below, never one
above, packages must not import each other in a circle, and the modules of one package
must not either (type-only imports count: a module that needs another's types depends
on it).  ``testkit``, the chaos harness, is the top layer alone: it is not installed, so
nothing of the package may import it.  The exit status is 1 when any of this happens
(``tests/test_import_graph.py`` runs this).

Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: From the bottom up.  A package of one layer may import packages of its own layer (as long
#: as no circle forms) and of the layers below.
LAYERS: list[tuple[str, ...]] = [
    # primitives every part shares: names, error codes, hidden passwords, free ports
    ("spark_coord", "common", "errors", "secret", "net", "memory", "gc_pauses", "table", "sitepath"),
    ("config_base", "config"),  # properties files (the machinery) and their documented keys
    ("records",),           # record batch v2 codec, compression, murmur2, decode to Arrow
    ("wire",),              # framing and one module per API
    ("log",),               # partition logs on disk
    ("zk",),                # ZooKeeper paths, client, embedded server
    ("security",),          # policy and mechanisms: ACLs, SASL, SCRAM, TLS contexts, client settings
    ("configs",),           # Kafka's config resources (group, topic, broker): model, validation, ZooKeeper store
    ("share",),             # share partitions (KIP-932) on their leaders: record states, sessions, persistence
    ("client",),            # the one client transport (sockets, framing, TLS/SASL handshake) and clients
    ("coordinator",),       # groups, rebalancing, offsets (no sockets of its own)
    ("consumer",),          # the thin consumer (a group member: the coordinator's channel or KIP-848)
    ("metrics",),           # Prometheus endpoint, status page, lag: reads the coordinator's state and log ends
    ("broker",),            # the broker server, its handlers and security
    ("spark",),             # the coordkafka data source
    # processes and tools: the CLI, local clusters, the standalone coordinator's process
    ("cli", "cluster", "demo", "standalone", "pyspark_coordkafka"),
    # the chaos harness, beside the package and not installed (tests/ and bench/ use it)
    ("testkit",),
]
#: The checkout's packages whose modules' imports are read.
PACKAGES = ("spark_coord", "pyspark_coordkafka", "testkit")
#: Imports of these count (a third-party import is none of the graph's business).
TARGETS = ("spark_coord", "testkit")


@dataclass(frozen=True)
class Import:
    source: str      # importing module, dotted
    target: str      # imported module, dotted
    path: Path
    line: int


def package_of(module: str) -> str:
    """``spark_coord.client.connection`` -> ``client``; ``spark_coord.config`` -> ``config``;
    ``spark_coord`` -> ``spark_coord``; ``pyspark_coordkafka`` -> itself."""
    parts = module.split(".")
    if parts[0] != "spark_coord":
        return parts[0]
    return parts[1] if len(parts) > 1 else "spark_coord"


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _absolute(source: str, is_package: bool, level: int, module: str | None) -> str:
    """The absolute name ``from <level dots><module> import ...`` in module ``source`` refers to."""
    if level == 0:
        return module or ""
    parts = source.split(".")
    if not is_package:
        parts = parts[:-1]
    parts = parts[:len(parts) - (level - 1)]
    return ".".join(parts + ([module] if module else []))


def _is_module(dotted: str, root: Path) -> bool:
    base = root.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> list[Import]:
    """Every import of a spark_coord or testkit module by a module of ``packages`` under ``root``."""
    out = []
    for top in packages:
        for path in sorted((root / top).rglob("*.py")):
            source = module_name(path, root)
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    base = _absolute(source, path.name == "__init__.py", node.level, node.module)
                    # ``from spark_coord import config`` imports the module spark_coord.config
                    targets = [f"{base}.{a.name}" if _is_module(f"{base}.{a.name}", root) else base
                               for a in node.names]
                else:
                    continue
                for target in dict.fromkeys(targets):
                    if target.split(".")[0] in TARGETS:
                        out.append(Import(source, target, path.relative_to(root), node.lineno))
    return out


def package_edges(found: list[Import]) -> dict[tuple[str, str], list[Import]]:
    edges: dict[tuple[str, str], list[Import]] = {}
    for imp in found:
        a, b = package_of(imp.source), package_of(imp.target)
        if a != b:
            edges.setdefault((a, b), []).append(imp)
    return edges


def layer_of(layers: list[tuple[str, ...]]) -> dict[str, int]:
    return {pkg: i for i, names in enumerate(layers) for pkg in names}


def cycles(nodes: set[str], edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one package (Tarjan), each sorted."""
    graph: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def violations(found: list[Import], layers: list[tuple[str, ...]] = LAYERS) -> list[str]:
    """What breaks the layering: packages missing from ``layers``, imports reaching up a layer,
    circles of packages.  Empty when the graph is clean."""
    layer = layer_of(layers)
    edges = package_edges(found)
    problems = []
    packages = {package_of(i.source) for i in found} | {package_of(i.target) for i in found}
    for pkg in sorted(packages - set(layer)):
        problems.append(f"package {pkg!r} is in no layer of LAYERS (scripts/import-graph.py)")
    for (a, b), where in sorted(edges.items()):
        if a in layer and b in layer and layer[b] > layer[a]:
            for imp in where:
                problems.append(f"upward import: {imp.path}:{imp.line} {imp.source} imports {imp.target} "
                                f"({a} is below {b})")
    for component in cycles(packages, set(edges)):
        inner = [f"{a}->{b} ({edges[(a, b)][0].path}:{edges[(a, b)][0].line})"
                 for a in component for b in component if (a, b) in edges]
        problems.append(f"import circle between {', '.join(component)}: {'; '.join(inner)}")
    for pkg, modules in sorted(module_edges(found).items()):
        for component in cycles({m for e in modules for m in e}, set(modules)):
            inner = [f"{a}->{b} ({modules[(a, b)][0].path}:{modules[(a, b)][0].line})"
                     for a in component for b in component if (a, b) in modules]
            problems.append(f"import circle inside {pkg}: {', '.join(component)}: {'; '.join(inner)}")
    return problems


def module_edges(found: list[Import]) -> dict[str, dict[tuple[str, str], list[Import]]]:
    """Per package, the imports between its own modules (a package's ``__init__`` counts as a module
    of it): circles there are refused too, type-only imports (``if TYPE_CHECKING:``) included -- a
    module that needs another's types depends on it."""
    out: dict[str, dict[tuple[str, str], list[Import]]] = {}
    for imp in found:
        if imp.source != imp.target and package_of(imp.source) == package_of(imp.target):
            out.setdefault(package_of(imp.source), {}).setdefault((imp.source, imp.target), []).append(imp)
    return out


def dot(found: list[Import], layers: list[tuple[str, ...]] = LAYERS) -> str:
    """Graphviz source: one row per layer, bottom layer at the bottom, an edge per package import."""
    edges = package_edges(found)
    out = ["digraph spark_coord {", "  rankdir=BT;", '  node [shape=box, fontname="Helvetica"];']
    for i, names in enumerate(layers):
        ranked = " ".join(f'"{n}";' for n in names)
        out.append(f"  {{ rank=same; {ranked} }}  // layer {i}")
    for (a, b), where in sorted(edges.items()):
        out.append(f'  "{a}" -> "{b}" [tooltip="{len(where)} import(s)"];')
    out.append("}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dot", action="store_true", help="print the package graph as Graphviz source")
    p.add_argument("--modules", action="store_true", help="list every import that crosses packages")
    args = p.parse_args(argv)
    found = imports()
    if args.dot:
        sys.stdout.write(dot(found))
    elif args.modules:
        for (a, b), where in sorted(package_edges(found).items()):
            for imp in where:
                sys.stdout.write(f"{a} -> {b}: {imp.path}:{imp.line} {imp.source} imports {imp.target}\n")
    else:
        layer = layer_of(LAYERS)
        by_source: dict[str, set[str]] = {}
        for a, b in package_edges(found):
            by_source.setdefault(a, set()).add(b)
        for pkg in sorted(by_source, key=lambda n: (layer.get(n, -1), n)):
            sys.stdout.write(f"{pkg} (layer {layer.get(pkg, '?')}) -> {', '.join(sorted(by_source[pkg]))}\n")
    problems = violations(found)
    for problem in problems:
        sys.stderr.write(problem + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
