"""The broker's view of the cluster, kept in step with ZooKeeper by watches.

Live brokers come from ``/brokers/ids`` (a ``ChildrenWatch``; every change re-reads
every registration, so a broker that re-registered with a new port is seen even
if the child list looks the same), topics from ``/brokers/topics`` (a
``ChildrenWatch`` plus one ``DataWatch`` per topic for its assignment and topic id).

Topic ids (KIP-516) live in the topic znode's ``topic_id``, as Kafka 2.8+ keeps them.
A topic whose znode has none (created before topic ids, or by a tool that does not
know them) is given one by the first broker that sees it: a conditional write on
the znode's version, so brokers racing to do it agree on one id; the losers' watch
then delivers the winner's.  ``topic_id(name)`` and ``topic_name(topic_id)`` look
ids up.  kazoo
runs these callbacks on its own thread, where reading ZooKeeper is allowed; the
parsed, immutable result is handed to the asyncio loop with ``to_loop``, and only
the loop thread changes the view.  kazoo's watch recipes re-arm themselves after
a session expiry, so the view heals by itself (``zk.client.ChildrenWatch`` keeps a
re-read that meets the expiry from logging a traceback).

Listeners (``add_listener``) run on the loop after every change; ``wait_for``
waits (bounded) for a predicate over the view to hold.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NoNodeError
from kazoo.recipe.watchers import DataWatch

from spark_coord.zk import model, paths
from spark_coord.zk.client import ChildrenWatch, to_loop

log = logging.getLogger(__name__)

Assignment = dict[int, list[int]]


class ClusterView:
    """Live brokers and topic assignments as ZooKeeper has them (read on the loop thread)."""

    def __init__(self, zk: KazooClient, loop: asyncio.AbstractEventLoop):
        self.zk = zk
        self.loop = loop
        self.brokers: dict[int, model.BrokerInfo] = {}
        self.topics: dict[str, Assignment] = {}
        #: topic -> its id (16 bytes), for the topics whose znode carries one
        self.topic_ids: dict[str, bytes] = {}
        self._names_by_id: dict[bytes, str] = {}
        self._listeners: list[Callable[["ClusterView"], None]] = []
        self._changed = asyncio.Event()
        self._topic_watches: dict[str, DataWatch] = {}
        self._watch_lock = threading.RLock()  # DataWatch calls back inside its constructor
        self._stopped = False
        self._broker_watch: ChildrenWatch | None = None
        self._topics_watch: ChildrenWatch | None = None

    # ------------------------------------------------------------------ queries
    @property
    def controller_id(self) -> int:
        """Lowest live broker id (-1 when none): what Metadata reports as the controller."""
        return min(self.brokers) if self.brokers else -1

    def leader(self, topic: str, partition: int) -> int | None:
        """The partition's assigned leader (first replica), None if the partition is unknown."""
        replicas = self.topics.get(topic, {}).get(partition)
        return replicas[0] if replicas else None

    def topic_id(self, name: str) -> bytes | None:
        """The id (16 bytes, as the wire carries it) of topic ``name``; None when there is no
        such topic or it has no id yet (a topic from before topic ids, for the moment until a
        broker has given it one).  ``model.format_topic_id`` gives Kafka's text form."""
        return self.topic_ids.get(name)

    def topic_name(self, topic_id: bytes) -> str | None:
        """The topic whose id is ``topic_id`` (16 bytes); None for an id of nothing: unknown, the
        zero UUID, the id of a deleted topic (a topic created again under the same name has a
        new id), or anything that is not 16 bytes."""
        if not isinstance(topic_id, (bytes, bytearray, memoryview)):
            return None
        return self._names_by_id.get(bytes(topic_id))

    def add_listener(self, fn: Callable[["ClusterView"], None]) -> None:
        """Call ``fn(view)`` on the loop after every change."""
        self._listeners.append(fn)

    async def wait_for(self, predicate: Callable[["ClusterView"], bool], timeout: float) -> bool:
        """Wait until ``predicate(view)`` holds (True) or ``timeout`` seconds pass (False)."""
        deadline = self.loop.time() + timeout
        while not predicate(self):
            remaining = deadline - self.loop.time()
            if remaining <= 0:
                return False
            event = self._changed
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except asyncio.TimeoutError:
                return predicate(self)
        return True

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Install the watches; returns once the initial state is loaded into the view."""
        await self.loop.run_in_executor(None, self._install)
        # Callbacks made during _install were posted before the executor's result: let them run.
        await asyncio.sleep(0)

    def _install(self) -> None:
        self.zk.ensure_path(paths.BROKER_IDS)
        self.zk.ensure_path(paths.BROKER_TOPICS)
        self._broker_watch = ChildrenWatch(self.zk, paths.BROKER_IDS, self._on_broker_ids)
        self._topics_watch = ChildrenWatch(self.zk, paths.BROKER_TOPICS, self._on_topic_names)

    def stop(self) -> None:
        """Stop reacting to ZooKeeper (the recipes drop their watches on the next event)."""
        self._stopped = True

    # ------------------------------------------------ kazoo thread: read, post
    def _on_broker_ids(self, children: list[str]) -> bool | None:
        if self._stopped:
            return False
        brokers: dict[int, model.BrokerInfo] = {}
        for child in children:
            try:
                broker_id = paths.parse_broker_node(child)
                data, _ = self.zk.get(paths.broker(broker_id))
                brokers[broker_id] = model.parse_broker(broker_id, data)
            except NoNodeError:
                continue  # went away between the listing and the read; the watch fires again
            except ValueError as e:
                log.warning("ignoring %s/%s: %s", paths.BROKER_IDS, child, e)
            except KazooException as e:  # connection trouble: the recipe re-runs on reconnect
                log.warning("reading %s/%s failed: %s", paths.BROKER_IDS, child, e)
        to_loop(self.loop, self._set_brokers)(brokers)
        return None

    def _on_topic_names(self, children: list[str]) -> bool | None:
        if self._stopped:
            return False
        names = set()
        for child in children:
            try:
                names.add(paths.validate_topic(child))
            except ValueError as e:
                log.warning("ignoring %s/%s: %s", paths.BROKER_TOPICS, child, e)
        with self._watch_lock:
            for gone in set(self._topic_watches) - names:
                del self._topic_watches[gone]
                to_loop(self.loop, self._set_topic)(gone, None)
            for name in sorted(names - set(self._topic_watches)):
                self._topic_watches[name] = DataWatch(self.zk, paths.topic(name), self._topic_callback(name))
        return None

    def _topic_callback(self, name: str) -> Callable:
        def on_data(data: bytes | None, stat) -> bool | None:
            if self._stopped:
                return False
            with self._watch_lock:
                current = self._topic_watches.get(name)
            if current is not None and getattr(current, "_func", None) is not on_data:
                return False  # a newer watch took over this topic
            if data is None:
                to_loop(self.loop, self._set_topic)(name, None)
                return None
            try:
                znode = model.parse_topic(data, name)
            except ValueError as e:
                log.warning("ignoring topic %s: %s", name, e)
                return None
            to_loop(self.loop, self._set_topic)(name, znode.partitions, znode.topic_id)
            if znode.topic_id is None and stat is not None:
                self._give_topic_id(name, data, stat.version)
            return None
        return on_data

    def _give_topic_id(self, name: str, data: bytes, version: int) -> None:
        """Write an id into ``name``'s znode, if it is still at ``version`` (kazoo thread).

        The id the view already knows for the topic is kept (its znode was rewritten by
        something that does not know topic ids); else a new one.  When another broker wrote
        first, the version no longer matches and nothing is written: the watch fires again
        with what it wrote."""
        topic_id = self.topic_ids.get(name) or model.new_topic_id()
        try:
            content = model.with_topic_id(data, topic_id, name)
            # retried over a lost connection: a write that went through answers BadVersionError then
            self.zk.retry(self.zk.set, paths.topic(name), content, version=version)
        except (BadVersionError, NoNodeError):
            log.debug("topic %s changed before this broker gave it an id", name)
            return
        except ValueError as e:
            log.warning("cannot give topic %s an id: %s", name, e)
            return
        except KazooException as e:  # the session expired meanwhile: the other brokers try too, and every
            # broker tries again when it next reads the topic (a change, its restart)
            log.warning("giving topic %s an id failed: %s", name, e)
            return
        log.info("topic %s had no topic id: gave it %s", name, model.format_topic_id(topic_id))

    # ------------------------------------------------------------ loop thread
    def _set_brokers(self, brokers: dict[int, model.BrokerInfo]) -> None:
        if brokers != self.brokers:
            log.info("live brokers: %s", ", ".join(f"{b.id}@{b.address}" for b in brokers.values()) or "none")
            self.brokers = brokers
            self._notify()

    def _set_topic(self, name: str, assignment: Assignment | None, topic_id: bytes | None = None) -> None:
        old_id = self.topic_ids.get(name)
        if topic_id is None:
            # The znode lost its id (rewritten by something that does not know topic ids): the
            # topic keeps the one it had, which _give_topic_id writes back.
            topic_id = old_id
        if assignment is None:
            self._forget_id(name)
            if self.topics.pop(name, None) is not None:
                log.info("topic %s deleted", name)
                self._notify()
            return
        if old_id != topic_id:
            self._forget_id(name)
            if topic_id is not None:
                other = self._names_by_id.get(topic_id)
                if other is not None and other != name:
                    log.warning("topics %s and %s have the same topic id %s: it now names %s", other, name,
                                model.format_topic_id(topic_id), name)
                    self.topic_ids.pop(other, None)
                self.topic_ids[name] = topic_id
                self._names_by_id[topic_id] = name
                log.debug("topic %s: id %s", name, model.format_topic_id(topic_id))
        if self.topics.get(name) != assignment or old_id != topic_id:
            self.topics[name] = assignment
            log.debug("topic %s: %s", name, assignment)
            self._notify()

    def _forget_id(self, name: str) -> None:
        old = self.topic_ids.pop(name, None)
        if old is not None and self._names_by_id.get(old) == name:
            del self._names_by_id[old]

    def _notify(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()
        for fn in list(self._listeners):
            try:
                fn(self)
            except Exception:
                log.exception("cluster view listener failed")
