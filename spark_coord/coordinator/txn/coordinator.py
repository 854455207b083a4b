"""The transaction coordinator of one coordinator shard (KIP-98; DESIGN, "Transactions (KIP-98)").

A shard's holder is the transaction coordinator of the transactional ids that hash to the shard (as a
group id does).  ``TxnCoordinator`` keeps those ids' ``TxnMetadata`` in memory, loaded from ZooKeeper
when the shard is won (``activate``) and dropped when it is lost (``deactivate``); every change is
decided by ``state`` and written by ``TxnStore`` (one fenced, version-checked multi) before it is
adopted and answered, so a deposed coordinator changes nothing.

While a write of an id is in flight the id is *pending* (Kafka's ``pendingState``): its other
requests are answered CONCURRENT_TRANSACTIONS.  EndTxn is answered once PrepareCommit/PrepareAbort is
durable; the markers then go to every partition's leader (``send_markers``: WriteTxnMarkers carrying
the shard's coordinator epoch), and for the transaction's groups (AddOffsetsToTxn) to Kafka's
``__consumer_offsets`` partition of each group's shard, whose holder commits or drops the offsets
pending there (``group_partition``), retried until each leader took them (a deleted topic's
partition counts as done), and Complete is written.  A shard won with ids in PrepareCommit/PrepareAbort sends
their markers again and completes them (a leader takes a marker for a transaction no longer open as
a no-op).  Every ``abort_interval_s`` the transactions Ongoing past their timeout are aborted with
the epoch bumped, as Kafka's ``abortTimedOutTransactions`` does, so their producer is fenced, and the
ids idle past ``id_expiration_ms`` are removed (``remove_expired``).

Injected: the store, the producer id allocator, the partition leaders (``leader_of``: a broker id,
None while the partition has no leader, ``NO_PARTITION`` when it does not exist), the marker
sender and the clock, so the logic runs in unit tests without sockets.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

from spark_coord.coordinator.storage.store import Fenced, StoreError
from spark_coord.coordinator.txn import state as st
from spark_coord.coordinator.txn.state import TxnMetadata, TxnState
from spark_coord.coordinator.txn.store import TxnStore
from spark_coord.errors import ErrorCode

log = logging.getLogger(__name__)

__all__ = ["TxnCoordinator", "TxnSettings", "MarkerSender"]

TopicPartition = tuple[str, int]
#: ``send_markers(leader id, WriteTxnMarkers markers) -> error code per partition`` (raises OSError or
#: ConnectionError when the leader cannot be reached).
MarkerSender = Callable[[int, list[dict]], Awaitable[dict[TopicPartition, int]]]
#: A partition's marker is done when its leader answers one of these (a deleted topic has no markers to take).
MARKER_DONE = (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
#: What ``leader_of`` answers for a partition that does not exist (its topic was deleted); None is a
#: partition with no leader right now.
NO_PARTITION = -1
#: First and longest wait between rounds of markers a leader did not take (seconds).
MARKER_RETRY_S = (0.05, 1.0)
#: How long a request about an id whose transaction is being completed (its markers on their way) or
#: written waits for that to end before it is answered CONCURRENT_TRANSACTIONS (seconds).  The next
#: transaction's first AddPartitionsToTxn comes right after EndTxn's answer, a few milliseconds
#: before the markers are written: answered CONCURRENT_TRANSACTIONS, each client waits its retry
#: backoff (librdkafka's and Java's some tens of ms), which cost a transaction of 1,000 records most
#: of its throughput; held, it is served once Complete is written.
SETTLE_WAIT_S = 1.0


@dataclass(frozen=True)
class TxnSettings:
    """The broker's transaction settings (``transaction.*`` keys)."""

    max_timeout_ms: int = 900_000
    abort_interval_s: float = 10.0
    #: ``transactional.id.expiration.ms``: an id with no transaction open or completing whose state
    #: has not changed for this long is removed (Kafka's default, 7 days).
    id_expiration_ms: int = 604_800_000


class TxnCoordinator:
    """The transactional ids of one shard, served while the shard is held."""

    def __init__(self, store: TxnStore, allocate_producer_id: Callable[[], Awaitable[int]],
                 leader_of: Callable[[str, int], "int | None"], send_markers: MarkerSender,
                 coordinator_epoch: Callable[[], int], settings: TxnSettings = TxnSettings(),
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000), label: str = "transactions",
                 group_partition: "Callable[[str], TopicPartition | None] | None" = None):
        self.store = store
        self.allocate_producer_id = allocate_producer_id
        self.leader_of = leader_of
        self.send_markers = send_markers
        self.coordinator_epoch = coordinator_epoch
        self.settings = settings
        self.now_ms = now_ms
        self.label = label
        #: The partition a group's marker goes to (Kafka's ``__consumer_offsets`` partition of the group,
        #: ``leader_of`` names its holder); None: the groups of a transaction get no marker.
        self.group_partition = group_partition
        self.active = False
        self.txns: dict[str, tuple[TxnMetadata, int]] = {}
        self.pending: set[str] = set()
        self._tasks: set[asyncio.Task] = set()
        self._completing: set[str] = set()
        self._settled: dict[str, asyncio.Event] = {}
        self._term = 0

    # ------------------------------------------------------------------ life cycle
    async def activate(self) -> None:
        """Load the shard's ids (raises StoreError when ZooKeeper fails), serve them, and complete the
        transactions found preparing (again after a failed load: what a first one started is dropped)."""
        if self.active or self._tasks:
            await self.deactivate()
        self._term += 1
        term = self._term
        loaded = await self.store.load()
        if term != self._term:
            return  # deactivated while loading
        self.txns = loaded
        self.pending.clear()
        self.active = True
        preparing = [tid for tid, (txn, _) in loaded.items() if txn.state.preparing]
        log.info("%s: %d transactional ids loaded, %d to complete", self.label, len(loaded), len(preparing))
        for tid in preparing:
            self._start_completion(tid)
        self._spawn(self._abort_timed_out_loop(term), "timeouts")

    async def deactivate(self) -> None:
        self._term += 1
        self.active = False
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.txns = {}
        self.pending.clear()
        self._completing.clear()
        for tid in list(self._settled):
            self._wake(tid)

    def _spawn(self, coro: Awaitable[None], what: str) -> None:
        async def guarded() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: %s failed", self.label, what)

        task = asyncio.get_running_loop().create_task(guarded(), name=f"{self.label}-{what}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _wake(self, tid: str) -> None:
        """The id's write or completion ended: the requests held for it go on."""
        event = self._settled.pop(tid, None)
        if event is not None:
            event.set()

    async def _settle(self, tid: str) -> None:
        """Wait, at most ``SETTLE_WAIT_S``, while ``tid`` is being written or completed, so the request
        is served on what follows rather than answered CONCURRENT_TRANSACTIONS."""
        deadline = time.monotonic() + SETTLE_WAIT_S
        while self.active and (tid in self.pending or tid in self._completing):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            event = self._settled.setdefault(tid, asyncio.Event())
            try:
                await asyncio.wait_for(event.wait(), left)
            except asyncio.TimeoutError:
                return

    # ------------------------------------------------------------------ writes
    async def _write(self, new: TxnMetadata) -> int:
        """Write ``new`` over the id's current node and adopt it: NONE, NOT_COORDINATOR when fenced,
        COORDINATOR_NOT_AVAILABLE when ZooKeeper failed (nothing adopted then)."""
        tid = new.transactional_id
        current = self.txns.get(tid)
        term = self._term
        self.pending.add(tid)
        try:
            version = await self.store.write(new, current[1] if current is not None else None)
        except Fenced as e:
            log.warning("%s: %s", self.label, e)
            return ErrorCode.NOT_COORDINATOR
        except StoreError as e:
            log.warning("%s: %s", self.label, e)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        finally:
            self.pending.discard(tid)
            self._wake(tid)  # the held requests resume after the adoption below (no await in between)
        if term != self._term:
            return ErrorCode.NOT_COORDINATOR
        self.txns[tid] = (new, version)
        log.debug("%s: %r is %s (producer %d epoch %d)", self.label, tid, new.state.value, new.producer_id,
                  new.producer_epoch)
        return ErrorCode.NONE

    # ------------------------------------------------------------------ the APIs
    async def init_producer_id(self, tid: str, timeout_ms: int,
                               expected: tuple[int, int] | None = None) -> tuple[int, int, int]:
        """InitProducerId with a transactional id: (error code, producer id, epoch)."""
        if timeout_ms <= 0 or timeout_ms > self.settings.max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        await self._settle(tid)
        if tid in self.pending:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        found = self.txns.get(tid)
        if found is None:
            # a new id: a producer id the request names (KIP-360) is not checked, Kafka starts it afresh too
            self.pending.add(tid)
            try:
                pid = await self.allocate_producer_id()
            finally:
                self.pending.discard(tid)
            if tid in self.txns or tid in self.pending:
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
            new = TxnMetadata(tid, pid, 0, timeout_ms, TxnState.EMPTY, update_ms=self.now_ms())
            code = await self._write(new)
            return (code, pid, 0) if code == ErrorCode.NONE else (code, -1, -1)
        txn = found[0]
        new_pid = None
        if txn.producer_epoch >= st.MAX_EPOCH and txn.state.completed:
            self.pending.add(tid)
            try:
                new_pid = await self.allocate_producer_id()
            finally:
                self.pending.discard(tid)
            if self.txns.get(tid) is not found:
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        decision = st.init_producer_id(txn, timeout_ms, self.now_ms(), new_pid, expected)
        if decision.code == ErrorCode.CONCURRENT_TRANSACTIONS and txn.state == TxnState.ONGOING:
            # a new producer fences the open transaction: abort it with the epoch bumped, and answer
            # CONCURRENT_TRANSACTIONS until its markers are out (the client retries)
            log.info("%s: InitProducerId of %r aborts its open transaction (producer %d epoch %d)", self.label, tid,
                     txn.producer_id, txn.producer_epoch)
            code = await self._write(st.fence_open(txn, self.now_ms()))
            if code:
                return code, -1, -1
            self._start_completion(tid)
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if decision.code:
            return decision.code, -1, -1
        if decision.write is None:
            return ErrorCode.NONE, txn.producer_id, txn.producer_epoch
        code = await self._write(decision.write)
        if code:
            return code, -1, -1
        return ErrorCode.NONE, decision.write.producer_id, decision.write.producer_epoch

    def _current(self, tid: str) -> "tuple[TxnMetadata | None, int]":
        if tid in self.pending:
            return None, ErrorCode.CONCURRENT_TRANSACTIONS
        found = self.txns.get(tid)
        if found is None:
            return None, ErrorCode.INVALID_PRODUCER_ID_MAPPING
        return found[0], ErrorCode.NONE

    async def _decided(self, tid: str, decide: Callable[[TxnMetadata, int], st.Decision]) -> int:
        """A request about ``tid`` once its last change settled: ``decide`` (a ``state`` decision on the
        current metadata and the time) gives its error code or the metadata to write first."""
        await self._settle(tid)
        txn, code = self._current(tid)
        if txn is None:
            return code
        decision = decide(txn, self.now_ms())
        if decision.code or decision.write is None:
            return decision.code
        return await self._write(decision.write)

    async def add_partitions(self, tid: str, producer_id: int, epoch: int, partitions: set[TopicPartition]) -> int:
        """AddPartitionsToTxn (the partitions are known to exist): one error code for all of them."""
        return await self._decided(tid, lambda txn, now: st.add_partitions(txn, producer_id, epoch, partitions, now))

    async def add_group(self, tid: str, producer_id: int, epoch: int, group_id: str) -> int:
        """AddOffsetsToTxn: the group joins the transaction (written before the answer, as Kafka writes
        the group's ``__consumer_offsets`` partition into the transaction's log entry)."""
        return await self._decided(tid, lambda txn, now: st.add_group(txn, producer_id, epoch, group_id, now))

    async def end_txn(self, tid: str, producer_id: int, epoch: int, commit: bool) -> int:
        """EndTxn: answered once PrepareCommit / PrepareAbort is durable; the markers follow."""
        code = await self._decided(tid, lambda txn, now: st.end_txn(txn, producer_id, epoch, commit, now))
        if code == ErrorCode.NONE:
            self._start_completion(tid)
        return code

    def verify(self, tid: str, producer_id: int, epoch: int, partition: TopicPartition) -> int:
        """The Produce check of a partition leader on this broker (``state.verify_partition``): read
        from the metadata held, no write and no wait, as Kafka's verification reads its cache."""
        found = self.txns.get(tid)
        if found is None:
            return st.verify_partition(None, -1, -1, frozenset(), producer_id, epoch, partition)
        txn = found[0]
        return st.verify_partition(txn.state, txn.producer_id, txn.producer_epoch, txn.partitions, producer_id,
                                   epoch, partition)

    def describe(self, tid: str) -> TxnMetadata | None:
        found = self.txns.get(tid)
        return found[0] if found is not None else None

    def listing(self) -> list[TxnMetadata]:
        return [txn for txn, _ in self.txns.values()]

    # ------------------------------------------------------------------ markers and completion
    def _start_completion(self, tid: str) -> None:
        if tid in self._completing:
            return
        self._completing.add(tid)
        self._spawn(self._complete(tid, self._term), f"markers-{tid}")

    async def _complete(self, tid: str, term: int) -> None:
        """Send the markers of ``tid``'s prepared transaction until every leader took them, then
        write Complete (again after a failed write, while this term lasts)."""
        delay = MARKER_RETRY_S[0]
        try:
            done: set[TopicPartition] = set()
            while self.active and term == self._term:
                found = self.txns.get(tid)
                if found is None or not found[0].state.preparing:
                    return
                txn = found[0]
                targets = set(txn.partitions) | self._group_partitions(txn)
                todo = targets - done
                if todo:
                    done |= await self._send_round(txn, todo)
                if done >= targets and tid not in self.pending:
                    code = await self._write(st.complete(txn, self.now_ms()))
                    if code == ErrorCode.NONE:
                        log.debug("%s: %r %s", self.label, tid, self.txns[tid][0].state.value)
                        return
                    if code == ErrorCode.NOT_COORDINATOR:
                        return
                await asyncio.sleep(delay)
                delay = min(delay * 2, MARKER_RETRY_S[1])
        finally:
            if term == self._term:
                self._completing.discard(tid)
                self._wake(tid)

    def _group_partitions(self, txn: TxnMetadata) -> set[TopicPartition]:
        """The partitions the markers of the transaction's groups go to (one per group's shard)."""
        if self.group_partition is None:
            return set()
        out = set()
        for group_id in txn.groups:
            tp = self.group_partition(group_id)
            if tp is not None:
                out.add(tp)
        return out

    async def _send_round(self, txn: TxnMetadata, todo: set[TopicPartition]) -> set[TopicPartition]:
        """One marker request to each leader of ``todo``: the partitions whose marker is done."""
        by_leader: dict[int, dict[str, list[int]]] = {}
        done: set[TopicPartition] = set()
        for topic, partition in sorted(todo):
            leader = self.leader_of(topic, partition)
            if leader == NO_PARTITION:
                done.add((topic, partition))  # the topic was deleted: nothing to mark
                continue
            if leader is None:
                continue  # no leader right now: the next round
            by_leader.setdefault(leader, {}).setdefault(topic, []).append(partition)
        commit = txn.state == TxnState.PREPARE_COMMIT
        epoch = self.coordinator_epoch()
        leaders = sorted(by_leader)
        calls = [self.send_markers(leader, [{
            "producer_id": txn.producer_id, "producer_epoch": txn.producer_epoch, "transaction_result": commit,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in sorted(by_leader[leader].items())],
            "coordinator_epoch": epoch}]) for leader in leaders]
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        for leader, outcome in zip(leaders, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                log.info("%s: markers of %r to broker %d: %r", self.label, txn.transactional_id, leader, outcome)
                continue
            for tp, code in outcome.items():
                if code in MARKER_DONE:
                    done.add(tp)
                else:
                    log.info("%s: marker of %r on %s-%d: %s", self.label, txn.transactional_id, tp[0], tp[1],
                             ErrorCode.name_of(code))
        return done

    # ------------------------------------------------------------------ timeouts
    async def _abort_timed_out_loop(self, term: int) -> None:
        while self.active and term == self._term:
            await asyncio.sleep(self.settings.abort_interval_s)
            await self.abort_timed_out()
            await self.remove_expired()

    async def remove_expired(self) -> None:
        """Remove every id ``state.expired`` says may go (Kafka's ``removeExpiredTransactionalIds``):
        its node deleted in a fenced multi at the version held, then dropped here.  While the delete
        is out the id is pending (its requests wait or get CONCURRENT_TRANSACTIONS); afterwards
        InitProducerId starts it afresh with a new producer id, as Kafka does."""
        now = self.now_ms()
        for tid, (txn, version) in list(self.txns.items()):
            if tid in self.pending or tid in self._completing or \
                    not st.expired(txn, now, self.settings.id_expiration_ms):
                continue
            term = self._term
            self.pending.add(tid)
            try:
                await self.store.delete(tid, version)
            except (Fenced, StoreError) as e:
                log.warning("%s: %s", self.label, e)
                continue
            finally:
                self.pending.discard(tid)
                self._wake(tid)
            if term == self._term and self.txns.get(tid, (None, -1))[1] == version:
                del self.txns[tid]
            log.info("%s: transactional id %r expired (%s, unchanged for %d ms): removed", self.label, tid,
                     txn.state.value, now - txn.update_ms)

    async def abort_timed_out(self) -> None:
        """Abort, with the epoch bumped, every transaction Ongoing past its timeout (not being written)."""
        now = self.now_ms()
        for tid, (txn, _) in list(self.txns.items()):
            if tid in self.pending:
                continue
            fenced = st.fence_for_timeout(txn, now)
            if fenced is None:
                continue
            log.info("%s: transaction of %r (producer %d epoch %d) timed out after %d ms: aborting", self.label, tid,
                     txn.producer_id, txn.producer_epoch, txn.timeout_ms)
            if await self._write(fenced) == ErrorCode.NONE:
                self._start_completion(tid)
