"""Network and clock faults for chaos runs: every process in a network namespace of its own.

A nemesis as Jepsen's, in modules:

- ``netns``: one run's bridge and a network namespace per process (ZooKeeper, each broker,
  each member, and ``client`` for the producer and the run's own readers), the cuts between
  them (``Net``), and code run inside a namespace;
- ``cluster``: the brokers in their namespaces (``net_cluster``), each behind a link proxy in
  a ``proxied`` run; processes started under a false clock (``spawn_env``) and their times
  mapped back (``real_time``); the run's tail of the log (``LogTail``);
- ``zk``: the run's ZooKeeper (one server, or an ensemble with a server per namespace) and
  the faults that split it or change the brokers;
- ``faults``: ``NemesisSettings`` and ``NemesisRun``, the fault kinds below: drawn,
  injected, healed, and what their windows say afterwards;
- ``report``: ``NemesisReport``, and the aggregate of many runs (``aggregate``).

``NemesisRun`` is a ``ChaosRun`` (``testkit.chaos``: its members, journals, producer and
checks) with every process in a namespace of its own, adding the fault kinds of
``NET_KINDS``, ``CLOCK_KINDS`` and ``PROXY_KINDS`` to the process faults, and the
Jepsen-named checks of ``testkit.jepsen_checks``:

- ``isolate_broker``: a broker (the coordinator's, half the time) cut from everyone;
- ``coordinator_zk_cut``: the group's coordinator broker cut from ZooKeeper only (its
  members still reach it);
- ``member_coordinator_cut``: a member cut from its coordinator's broker only (it still
  reaches the other brokers);
- ``broker_clients_cut``: a broker cut from every member and the producer, not from
  ZooKeeper nor the other brokers;
- ``bridge``: one server node (ZooKeeper or a broker) reaches all others, the rest split
  in two halves that do not reach each other;
- ``flap``: the coordinator cut from ZooKeeper, healed, cut again, 3 to 5 times, each
  cut shorter than its session;
- ``isolate_member``: a member cut from everyone;
- ``zk_split``: the ZooKeeper ensemble (``zk_nodes`` servers, 3 by default: a real quorum in
  namespaces ``zk0``..; 1 runs one standalone server in ``zk``) split into a majority and a
  minority of one server, the coordinator's broker with the minority (or, mirrored, with the
  majority and another broker with the minority); only ZooKeeper-to-ZooKeeper and
  broker-to-ZooKeeper links are cut (``testkit.nemesis.zk``);
- ``broker_add`` / ``broker_remove`` (``MEMBERSHIP_KINDS``): a broker with a new id started in
  a new namespace; a broker that leads none of the topic's partitions (one replica each, so
  only an added or a spare one) stopped for good -- the coordinator when it is one of those;
- clocks (with libfaketime, ``faketime_lib()``): ``clock_member_offset`` /
  ``clock_member_fast`` restart a member under ``FAKETIME="+<2x session>s"`` or
  ``"+0 x2"`` (its journal times are mapped back to real time before the checks),
  ``clock_coordinator_offset`` / ``clock_coordinator_fast`` restart the coordinator's
  broker so; each lasts a while, then the process is restarted with the real clock;
- link faults (``PROXY_KINDS``, in a run with ``proxied``: each broker listens on loopback in
  its namespace and advertises ``<its address>:9092``, where a ``testkit.linkproxy`` process
  of its namespace forwards every client connection -- the producer's, the members', the
  thin members' channel to the coordinator): ``slow_broker`` delays every chunk on a
  broker's links by 100-800 ms plus up to half that again of jitter, ``throttle_broker``
  caps each direction of each link at 8-64 KB/s, ``stall_broker`` makes the coordinator's
  broker's links pass no byte at all, open or new, without closing any (what was held
  passes once healed), ``stuck_links`` makes the coordinator's broker's *open* links pass
  nothing, no close reaching either end, while connections made since pass (the path of each
  connection lost, as when a NAT or firewall drops its state: a client recovers only by its own
  timeouts and a new connection; it lasts a cut plus the members' ``socket.timeout.ms``, so they
  do); each for as long as a cut, and each healed by setting ``pass``.
- ``txn_writer_kill`` (``TXN_KINDS``, runs with ``txn_writers``): a transactional writer of the
  transactional workload (``testkit.txn_member``, checked by ``testkit.txn_checks``) SIGKILLed,
  maybe inside a transaction, and restarted: its ``init_transactions`` fences the dead one.

Each fault may come with a second one at the same moment (``combine``, a member fault
beside a broker fault).  The report adds, per fault kind: how often it was injected, the
longest wait of a record on the partitions it did not touch (neither their leader nor
their owner), and the Jepsen anomalies.
"""

from __future__ import annotations

from testkit.nemesis.cluster import (
                                     LogTail,
                                     clock_unavailable_reason,
                                     faketime_lib,
                                     net_cluster,
                                     process_start,
                                     real_time,
                                     spawn_env,
)
from testkit.nemesis.faults import (
                                     ALL_KINDS,
                                     CLOCK_KINDS,
                                     MEMBERSHIP_KINDS,
                                     NET_KINDS,
                                     PROCESS_KINDS,
                                     PROXY_KINDS,
                                     NemesisRun,
                                     NemesisSettings,
                                     attribute_to_faults,
                                     plan,
)
from testkit.nemesis.netns import (
                                     HostNamespace,
                                     NemesisUnavailable,
                                     Net,
                                     Node,
                                     cleanup,
                                     cleanup_stale,
                                     unavailable_reason,
)
from testkit.nemesis.report import LAG_SLACK_S, MAX_DUPLICATE_PCT, NemesisReport, aggregate, aggregate_tables

__all__ = ["ALL_KINDS", "CLOCK_KINDS", "LAG_SLACK_S", "MAX_DUPLICATE_PCT", "MEMBERSHIP_KINDS", "NET_KINDS",
           "PROCESS_KINDS", "PROXY_KINDS", "HostNamespace", "LogTail", "NemesisReport", "NemesisRun",
           "NemesisSettings", "NemesisUnavailable", "Net", "Node", "aggregate", "aggregate_tables",
           "attribute_to_faults", "cleanup", "cleanup_stale", "clock_unavailable_reason", "faketime_lib",
           "net_cluster", "plan", "process_start", "real_time", "spawn_env", "unavailable_reason"]
