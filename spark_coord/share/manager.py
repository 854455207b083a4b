"""The share partitions a broker leads, their share sessions and their persistence (KIP-932).

``SharePartitionManager`` is what the ShareFetch and ShareAcknowledge handlers use (``session``,
``partition``, ``acknowledge``, ``readable_bytes``, ``acquire``, ``forget``, ``close_session``;
a share partition it hands out is an opaque handle to them):

* **Share partitions** (``SharePartition``, per group and partition) are made on first use: from
  their znode when they have one, else at the group's ``share.auto.offset.reset`` (``latest``:
  the log end, ``earliest``: the log start, ``by_duration:<ISO-8601>``: the first record at or
  after now minus the duration).  A partition whose log start moved past its start offset
  (retention) moves along.
* **Share sessions** (``sessions.ShareSessions``), keyed by (group, member), as Kafka's
  ShareSessionCache.
* **Locks**: a sweep releases records whose acquisition lock ran out (lock deadlines and idle
  sessions are on the monotonic clock: a step of the wall clock frees no lock early, keeps none late).
* **Persistence**: an acknowledgement is answered only once it is durable, so an accepted or
  rejected record never comes back, even after a SIGKILL.  With a journal
  (``journal.ShareJournal``, beside the partition logs), once an append covering it is done --
  when the share partition is ``ready`` and ZooKeeper-fresh (a conditional write of it landed
  since this broker's last ZooKeeper session loss) -- and ZooKeeper (``ShareStateStore``) gets
  the state behind, as a checkpoint; else (no journal, a first write or takeover not landed yet,
  a session lost since the last write landed, a failed append) once a ZooKeeper write covering
  it landed.  Acquisitions and lock expiries are written behind, within ``flush_interval_ms``:
  an acquisition lost in a crash is delivered again (its delivery count from the last write).
  One writer task batches every dirty partition into ZooKeeper multis, one at a time, so the
  ZooKeeper write rate is bounded whatever the request rate.  A restart loads the journal's
  entry instead of the znode when it is of the znode's lineage and newer (``_load``).
* **Fencing**: every load is a takeover, written under this broker's name (``writer``) and the next
  state epoch before the partition is served; a write refused because another broker (or
  incarnation) wrote since makes this one stop serving the partition (``fenced``:
  NOT_LEADER_OR_FOLLOWER) until its view of the partition's replicas changes, instead of
  reloading and going on beside the new leader.  DESIGN.md "Share groups (KIP-932)".
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from kazoo.protocol.states import KazooState

from spark_coord.configs import parse_by_duration
from spark_coord.errors import ErrorCode
from spark_coord.log import OffsetOutOfRange
from spark_coord.records.region import FileRegion
from spark_coord.share.errors import ShareGroupUnknown, ShareLeaderFenced, ShareStateUnavailable
from spark_coord.share.journal import JournalEntry, ShareJournal
from spark_coord.share.log_read import aborted_ranges, batch_bounds, split_acquired
from spark_coord.share.partition import AckType, Acquired, SharePartition
from spark_coord.share.sessions import FINAL_EPOCH, MAX_EPOCH, OPEN_EPOCH, SESSION_IDLE_MS, ShareSession, ShareSessions
from spark_coord.share.store import NO_NODE, ShareStateStore, StateFenced, Write, decode, encode, identity_of, seq_of

log = logging.getLogger(__name__)

__all__ = ["SharePartitionManager", "ShareSession", "ShareSettings", "ShareStateUnavailable", "ShareGroupUnknown",
           "ShareLeaderFenced", "Key", "OPEN_EPOCH", "FINAL_EPOCH", "MAX_EPOCH", "SESSION_IDLE_MS"]

Key = tuple[str, str, int]  # (group, topic, partition)

#: Wait before writing again after ZooKeeper failed a write.
RETRY_S = 0.5
#: How long a request waits for a new share partition's initial state to be written.
INIT_WAIT_S = 5.0
#: How long a new share partition's load waits for its group's znode, and how often it looks: the
#: coordinator saves it in the background when a member joins, so a member's first ShareFetch can
#: come before it.
GROUP_WAIT_S, GROUP_POLL_S = 1.0, 0.05
#: The most bytes read from one partition's log per acquisition.
READ_BYTES = 1 << 20
#: How long an acknowledgement waits for its write to ZooKeeper before it is answered REQUEST_TIMED_OUT.
WRITE_WAIT_S = 30.0
#: The most log reads of one acquisition that archived records of aborted transactions and acquired
#: nothing else (each reads at most ``READ_BYTES``): past them the fetch is answered with nothing.
ABORTED_READS = 16
#: ``share.isolation.level`` values.
READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"


def _clipped(snap: dict, end: int) -> dict:
    """``snap`` (a ``SharePartition.snapshot()``) without what lies at or past ``end``, the log end:
    a saved start past it (a truncated or replaced log) would stall the partition, and states of
    offsets past it would be taken for the records written there next."""
    ranges = [[first, min(last, end - 1), state, count] for first, last, state, count in snap["ranges"]
              if first < end]
    return {**snap, "start": min(snap["start"], end), "ranges": ranges}


def _refused(batches: list[dict], renew: bool) -> bool:
    """A partition's AcknowledgementBatches break Kafka's rules, checked before any is applied (a
    refusal applies none; matching Java's ``KafkaApis.validateAcknowledgementBatches``): a range
    inverted or starting before the previous one ends, no type, neither one type nor one per
    offset, a type out of range -- Renew (4) only where ``renew`` (a v2 request with IsRenewAck)."""
    top = AckType.RENEW if renew else AckType.REJECT
    last = -1
    for b in batches:
        first, end = b.get("first_offset", -1), b.get("last_offset", -1)
        types = b.get("acknowledge_types") or []
        if first > end or first < last or not types or (len(types) > 1 and len(types) != end - first + 1) \
                or min(types) < 0 or max(types) > top:
            return True
        last = end
    return False


@dataclass(frozen=True)
class ShareSettings:
    """What a group's share partitions follow (broker config and group configs)."""

    lock_duration_ms: int = 30000
    delivery_count_limit: int = 5
    max_in_flight: int = 2000
    auto_offset_reset: str = "latest"


@dataclass
class _Held:
    """A share partition held by this broker, with what its persistence needs."""

    key: Key
    sp: SharePartition
    topic_id: bytes | None
    #: Znode version last written or read (NO_NODE: not written yet).
    zversion: int = NO_NODE
    #: ``sp.version`` of what is in ZooKeeper.
    written: int = -1
    #: Futures waiting for a ZooKeeper write covering a version: (version, future).
    waiters: list[tuple[int, asyncio.Future]] = field(default_factory=list)
    #: Futures waiting for a journal append covering a version (or a ZooKeeper write): (version, future).
    jwaiters: list[tuple[int, asyncio.Future]] = field(default_factory=list)
    #: ``sp.version`` last journaled.
    journaled: int = -1
    #: ZooKeeper-fresh: a conditional write of it landed since this broker's last ZooKeeper session loss
    #: (so no other writer took it over before then); only then is an acknowledgement answered from the
    #: journal.
    fresh: bool = False
    gone: bool = False
    #: Its state is in ZooKeeper under this broker's name (False until its first write -- a new share
    #: partition's create, or the takeover of a stored one -- lands: not served yet).
    ready: bool = True
    #: This broker's state epoch on it: the stored one plus one (each load is a takeover).
    epoch: int = 1
    #: For a new one: the creation zxid of its group's znode when its start was chosen (None: none).
    group_created: int | None = None
    #: For a new one: the creation zxid of its topic's znode under the group then (None: none).
    topic_created: int | None = None
    #: Its first write was refused because its group has no znode (``ShareGroupUnknown``).
    group_gone: bool = False


class SharePartitionManager(ShareSessions):
    """Share partitions, sessions, lock expiry and the state writer of one broker."""

    def __init__(self, ctx: Any, store: ShareStateStore | None = None, *,
                 settings: Callable[[str], ShareSettings] | None = None, flush_interval_ms: int = 100,
                 clock: Callable[[], float] = lambda: time.monotonic() * 1000,
                 wall_clock: Callable[[], float] = lambda: time.time() * 1000, init_wait_s: float = INIT_WAIT_S,
                 max_sessions: int = 2000, group_wait_s: float = GROUP_WAIT_S, journal: ShareJournal | None = None,
                 recovered: dict[Key, JournalEntry] | None = None):
        self.ctx = ctx
        #: Where acknowledgements are made durable first (None: in ZooKeeper, waited for), and the entries it
        #: recovered at start (``journal.open()``; by default what it holds pending), used once at each load.
        self.journal = journal
        self.recovered = dict(recovered if recovered is not None else journal.pending if journal else {})
        #: ZooKeeper sessions lost (or suspended) so far: a write submitted in an earlier one makes nothing fresh.
        self._zk_gen = 0
        #: Share partitions waiting on the journal this turn of the event loop (by id).
        self._jwait: dict[int, _Held] = {}
        #: Someone waits on ZooKeeper this turn: the group commit writes at once (else the journal's
        #: appends leave the state to the write-behind).
        self._zk_soon = False
        #: Share sessions kept at most (group.share.max.share.sessions).
        self.max_sessions = max_sessions
        #: Who writes this manager's state: the broker and this incarnation of it (in every znode it writes,
        #: with the state epoch of its hold on the share partition).
        self.writer = f"{getattr(ctx, 'broker_id', '?')}-{uuid.uuid4().hex[:12]}"
        #: Share partitions another leader took over from this one: the partition's replicas in this broker's
        #: view then.  Not served (NOT_LEADER_OR_FOLLOWER) until the view shows other replicas.
        self.fenced: dict[Key, tuple[int, ...] | None] = {}
        self.init_wait_s = init_wait_s
        self.group_wait_s = group_wait_s
        self.store = store or ShareStateStore(ctx.zk, ctx.zk_call)
        self.settings = settings or (lambda group: ShareSettings())
        self.flush_interval_ms = flush_interval_ms
        #: Lock deadlines and idle sessions (ms): monotonic, as Kafka's timers, so a step of the wall
        #: clock frees no lock early and keeps none late.
        self.clock = clock
        #: The wall clock (ms), for what is about record timestamps (``by_duration`` resets).
        self.wall_clock = wall_clock
        self.held: dict[Key, _Held] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._loading: dict[Key, asyncio.Future] = {}
        self._dirty: set[Key] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The write in flight (one at a time, so a share partition's writes land in order), and the
        #: timer of the next write-behind.
        self._inflight: asyncio.Future | None = None
        self._timer: asyncio.TimerHandle | None = None
        #: A group commit is scheduled for the end of this turn of the event loop (``durable_soon``).
        self._commit_soon = False
        self._tasks: list[asyncio.Task] = []
        self._evicted_ms = 0.0
        #: Counters for the metrics and the benchmark.
        self.acquired_total = 0
        self.acknowledged_total = 0

    # ------------------------------------------------------------ life cycle

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._tasks = [loop.create_task(self._sweeper(), name="share-lock-sweeper")]
        if self.journal is not None and hasattr(getattr(self.ctx, "zk", None), "add_listener"):
            self.ctx.zk.add_listener(self._zk_state)

    def _zk_state(self, state: str) -> None:
        """kazoo's connection thread: a session suspended or lost (``KazooState.SUSPENDED``, ``LOST``)."""
        if state != KazooState.CONNECTED and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._session_lost)

    def _session_lost(self) -> None:
        """The ZooKeeper session may be gone: another incarnation of this broker may register and take share
        partitions over, so no share partition answers from the journal until its next write lands."""
        self._zk_gen += 1
        for held in self.held.values():
            held.fresh = False

    async def stop(self) -> None:
        """Write what is dirty (bounded), then stop."""
        try:
            await asyncio.wait_for(self.flush(), 5)
        except (asyncio.TimeoutError, Exception) as e:  # noqa: BLE001 -- stopping anyway
            log.warning("share state not all written at stop: %s", e)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.journal is not None and hasattr(getattr(self.ctx, "zk", None), "remove_listener"):
            self.ctx.zk.remove_listener(self._zk_state)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    # ------------------------------------------------------------ share partitions

    async def partition(self, group: str, topic: str, partition: int) -> _Held:
        """The share partition (loaded or made on first use).  Raises ``OSError``-like errors of
        ZooKeeper to the caller, which answers an error for the partition."""
        key = (group, topic, partition)
        self._check_fence(key)
        topic_id = self.ctx.view.topic_id(topic)
        held = self.held.get(key)
        if held is not None and not held.gone and held.topic_id == topic_id:
            if not held.ready:
                await self._initialized(held)
            self._follow_log_start(held)
            return held
        pending = self._loading.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        fut = asyncio.get_running_loop().create_future()
        self._loading[key] = fut
        try:
            held = await self._load(key, topic_id, None if held is None else held)
            fut.set_result(held)
            return held
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # retrieved: waiters re-raise it
            raise
        finally:
            self._loading.pop(key, None)

    async def _load(self, key: Key, topic_id: bytes | None, old: _Held | None) -> _Held:
        group, topic, partition = key
        s = self.settings(group)
        limits = {"delivery_count_limit": s.delivery_count_limit, "max_in_flight": s.max_in_flight}
        data, version = await self.store.load(group, topic, partition)
        entry = self.recovered.pop(key, None)
        if entry is not None and data is not None and (entry.writer, entry.epoch) == identity_of(data) \
                and entry.seq > seq_of(data):
            # acknowledgements answered after the last checkpoint: the journal's state is the newer one
            log.info("share partition %s/%s-%d: loaded from the share-state journal (sequence %d, the znode's %d)",
                     *key, entry.seq, seq_of(data))
            data = entry.data
        elif entry is not None:  # the znode was written since by another writer, an admin, or deleted
            log.info("share partition %s/%s-%d: the share-state journal's entry is stale; ignored", *key)
            if self.journal is not None:
                self.journal.drop(key)
        # read before the start is chosen: the group, or its state of the topic, deleted from now on fences
        # the create (store.Write)
        group_created = await self._group_created(group) if data is None else None
        topic_created = await self.store.topic_created(group, topic) if data is None else None
        plog = self.ctx.logs.get_or_create(topic, partition)
        sp = None
        if data is not None:
            try:
                snap, stored_id = decode(data)
                if stored_id is None or topic_id is None or stored_id == topic_id:
                    sp = SharePartition.restore(snap, **limits)
                else:
                    log.info("share partition %s/%s-%d: topic created again; starting afresh", *key)
            except ValueError as e:
                log.error("share partition %s/%s-%d: stored state unreadable (%s); starting afresh", *key, e)
        fresh = sp is None
        # State another process wrote is about the log as it was before this process opened it: what lies
        # at or past the end the log recovered to was cut off by a crash (or the disk replaced), and records
        # appended there since are new, even when they are in the log by the time of this load.  An admin's
        # write (no writer: AlterShareGroupOffsets, a reset) is taken as of now.
        bound = plog.log_end_offset
        if data is not None and identity_of(data)[0] not in (None, self.writer):
            bound = min(bound, getattr(plog, "opened_end_offset", bound))
        if sp is None:
            sp = SharePartition(self._initial_offset(plog, s.auto_offset_reset), **limits)
        elif sp.end_offset > bound:
            log.warning("share partition %s/%s-%d: its state reaches offset %d but the log ended at %d when it was "
                        "opened (truncated or replaced): the state from there on is dropped, records written there "
                        "are new", *key, sp.end_offset - 1, bound)
            sp = SharePartition.restore(_clipped(sp.snapshot(), bound), **limits)
        # Every load is a takeover: the state is written back under this broker's name and the next state
        # epoch before it is served, so the leader it was taken from is refused at its next write (Kafka's
        # share coordinator records the leader epoch of ReadShareGroupState the same way).
        held = _Held(key, sp, topic_id, zversion=version, written=-1, ready=False,
                     epoch=identity_of(data)[1] + 1 if data is not None else 1, group_created=group_created,
                     topic_created=topic_created)
        self.held[key] = held
        self._follow_log_start(held)
        if fresh:
            log.info("share partition %s/%s-%d starts at offset %d (share.auto.offset.reset=%s)", *key,
                     sp.start_offset, s.auto_offset_reset)
        else:
            log.info("share partition %s/%s-%d restored at offset %d (%d in flight), state epoch %d", *key,
                     sp.start_offset, sp.end_offset - sp.start_offset, held.epoch)
        await self._initialized(held)
        return held

    async def _group_created(self, group: str) -> int:
        """The creation zxid of the group's znode, waited for up to ``group_wait_s`` (its coordinator
        saves it in the background when a member joins).  Raises ``ShareGroupUnknown`` when it has none."""
        deadline = time.monotonic() + self.group_wait_s
        while True:
            created = await self.store.group_created(group)
            if created is not None:
                return created
            if time.monotonic() >= deadline:
                raise ShareGroupUnknown("share group %s: no such group (deleted, or no member ever joined); its "
                                        "share partitions are not served" % group)
            await asyncio.sleep(GROUP_POLL_S)

    async def _initialized(self, held: _Held) -> None:
        """Wait until a loaded share partition's state is in ZooKeeper under this broker's name and
        state epoch: a new one's start offset, as Kafka initializes share-group state before serving
        it (written behind, a crash in between would pick a new start on restart and the records
        produced meanwhile would never reach the group); a stored one's takeover (the leader it was
        taken from is refused from then on).  Raises ``ShareStateUnavailable`` after ``init_wait_s``
        (the write goes on; the next request waits for it again, and the start stays the one chosen
        first), ``ShareLeaderFenced`` when another leader took it over meanwhile."""
        code = await self.durable(held, held.sp.version, timeout=self.init_wait_s)
        if code != ErrorCode.NONE:
            self._check_fence(held.key)
            if held.group_gone:
                raise ShareGroupUnknown("share partition %s/%s-%d: its group was deleted" % held.key)
            raise ShareStateUnavailable("share partition %s/%s-%d: its state is not in ZooKeeper (%s)"
                                        % (*held.key, ErrorCode(code).name))
        held.ready = True

    def _replicas(self, key: Key) -> tuple[int, ...] | None:
        replicas = getattr(self.ctx.view, "topics", {}).get(key[1], {}).get(key[2])
        return None if replicas is None else tuple(replicas)

    def _check_fence(self, key: Key) -> None:
        """Raise ``ShareLeaderFenced`` while another leader holds ``key`` and this broker's view of the
        partition's replicas is the one it had when it was taken over (a new assignment lifts it)."""
        if key not in self.fenced:
            return
        if self._replicas(key) == self.fenced[key]:
            raise ShareLeaderFenced("share partition %s/%s-%d: another leader took it over" % key)
        log.info("share partition %s/%s-%d: its replicas changed since another leader took it over; served "
                 "again (taken over from the stored state)", *key)
        del self.fenced[key]

    def _initial_offset(self, plog: Any, reset: str) -> int:
        if reset == "earliest":
            return plog.log_start_offset
        if reset.startswith("by_duration:"):
            try:
                since = self.wall_clock() - parse_by_duration(reset)
            except ValueError:
                return plog.log_end_offset
            found = plog.offset_for_timestamp(int(since))
            return found[0] if found is not None else plog.log_end_offset
        return plog.log_end_offset

    def _follow_log_start(self, held: _Held) -> None:
        group, topic, partition = held.key
        try:
            start = self.ctx.logs.get_or_create(topic, partition).log_start_offset
        except Exception:  # noqa: BLE001 -- the caller answers for a missing log itself
            return
        if start > held.sp.start_offset:
            held.sp.move_start(start)
            self._mark(held)

    def forget_partitions(self, keys: Iterable[Key]) -> None:
        """Drop these share partitions (an admin altered or deleted their state in ZooKeeper): the next
        request reads the new state; acknowledgements waiting for a write get FENCED_STATE_EPOCH."""
        for key in keys:
            held = self.held.pop(key, None)
            if held is None:
                continue
            self._drop(held)
            self._dirty.discard(key)
            self.ctx.appends.notify((key[1], key[2]))

    def _drop(self, held: _Held) -> None:
        """``held`` is served no more (fenced, reset, deleted): its waiters get FENCED_STATE_EPOCH, its
        journal entry is needed no more."""
        held.gone = True
        held.waiters = self._answer(held.waiters + held.jwaiters, 2**63, ErrorCode.FENCED_STATE_EPOCH)
        held.jwaiters = []
        current = self.held.get(held.key)
        if self.journal is not None and (current is None or current is held):
            self.journal.drop(held.key)

    def forget_topic(self, topic: str) -> None:
        """A topic went: its share partitions here are dropped (its znodes stay until the group goes)."""
        for key in [k for k in self.held if k[1] == topic]:
            self._drop(self.held.pop(key))
        for key in [k for k in self.fenced if k[1] == topic]:
            del self.fenced[key]

    def release_member(self, group: str, member_id: str, partitions: Iterable[tuple[str, int]]) -> int:
        n = 0
        for topic, p in partitions:
            held = self.held.get((group, topic, p))
            if held is not None and not held.gone:
                released = held.sp.release_member(member_id)
                if released:
                    n += released
                    self._mark(held)
                    self.ctx.appends.notify((topic, p))
        return n

    # ------------------------------------------------------------ acquire / acknowledge

    def isolation_level(self, group: str) -> str:
        """The group's ``share.isolation.level`` now (read at each fetch, as Kafka's share fetch reads
        the group's config: a change applies from the next acquisition on): ``read_committed`` or
        ``read_uncommitted`` (the default, also where the broker keeps no group configs)."""
        configs = getattr(self.ctx, "group_configs", None)
        if configs is None:
            return READ_UNCOMMITTED
        level = getattr(configs.get(group), "share_isolation_level", READ_UNCOMMITTED)
        return READ_COMMITTED if level == READ_COMMITTED else READ_UNCOMMITTED

    def _stable_offset(self, held: _Held, plog: Any) -> int | None:
        """Where ``held``'s group may read up to: the log's last stable offset for read_committed
        (records of an open transaction wait until it ends), None (the log end) for read_uncommitted."""
        return plog.last_stable_offset if self.isolation_level(held.key[0]) == READ_COMMITTED else None

    def readable_bytes(self, held: _Held, limit: int) -> int | None:
        """The log's bytes from where ``held`` acquires next, counted up to ``limit`` (what a
        ShareFetch's MinBytes weighs, as Kafka's ``DelayedShareFetch`` does) -- below the last stable
        offset for a read_committed group; None when it can acquire nothing now (its window is full).
        A start on a segment older than the active one counts as ``limit``, as Kafka answers such a
        fetch at once."""
        offset = held.sp.fetch_offset()
        if offset is None:
            return None
        if limit <= 0:
            return 0
        plog = self.ctx.logs.get_or_create(held.key[1], held.key[2])
        stable = self._stable_offset(held, plog)
        if stable is not None and offset >= stable:
            return 0
        bases = plog.segment_bases()
        if len(bases) > 1 and offset < bases[-1]:
            return limit
        try:
            region = plog.read(offset, 0x7FFFFFFF, stable)  # to the end of its segment (or the LSO)
        except OffsetOutOfRange:
            self._follow_log_start(held)
            return 0
        return min(region.length, limit) if region is not None else 0

    def acquire(self, held: _Held, member_id: str, *, max_records: int, max_bytes: int, batch_optimized: bool,
                batch_size: int) -> tuple[list[Acquired], FileRegion | None]:
        """Acquire for ``member_id`` at most ``max_records`` records (``batch_optimized``: the last
        batch completes) from the log at ``held``'s fetch offset, reading at most ``max_bytes`` (and
        ``READ_BYTES``): the acquired ranges -- in batch-optimized mode cut into ranges of about
        ``batch_size`` records at batch boundaries (``_split``) -- and the part of the log that holds
        them (a ``FileRegion``: sent with sendfile, never copied through Python).  Only the batch
        headers are read, and only as many batches as ``max_records`` needs.

        Control batches are no records of the share partition: their offsets are archived as gaps,
        never acquired (the bytes of one between two acquired batches are sent; clients skip control
        batches).  A read_committed group (``share.isolation.level``) reads below the last stable
        offset only, and the records of aborted transactions it acquires are archived at once
        (``SharePartition.acquire``); when a read acquired nothing else, the next is read at once
        (up to ``ABORTED_READS``), so an aborted transaction does not make a fetch wait while
        committed records follow it."""
        for _ in range(ABORTED_READS):
            before = held.sp.fetch_offset()
            acquired, region = self._acquire_once(held, member_id, max_records=max_records, max_bytes=max_bytes,
                                                  batch_optimized=batch_optimized, batch_size=batch_size)
            if acquired or held.sp.fetch_offset() in (None, before):
                return acquired, region
        return [], None

    def _acquire_once(self, held: _Held, member_id: str, *, max_records: int, max_bytes: int,
                      batch_optimized: bool, batch_size: int) -> tuple[list[Acquired], FileRegion | None]:
        """One read of the log and the acquisition from it (``acquire``)."""
        offset = held.sp.fetch_offset()
        if offset is None or max_records <= 0 or held.gone:
            return [], None
        plog = self.ctx.logs.get_or_create(held.key[1], held.key[2])
        stable = self._stable_offset(held, plog)
        try:
            region = plog.read(offset, min(READ_BYTES, max_bytes), stable)
        except OffsetOutOfRange:  # the log start passed it since the partition was handed out
            self._follow_log_start(held)
            return [], None
        if region is None:
            return [], None
        batches, read_end = batch_bounds(region, offset, max_records)
        if read_end < 0:
            return [], None
        aborted = aborted_ranges(plog, batches, read_end) if stable is not None else []
        s = self._settings(held)
        acquired = held.sp.acquire(member_id, [(b.first, b.last) for b in batches], max_records=max_records,
                                   lock_deadline=self.clock() + s.lock_duration_ms, batch_optimized=batch_optimized,
                                   stable_offset=stable, aborted=aborted, read_end=read_end)
        self._mark(held)  # acquired, or gaps, markers and aborted records archived
        if not acquired:
            return [], None
        self.acquired_total += sum(a.last_offset - a.first_offset + 1 for a in acquired)
        first_byte = last_byte = None
        for b in batches:
            if any(a.first_offset <= b.last and a.last_offset >= b.first for a in acquired):
                first_byte = b.start if first_byte is None else first_byte
                last_byte = b.end
        assert first_byte is not None and last_byte is not None  # what was acquired came from these batches
        if batch_optimized:
            acquired = split_acquired(acquired, [b.first for b in batches], batch_size)
        return acquired, FileRegion(region.fileobj, region.offset + first_byte, last_byte - first_byte)

    def _settings(self, held: _Held) -> ShareSettings:
        """The group's settings now, its limits given to the share partition (a group's configs
        may have changed since it loaded)."""
        s = self.settings(held.key[0])
        held.sp.set_limits(delivery_count_limit=s.delivery_count_limit, max_in_flight=s.max_in_flight)
        return s

    def acknowledge(self, held: _Held, member_id: str, batches: list[dict], *,
                    renew: bool) -> tuple[ErrorCode, "asyncio.Future[ErrorCode]"]:
        """Apply a partition's AcknowledgementBatches (``renew``: Renew is allowed, a v2 request with
        IsRenewAck): the first error, and a future done once what they changed is durable (NONE) -- in
        the journal, or in ZooKeeper (``durable_soon``) -- or cannot be (the error to answer;
        REQUEST_TIMED_OUT after ``WRITE_WAIT_S``).  The append or write goes at the end of this turn
        of the event loop, with every other change waited on in it (a group commit).
        Batches breaking Kafka's rules (``_refused``) get INVALID_REQUEST and none is applied."""
        if _refused(batches, renew):
            code = ErrorCode.INVALID_REQUEST
        else:
            code = ErrorCode.NONE
            s = self._settings(held)
            deadline = self.clock() + s.lock_duration_ms
            for b in batches:
                first, last = b["first_offset"], b["last_offset"]
                c = held.sp.acknowledge(member_id, first, last, list(b["acknowledge_types"]), lock_deadline=deadline)
                if c == ErrorCode.NONE:
                    self.acknowledged_total += last - first + 1
                elif code == ErrorCode.NONE:
                    code = c
            self._mark(held)
            self.ctx.appends.notify((held.key[1], held.key[2]))  # released records may go to a waiting fetch
        written = self.durable_soon(held, held.sp.version, journal=True)
        return code, asyncio.ensure_future(self.settle(written, held.key, WRITE_WAIT_S))

    # ------------------------------------------------------------ persistence

    def _mark(self, held: _Held) -> None:
        """``held`` changed: written behind, within ``flush_interval_ms``."""
        if held.sp.version != held.written:
            self._dirty.add(held.key)
            if self._timer is None and self._inflight is None and self._loop is not None:
                self._timer = self._loop.call_later(self.flush_interval_ms / 1000, self._timed)

    def durable_soon(self, held: _Held, version: int, journal: bool = False) -> "asyncio.Future[ErrorCode]":
        """A future done once ``version`` of ``held`` is in ZooKeeper (NONE) or cannot be (the error to
        answer) -- with ``journal`` (an acknowledgement), once it is journaled instead when there is a
        journal and ``held`` is ``ready`` and ZooKeeper-fresh (``_Held.fresh``): the state goes to
        ZooKeeper behind, as a checkpoint within ``flush_interval_ms``.

        A group commit: the write is started once, when this turn of the event loop ends (``call_soon``),
        so every change waited on in the same turn -- the acknowledgements of all the requests read in it,
        of any members, sessions and share partitions -- goes in one journal append (``_journal_commit``)
        or one multi, and each waiter is answered once that is done, as Kafka's broker answers after its
        share coordinator's log append.
        While a write is in flight the next one starts when it ends (``_written``), with everything
        waited on meanwhile."""
        fut = asyncio.get_running_loop().create_future()
        if held.gone:
            fut.set_result(ErrorCode.FENCED_STATE_EPOCH)
        elif held.written >= version or (journal and held.journaled >= version):
            fut.set_result(ErrorCode.NONE)
        elif journal and self.journal is not None and held.ready and held.fresh:
            held.jwaiters.append((version, fut))
            self._jwait[id(held)] = held
        else:
            held.waiters.append((version, fut))
            self._dirty.add(held.key)
            self._zk_soon = True
        if not fut.done():
            if not self._commit_soon and self._loop is not None:
                self._commit_soon = True
                self._loop.call_soon(self._group_commit)
        return fut

    def _group_commit(self) -> None:
        """The end of the turn of the event loop in which changes were first waited on (``durable_soon``)."""
        self._commit_soon = False
        if self._jwait:
            self._journal_commit()
        if self._zk_soon:
            self._zk_soon = False
            self._submit()

    def _journal_commit(self) -> None:
        """One journal append for every share partition waited on in this turn; their waiters answered,
        their state marked for ZooKeeper behind.  A failed append (a full disk) sends them to ZooKeeper."""
        assert self.journal is not None
        waiting, self._jwait = [h for h in self._jwait.values() if not h.gone and h.jwaiters], {}
        helds = [h for h in waiting if h.fresh]  # a session lost since they were waited on: ZooKeeper's
        entries = [self.journal.entry(h.key, self.writer, h.epoch, h.sp, h.topic_id) for h in helds]
        try:
            self.journal.append(entries)
        except OSError as e:
            log.error("share-state journal append failed (%s): %d share partition(s) wait for ZooKeeper instead",
                      e, len(helds))
            helds, entries = [], []
        journaled = {id(h) for h in helds}
        for h in (h for h in waiting if id(h) not in journaled):
            h.waiters += h.jwaiters
            h.jwaiters = []
            self._dirty.add(h.key)
            self._zk_soon = True
        for h, entry in zip(helds, entries, strict=True):
            h.journaled = max(h.journaled, entry.seq)
            h.jwaiters = self._answer(h.jwaiters, h.journaled)
            self._mark(h)

    @staticmethod
    def _answer(waiters: list[tuple[int, asyncio.Future]], upto: int,
                code: ErrorCode = ErrorCode.NONE) -> list[tuple[int, asyncio.Future]]:
        """Answer ``code`` to the waiters for a version up to ``upto``; the others."""
        keep = []
        for v, w in waiters:
            if v <= upto:
                if not w.done():
                    w.set_result(code)
            else:
                keep.append((v, w))
        return keep

    async def durable(self, held: _Held, version: int, timeout: float = 30.0) -> ErrorCode:
        """Wait until ``version`` of ``held`` is in ZooKeeper: NONE, or the error to answer."""
        return await self.settle(self.durable_soon(held, version), held.key, timeout)

    async def settle(self, fut: "asyncio.Future[ErrorCode]", key: Key, timeout: float = 30.0) -> ErrorCode:
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError:
            log.warning("share partition %s/%s-%d: state not written within %.0f s", *key, timeout)
            return ErrorCode.REQUEST_TIMED_OUT

    async def flush(self) -> None:
        """Write everything dirty now (stop, tests)."""
        while self._dirty or self._inflight is not None:
            if self._inflight is None:
                self._submit()
            if self._inflight is not None:
                await asyncio.shield(self._inflight)
                await asyncio.sleep(0)  # the done callback runs

    def _timed(self) -> None:
        self._timer = None
        self._submit()

    def _submit(self) -> None:
        """Start writing everything dirty in one go (multis of ``store.MAX_OPS``) on a worker thread,
        unless a write is in flight: its completion starts the next one.

        On a worker thread blocked in kazoo's synchronous multi, not with kazoo's asynchronous one: its
        answer would come back through kazoo's one completion thread, behind whatever watch callbacks of
        the broker run there (with one librdkafka ShareConsumer it read fewer ShareFetches per second in
        most of the profiled runs, though it used less CPU per ShareFetch)."""
        if self._inflight is not None or not self._dirty or self._loop is None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        keys, self._dirty = self._dirty, set()
        writes, taken, gen = [], [], self._zk_gen
        for key in keys:
            held = self.held.get(key)
            if held is None or held.gone or held.sp.version == held.written:
                continue
            writes.append(Write(*key, encode(held.sp.snapshot(), held.topic_id, self.writer, held.epoch,
                                             seq=held.sp.version),
                                held.zversion, (self.writer, held.epoch), held.group_created,
                                held.topic_created))
            taken.append((held, held.sp.version, writes[-1].data))
        if not writes:
            return
        self._inflight = self._loop.run_in_executor(None, self.store.write_blocking, writes)
        self._inflight.add_done_callback(lambda f: self._written(f, taken, gen))

    def _written(self, fut: asyncio.Future, taken: list[tuple[_Held, int, bytes]], gen: int = 0) -> None:
        self._inflight = None
        try:
            results = fut.result()
        except Exception as e:  # noqa: BLE001 -- ZooKeeper unreachable: keep it dirty, try again soon
            log.warning("share state write failed (%r); retrying", e)
            # it may have been applied all the same (the answer was lost): the next write recognises it by
            # this writer's identity in the znode
            self._dirty.update(h.key for h, _, _ in taken)
            if self._loop is not None and self._timer is None:
                self._timer = self._loop.call_later(RETRY_S, self._timed)
            return
        for held, version, _ in taken:
            r = results.get(held.key)
            if isinstance(r, StateFenced) or r is None:
                if isinstance(r, StateFenced):
                    self._lost(held, r)
                    held.group_gone = r.group_gone
                self._drop(held)
                if self.held.get(held.key) is held:
                    del self.held[held.key]
                continue
            held.zversion = r
            held.written = max(held.written, version)
            held.fresh = held.fresh or gen == self._zk_gen
            if self.journal is not None:
                self.journal.covered(held.key, self.writer, held.epoch, version)
            held.waiters = self._answer(held.waiters, held.written)
            held.jwaiters = self._answer(held.jwaiters, held.written)
            if held.sp.version != held.written:
                self._dirty.add(held.key)
        if any(h.waiters for h in (self.held.get(k) for k in self._dirty) if h is not None):
            self._submit()  # someone waits: at once
        elif self._dirty and self._timer is None and self._loop is not None:
            self._timer = self._loop.call_later(self.flush_interval_ms / 1000, self._timed)

    def _lost(self, held: _Held, fenced: StateFenced) -> None:
        """``held``'s write was refused.  Written by another leader since this broker served it: this
        broker stops serving it (``fenced``) rather than reload and go on beside the other -- the newer
        takeover wins.  Else (an admin reset or deletion, or a takeover of this broker's that lost to a
        write of the leader it took over from, which is refused next) it is read again at next use."""
        other = fenced.writer is not None and fenced.writer != self.writer
        if other and held.ready and self.held.get(held.key) is held:
            self.fenced[held.key] = self._replicas(held.key)
            log.warning("share partition %s/%s-%d: taken over by %s (state epoch %d, ours %d); no longer served "
                        "here", *held.key, fenced.writer, fenced.epoch, held.epoch)

    # ------------------------------------------------------------ locks

    async def _sweeper(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            now = self.clock()
            if now - self._evicted_ms >= 1000:
                self._evicted_ms = now
                self._evict_idle(now)
            for held in list(self.held.values()):
                deadline = held.sp.next_lock_deadline()
                if deadline is not None and deadline <= now:
                    self._settings(held)  # the group's limit decides which expiring records are archived
                    if held.sp.expire_locks(now):
                        self._mark(held)
                        self.ctx.appends.notify((held.key[1], held.key[2]))

    # ------------------------------------------------------------ views

    def stats(self) -> dict[Key, dict[str, int]]:
        """Per share partition held: start offset, in-flight counts, cumulative deliveries."""
        out = {}
        for key, held in self.held.items():
            c = held.sp.counts()
            out[key] = {"start_offset": held.sp.start_offset, "end_offset": held.sp.end_offset,
                        "deliveries": held.sp.deliveries_total, "archived_total": held.sp.archived_total, **c}
        return out
