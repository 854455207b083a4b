"""``spark-coord``: the command line.

Every subcommand's arguments are declared here; the work is done by the package
that owns the concept (imported lazily so ``--help`` is instant).
"""

from __future__ import annotations

import argparse
import logging
import sys

LOG_FORMAT = "%(asctime)s %(levelname)-5s %(name)s: %(message)s"


def _add_config_args(p: argparse.ArgumentParser, default_conf: str | None) -> None:
    p.add_argument("--config", metavar="FILE", default=default_conf,
                   help=f"properties file (default: {default_conf or 'built-in defaults'})")
    p.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                   help="set any key of the properties file; repeatable")


def _add_bootstrap(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", "-b", metavar="HOST:PORT[,...]", default="127.0.0.1:9092",
                   help="brokers to bootstrap from (default: %(default)s)")


def build_parser() -> argparse.ArgumentParser:
    from spark_coord.security.cli import add_client_options, add_parsers as add_security_parsers

    parser = argparse.ArgumentParser(prog="spark-coord", description="Kafka-wire brokers, a ZooKeeper-elected consumer-group coordinator, and tools to drive them.")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="logging level (default: %(default)s)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("zookeeper", help="run an embedded Apache ZooKeeper server (from the pyspark jars)",
                       description="Run a real Apache ZooKeeper server with java, from the jars the pyspark wheel ships.")
    _add_config_args(p, None)
    p.set_defaults(func="spark_coord.zk.embedded:run_cli")

    p = sub.add_parser("broker", help="run a broker (data plane + coordinator candidate)",
                       description="Run one broker: serves the partitions it leads over the Kafka protocol.")
    _add_config_args(p, None)
    p.set_defaults(func="spark_coord.broker.main:run_cli")

    p = sub.add_parser("up", help="run ZooKeeper and N brokers locally until Ctrl-C",
                       description="Start a local cluster: one embedded ZooKeeper and N brokers, each a process.")
    p.add_argument("--brokers", type=int, default=1, help="number of brokers (default: %(default)s)")
    p.add_argument("--zk-port", type=int, default=2181, help="ZooKeeper client port (default: %(default)s; 0 = free port)")
    p.add_argument("--port", type=int, default=9092, help="first broker port; broker i listens on port+i (default: %(default)s; 0 = free ports)")
    p.add_argument("--data-dir", default="data/local-cluster", help="where ZooKeeper and broker data live (default: %(default)s)")
    p.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                   help="broker setting applied to every broker; repeatable")
    p.set_defaults(func="spark_coord.cluster:run_cli")

    p = sub.add_parser("topics", help="create, list, describe and delete topics",
                       description="Topic administration over the Kafka protocol (CreateTopics, Metadata, DeleteTopics).")
    _add_bootstrap(p)
    add_client_options(p)
    tsub = p.add_subparsers(dest="action", metavar="ACTION")
    tsub.required = True
    c = tsub.add_parser("create", help="create a topic")
    c.add_argument("topic")
    c.add_argument("--partitions", "-p", type=int, default=-1, help="partition count (default: the broker's num.partitions)")
    c.add_argument("--if-not-exists", action="store_true", help="succeed if the topic already exists")
    tsub.add_parser("list", help="list topics")
    d = tsub.add_parser("describe", help="partitions, leaders and offsets of topics")
    d.add_argument("topics", nargs="*", help="topics to describe (default: all)")
    x = tsub.add_parser("delete", help="delete a topic")
    x.add_argument("topic")
    p.set_defaults(func="spark_coord.client.cli:topics")

    p = sub.add_parser("produce", help="produce lines from stdin or a file to a topic",
                       description="Produce one record per input line.")
    _add_bootstrap(p)
    add_client_options(p)
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--file", "-f", default="-", help="input file (default: stdin)")
    p.add_argument("--key-separator", "-K", metavar="SEP", default=None,
                   help="split each line at the first SEP into key and value (default: no key)")
    p.add_argument("--partition", type=int, default=None, help="produce to this partition (default: by key hash, else round-robin)")
    p.add_argument("--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"], default="none")
    p.add_argument("--acks", type=int, choices=[-1, 0, 1], default=1)
    p.add_argument("--batch-size", type=int, default=16384, help="bytes per record batch (default: %(default)s)")
    p.set_defaults(func="spark_coord.client.cli:produce")

    p = sub.add_parser("tail", help="read partitions by offset, with no group",
                       description="Print records of a topic's partitions, one per line, from an offset.")
    _add_bootstrap(p)
    add_client_options(p)
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--partition", "-p", type=int, action="append", help="partition(s) to read (default: all)")
    p.add_argument("--offset", "-o", default="earliest", help="earliest, latest, or a number (default: %(default)s)")
    p.add_argument("--count", "-c", type=int, default=None, help="stop after this many records")
    p.add_argument("--follow", action="store_true", help="keep waiting for new records (default: stop at the end)")
    p.add_argument("--key-separator", "-K", metavar="SEP", default=None, help="print key SEP value")
    p.set_defaults(func="spark_coord.client.cli:tail")

    p = sub.add_parser("consume", help="join a consumer group and print its records",
                       description="Join a consumer group through the coordinator and print one record per line "
                                   "until Ctrl-C or SIGTERM, then leave the group cleanly (last offsets committed).")
    _add_bootstrap(p)
    _add_config_args(p, None)
    p.add_argument("--group", "-g", required=True, help="consumer group id")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--topic", "-t", help="topic(s) to subscribe to, comma-separated")
    what.add_argument("--pattern", help="subscribe to every topic matching this regex (also topics created later)")
    p.add_argument("--from-beginning", action="store_true",
                   help="with no committed offset, start at the earliest offset (auto.offset.reset=smallest)")
    p.add_argument("--key-separator", "-K", metavar="SEP", default=None, help="print key SEP value")
    p.add_argument("--count", "-c", type=int, default=None, help="stop after this many records")
    p.set_defaults(func="spark_coord.consumer.cli:consume")

    p = sub.add_parser("groups", help="list consumer groups and describe their members, offsets and lag",
                       description="Ask the coordinator about its groups: members, generation, owners, committed "
                                   "offsets, log end and lag per partition.")
    _add_bootstrap(p)
    gsub = p.add_subparsers(dest="action", metavar="ACTION")
    gsub.required = True
    gsub.add_parser("list", help="list groups")
    d = gsub.add_parser("describe", help="members, owners, offsets and lag")
    d.add_argument("groups", nargs="*", help="groups to describe (default: all)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func="spark_coord.consumer.cli:groups")

    add_security_parsers(sub, _add_config_args)

    p = sub.add_parser("demo", help="local-cluster demo: start ZooKeeper and a broker, produce, read back, stop",
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
    try:
        return int(_resolve(args.func)(args) or 0)
    except ConfigError as e:
        logging.getLogger("spark_coord").error("configuration: %s", e)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
