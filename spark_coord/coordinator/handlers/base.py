"""What every API module of the coordinator's front door exports: a ``GroupApi`` (see the package
docstring)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.coordinator.handlers.door import FrontDoor

HandleFn = Callable[["FrontDoor", Any, Any, Any, dict], Awaitable["dict | Any"]]
ErrorFn = Callable[[dict, int], dict]


@dataclass(frozen=True)
class GroupApi:
    """How the coordinator's front door serves one API key."""

    api_key: int
    name: str
    handle: HandleFn
    error_response: ErrorFn
