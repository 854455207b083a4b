"""Small helpers shared by the tests (import with ``from helpers import wait_until``)."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.05,
               message: str | Callable[[], str] = "condition") -> T:
    """Call ``predicate`` until it returns something truthy, and return that.

    Fails the test with ``AssertionError`` naming ``message`` (a string or a callable
    producing one, for state that is only known at the time of failure) when
    ``timeout`` seconds pass first.  Exceptions from ``predicate`` propagate.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout} s waiting for: {text}")
        time.sleep(interval)
