"""Arrow arrays of ints and constants built from buffers, without pandas.

``pa.array`` and ``pa.scalar`` of Python objects consult pyarrow's pandas shim, which imports
pandas -- a fifth to a third of a second of a fresh Spark Python worker's first micro-batch (a
stopped query's workers are gone, the next query forks new ones), and nothing else a worker does
for a read imports pandas.  The decoders (``records.arrow``, ``records.arrow_jit``) build their
arrays and scalars from Python values here.
"""

from __future__ import annotations

from array import array

import pyarrow as pa

_TYPECODES = {pa.uint64(): "Q", pa.int64(): "q", pa.int32(): "i"}


def int_array(values, type_: pa.DataType) -> pa.Array:
    """The ints ``values`` as an Arrow array of ``type_`` (uint64, int64 or int32), without pandas;
    ``OverflowError`` for a value out of the type's range."""
    data = array(_TYPECODES[type_], values)
    return pa.Array.from_buffers(type_, len(data), [None, pa.py_buffer(data)])


def constant(value: int | str, type_: pa.DataType, n: int) -> pa.Array:
    """``n`` rows of ``value`` (an int, or a str for a string column), without pandas."""
    if isinstance(value, str):
        data = value.encode()
        one = pa.Array.from_buffers(type_, 1, [None, pa.py_buffer(array("i", (0, len(data)))), pa.py_buffer(data)])
    else:
        one = int_array((value,), type_)
    return pa.repeat(one[0], n)
