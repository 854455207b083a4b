"""Full garbage collections kept off the event loop (``spark_coord.gc_pauses``): while a
``HeapFreezer`` runs no young collection sets off a full one, survivors are frozen on its
schedule, cyclic garbage among them is freed by the full collection it runs once the heap has
grown, and stopping it gives the process back to Python's own schedule."""

from __future__ import annotations

import asyncio
import gc
import sys
import time
import weakref

import pytest

from spark_coord.gc_pauses import NO_AUTOMATIC_FULL, HeapFreezer, start_from_config


class Node:
    """A cycle's link: freed only by the cyclic collector."""

    def __init__(self) -> None:
        self.other: Node | None = None


def make_cycle() -> "weakref.ref[Node]":
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


async def until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


@pytest.fixture
def restore_gc():
    thresholds = gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)
    gc.unfreeze()


def test_no_automatic_full_collection_while_running_and_the_schedule_back_after(restore_gc):
    before = gc.get_threshold()

    async def run() -> None:
        freezer = HeapFreezer(interval_s=0.01)
        freezer.start()
        try:
            assert freezer.running and freezer.full_collections == 1
            assert gc.get_threshold() == (before[0], before[1], NO_AUTOMATIC_FULL)
            assert gc.get_freeze_count() > 0
            full0 = gc.get_stats()[2]["collections"]
            for _ in range(200_000):   # many young collections
                make_cycle()
            assert gc.get_stats()[2]["collections"] == full0
        finally:
            freezer.stop()

    asyncio.run(run())
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_frozen_cycles_are_freed_by_the_full_collection_once_the_heap_grew(restore_gc):
    async def run() -> None:
        freezer = HeapFreezer(interval_s=0.01, growth=0.05)
        freezer.start()
        try:
            ref = make_cycle()
            frozen = gc.get_freeze_count()
            await until(lambda: gc.get_freeze_count() > frozen)   # the next tick froze it
            gc.collect()
            assert ref() is not None, "a frozen cycle is out of the collector's sight"
            assert not freezer.due_for_full()
            ballast = [[i] for i in range(sys.getallocatedblocks() // 10)]   # the heap grows by a tenth
            await until(lambda: freezer.full_collections >= 2)
            assert ref() is None
            del ballast
        finally:
            freezer.stop()

    asyncio.run(run())


def test_the_setting_zero_keeps_pythons_schedule(restore_gc):
    before = gc.get_threshold()
    assert start_from_config(0) is None
    assert gc.get_threshold() == before

    async def run() -> None:
        freezer = start_from_config(60_000)
        assert freezer is not None and freezer.interval_s == 60
        freezer.stop()

    asyncio.run(run())
    assert gc.get_threshold() == before


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        HeapFreezer(interval_s=0)
    with pytest.raises(ValueError):
        HeapFreezer(growth=-1)
