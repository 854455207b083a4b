"""Checks of Kafka transactions on journals of transactional writers and readers (``testkit.txn_member``).

Inputs: the transactions the writers journaled (``transactions``: id -> values per partition, the
outcome the client saw), the log read at the end of the run with ``read_committed`` and with
``read_uncommitted`` (partition -> [(offset, value)], every transaction ended by then: the last stable
offset at the log end), and what the readers journaled ((partition, offset, value) per reader, with its
isolation level).  ``check`` returns a ``TxnResult``; its violations:

- ``lost_write``: a transaction the client saw committed with a value missing from the committed log;
- ``aborted_read``: a value read with read_committed (by a reader, or in the final read) of a
  transaction the client saw aborted, or that the log shows aborted (in the log, not read committed at
  the end) -- Jepsen's G1a;
- ``partial``: a transaction with some but not all of its values visible to read_committed at the
  end (atomicity; an indeterminate transaction must resolve all or nothing too);
- ``duplicate``: a value at two offsets (of the log read uncommitted, or in any reader's journal);
- ``inconsistent_offsets``: a reader saw at a (partition, offset) another value than the log holds;
- ``uncommitted_visible``: a value read committed that is in no journaled transaction at all;
- ``realtime_cycle``: a cycle in the order of appends (below);
- ``unread``: a reader that never read every value of the final log at its isolation level.

The cycle check.  Jepsen's Kafka workload infers write-write dependencies from each partition's
order and write-read ones from what a transaction read; with writers that only write, the only
edges are write-write.  Kafka orders each partition and nothing across partitions: T1 before T2 on
p and T2 before T1 on q is a G0 cycle Kafka allows (its transactions give atomic visibility, not
serializability across partitions), so such a cycle is not flagged.  What Kafka does promise is
real-time: a writer's next transaction starts after its commit returned, when every batch of that
one is acknowledged, so each of its appends precedes each append of every later transaction of the
writer.  The check builds a graph of appends -- a node per (transaction, partition), an edge from
each committed append to the next committed one in the partition's log, and from every append of a
transaction whose commit the client saw returned to every append of the writer's next committed
transaction -- and reports each strongly connected component with more than one node.  Each
partition's order is a total one, and within a transaction nothing is ordered, so a cycle needs a
writer's order: a later transaction's append before an earlier one's on some partition, directly or
through other writers (T_a1 before T_a2 in writer a; T_a2 before T_b1 on p; T_b1 before T_b2 in b;
T_b2 before T_a1 on q: impossible in real time).  Consume-transform-produce transactions (reads
inside transactions, TxnOffsetCommit) would add write-read edges; none are run here.

Indeterminate transactions (``unknown``: the commit raised, or no ``end`` in the journal) are
resolved by the final read: ``committed`` when all their values are visible read_committed, ``aborted``
when none are, a ``partial`` violation otherwise.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Iterable, Mapping

#: partition -> [(offset, value)] in offset order
Log = Mapping[int, list[tuple[int, str]]]


@dataclass
class Txn:
    id: str
    writer: str
    #: partition -> values, in the order sent
    values: dict[int, list[str]]
    #: committed / aborted / unknown, as the client saw it
    outcome: str
    #: the position of the transaction in its writer's journal
    seq: int = 0


@dataclass
class TxnResult:
    VIOLATIONS = ("lost_write", "aborted_read", "partial", "duplicate", "inconsistent_offsets",
                  "uncommitted_visible", "realtime_cycle", "unread")
    transactions: int = 0
    committed: int = 0
    aborted: int = 0
    unknown: int = 0
    #: indeterminate transactions the final read resolved: committed, aborted (partial ones are violations)
    unknown_committed: int = 0
    unknown_aborted: int = 0
    #: values read by read_uncommitted readers of transactions that ended aborted (aborted data is in the log)
    uncommitted_reads_of_aborted: int = 0
    reads: dict = field(default_factory=dict)
    lost_write: list[str] = field(default_factory=list)
    aborted_read: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)
    duplicate: list[str] = field(default_factory=list)
    inconsistent_offsets: list[str] = field(default_factory=list)
    uncommitted_visible: list[str] = field(default_factory=list)
    realtime_cycle: list[str] = field(default_factory=list)
    #: readers that never read, by the end of the run, every value of the final log at their level
    #: (filled by the run, which knows when its readers stopped)
    unread: list[str] = field(default_factory=list)

    @property
    def violations(self) -> list[str]:
        return [f"txn {k}: {v}" for k in self.VIOLATIONS for v in getattr(self, k)]

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        return (f"transactions: {self.transactions} ({self.committed} committed, {self.aborted} aborted, "
                f"{self.unknown} indeterminate: {self.unknown_committed} resolved committed, "
                f"{self.unknown_aborted} aborted); read_uncommitted reads of aborted values "
                f"{self.uncommitted_reads_of_aborted}; anomalies: "
                + ", ".join(f"{k} {len(getattr(self, k))}" for k in self.VIOLATIONS))


def transactions(journals: Mapping[str, list[dict]]) -> dict[str, Txn]:
    """The transactions of writer journals (name -> events of ``testkit.txn_member writer``): a
    ``begin`` without an ``end`` is ``unknown``."""
    out: dict[str, Txn] = {}
    for name, events in journals.items():
        writer = name.split(".")[0]
        for e in events:
            if e["ev"] == "begin":
                out[e["txn"]] = Txn(e["txn"], writer, {int(p): list(v) for p, v in e["values"].items()}, "unknown",
                                    seq=0)
            elif e["ev"] == "end" and e["txn"] in out:
                out[e["txn"]].outcome = e["outcome"]
    # each writer's transactions in the order it ran them (incarnations in start order, then journal order)
    order: dict[str, int] = defaultdict(int)
    for name in sorted(journals, key=lambda n: (n.split(".")[0], _incarnation(n))):
        for e in journals[name]:
            if e["ev"] == "begin":
                t = out[e["txn"]]
                t.seq = order[t.writer]
                order[t.writer] += 1
    return out


def _incarnation(name: str) -> int:
    _, _, n = name.partition(".")
    return int(n) if n.isdigit() else 0


def reads(journals: Mapping[str, list[dict]]) -> list[tuple[int, int, str]]:
    """(partition, offset, value) of every ``recs`` line of a reader journal."""
    return [(e["p"], o, v) for events in journals.values() for e in events if e["ev"] == "recs"
            for o, v in zip(e["offs"], e["vals"], strict=True)]


def check(txns: Mapping[str, Txn], committed_log: Log, uncommitted_log: Log,
          readers: Mapping[str, tuple[str, Iterable[tuple[int, int, str]]]]) -> TxnResult:
    """Every check of the module docstring.  ``readers``: name -> (isolation level, its reads)."""
    r = TxnResult(transactions=len(txns))
    owner = {v: t.id for t in txns.values() for vals in t.values.values() for v in vals}
    visible = {v: (p, o) for p, recs in committed_log.items() for o, v in recs}
    in_log = {v for recs in uncommitted_log.values() for _, v in recs}
    at_offset = {(p, o): v for p, recs in uncommitted_log.items() for o, v in recs}
    final: dict[str, str] = {}
    for t in txns.values():
        vals = [v for vs in t.values.values() for v in vs]
        seen = [v for v in vals if v in visible]
        r.committed += t.outcome == "committed"
        r.aborted += t.outcome == "aborted"
        r.unknown += t.outcome == "unknown"
        if t.outcome == "committed" and len(seen) < len(vals):
            missing = sorted(set(vals) - set(seen))
            r.lost_write.append(f"{t.id} committed (client saw it), {len(missing)} of {len(vals)} values not "
                                f"read committed at the end: {missing[:4]}"
                                + (f" ({sum(v in in_log for v in missing)} of them in the log)" if missing else ""))
        elif t.outcome == "aborted" and seen:
            r.aborted_read.append(f"{t.id} aborted (client saw it): read committed at the end "
                                  f"{[(v, visible[v]) for v in seen[:4]]}")
        elif 0 < len(seen) < len(vals):
            missing = sorted(set(vals) - set(seen))
            r.partial.append(f"{t.id} ({t.outcome}): {len(seen)} of {len(vals)} values read committed at the end; "
                             f"missing {missing[:4]}, visible {[(v, visible[v]) for v in seen[:4]]}")
        if t.outcome == "unknown":
            if len(seen) == len(vals):
                r.unknown_committed += 1
            elif not seen:
                r.unknown_aborted += 1
        final[t.id] = ("committed" if seen and len(seen) == len(vals) else "aborted" if not seen else "partial")
    for v in visible:
        if v not in owner:
            r.uncommitted_visible.append(f"{v} at {visible[v]} is read committed and in no transaction journaled")
    # duplicates in the log
    places: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for p, recs in uncommitted_log.items():
        for o, v in recs:
            places[v].append((p, o))
    for v, where in sorted(places.items()):
        if len(where) > 1:
            r.duplicate.append(f"{v} ({owner.get(v, '?')}) in the log at {sorted(where)}")
    for name, (level, recs) in sorted(readers.items()):
        seen_at: dict[str, set[tuple[int, int]]] = defaultdict(set)
        counts = {"records": 0, "aborted_values": 0}
        for p, o, v in recs:
            counts["records"] += 1
            seen_at[v].add((p, o))
            if (p, o) in at_offset and at_offset[(p, o)] != v:
                r.inconsistent_offsets.append(f"{name} read {v} at {p}/{o}, where the log holds {at_offset[(p, o)]}")
            t = txns.get(owner.get(v, ""))
            ended_aborted = t is not None and (t.outcome == "aborted" or final.get(t.id) == "aborted")
            if ended_aborted:
                counts["aborted_values"] += 1
                if level == "read_committed":
                    why = "the client saw it aborted" if t.outcome == "aborted" else "the log shows it aborted"
                    r.aborted_read.append(f"{name} (read_committed) read {v} at {p}/{o} of {t.id}: {why}")
                else:
                    r.uncommitted_reads_of_aborted += 1
        for v, where in seen_at.items():
            if len(where) > 1:
                r.duplicate.append(f"{name} read {v} at {sorted(where)}")
        r.reads[name] = dict(counts, isolation=level)
    r.realtime_cycle = realtime_cycles(txns, committed_log)
    return r


def realtime_cycles(txns: Mapping[str, Txn], committed_log: Log) -> list[str]:
    """The strongly connected components (more than one node) of the append graph of the module
    docstring: nodes (transaction, partition) of committed values, an edge to the next committed
    transaction's append on each partition, and from each append of a transaction the client saw
    committed to each append of every later transaction of its writer (through a chain of hub nodes)."""
    owner = {v: t.id for t in txns.values() for vals in t.values.values() for v in vals}
    edges: dict[object, set[object]] = defaultdict(set)
    appends: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for p, recs in committed_log.items():
        prev = None
        for _, v in recs:
            tid = owner.get(v)
            if tid is None:
                continue
            node = (tid, p)
            appends[tid].add(node)
            if prev is not None and prev != node:
                edges[prev].add(node)
            prev = node
    by_writer: dict[str, list[Txn]] = defaultdict(list)
    for t in txns.values():
        if appends.get(t.id):
            by_writer[t.writer].append(t)
    for ts in by_writer.values():
        ts.sort(key=lambda t: t.seq)
        # hub "after a": precedes every append of every later transaction of the writer (a chain of hubs);
        # reached from a's appends only when a's commit returned (else they may be retried late: no order)
        for a, b in zip(ts, ts[1:], strict=False):
            hub = ("after", a.id)
            if a.outcome == "committed":
                for node in appends[a.id]:
                    edges[node].add(hub)
            edges[hub] = set(appends[b.id]) | {("after", b.id)}
    out = []
    for comp in _sccs(edges):
        if len(comp) > 1:
            named = sorted(str(n) for n in comp if n[0] != "after")
            out.append(f"cycle through {len(named)} appends: {named[:8]}")
    return out


def _sccs(edges: Mapping[object, set[object]]) -> list[list]:
    """Tarjan's strongly connected components, iteratively."""
    index: dict[object, int] = {}
    low: dict[object, int] = {}
    on_stack: set[object] = set()
    stack: list[object] = []
    out: list[list] = []
    nodes = set(edges) | {m for ms in edges.values() for m in ms}
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()), key=str)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for m in it:
                if m not in index:
                    index[m] = low[m] = counter
                    counter += 1
                    stack.append(m)
                    on_stack.add(m)
                    work.append((m, iter(sorted(edges.get(m, ()), key=str))))
                    advanced = True
                    break
                if m in on_stack:
                    low[node] = min(low[node], index[m])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                out.append(comp)
    return out
