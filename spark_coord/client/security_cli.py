"""``spark-coord users`` (SCRAM credentials in ZooKeeper), ``spark-coord acls`` (ACLs through the
Kafka API) and the client security options.

``users add|delete|list`` write ``/config/users/<user>`` the way Kafka's
``kafka-configs --zookeeper ... --entity-type users`` did, change notification
included, so running brokers pick the change up at once.  They reach ZooKeeper
with a broker's settings (``--config conf/broker.properties``: ``zookeeper.connect``,
``zookeeper.auth.digest``, ``zookeeper.set.acl``) or ``--zookeeper CONNECT``.
Passwords are read from a prompt (twice) on a terminal, else from the first line of
standard input, never from the command line.

``acls add|remove|list`` speak Kafka's ``kafka-acls.sh`` vocabulary (``--allow-principal``,
``--deny-principal``, ``--allow-host``, ``--operation``, ``--topic``, ``--group``, ``--cluster``,
``--transactional-id``, ``--resource-pattern-type``, ``--producer``, ``--consumer``) and go
through CreateAcls, DescribeAcls and DeleteAcls on any broker, so they need Alter
(Describe for ``list``) on the cluster, e.g. as a ``super.users`` principal.

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


# ----------------------------------------------------------------------- acls

def _resources(args: argparse.Namespace, pattern_type):
    """The resource patterns the options name (the cluster's is always literal when adding)."""
    from spark_coord.security.acl import CLUSTER_NAME, PatternType, ResourcePattern, ResourceType

    out = [ResourcePattern(ResourceType.TOPIC, t, pattern_type) for t in args.topic or []]
    out += [ResourcePattern(ResourceType.GROUP, g, pattern_type) for g in args.group or []]
    out += [ResourcePattern(ResourceType.TRANSACTIONAL_ID, x, pattern_type) for x in args.transactional_id or []]
    if args.cluster:
        specific = pattern_type in (PatternType.LITERAL, PatternType.PREFIXED)
        out.append(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME,
                                   PatternType.LITERAL if specific else pattern_type))
    return out


def _entries(args: argparse.Namespace, default_op):
    """(principal, host, operation, permission) tuples the options ask for."""
    from spark_coord.security.acl import AclOperation, AclPermissionType

    ops = [AclOperation.parse(o) for o in args.operation or []] or [default_op]
    out = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
                                          (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        for principal in principals or []:
            for host in hosts or ["*"]:
                out += [(principal, host, op, permission) for op in ops]
    return out


def _role_bindings(args: argparse.Namespace, pattern_type):
    """``--producer`` / ``--consumer``: Kafka's convenience sets of ACLs."""
    from spark_coord.security.acl import (
        CLUSTER_NAME,
        AccessControlEntry,
        AclBinding,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourcePattern,
        ResourceType,
    )

    wanted: list[tuple[ResourcePattern, AclOperation]] = []
    topic_ops = ([AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE] if args.producer else []) + \
                ([AclOperation.READ, AclOperation.DESCRIBE] if args.consumer else [])
    for t in args.topic or []:
        wanted += [(ResourcePattern(ResourceType.TOPIC, t, pattern_type), op) for op in dict.fromkeys(topic_ops)]
    if args.consumer:
        wanted += [(ResourcePattern(ResourceType.GROUP, g, pattern_type), AclOperation.READ) for g in args.group or []]
    if args.producer:
        wanted.append((ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL),
                       AclOperation.IDEMPOTENT_WRITE))
    return [AclBinding(pattern, AccessControlEntry(principal, host, op, AclPermissionType.ALLOW))
            for principal in args.allow_principal or [] for host in args.allow_host or ["*"]
            for pattern, op in wanted]


def _print_bindings(bindings) -> None:
    by_pattern: dict = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    for pattern, entries in by_pattern.items():
        sys.stdout.write(f"Current ACLs for resource `ResourcePattern(resourceType={pattern.resource_type.name}, "
                         f"name={pattern.name}, patternType={pattern.pattern_type.name})`:\n")
        for e in entries:
            sys.stdout.write(f"\t(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
                             f"permissionType={e.permission.name})\n")
        sys.stdout.write("\n")


def acls(args: argparse.Namespace) -> int:
    """``spark-coord acls add|remove|list``."""
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.errors import KafkaError
    from spark_coord.security.acl import (
        AccessControlEntry,
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourceType,
        validate_binding,
    )

    try:
        pattern_type = PatternType.parse(args.resource_pattern_type)
        resources = _resources(args, pattern_type)
        if args.action == "add":
            if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
                raise ConfigError("--resource-pattern-type: add needs literal or prefixed")
            if args.producer or args.consumer:
                bindings = _role_bindings(args, pattern_type)
            else:
                bindings = [AclBinding(r, AccessControlEntry(*e)) for r in resources
                            for e in _entries(args, AclOperation.ALL)]
            if not bindings:
                raise ConfigError("acls add: give a resource (--topic, --group, --cluster, --transactional-id) and "
                                  "--allow-principal or --deny-principal")
            for b in bindings:
                why = validate_binding(b)
                if why:
                    raise ConfigError(f"acls add: {b}: {why}")
        else:
            entries = _entries(args, AclOperation.ANY)
            principals = [args.principal] if getattr(args, "principal", None) else []
            if not entries:
                entries = [(p, None, op, AclPermissionType.ANY) for p in principals or [None]
                           for op in ([AclOperation.parse(o) for o in args.operation or []] or [AclOperation.ANY])]
            filters = [AclBindingFilter(r.resource_type, r.name, r.pattern_type, *e) for r in resources
                       for e in entries] if resources else \
                      [AclBindingFilter(ResourceType.ANY, None, PatternType.ANY, *e) for e in entries]
    except ValueError as e:
        log.error("%s", e)
        return 2
    try:
        with ClusterClient(args.bootstrap, security=client_security(args)) as cluster:
            admin = AdminClient(cluster)
            if args.action == "add":
                admin.create_acls(bindings)
                log.info("added %d ACL(s)", len(bindings))
                _print_bindings(bindings)
            elif args.action == "remove":
                if not resources:
                    raise ConfigError("acls remove: give the resource(s) to remove ACLs from")
                removed = admin.delete_acls(filters)
                log.info("removed %d ACL(s)", len(removed))
                _print_bindings(removed)
            else:
                found = []
                for f in filters:
                    found += [b for b in admin.describe_acls(f) if b not in found]
                _print_bindings(found)
    except (KafkaError, OSError) as e:
        log.error("%s", e)
        return 1
    return 0


def add_parsers(subcommand, actions) -> None:
    """The ``users`` and ``acls`` subcommands, made with the top-level parser's ``subcommand(name,
    **kwargs)`` and ``actions(parser, *shared)``, so their options may come before or after the action."""
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
    p.set_defaults(func="spark_coord.client.security_cli:users")

    p = subcommand("acls", help="add, remove and list ACLs (Kafka's kafka-acls vocabulary)",
                   description="ACLs through the Kafka API (CreateAcls, DescribeAcls, DeleteAcls) of any broker; "
                               "stored in ZooKeeper in Kafka's layout and effective on every broker at once.")
    _acl_options(p)
    action = actions(p, _acl_options)
    for name, text in (("add", "add ACLs"), ("remove", "remove the ACLs matching the options"),
                       ("list", "list ACLs (all, or of the given resources)")):
        a = action(name, help=text)
        if name == "add":
            a.add_argument("--producer", action="store_true",
                           help="Write, Describe, Create on --topic and IdempotentWrite on the cluster")
            a.add_argument("--consumer", action="store_true", help="Read, Describe on --topic, Read on --group")
        if name == "list":
            a.add_argument("--principal", metavar="PRINCIPAL", help="only ACLs of this principal")
    p.set_defaults(func="spark_coord.client.security_cli:acls")


def _acl_options(p: argparse.ArgumentParser, suppress: object = None) -> None:
    """The options every ``acls`` action takes, before or after the action."""
    many = [] if suppress is None else suppress
    p.add_argument("--bootstrap", "-b", metavar="HOST:PORT[,...]", default="127.0.0.1:9092" if suppress is None
                   else suppress, help="brokers to bootstrap from (default: 127.0.0.1:9092)")
    add_client_options(p, suppress)
    p.add_argument("--topic", action="append", metavar="TOPIC", default=many if suppress else None,
                   help="topic resource; repeatable ('*': all)")
    p.add_argument("--group", action="append", metavar="GROUP", default=many if suppress else None,
                   help="consumer group resource; repeatable")
    p.add_argument("--transactional-id", action="append", metavar="ID", default=many if suppress else None,
                   help="transactional id resource")
    p.add_argument("--cluster", action="store_true", default=False if suppress is None else suppress,
                   help="the cluster resource (kafka-cluster)")
    p.add_argument("--resource-pattern-type", default="literal" if suppress is None else suppress,
                   choices=["literal", "prefixed", "any", "match"],
                   help="literal (default), prefixed; for list and remove also any or match")
    for opt, text in (("--allow-principal", "e.g. User:alice; repeatable"),
                      ("--deny-principal", "e.g. User:mallory; repeatable"),
                      ("--allow-host", "host of allowed principals (default *)"),
                      ("--deny-host", "host of denied principals (default *)")):
        p.add_argument(opt, action="append", metavar=opt.rsplit("-", 1)[1].upper(),
                       default=many if suppress else None, help=text)
    p.add_argument("--operation", action="append", metavar="OP", default=many if suppress else None,
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                        "AlterConfigs, IdempotentWrite, All; repeatable (add: default All)")


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
