"""Spark's Python processes import pyspark from site-packages rather than from the zipped copy
inside the same pyspark package.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) at the front of the
``PYTHONPATH`` of every Python process it starts: the driver, the daemons that fork its
workers and, for every streaming query on a Python data source, a fresh driver-side
reader process.  Python cannot cache compiled modules of a zip, so each of those
processes compiles pyspark's sources again: about 0.75 CPU-seconds per process, paid
again by every query.  When Spark is the pip-installed pyspark, ``$SPARK_HOME`` is
``<site-packages>/pyspark`` and those zips hold the very modules installed next to them,
so dropping them from ``sys.path`` changes nothing but the start-up time.  A zip of a
separately installed Spark (``/opt/spark/python/lib/pyspark.zip`` on a cluster) is left
where it is: there the zip is the Spark the JVM runs.

The virtual environment of this checkout (``scripts/ensure-venv.sh``) runs
``prefer_installed_pyspark(sys.path)`` from a .pth file at every interpreter start.
"""

from __future__ import annotations

import os


def _bundled_zip(entry: str, sites: set[str]) -> bool:
    """Whether ``entry`` is a zip in ``<site>/pyspark/python/lib/`` of a ``<site>`` in ``sites``."""
    if not entry.endswith(".zip"):
        return False
    lib = os.path.dirname(os.path.realpath(entry))
    python = os.path.dirname(lib)
    package = os.path.dirname(python)
    return (os.path.basename(lib) == "lib" and os.path.basename(python) == "python"
            and os.path.basename(package) == "pyspark" and os.path.dirname(package) in sites)


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """Remove from ``path`` (in place) the zips that the pyspark package installed in one of
    ``path``'s directories carries of itself; returns what was removed."""
    sites = {os.path.realpath(p) for p in path if p and not p.endswith(".zip")}
    dropped = [p for p in path if _bundled_zip(p, sites)]
    if dropped:
        path[:] = [p for p in path if p not in dropped]
    return dropped
