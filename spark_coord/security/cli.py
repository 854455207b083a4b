"""``spark-coord users`` (SCRAM credentials in ZooKeeper) and the client security options.

``users add|delete|list`` write ``/config/users/<user>`` the way Kafka's
``kafka-configs --zookeeper ... --entity-type users`` did, change notification
included, so running brokers pick the change up at once.  They reach ZooKeeper
with a broker's settings (``--config conf/broker.properties``: ``zookeeper.connect``,
``zookeeper.auth.digest``, ``zookeeper.set.acl``) or ``--zookeeper CONNECT``.
Passwords are read from a prompt (twice) on a terminal, else from the first line of
standard input, never from the command line.

Every client command that talks to brokers takes ``--command-config FILE``
(Kafka's name: a client properties file, conf/client.properties) and ``-X key=value``
(kcat's), for ``security.protocol``, ``sasl.*`` and ``ssl.*``.
"""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import sys
from typing import Any

from spark_coord import config
from spark_coord.config import ConfigError

log = logging.getLogger("spark_coord.cli")


# ---------------------------------------------------------------- client settings

def client_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Client keys from ``--command-config`` then ``-X`` (later wins), checked against conf/client.properties."""
    overrides = config.parse_overrides(getattr(args, "client_option", None) or [])
    cfg = config.load(config.CLIENT, getattr(args, "command_config", None), overrides)
    return dict(cfg)


def client_security(args: argparse.Namespace):
    """The ``ClientSecurity`` of a client command (None: PLAINTEXT, the default)."""
    from spark_coord.security.client import ClientSecurity

    security = ClientSecurity.from_settings(client_settings(args))
    return None if security.protocol == "PLAINTEXT" else security


# ---------------------------------------------------------------------- users

def _zk(args: argparse.Namespace):
    from spark_coord.zk.client import connect_from_config

    cfg = config.load(config.BROKER, args.config, args.override)
    return connect_from_config(cfg, connect_string=args.zookeeper)


def _read_password(user: str) -> str:
    if sys.stdin.isatty():
        first = getpass.getpass(f"password for {user}: ")
        if getpass.getpass("again: ") != first:
            raise ConfigError("the passwords differ")
        password = first
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise ConfigError("empty password")
    return password


def users(args: argparse.Namespace) -> int:
    """``spark-coord users add|delete|list``."""
    from spark_coord.security.credentials import UserStore
    from spark_coord.security.scram import MECHANISMS
    from spark_coord.zk.client import close

    mechanisms = args.mechanism or list(MECHANISMS) if args.action != "list" else []
    password = _read_password(args.user) if args.action == "add" else None
    zk = _zk(args)
    try:
        store = UserStore(zk)
        if args.action == "add":
            store.set_password(args.user, password, mechanisms, args.iterations)
            log.info("user %s: %s credentials set", args.user, ", ".join(mechanisms))
        elif args.action == "delete":
            if not store.delete(args.user, mechanisms):
                log.error("user %s has no %s credentials", args.user, " or ".join(mechanisms))
                return 1
            log.info("user %s: %s credentials removed", args.user, ", ".join(mechanisms))
        else:
            listed = store.users()
            if args.json:
                sys.stdout.write(json.dumps(listed, indent=2) + "\n")
            else:
                for user, mechs in listed.items():
                    sys.stdout.write(f"{user}\t{','.join(mechs)}\n")
    finally:
        close(zk)
    return 0


def add_parsers(subcommand, actions) -> None:
    """The ``users`` subcommand, made with the top-level parser's ``subcommand(name, **kwargs)``
    and ``actions(parser, *shared)``, so its options may come before or after the action."""
    from spark_coord.security.scram import MECHANISMS

    p = subcommand("users", help="add, delete and list SCRAM users (credentials in ZooKeeper)",
                   description="SCRAM-SHA-256/512 credentials in ZooKeeper (/config/users/<user>, Kafka's "
                               "layout); running brokers pick changes up at once. Passwords come from a prompt, "
                               "or the first line of standard input.")
    _add_zookeeper_options(p)
    action = actions(p, _add_zookeeper_options)
    for name, text in (("add", "create a user or set its password"), ("delete", "remove a user's credentials")):
        a = action(name, help=text)
        a.add_argument("user")
        a.add_argument("--mechanism", action="append", choices=list(MECHANISMS),
                       help="SCRAM mechanism; repeatable (default: both)")
        if name == "add":
            a.add_argument("--iterations", type=int, default=4096, help="PBKDF2 iterations (default: %(default)s)")
    lst = action("list", help="list users and their mechanisms")
    lst.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func="spark_coord.security.cli:users")


def _add_zookeeper_options(p: argparse.ArgumentParser, suppress: object = None) -> None:
    """Where the credentials live: a broker properties file (its zookeeper.* keys) or a connect string."""
    p.add_argument("--config", metavar="FILE", default=suppress,
                   help="broker properties file: its zookeeper.connect and zookeeper.auth.digest (default: none)")
    p.add_argument("--override", metavar="KEY=VALUE", action="append", default=[] if suppress is None else suppress,
                   help="set any key of the properties file; repeatable")
    p.add_argument("--zookeeper", metavar="CONNECT", default=suppress,
                   help="ZooKeeper connect string (default: zookeeper.connect of --config)")


def add_client_options(p: argparse.ArgumentParser, suppress: object = None) -> None:
    """``--command-config FILE`` and ``-X key=value``: Kafka client settings (security.protocol, sasl.*, ssl.*).
    ``suppress`` (``argparse.SUPPRESS``) on an action's parser, so the options may follow the action."""
    p.add_argument("--command-config", metavar="FILE", default=suppress,
                   help="client properties file (conf/client.properties): security.protocol, sasl.*, ssl.*")
    p.add_argument("-X", dest="client_option", metavar="KEY=VALUE", action="append",
                   default=[] if suppress is None else suppress,
                   help="a client setting, as kcat takes it; repeatable (e.g. -X security.protocol=SASL_SSL)")
