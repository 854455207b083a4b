"""``spark-coord``: the command line.

Every subcommand's arguments are declared here; the work is done by the package
that owns the concept (imported lazily so ``--help`` is instant).

Options go anywhere after the subcommand, as people type them: ``--log-level`` is
accepted before or after the subcommand, and the options of a subcommand with
actions (``topics``, ``groups``: ``-b``, ``--json``) before or after the action.
An option declared on a parent parser is declared again on each child parser with
the default ``SUPPRESS``, so the child sets it only when it is given there and a
value given before the action is never reset by the child's default.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any, Callable

LOG_FORMAT = "%(asctime)s %(levelname)-5s %(name)s: %(message)s"


#: How an option shared by a parser and its child parsers is declared: ``add(parser, default)``.
SharedOption = Callable[[argparse.ArgumentParser, Any], None]


def _add_log_level(p: argparse.ArgumentParser, default: Any = "INFO") -> None:
    p.add_argument("--log-level", default=default, choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="logging level (default: INFO)")


def _add_config_args(p: argparse.ArgumentParser, default_conf: str | None) -> None:
    p.add_argument("--config", metavar="FILE", default=default_conf,
                   help=f"properties file (default: {default_conf or 'built-in defaults'})")
    p.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                   help="set any key of the properties file; repeatable")


def _add_bootstrap(p: argparse.ArgumentParser, default: Any = "127.0.0.1:9092") -> None:
    p.add_argument("--bootstrap", "-b", metavar="HOST:PORT[,...]", default=default,
                   help="brokers to bootstrap from (default: 127.0.0.1:9092)")


def _add_coordinator(p: argparse.ArgumentParser, default: Any = None) -> None:
    p.add_argument("--coordinator", metavar="HOST:PORT[,...]", default=default,
                   help="standalone coordinators to ask (default: the brokers of -b)")


def _add_json(p: argparse.ArgumentParser, default: Any = False) -> None:
    p.add_argument("--json", action="store_true", default=default, help="print JSON instead of tables")


def _subcommand(sub, name: str, *shared: SharedOption, **kwargs) -> argparse.ArgumentParser:
    """A subcommand parser taking ``--log-level`` (also after the subcommand) and the ``shared`` options;
    a subcommand with actions passes the same ``shared`` to ``_actions``."""
    p = sub.add_parser(name, **kwargs)
    _add_log_level(p, argparse.SUPPRESS)
    for add in shared:
        add(p)
    return p


def _actions(p: argparse.ArgumentParser, *shared: SharedOption) -> Callable[..., argparse.ArgumentParser]:
    """Make ``p`` a command with actions; returns ``add_action(name, help=...)`` for its children,
    which accept the ``shared`` options of ``p`` too (so they may come before or after the action)."""
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    def add_action(name: str, **kwargs) -> argparse.ArgumentParser:
        child = actions.add_parser(name, **kwargs)
        _add_log_level(child, argparse.SUPPRESS)
        for add in shared:
            add(child, argparse.SUPPRESS)
        return child

    return add_action


def build_parser() -> argparse.ArgumentParser:
    from spark_coord.client.security_cli import add_client_options
    from spark_coord.client.security_cli import add_parsers as add_security_parsers
    from spark_coord.records.compression import CODEC_IDS

    parser = argparse.ArgumentParser(prog="spark-coord", description="Kafka-wire brokers, a ZooKeeper-elected "
                                     "consumer-group coordinator, and tools to drive them.")
    _add_log_level(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = _subcommand(sub, "zookeeper", help="run an embedded Apache ZooKeeper server (from the pyspark jars)",
                    description="Run a real Apache ZooKeeper server with java, from the jars the pyspark wheel ships.")
    _add_config_args(p, None)
    p.set_defaults(func="spark_coord.zk.embedded:run_cli")

    p = _subcommand(sub, "broker", help="run a broker (data plane + coordinator candidate)",
                    description="Run one broker: serves the partitions it leads over the Kafka protocol.")
    _add_config_args(p, None)
    p.set_defaults(func="spark_coord.broker.main:run_cli")

    p = _subcommand(sub, "up", help="run ZooKeeper and N brokers locally until Ctrl-C",
                    description="Start a local cluster: one embedded ZooKeeper and N brokers, each a process.")
    p.add_argument("--brokers", type=int, default=1, help="number of brokers (default: %(default)s)")
    p.add_argument("--zk-port", type=int, default=2181,
                   help="ZooKeeper client port (default: %(default)s; 0 = free port)")
    p.add_argument("--port", type=int, default=9092,
                   help="first broker port; broker i listens on port+i (default: %(default)s; 0 = free ports)")
    p.add_argument("--data-dir", default="data/local-cluster",
                   help="where ZooKeeper and broker data live (default: %(default)s)")
    p.add_argument("--metrics-port", type=int, default=None,
                   help="first metrics endpoint port (Prometheus /metrics and the status page /); broker i serves "
                        "port+i (0 = free ports; default: no metrics)")
    p.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                   help="broker setting applied to every broker; repeatable")
    p.set_defaults(func="spark_coord.cluster:run_cli")

    p = _subcommand(sub, "topics", _add_bootstrap, add_client_options, help="create, list, describe and delete topics",
                    description="Topic administration over the Kafka protocol (CreateTopics, Metadata, DeleteTopics, "
                                "CreatePartitions, DeleteRecords).")
    action = _actions(p, _add_bootstrap, add_client_options)
    c = action("create", help="create a topic")
    c.add_argument("topic")
    c.add_argument("--partitions", "-p", type=int, default=-1,
                   help="partition count (default: the broker's num.partitions)")
    c.add_argument("--if-not-exists", action="store_true", help="succeed if the topic already exists")
    c.add_argument("--config", metavar="KEY=VALUE", action="append", default=[],
                   help="a topic config (cleanup.policy=compact, retention.ms=...); repeatable")
    action("list", help="list topics")
    d = action("describe", help="partitions, leaders and offsets of topics")
    d.add_argument("topics", nargs="*", help="topics to describe (default: all)")
    d.add_argument("--configs", action="store_true", help="also list each topic's own (non-default) configs")
    a = action("alter-config", help="set or delete a topic's configs (IncrementalAlterConfigs)")
    a.add_argument("topic")
    a.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], help="set a config; repeatable")
    a.add_argument("--delete", metavar="KEY", action="append", default=[],
                   help="delete a config (back to the broker's value); repeatable")
    a.add_argument("--validate-only", action="store_true", help="check the change, change nothing")
    x = action("delete", help="delete a topic")
    x.add_argument("topic")
    ap = action("add-partitions", help="grow a topic to more partitions (CreatePartitions)",
                description="Grow TOPIC to --partitions N partitions; the new ones are spread over the live brokers "
                            "and running consumer groups are rebalanced onto them. Partitions are never removed.")
    ap.add_argument("topic")
    ap.add_argument("--partitions", "-p", type=int, required=True, metavar="N",
                    help="the new total partition count (must be larger than the current one)")
    ap.add_argument("--validate-only", action="store_true", help="check the request, change nothing")
    dr = action("delete-records", help="delete a partition's records before an offset (DeleteRecords)",
                description="Move the log start offset of TOPIC's partition(s) to OFFSET: records below it are "
                            "gone for every reader (a consumer positioned below it follows its auto.offset.reset).")
    dr.add_argument("topic")
    dr.add_argument("--partition", "-p", type=int, action="append", metavar="P",
                    help="partition to delete from; repeatable (default: every partition)")
    dr.add_argument("--before", required=True, metavar="OFFSET",
                    help="delete records with offsets below OFFSET; 'end' (or -1) deletes everything up to the "
                         "high watermark")
    p.set_defaults(func="spark_coord.client.cli:topics")

    p = _subcommand(sub, "produce", _add_bootstrap, add_client_options,
                    help="produce lines from stdin or a file to a topic",
                    description="Produce one record per input line.")
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--file", "-f", default="-", help="input file (default: stdin)")
    p.add_argument("--key-separator", "-K", metavar="SEP", default=None,
                   help="split each line at the first SEP into key and value (default: no key)")
    p.add_argument("--partition", "-p", type=int, default=None,
                   help="produce every record to this partition (default: by key hash; records without a key "
                        "stick to one partition per batch, starting at a random one)")
    p.add_argument("--compression", choices=list(CODEC_IDS), default="none")
    p.add_argument("--acks", type=int, choices=[-1, 0, 1], default=1)
    p.add_argument("--batch-size", type=int, default=16384, help="bytes per record batch (default: %(default)s)")
    p.set_defaults(func="spark_coord.client.cli:produce")

    p = _subcommand(sub, "tail", _add_bootstrap, add_client_options, help="read partitions by offset, with no group",
                    description="Print records of a topic's partitions, one per line, from an offset.")
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--partition", "-p", type=int, action="append", help="partition(s) to read (default: all)")
    p.add_argument("--offset", "-o", default="earliest", help="earliest, latest, or a number (default: %(default)s)")
    p.add_argument("--count", "-c", type=int, default=None, help="stop after this many records")
    p.add_argument("--follow", action="store_true", help="keep waiting for new records (default: stop at the end)")
    p.add_argument("--key-separator", "-K", metavar="SEP", default=None, help="print key SEP value")
    p.set_defaults(func="spark_coord.client.cli:tail")

    p = _subcommand(sub, "coordinator", help="run a standalone coordinator beside a Kafka-protocol cluster",
                    description="Run the consumer-group coordinator as its own process for any Kafka-protocol "
                                "cluster (bootstrap.servers): it elects through its own ZooKeeper, learns brokers "
                                "and topics from the cluster's Metadata API, and keeps offsets in ZooKeeper (and, "
                                "with coordinator.offsets.mirror=true, in the cluster's own offset store). "
                                "It reaches the cluster with the client security settings of every client "
                                "command: -X key=value and --command-config FILE (security.protocol, "
                                "sasl.mechanism(s), sasl.username, sasl.password, ssl.ca.location, ...), or "
                                "the same keys under kafka. in its properties file (kafka.security.protocol=...).")
    _add_config_args(p, None)
    p.add_argument("--command-config", metavar="FILE", default=None,
                   help="client properties file (conf/client.properties) with the data cluster's security.protocol, "
                        "sasl.*, ssl.* (the kafka.* keys of conf/coordinator.properties)")
    p.add_argument("-X", dest="client_option", metavar="KEY=VALUE", action="append", default=[],
                   help="a client security setting for the data cluster, as kcat takes it; repeatable "
                        "(e.g. -X security.protocol=SASL_SSL -X sasl.mechanism=SCRAM-SHA-512)")
    p.set_defaults(func="spark_coord.standalone:run_cli")

    p = _subcommand(sub, "consume", _add_bootstrap, help="join a consumer group or a share group and print its records",
                    description="Join a consumer group through the coordinator and print one record per line "
                                "until Ctrl-C or SIGTERM, then leave the group cleanly (last offsets committed). "
                                "With --share-group, read as a member of a share group (KIP-932): records are "
                                "shared one by one with the group's other members, each printed record is "
                                "accepted with the next fetch, and the share session is closed at the end.")
    _add_config_args(p, None)
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--group", "-g", help="consumer group id")
    who.add_argument("--share-group", metavar="GROUP",
                     help="share group id (KIP-932): read records shared with the group's other members")
    p.add_argument("--coordinator", metavar="HOST:PORT[,...]", default=None,
                   help="standalone coordinators to join through (default: ask the brokers of -b)")
    p.add_argument("--group-protocol", choices=("coordkafka", "consumer"), default=None,
                   help="coordkafka (default; group.protocol of --config): join through the coordinator's own "
                        "channel; consumer: Kafka 4's consumer group protocol (KIP-848), with any Kafka 4 "
                        "cluster's group coordinator, as kafka-console-consumer --consumer-property "
                        "group.protocol=consumer")
    p.add_argument("--group-instance-id", metavar="ID", default=None,
                   help="with --group-protocol consumer: a static member's id (group.instance.id): it leaves with "
                        "epoch -2 and, started again with the same id within the session timeout, gets its "
                        "partitions back")
    p.add_argument("--group-remote-assignor", metavar="NAME", default=None,
                   help="with --group-protocol consumer: the group's server-side assignor (group.remote.assignor): "
                        "uniform or range")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--topic", "-t", help="topic(s) to subscribe to, comma-separated")
    what.add_argument("--pattern", help="subscribe to every topic matching this regex (also topics created later)")
    p.add_argument("--from-beginning", action="store_true",
                   help="with no committed offset, start at the earliest offset (auto.offset.reset=smallest)")
    p.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"), default=None,
                   help="read_committed: only records of committed transactions (and non-transactional ones), "
                        "up to the last stable offset; read_uncommitted (the default, isolation.level): every record")
    p.add_argument("--key-separator", "-K", metavar="SEP", default=None, help="print key SEP value")
    p.add_argument("--count", "-c", type=int, default=None, help="stop after this many records")
    add_client_options(p)
    p.set_defaults(func="spark_coord.consumer.cli:consume")

    p = _subcommand(sub, "groups", _add_bootstrap, _add_json, add_client_options, _add_coordinator,
                    help="list consumer groups and describe their members, offsets and lag",
                    description="Ask the coordinator about its groups: members, generation, owners, committed "
                                "offsets, log end and lag per partition.")
    action = _actions(p, _add_bootstrap, _add_json, add_client_options, _add_coordinator)
    action("list", help="list groups")
    d = action("describe", help="members, owners, offsets and lag")
    d.add_argument("groups", nargs="*", help="groups to describe (default: all)")
    p.set_defaults(func="spark_coord.consumer.cli:groups")

    p = _subcommand(sub, "share-groups", _add_bootstrap, _add_json, add_client_options,
                    help="list share groups (KIP-932), describe their members, offsets and lag, reset their offsets",
                    description="Share groups as Kafka's kafka-share-groups.sh shows them: members and their "
                                "assignments, and per partition the start offset (the first record the group is "
                                "not done with), the log end and the lag; reset-offsets sets an empty group's "
                                "start offsets (a dry run unless --execute).")
    action = _actions(p, _add_bootstrap, _add_json, add_client_options)
    action("list", help="list share groups with their state and member count")
    d = action("describe", help="members, assignments, start offsets and lag")
    d.add_argument("groups", nargs="*", help="share groups to describe (default: all)")
    r = action("reset-offsets", help="set an empty share group's start offsets (dry run unless --execute)",
               description="Compute new start offsets for the partitions of --topic and print them; with "
                           "--execute, set them (AlterShareGroupOffsets). The group must have no member.")
    r.add_argument("group", help="the share group")
    r.add_argument("--topic", "-t", action="append", required=True, metavar="TOPIC[:P,...]",
                   help="a topic (every partition) or some of its partitions (orders:0,2); repeatable")
    to = r.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start: read everything again")
    to.add_argument("--to-latest", action="store_true", help="the log end: skip what is there now")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N (kept within the log)")
    r.add_argument("--execute", action="store_true", help="apply the new offsets (default: dry run, change nothing)")
    p.set_defaults(func="spark_coord.client.share_cli:share_groups")

    add_security_parsers(lambda name, **kw: _subcommand(sub, name, **kw), _actions)

    p = _subcommand(sub, "demo", help="local-cluster demo: start ZooKeeper and a broker, produce, read back, stop",
                    description="Start an embedded ZooKeeper and a broker on free ports, create a topic, produce "
                                "sample records, read them back, print them, and shut everything down.")
    p.add_argument("--records", type=int, default=20, help="records to produce (default: %(default)s)")
    p.set_defaults(func="spark_coord.demo:run_cli")
    return parser


def _resolve(spec: str):
    import importlib
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level), format=LOG_FORMAT, stream=sys.stderr)
    if args.log_level != "DEBUG":
        logging.getLogger("kazoo.client").setLevel(logging.WARNING)  # connection chatter
    from spark_coord.config import ConfigError
    from spark_coord.zk.client import ZooKeeperUnavailable

    try:
        return int(_resolve(args.func)(args) or 0)
    except ConfigError as e:
        logging.getLogger("spark_coord").error("configuration: %s", e)
        return 2
    except ZooKeeperUnavailable as e:
        logging.getLogger("spark_coord").error("%s", e)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
