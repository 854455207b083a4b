"""Wake-ups for long-poll fetches: Produce notifies, Fetch waits.

A waiting fetch registers one future under every partition it asked for; an
append to any of them resolves it.  Pure asyncio (loop thread only), no polling.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Iterable

from spark_coord.common import TopicPartition


class AppendWaiters:
    """Futures of waiting fetches, keyed by the partitions they wait on."""

    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[asyncio.Future]] = defaultdict(set)

    def notify(self, tp: TopicPartition) -> None:
        """Records were appended to ``tp``: wake every fetch waiting on it."""
        for fut in self._waiters.pop(tp, ()):
            if not fut.done():
                fut.set_result(tp)

    async def wait_any(self, tps: Iterable[TopicPartition], timeout: float) -> bool:
        """Wait until one of ``tps`` gets an append (True) or ``timeout`` seconds pass (False)."""
        tps = list(tps)
        if timeout <= 0 or not tps:
            return False
        fut = asyncio.get_running_loop().create_future()
        for tp in tps:
            self._waiters[tp].add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            for tp in tps:
                waiting = self._waiters.get(tp)
                if waiting is not None:
                    waiting.discard(fut)
                    if not waiting:
                        del self._waiters[tp]

    def waiting(self) -> int:
        """Number of (partition, fetch) registrations (for tests and metrics)."""
        return sum(len(s) for s in self._waiters.values())
