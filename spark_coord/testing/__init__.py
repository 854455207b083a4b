"""Support for end-to-end trials of the coordinator on real processes.

- ``member``: a group member that runs as its own process and journals every record
  it yields and every assignment it is given (``MemberProcess`` starts and signals it);
- ``zk_history``: samples a group's generation, owners and committed offsets in
  ZooKeeper during a run;
- ``invariants``: checks DESIGN section 9 invariants 1-3 against those journals.

Used by ``tests/integration``; usable by hand against a ``spark-coord up`` cluster.
"""
