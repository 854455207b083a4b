"""Which asyncio event loop a broker or standalone coordinator runs on (``event.loop``).

``asyncio``: the standard library's loop.  ``uvloop``: libuv's (the ``uvloop``
package), whose transports, timers, futures and tasks are written in C: a
coordinator spends most of its loop's time in them (one timer, one future and
one socket write per ping), and with 19,800 members on one coordinator uvloop cut
the ping lateness p99 from 579 ms to 201 ms (bench/bench_coordinator.py).  Its
one difference that shows: it has no ``loop.sendfile``, so fetches are served by
reading the log and writing it (as over TLS) instead of with ``sendfile``.
Where ``uvloop`` is not installed the standard loop is used, with a warning.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Coroutine

log = logging.getLogger(__name__)

LOOPS = ("asyncio", "uvloop")


def run(main: Coroutine[Any, Any, int], kind: str = "asyncio") -> int:
    """``asyncio.run(main)`` on the loop ``kind`` names."""
    if kind not in LOOPS:
        raise ValueError(f"event.loop must be one of {', '.join(LOOPS)}, not {kind!r}")
    if kind == "uvloop":
        try:
            import uvloop
        except ImportError:
            log.warning("event.loop=uvloop but the uvloop package is not installed: running on asyncio's loop")
        else:
            log.info("running on uvloop %s", uvloop.__version__)
            return uvloop.run(main)
    return asyncio.run(main)
