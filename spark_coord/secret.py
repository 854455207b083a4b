"""``Password``: a secret value that never shows itself in logs, reprs or messages.

Kafka's ``org.apache.kafka.common.config.types.Password`` does the same: configuration
keys of type password (``ssl.key.password``, ``sasl.password``, ``sasl.jaas.config``,
``zookeeper.auth.digest`` ...) hold a ``Password``, whose ``str`` and ``repr`` are
``[hidden]``, so a ``Config``, a dataclass of options or a log line that formats one
cannot leak it.  The text is reached only through ``.value``, where it is used.
"""

from __future__ import annotations

import hmac
from typing import Any

HIDDEN = "[hidden]"


class Password:
    """A secret string: ``str()``/``repr()`` give ``[hidden]``; ``.value`` is the secret."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        if isinstance(value, Password):
            value = value.value
        if not isinstance(value, str):
            raise TypeError(f"a password must be a string, not {type(value).__name__}")
        self._value = value

    @property
    def value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return HIDDEN

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return HIDDEN

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, Password):
            return NotImplemented
        return hmac.compare_digest(self._value.encode("utf-8"), other._value.encode("utf-8"))

    def __hash__(self) -> int:
        return hash((Password, len(self._value)))

    def __reduce__(self):  # pickled to Spark executors inside options: the value must travel
        return (Password, (self._value,))


def reveal(value: "Password | str | None") -> str | None:
    """The text of a ``Password`` (or a plain string), None for None."""
    if value is None:
        return None
    return value.value if isinstance(value, Password) else str(value)
