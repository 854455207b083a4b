"""Support for end-to-end trials of the coordinator on real processes.

- ``member``: a group member that runs as its own process and journals every record
  it yields, every assignment it is given, resumed or loses, and every commit
  (``MemberProcess`` starts and signals it);
- ``producer``: a producer that journals what was acknowledged, a sampler of log end
  offsets, and a reader of what the log holds;
- ``zk_history``: samples a group's generation, owners and committed offsets in
  ZooKeeper during a run;
- ``invariants``: checks DESIGN section 9 invariants (one owner per partition at a
  time, at least once, offsets never backwards, liveness, final offsets at the log
  end) against those journals;
- ``chaos``: a whole chaos run -- cluster, producer, members, random faults -- and
  its report (``tests/chaos``, ``bench/chaos.py``).

Used by ``tests/integration`` and ``tests/chaos``; usable by hand against a
``spark-coord up`` cluster.
"""
