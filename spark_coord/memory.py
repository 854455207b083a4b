"""Keeping freed memory for reuse in processes that allocate large buffers over and over.

glibc's malloc serves a request above its mmap threshold (128 KiB at first, raised as such
blocks are freed) with fresh pages of its own, and gives the free memory at the top of its
heaps back to the kernel once there is more than its trim threshold.  A broker allocates
buffers of a MiB or more for every Produce request (the request, the socket reads that fill
it), so under load most of them came as fresh pages: the kernel maps and zeroes each page on
first touch, which cost the broker a third of its CPU time while a Spark sink wrote to it.

``keep_freed_memory`` fixes both thresholds (``mallopt``): blocks below ``mmap_threshold``
come from the heap, and up to ``trim_threshold`` bytes freed at a heap's top stay there for
the next request.  A threshold set in the environment with glibc's own variables
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``) is left as the operator chose it.
Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger(__name__)

#: ``mallopt`` parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

#: Blocks below this come from malloc's heaps (a Produce request of up to 32 MiB reuses memory).
MMAP_THRESHOLD = 32 * 1048576
#: Free bytes a heap keeps at its top before giving them back to the kernel.
TRIM_THRESHOLD = 128 * 1048576


def keep_freed_memory(mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD) -> bool:
    """Set glibc malloc's mmap and trim thresholds for this process (each unless the environment
    sets it); False where the C library has no ``mallopt`` or refuses a value."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on (no ldconfig lookup)
    except (OSError, AttributeError):
        log.debug("no mallopt in this C library: malloc thresholds left as they are")
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    for param, value, variable in ((M_MMAP_THRESHOLD, mmap_threshold, "MALLOC_MMAP_THRESHOLD_"),
                                   (M_TRIM_THRESHOLD, trim_threshold, "MALLOC_TRIM_THRESHOLD_")):
        if variable in os.environ:
            log.debug("%s=%s in the environment: kept", variable, os.environ[variable])
        elif not mallopt(param, value):
            log.debug("mallopt refused %s %d", variable.rstrip("_").lower(), value)
            return False
    log.debug("malloc keeps freed memory: mmap threshold %d, trim threshold %d bytes", mmap_threshold,
              trim_threshold)
    return True
