"""SharePartition against a per-offset model (hypothesis state machine): random members,
batches (with gaps), acknowledgements, releases, lock expiries, start moves and crashes."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from spark_coord.errors import ErrorCode
from spark_coord.share import AckType, Acquired, RecordState, SharePartition

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = (RecordState.AVAILABLE, RecordState.ACQUIRED,
                                               RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
MEMBERS = ["a", "b", "c"]
LIMIT = 3
MAX_IN_FLIGHT = 40


class Model:
    """The rules, offset by offset: ``recs[o] = [state, count, holder, deadline]``."""

    def __init__(self, start: int):
        self.start = self.end = start
        self.recs: dict[int, list] = {}
        self.archived = self.delivered = self.accepted = 0

    def advance(self) -> None:
        while self.start < self.end and self.recs[self.start][0] in (ACKNOWLEDGED, ARCHIVED):
            del self.recs[self.start]
            self.start += 1

    def fetch_offset(self):
        for o in range(self.start, self.end):
            if self.recs[o][0] == AVAILABLE:
                return o
        return self.end if self.end - self.start < MAX_IN_FLIGHT else None

    def gap(self, upto: int) -> None:
        """No records in ``[end, upto)``: archived with count 0 (the start moves when the window is empty)."""
        if self.start == self.end:
            self.archived += max(upto - self.end, 0)
            self.start = self.end = max(upto, self.end)
            return
        while self.end < upto and self.end < self.start + MAX_IN_FLIGHT:
            self.recs[self.end] = [ARCHIVED, 0, None, None]
            self.archived += 1
            self.end += 1

    def acquire(self, member, batches, max_records, deadline, batch_optimized, stable=None, aborted=(),
                read_end=None) -> list[tuple[int, int]]:
        if stable is not None:  # read_committed: nothing at or past the last stable offset
            batches = [(bf, min(bl, stable - 1)) for bf, bl in batches if bf < stable]
            read_end = None if read_end is None else min(read_end, stable)
        got = []  # (offset, count)
        remaining = max_records
        stopped = False
        for bf, bl in batches:
            if remaining <= 0:
                stopped = True
                break
            if bl < self.start:
                continue
            budget = bl - bf + 1 if batch_optimized else remaining
            n = 0
            full = False
            for o in range(max(bf, self.start), bl + 1):
                if n >= budget:
                    break
                if o < self.end:
                    r = self.recs[o]
                    if r[0] == AVAILABLE:
                        r[0], r[1], r[2], r[3] = ACQUIRED, r[1] + 1, member, deadline
                        got.append((o, r[1]))
                        n += 1
                    continue
                if o == bf and bf > self.end:  # a gap before this batch
                    self.gap(bf)
                if self.end != o or self.end >= self.start + MAX_IN_FLIGHT:
                    full = True
                    break
                self.recs[o] = [ACQUIRED, 1, member, deadline]
                got.append((o, 1))
                self.end += 1
                n += 1
            remaining -= n
            self.delivered += n
            if full:
                stopped = True
                break
        if read_end is not None and not stopped and (not batches or self.end > batches[-1][1]):
            self.gap(read_end)  # control batches after the last data batch
        kept = []
        for o, c in got:  # an aborted transaction's records: acquired, then archived at once
            if any(af <= o <= al for af, al in aborted):
                self.recs[o] = [ARCHIVED, c, None, None]
                self.archived += 1
                self.delivered -= 1
            else:
                kept.append((o, c))
        self.advance()
        return kept

    def give_back(self, o: int) -> None:
        r = self.recs[o]
        if r[1] >= LIMIT:
            r[0] = ARCHIVED
            self.archived += 1
        else:
            r[0] = AVAILABLE
        r[2] = r[3] = None

    def acknowledge(self, member, first, last, types, deadline) -> ErrorCode:
        if first < 0 or first > last or len(types) not in (1, last - first + 1) or \
                any(t < 0 or t > 4 for t in types) or (AckType.RENEW in types and deadline is None):
            return ErrorCode.INVALID_REQUEST
        for o in range(first, last + 1):
            if o not in self.recs or self.recs[o][0] != ACQUIRED or self.recs[o][2] != member:
                return ErrorCode.INVALID_RECORD_STATE
        for o in range(first, last + 1):
            t = types[0] if len(types) == 1 else types[o - first]
            r = self.recs[o]
            if t == AckType.ACCEPT:
                r[0], r[2], r[3] = ACKNOWLEDGED, None, None
                self.accepted += 1
            elif t in (AckType.REJECT, AckType.GAP):
                r[0], r[2], r[3] = ARCHIVED, None, None
                self.archived += 1
            elif t == AckType.RELEASE:
                self.give_back(o)
            else:
                r[3] = deadline
        self.advance()
        return ErrorCode.NONE

    def release(self, which) -> int:
        n = 0
        for o, r in self.recs.items():
            if r[0] == ACQUIRED and which(r):
                self.give_back(o)
                n += 1
        self.advance()
        return n

    def move_start(self, offset: int) -> None:
        if offset <= self.start:
            return
        for o in range(self.start, min(offset, self.end)):
            del self.recs[o]
        self.start = offset
        self.end = max(self.end, offset)
        self.advance()

    def crash(self) -> None:
        """Every lock is lost, as if it ran out: a record acquired at the delivery-count limit is
        ARCHIVED (it was handed out that many times), any other AVAILABLE again, its count kept."""
        for o, r in self.recs.items():
            if r[0] == ACQUIRED:
                self.give_back(o)
        self.advance()


def expand(sp: SharePartition) -> dict[int, list]:
    out = {}
    for first, last, state, count, holder, deadline in sp._ranges:
        for o in range(first, last + 1):
            out[o] = [RecordState(state), count, holder, deadline]
    return out


batch_shapes = st.lists(st.tuples(st.integers(0, 4), st.integers(1, 12)), min_size=1, max_size=4)


class SharePartitionMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.sp = SharePartition(5, delivery_count_limit=LIMIT, max_in_flight=MAX_IN_FLIGHT)
        self.model = Model(5)
        self.now = 0
        self.max_count: dict[int, int] = {}
        self.final: set[int] = set()
        self.last = (self.sp.version, self.sp.snapshot())

    # ---------------------------------------------------------------- rules

    @rule(member=st.sampled_from(MEMBERS), back=st.integers(-3, 6), shapes=batch_shapes,
          max_records=st.integers(0, 25), lock=st.integers(0, 100), batch_optimized=st.booleans(),
          from_end=st.booleans())
    def acquire(self, member, back, shapes, max_records, lock, batch_optimized, from_end):
        self._acquire(member, back, shapes, max_records, lock, batch_optimized, from_end)

    @rule(member=st.sampled_from(MEMBERS), back=st.integers(-3, 6), shapes=batch_shapes,
          max_records=st.integers(0, 25), lock=st.integers(0, 100), batch_optimized=st.booleans(),
          from_end=st.booleans(), stable_back=st.one_of(st.none(), st.integers(-2, 14)),
          aborted=st.lists(st.booleans(), min_size=4, max_size=4), tail=st.one_of(st.none(), st.integers(0, 4)))
    def acquire_transactional(self, member, back, shapes, max_records, lock, batch_optimized, from_end,
                              stable_back, aborted, tail):
        """A read with control batches after the data (``tail``), a last stable offset (``stable_back``
        before the read's end) and some batches of aborted transactions (read_committed)."""
        self._acquire(member, back, shapes, max_records, lock, batch_optimized, from_end, stable_back=stable_back,
                      aborted_mask=aborted, tail=tail)

    def _acquire(self, member, back, shapes, max_records, lock, batch_optimized, from_end, stable_back=None,
                 aborted_mask=(), tail=None):
        fetch = self.sp.fetch_offset()
        assert fetch == self.model.fetch_offset()
        base = (self.sp.end_offset if from_end or fetch is None else fetch) - back
        batches, o = [], max(base, 0)
        for gap, size in shapes:
            o += gap
            batches.append((o, o + size - 1))
            o += size
        before = {o: list(r) for o, r in self.model.recs.items()}
        deadline = self.now + lock
        read_end = None if tail is None else batches[-1][1] + 1 + tail
        stable = None if stable_back is None else batches[-1][1] + 1 - stable_back
        aborted = [b for b, m in zip(batches, aborted_mask, strict=False) if m]
        got = self.sp.acquire(member, batches, max_records=max_records, lock_deadline=deadline,
                              batch_optimized=batch_optimized, stable_offset=stable, aborted=aborted,
                              read_end=read_end)
        expect = self.model.acquire(member, batches, max_records, deadline, batch_optimized, stable, aborted,
                                    read_end)
        if stable is not None:
            assert all(a.last_offset < stable for a in got)
        assert not any(af <= a.last_offset and a.first_offset <= al for a in got for af, al in aborted)
        flat = [(o, a.delivery_count) for a in got for o in range(a.first_offset, a.last_offset + 1)]
        event("acquire: " + ("nothing" if not flat else "redelivery" if any(c > 1 for _, c in flat) else "new"))
        if fetch is None:
            event("acquire: window full")
        assert flat == expect
        for a, b in zip(got, got[1:], strict=False):  # merged where contiguous with one count
            assert not (a.last_offset + 1 == b.first_offset and a.delivery_count == b.delivery_count)
        assert all(isinstance(a, Acquired) for a in got)
        for o, _ in flat:  # never one another member holds (nor one acquired before and not given back)
            assert o not in before or before[o][0] == AVAILABLE

    def _holding(self) -> list[str]:
        return sorted({r[2] for r in self.model.recs.values() if r[0] == ACQUIRED})

    @precondition(lambda self: self._holding())
    @rule(data=st.data())
    def acknowledge_held(self, data):
        """A holder acknowledges a run of its own records (now and then one offset too many)."""
        member = data.draw(st.sampled_from(self._holding()), label="member")
        held = sorted(o for o, r in self.model.recs.items() if r[0] == ACQUIRED and r[2] == member)
        first = data.draw(st.sampled_from(held), label="first")
        run = 1
        while first + run in self.model.recs and self.model.recs[first + run][:3:2] == [ACQUIRED, member]:
            run += 1
        size = data.draw(st.one_of(st.just(run), st.integers(1, run)), label="size")
        if data.draw(st.integers(0, 9), label="one too many") == 0:
            size += 1
        self._acknowledge(data, member, first, size)

    @rule(member=st.sampled_from(MEMBERS), data=st.data())
    def acknowledge_any(self, member, data):
        """Anyone acknowledges anything near the window, mostly refused."""
        first = data.draw(st.integers(self.sp.start_offset - 3, self.sp.end_offset + 2), label="first")
        size = data.draw(st.integers(0, 6), label="size")
        self._acknowledge(data, member, first, size)

    def _acknowledge(self, data, member: str, first: int, size: int) -> None:
        last = first + size - 1
        kind = data.draw(st.sampled_from(["one", "one", "each", "each", "bad"]), label="kind")
        type_st = st.sampled_from(list(AckType))
        if kind == "one":
            types = [data.draw(type_st, label="type")]
        elif kind == "each":
            types = data.draw(st.lists(type_st, min_size=max(size, 0), max_size=max(size, 0)), label="types")
        else:
            types = data.draw(st.lists(st.integers(-1, 5), min_size=0, max_size=3), label="types")
        deadline = data.draw(st.integers(self.now - 1, self.now + 30), label="deadline")
        if deadline < self.now:
            deadline = None  # RENEW without a deadline is an invalid request
        if not types:
            types = [5] if kind == "bad" else [AckType.ACCEPT]
        ranges = list(self.sp._ranges)
        code = self.sp.acknowledge(member, first, last, types, lock_deadline=deadline)
        assert code == self.model.acknowledge(member, first, last, types, deadline)
        event(f"acknowledge: {code.name}")
        if code != ErrorCode.NONE:
            assert self.sp._ranges == ranges

    @rule(member=st.sampled_from(MEMBERS))
    def release_member(self, member):
        assert self.sp.release_member(member) == self.model.release(lambda r: r[2] == member)

    @rule(dt=st.integers(0, 15))
    def expire_locks(self, dt):
        self.now += dt
        now = self.now
        assert self.sp.expire_locks(now) == self.model.release(lambda r: r[3] <= now)

    @rule(delta=st.integers(-5, 20))
    def move_start(self, delta):
        offset = max(self.sp.start_offset + delta, 0)
        self.sp.move_start(offset)
        self.model.move_start(offset)
        for o in list(self.max_count):
            if o < offset:
                del self.max_count[o]

    @rule()
    def crash_and_restore(self):
        snap = self.sp.snapshot()
        self.sp = SharePartition.restore(snap, delivery_count_limit=LIMIT, max_in_flight=MAX_IN_FLIGHT)
        self.model.crash()
        self.model.archived = self.model.delivered = self.model.accepted = 0  # counters start again
        self.last = (self.sp.version, self.sp.snapshot())  # the restored partition's own baseline

    # ---------------------------------------------------------------- invariants

    @invariant()
    def matches_the_model(self):
        sp, m = self.sp, self.model
        assert (sp.start_offset, sp.end_offset) == (m.start, m.end)
        assert expand(sp) == m.recs
        assert (sp.archived_total, sp.deliveries_total, sp.acknowledged_total) == \
            (m.archived, m.delivered, m.accepted)

    @invariant()
    def ranges_are_sorted_disjoint_covering_and_merged(self):
        sp = self.sp
        expect = sp.start_offset
        prev = None
        for r in sp._ranges:
            first, last, state, count, holder, deadline = r
            assert first == expect and first <= last
            assert state in (0, 1, 2, 4) and count >= 0
            # an ACQUIRED offset has exactly one holder, the others none
            assert (state == ACQUIRED) == (holder is not None) == (deadline is not None)
            assert prev is None or prev[2:] != r[2:]
            prev, expect = r, last + 1
        assert expect == sp.end_offset
        assert not sp._ranges or sp._ranges[0][2] in (AVAILABLE, ACQUIRED)  # the start is never final

    @invariant()
    def aggregates_agree(self):
        recs = self.model.recs.values()
        holders: dict[str, int] = {}
        for r in recs:
            if r[0] == ACQUIRED:
                holders[r[2]] = holders.get(r[2], 0) + 1
        assert self.sp.holders() == holders
        assert self.sp.counts() == {name: sum(1 for r in recs if r[0] == s) for name, s in
                                    (("available", AVAILABLE), ("acquired", ACQUIRED),
                                     ("acknowledged", ACKNOWLEDGED), ("archived", ARCHIVED))}
        deadlines = [r[3] for r in recs if r[0] == ACQUIRED]
        assert self.sp.next_lock_deadline() == (min(deadlines) if deadlines else None)
        assert self.sp.fetch_offset() == self.model.fetch_offset()

    @invariant()
    def counts_never_go_down_and_final_stays_final(self):
        for o, r in self.model.recs.items():
            assert r[1] >= self.max_count.get(o, 0), f"delivery count of {o} went down"
            self.max_count[o] = r[1]
            if o in self.final:
                assert r[0] in (ACKNOWLEDGED, ARCHIVED), f"{o} came back from final to {r[0].name}"
            elif r[0] in (ACKNOWLEDGED, ARCHIVED):
                self.final.add(o)

    @invariant()
    def snapshot_restores_to_the_model_without_acquisitions(self):
        snap = self.sp.snapshot()
        again = SharePartition.restore(snap, delivery_count_limit=LIMIT, max_in_flight=MAX_IN_FLIGHT)
        lost = copy.deepcopy(self.model)
        lost.crash()
        assert (again.start_offset, again.end_offset) == (lost.start, lost.end)
        assert expand(again) == lost.recs
        assert all(r[1] < LIMIT for r in lost.recs.values() if r[0] == AVAILABLE)
        # a restore is a fixed point (the first restore may move the start over what the crash
        # archived, so its snapshot may differ from ``snap`` in that only)
        assert SharePartition.restore(again.snapshot(), delivery_count_limit=LIMIT,
                                      max_in_flight=MAX_IN_FLIGHT).snapshot() == again.snapshot()
        # the version went up whenever the snapshot changed (and may go up without: a record
        # acquired at the delivery limit is already written ARCHIVED, so its lock running out or its
        # release changes the state but not the snapshot)
        version, before = self.last
        assert snap == before or self.sp.version != version, (version, self.sp.version, before, snap)
        assert self.sp.version >= version
        self.last = (self.sp.version, snap)


SharePartitionMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestSharePartitionModel = SharePartitionMachine.TestCase
