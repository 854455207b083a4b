"""The chaos harness: end-to-end trials of the coordinator on real processes.

It lives beside the package, not in it: ``pip install .`` ships none of it (it needs root,
network namespaces and libfaketime, and only ``tests/`` and ``bench/`` use it), as Kafka,
aiokafka and franz-go's kfake keep their harnesses outside what they ship.  Run it from a
checkout: pytest and the ``bench/`` scripts put the checkout on ``sys.path``, and the processes
it starts (``python -m testkit.<module>``) get it on ``PYTHONPATH`` (``child_env``).

- ``member``: a group member that runs as its own process and journals every record
  it yields, every assignment it is given, resumed or loses, and every commit
  (``MemberProcess`` starts and signals it); ``kafka_member``, ``share_member`` and
  ``spark_member`` journal alike for confluent-kafka consumers, share consumers and
  Spark queries;
- ``producer``: a producer that journals what was acknowledged, a sampler of log end
  offsets, and a reader of what the log holds;
- ``zk_history``: samples a group's generation, owners and committed offsets in
  ZooKeeper during a run;
- ``invariants``: checks the run's invariants (one owner per partition at a time:
  DESIGN.md "One holder at a time (invariant 1)"; at least once, offsets never backwards,
  liveness, final offsets at the log end) against those journals; ``jepsen_checks``: Jepsen's Kafka anomalies;
- ``chaos``: a whole chaos run -- cluster, producer, members, random faults -- and
  its report (``tests/chaos``, ``bench/chaos.py``); ``analysis``: its checks over what
  the run recorded; ``diagnostics``: stack dumps of a member whose commits keep failing;
- ``nemesis``: a chaos run with every process in a network namespace of its own, and
  network, clock and link faults (``linkproxy``);
- ``tls``: a throw-away CA and certificates for the tests.

Used by ``tests/`` and ``bench/``; usable by hand against a ``spark-coord up`` cluster.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The checkout (testkit is not installed): its processes import testkit, and spark_coord, from here.
ROOT = Path(__file__).resolve().parents[1]


def child_env(**overrides: str) -> dict[str, str]:
    """This process's environment with ``overrides``, and the checkout first on ``PYTHONPATH`` (once):
    what a ``python -m testkit.<module>`` child, and Spark's Python workers, need to import it."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(ROOT)]
    return dict(os.environ, **overrides, PYTHONPATH=os.pathsep.join([str(ROOT), *paths]))
