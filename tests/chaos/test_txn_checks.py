"""The transactional checks of ``testkit.txn_checks`` on small synthetic journals: a clean history passes,
and each anomaly (a lost committed write, an aborted read, a partial transaction, a duplicate, a value
at an offset the log disagrees with, a cycle through a writer's order) is flagged; indeterminate
transactions are resolved by the final read; Kafka's cross-partition order (a G0 cycle) is not flagged."""

from __future__ import annotations

from testkit.txn_checks import Txn, check, realtime_cycles, transactions


def journal(*txns: tuple[str, dict[int, list[str]], str | None]) -> list[dict]:
    """Writer journal lines: (txn, values, outcome or None for a begin without end)."""
    out: list[dict] = [{"ev": "start", "ts": 0.0}]
    for tid, values, outcome in txns:
        out.append({"ev": "begin", "txn": tid, "values": {str(p): v for p, v in values.items()}, "intent": "commit"})
        if outcome is not None:
            out.append({"ev": "end", "txn": tid, "outcome": outcome, "error": None})
    return out


def log_of(*recs: tuple[int, str]) -> dict[int, list[tuple[int, str]]]:
    """(partition, value) in append order -> partition -> [(offset, value)]."""
    out: dict[int, list[tuple[int, str]]] = {}
    for p, v in recs:
        part = out.setdefault(p, [])
        part.append((len(part), v))
    return out


def history():
    """Writer w0: a commits, b aborts, c commits; writer w1: d commits, e indeterminate (SIGKILLed)."""
    txns = transactions({
        "w0": journal(("a", {0: ["a/0"], 1: ["a/1"]}, "committed"), ("b", {0: ["b/0"], 2: ["b/2"]}, "aborted"),
                      ("c", {1: ["c/1"], 2: ["c/2"]}, "committed")),
        "w1": journal(("d", {0: ["d/0"], 2: ["d/2"]}, "committed")),
        "w1.1": journal(("e", {1: ["e/1"], 2: ["e/2"]}, None))})
    uncommitted = log_of((0, "a/0"), (1, "a/1"), (0, "b/0"), (2, "b/2"), (0, "d/0"), (2, "d/2"), (1, "c/1"),
                         (2, "c/2"), (1, "e/1"), (2, "e/2"))
    return txns, uncommitted


def committed_of(uncommitted, aborted: set[str]):
    return {p: [(o, v) for o, v in recs if v not in aborted] for p, recs in uncommitted.items()}


def test_a_clean_history_passes_and_resolves_the_indeterminate():
    txns, unc = history()
    assert txns["e"].outcome == "unknown" and txns["e"].writer == "w1" and txns["e"].seq == 1
    com = committed_of(unc, {"b/0", "b/2"})
    readers = {"r0": ("read_committed", [(0, 0, "a/0"), (0, 2, "d/0"), (2, 3, "e/2")]),
               "r1": ("read_uncommitted", [(0, 1, "b/0"), (2, 0, "b/2")])}
    r = check(txns, com, unc, readers)
    assert r.violations == []
    assert (r.transactions, r.committed, r.aborted, r.unknown) == (5, 3, 1, 1)
    assert (r.unknown_committed, r.unknown_aborted) == (1, 0)
    assert r.uncommitted_reads_of_aborted == 2
    # the same indeterminate transaction, aborted in the log: resolved aborted
    r = check(txns, committed_of(unc, {"b/0", "b/2", "e/1", "e/2"}), unc, {})
    assert r.violations == [] and (r.unknown_committed, r.unknown_aborted) == (0, 1)


def test_each_anomaly_is_flagged():
    txns, unc = history()
    # lost write: c committed, c/2 not read committed
    r = check(txns, committed_of(unc, {"b/0", "b/2", "c/2"}), unc, {})
    assert len(r.lost_write) == 1 and "c committed" in r.lost_write[0]
    # aborted read in the final read, and by a read_committed reader of a transaction the log shows aborted
    r = check(txns, committed_of(unc, {"b/2", "e/1", "e/2"}), unc,
              {"r0": ("read_committed", [(2, 3, "e/2")])})
    assert any(x.startswith("b aborted") for x in r.aborted_read)
    assert any("r0 (read_committed) read e/2" in x and "the log shows it aborted" in x for x in r.aborted_read)
    # partial: the indeterminate e half visible
    r = check(txns, committed_of(unc, {"b/0", "b/2", "e/1"}), unc, {})
    assert len(r.partial) == 1 and r.partial[0].startswith("e (unknown)")
    # duplicate in the log and in a reader, and a reader's value the log does not hold at that offset
    dup = {p: list(recs) for p, recs in unc.items()}
    dup[0].append((len(dup[0]), "a/0"))
    r = check(txns, committed_of(dup, {"b/0", "b/2"}), dup,
              {"r0": ("read_committed", [(1, 0, "a/1"), (1, 5, "a/1"), (0, 0, "d/0")])})
    assert any("a/0 (a) in the log at [(0, 0), (0, 3)]" in x for x in r.duplicate)
    assert any("r0 read a/1 at [(1, 0), (1, 5)]" in x for x in r.duplicate)
    assert r.inconsistent_offsets == ["r0 read d/0 at 0/0, where the log holds a/0"]
    # a value read committed that no writer journaled
    r = check(txns, {**committed_of(unc, {"b/0", "b/2"}), 3: [(0, "zz")]}, unc, {})
    assert len(r.uncommitted_visible) == 1


def test_realtime_cycle_needs_a_writers_order():
    # G0 across partitions, no writer order between x and y: Kafka allows it
    g0 = {"x": Txn("x", "w0", {0: ["x/0"], 1: ["x/1"]}, "committed", 0),
          "y": Txn("y", "w1", {0: ["y/0"], 1: ["y/1"]}, "committed", 0)}
    assert realtime_cycles(g0, log_of((0, "x/0"), (0, "y/0"), (1, "y/1"), (1, "x/1"))) == []
    # a1 then a2 in writer a, b1 then b2 in writer b; a2 before b1 on 0, b2 before a1 on 1: impossible
    txns = {"a1": Txn("a1", "a", {1: ["a1/1"]}, "committed", 0), "a2": Txn("a2", "a", {0: ["a2/0"]}, "committed", 1),
            "b1": Txn("b1", "b", {0: ["b1/0"]}, "committed", 0), "b2": Txn("b2", "b", {1: ["b2/1"]}, "committed", 1)}
    cycles = realtime_cycles(txns, log_of((0, "a2/0"), (0, "b1/0"), (1, "b2/1"), (1, "a1/1")))
    assert len(cycles) == 1 and "('a1', 1)" in cycles[0] and "('b2', 1)" in cycles[0]
    # the same with b1's commit unseen (indeterminate): no order from b1 to b2 is known, no cycle
    txns["b1"].outcome = "unknown"
    assert realtime_cycles(txns, log_of((0, "a2/0"), (0, "b1/0"), (1, "b2/1"), (1, "a1/1"))) == []
    # and one writer's later transaction before its earlier one on a partition
    one = {"k1": Txn("k1", "w", {0: ["k1/0"]}, "committed", 0), "k2": Txn("k2", "w", {0: ["k2/0"]}, "committed", 1)}
    assert len(realtime_cycles(one, log_of((0, "k2/0"), (0, "k1/0")))) == 1
    assert realtime_cycles(one, log_of((0, "k1/0"), (0, "k2/0"))) == []
