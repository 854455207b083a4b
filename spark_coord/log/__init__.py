"""Partition log: segments of record batches, a sparse offset index, recovery, retention.

Public API: :class:`LogConfig`, :class:`PartitionLog`, :class:`LogManager`,
:class:`OffsetOutOfRange`, :class:`LogClosed`.
"""

from .config import LogConfig
from .errors import LogClosed, OffsetOutOfRange
from .manager import LogManager
from .partition import PartitionLog

__all__ = ["LogConfig", "LogClosed", "LogManager", "OffsetOutOfRange", "PartitionLog"]
