"""Every ZooKeeper path of spark-coord, in one place.

The layout is Kafka's own (ZooKeeper-mode Kafka 2.x for brokers and topics, the
0.8 high-level consumer for groups), so that existing tools -- lag checkers that
read ZooKeeper offsets, ZooKeeper-mode Kafka tooling -- understand what we write::

    /brokers/ids/<broker id>                            ephemeral, broker JSON (model.py)
    /brokers/topics/<topic>                             persistent, partition assignment JSON
    /latest_producer_id_block                           persistent, last claimed producer id block
    /consumers/coordinator                              ephemeral, the single coordinator of an older
                                                        version (legacy; never created now: while it
                                                        exists no shard is elected)
    /consumers/<group>/ids/<consumer id>                persistent, registered members
    /consumers/<group>/state                            persistent, what a new coordinator
                                                        needs to restore the group
    /consumers/<group>/offsets/<topic>/<partition>      persistent, next offset (decimal)
    /consumers/<group>/owners/<topic>/<partition>       persistent, owning consumer id
    /coordinators/ids/<coordinator id>                  ephemeral, a live coordinator (a broker with
                                                        coordinator.enable, or a standalone one):
                                                        broker JSON with its endpoints
    /coordinators/shards                                persistent, {"version":1,"count":N}: the
                                                        cluster's shard count, fixed by the first
                                                        coordinator
    /coordinators/shards/<n>                            persistent, its data version is shard n's
                                                        fencing token (bumped by each election)
    /coordinators/shards/<n>/leader                     ephemeral, the coordinator id holding shard n;
                                                        its czxid is the shard's epoch
    /config/users/<user>                                persistent, SCRAM credentials (sensitive)
    /config/groups/<group>                              persistent, a group's own configs (KIP-848, KIP-932)
    /config/changes/config_change_<seq>                 persistent sequential, "users/<user>" or
                                                        "groups/<group>" changed
    /kafka-acl/<ResourceType>/<name>                    persistent, literal ACLs of a resource (sensitive)
    /kafka-acl-extended/prefixed/<ResourceType>/<name>  persistent, prefixed ACLs (sensitive)
    /kafka-acl-changes/acl_changes_<seq>                persistent sequential, "<TYPE>:<name>" changed
    /share-groups/<group>/<topic>/<partition>           persistent, a share partition's state, written by
                                                        the partition's leader (KIP-932)
    /share-group-changes/share_change_<seq>             persistent sequential, {"version":1,"group":...}:
                                                        an admin changed or deleted a share group's state
    /kafka-acl-extended-changes/acl_changes_<seq>       persistent sequential, JSON of a changed pattern

No other module builds a path by hand: a name that cannot be a single znode
component (a ``/``, ``.``/``..``, control characters) or that would collide with
the layout (a group called ``coordinator``) raises ``ValueError`` naming it here,
before anything reaches ZooKeeper.
"""

from __future__ import annotations

import re

# ------------------------------------------------------------------------ names

#: Kafka's rule for topic names (``Topic.validate``): letters, digits, ``.``, ``_``, ``-``.
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]+$")
TOPIC_MAX_LENGTH = 249

#: Longest group or consumer id we accept (a znode name has no hard limit, but a
#: path must stay far below ZooKeeper's 1 MB packet; Kafka itself has no limit).
NAME_MAX_LENGTH = 255

#: Children of /consumers that are not groups; a group may not take these names.
RESERVED_GROUP_NAMES = frozenset({"coordinator"})

#: Characters ZooKeeper refuses in a path (``PathUtils.validatePath``), plus ``/``
#: which would silently add a level.
_ZK_FORBIDDEN = re.compile("[\u0000-\u001f\u007f-\u009f\ud800-\uf8ff\ufff0-\uffff/]")


def validate_topic(name: str) -> str:
    """Return ``name`` if it is a legal Kafka topic name, else raise ``ValueError`` naming it."""
    if not isinstance(name, str):
        raise ValueError(f"topic name must be a string, got {type(name).__name__}: {name!r}")
    if name in ("", ".", ".."):
        raise ValueError(f"illegal topic name {name!r}: empty, '.' and '..' are not allowed")
    if len(name) > TOPIC_MAX_LENGTH:
        raise ValueError(f"illegal topic name {name[:40]!r}...: longer than {TOPIC_MAX_LENGTH} characters")
    if not _TOPIC_RE.match(name):
        raise ValueError(f"illegal topic name {name!r}: only ASCII letters, digits, '.', '_' and '-' are allowed")
    return name


def _validate_component(kind: str, name: object) -> str:
    if not isinstance(name, str):
        raise ValueError(f"{kind} must be a string, got {type(name).__name__}: {name!r}")
    if name in ("", ".", ".."):
        raise ValueError(f"illegal {kind} {name!r}: empty, '.' and '..' are not allowed")
    if len(name) > NAME_MAX_LENGTH:
        raise ValueError(f"illegal {kind} {name[:40]!r}...: longer than {NAME_MAX_LENGTH} characters")
    bad = _ZK_FORBIDDEN.search(name)
    if bad:
        raise ValueError(f"illegal {kind} {name!r}: character {bad.group()!r} is not allowed")
    return name


def validate_group(name: object) -> str:
    """Return ``name`` if it can be a consumer group id (any value: one that is not a string is
    refused too), else raise ``ValueError`` naming it."""
    name = _validate_component("group id", name)
    if name in RESERVED_GROUP_NAMES:
        raise ValueError(f"illegal group id {name!r}: reserved (it names {CONSUMERS}/{name})")
    return name


def validate_consumer_id(name: object) -> str:
    """Return ``name`` if it can be a consumer (member) id, else raise ``ValueError`` naming it."""
    return _validate_component("consumer id", name)


def validate_broker_id(broker_id: int) -> int:
    """Return ``broker_id`` if it is a non-negative int (not a bool), else raise ``ValueError``."""
    if isinstance(broker_id, bool) or not isinstance(broker_id, int) or broker_id < 0:
        raise ValueError(f"illegal broker id {broker_id!r}: must be an integer >= 0")
    return broker_id


def validate_partition(partition: int) -> int:
    """Return ``partition`` if it is a non-negative int (not a bool), else raise ``ValueError``."""
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise ValueError(f"illegal partition {partition!r}: must be an integer >= 0")
    return partition


_DECIMAL = re.compile(r"^(0|[1-9][0-9]{0,18})$")


def parse_int_node(kind: str, node: str) -> int:
    """The integer a child znode's name stands for (``/brokers/ids/3`` -> 3).

    Strict: only a canonical non-negative decimal ("0", "17"), so a stray node a
    person or tool created ("07", "x", "-1") is refused with a ``ValueError``
    instead of being misread.
    """
    if not isinstance(node, str) or not _DECIMAL.match(node):
        raise ValueError(f"znode {node!r} is not a {kind} (a non-negative decimal)")
    return int(node)


def parse_broker_node(node: str) -> int:
    """Broker id of a child of ``/brokers/ids``."""
    return parse_int_node("broker id", node)


def parse_partition_node(node: str) -> int:
    """Partition of a child of ``.../offsets/<topic>`` or ``.../owners/<topic>``."""
    return parse_int_node("partition", node)


def join(*components: str) -> str:
    """An absolute path from already validated components (``join("a", "b") == "/a/b"``)."""
    return "/" + "/".join(components)


def validate_chroot(chroot: str) -> str:
    """Return ``chroot`` if it is an absolute znode path usable as a chroot, else raise ``ValueError``."""
    if not isinstance(chroot, str) or not chroot.startswith("/") or chroot == "/" or chroot.endswith("/"):
        raise ValueError(f"illegal chroot {chroot!r}: must be an absolute path like /spark-coord, with no trailing '/'")
    for component in chroot[1:].split("/"):
        _validate_component("chroot component", component)
    return chroot


# ---------------------------------------------------------------------- brokers

BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
#: Kafka's cluster id znode: {"version":"1","id":"<id>"}, created once by the first broker.
CLUSTER_ID = "/cluster/id"
#: Kafka's producer id block znode: {"version":1,"broker":<id>,"block_start":"<n>","block_end":"<m>"},
#: the last block of producer ids claimed by any broker (version-checked sets).
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"


def broker(broker_id: int) -> str:
    """``/brokers/ids/<id>``: a live broker's ephemeral registration."""
    return f"{BROKER_IDS}/{validate_broker_id(broker_id)}"


def topic(name: str) -> str:
    """``/brokers/topics/<topic>``: the topic's partition -> replicas assignment."""
    return f"{BROKER_TOPICS}/{validate_topic(name)}"


# --------------------------------------------------------------------- security

CONFIG = "/config"
CONFIG_USERS = "/config/users"
#: Kafka's config change notifications: sequential children ``config_change_<seq>``.
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ACL = "/kafka-acl"
ACL_EXTENDED = "/kafka-acl-extended"
ACL_CHANGES = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
#: Subtrees only the brokers' own ZooKeeper identity may read (credentials and ACLs).
SENSITIVE_ROOTS = (CONFIG_USERS, ACL, ACL_EXTENDED, ACL_CHANGES, ACL_EXTENDED_CHANGES)


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: a user name as a znode name (URL-encoding, ``*`` as
    ``%2A``, space as ``%20``; letters, digits, ``.``, ``-`` and ``_`` stay)."""
    from urllib.parse import quote

    if not isinstance(name, str) or not name:
        raise ValueError(f"illegal user name {name!r}: empty")
    return quote(name, safe="").replace("~", "%7E")


def desanitize(node: str) -> str:
    """The user name a child of ``/config/users`` stands for."""
    from urllib.parse import unquote

    return unquote(node)


def user_config(name: str) -> str:
    """``/config/users/<user>``: the user's SCRAM credentials (and any other per-user config)."""
    return f"{CONFIG_USERS}/{sanitize(name)}"


def is_sensitive(path: str) -> bool:
    """Whether ``path`` lies in a subtree that must not be world-readable."""
    return any(path == root or path.startswith(root + "/") for root in SENSITIVE_ROOTS)


def acl_type(pattern_type: str, resource_type: str) -> str:
    """``/kafka-acl/Topic`` (LITERAL) or ``/kafka-acl-extended/prefixed/Topic``: one child per resource name."""
    base = ACL if pattern_type == "LITERAL" else f"{ACL_EXTENDED}/{pattern_type.lower()}"
    return f"{base}/{_validate_component('resource type', resource_type)}"


def acl_resource(pattern_type: str, resource_type: str, name: str) -> str:
    """``/kafka-acl/Topic/<name>`` (LITERAL) or ``/kafka-acl-extended/prefixed/Topic/<name>``: its ACLs."""
    return f"{acl_type(pattern_type, resource_type)}/{_validate_component('resource name', name)}"


# -------------------------------------------------------------------- consumers

CONSUMERS = "/consumers"
#: The single coordinator's election node of older versions.  Never created now: a shard
#: election's multi creates and deletes it, so that it fails while an older coordinator holds it.
COORDINATOR = "/consumers/coordinator"

# ------------------------------------------------------------------ coordinators

COORDINATORS = "/coordinators"
#: Live coordinators: one ephemeral child per coordinator id, broker JSON with its endpoints.
COORDINATOR_IDS = "/coordinators/ids"
#: The shard count: {"version":1,"count":N}; each child is one shard.
SHARDS = "/coordinators/shards"


def coordinator(coordinator_id: int) -> str:
    """``/coordinators/ids/<id>``: a live coordinator's ephemeral registration."""
    return f"{COORDINATOR_IDS}/{validate_broker_id(coordinator_id)}"


def shard(n: int) -> str:
    """``/coordinators/shards/<n>``: its data version is the shard's fencing token."""
    return f"{SHARDS}/{validate_partition(n)}"


def shard_leader(n: int) -> str:
    """``/coordinators/shards/<n>/leader``: ephemeral, the coordinator id holding shard n (czxid: its epoch)."""
    return f"{shard(n)}/leader"


def group(g: str) -> str:
    """``/consumers/<group>``: everything the group keeps in ZooKeeper lives below."""
    return f"{CONSUMERS}/{validate_group(g)}"


def group_ids(g: str) -> str:
    """``/consumers/<group>/ids``: one child per registered member."""
    return f"{group(g)}/ids"


def member(g: str, consumer_id: str) -> str:
    """``/consumers/<group>/ids/<consumer id>``: one registered member."""
    return f"{group_ids(g)}/{validate_consumer_id(consumer_id)}"


def group_state(g: str) -> str:
    """``/consumers/<group>/state``: generation and assignment, read by a newly elected coordinator."""
    return f"{group(g)}/state"


def group_offsets(g: str) -> str:
    """``/consumers/<group>/offsets``: one child per topic the group has committed offsets for."""
    return f"{group(g)}/offsets"


def topic_offsets(g: str, t: str) -> str:
    """``/consumers/<group>/offsets/<topic>``: one child per partition."""
    return f"{group_offsets(g)}/{validate_topic(t)}"


def offset(g: str, t: str, partition: int) -> str:
    """``/consumers/<group>/offsets/<topic>/<partition>``: next offset to consume, decimal."""
    return f"{topic_offsets(g, t)}/{validate_partition(partition)}"


def group_owners(g: str) -> str:
    """``/consumers/<group>/owners``: one child per topic the group owns partitions of."""
    return f"{group(g)}/owners"


def topic_owners(g: str, t: str) -> str:
    """``/consumers/<group>/owners/<topic>``: one child per owned partition."""
    return f"{group_owners(g)}/{validate_topic(t)}"


def owner(g: str, t: str, partition: int) -> str:
    """``/consumers/<group>/owners/<topic>/<partition>``: the consumer id that owns it."""
    return f"{topic_owners(g, t)}/{validate_partition(partition)}"


# ---------------------------------------------------------------- share groups (KIP-932)
# Kafka keeps share-partition state in its share coordinator's internal topic (__share_group_state);
# ZooKeeper-mode Kafka never had share groups, so there is no Kafka layout to follow.  Ours sits
# beside /consumers (not under it, where lag tools and our own group restore would take a share
# group for a consumer group): one znode per share partition, written by the partition's leader
# with a version check (DESIGN.md "Share groups (KIP-932)").
SHARE_GROUPS = "/share-groups"


def share_group(g: str) -> str:
    """``/share-groups/<group>``: a share group's state, one child per topic it has state for."""
    return f"{SHARE_GROUPS}/{validate_group(g)}"


def share_topic(g: str, t: str) -> str:
    """``/share-groups/<group>/<topic>``: one child per partition."""
    return f"{share_group(g)}/{validate_topic(t)}"


def share_partition(g: str, t: str, partition: int) -> str:
    """``/share-groups/<group>/<topic>/<partition>``: the share partition's start offset and in-flight
    ranges, JSON ``{"version":1,"start":N,"ranges":[[first,last,state,deliveries],...],"topic_id":...}``."""
    return f"{share_topic(g, t)}/{validate_partition(partition)}"


#: Notifications that an admin (AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups) rewrote
#: or deleted a share group's state: sequential children ``share_change_<seq>``, JSON
#: ``{"version":1,"group":"<group>"}``.  Every broker follows them (Kafka's change-notification
#: pattern, ``security.notifications``) and drops the share partitions of that group it holds, so the
#: next fetch reads the new state.  Beside ``/share-groups`` (under it, the root would take a group's
#: name).
SHARE_CHANGES = "/share-group-changes"
SHARE_CHANGE_PREFIX = "share_change_"


def parse_group_node(node: str) -> str | None:
    """The group id a child of ``/consumers`` stands for, or None for a reserved child
    (``coordinator``) or a name that is not a legal group id."""
    try:
        return validate_group(node)
    except ValueError:
        return None


#: Persistent parents that exist in every cluster (created by a broker at start-up).
ROOTS = (BROKERS, BROKER_IDS, BROKER_TOPICS, CONSUMERS)


# ---------------------------------------------------------- entity configs (groups)
# ZooKeeper-mode Kafka keeps every entity's dynamic configs at /config/<entity type>/<name>
# ({"version":1,"config":{...}}: /config/topics/<t>, /config/brokers/<id>, /config/users/<u>...)
# and announces each change with a notification under /config/changes, {"version":2,
# "entity_path":"<entity type>/<name>"}.  Group configs (KIP-848, KIP-932: the GROUP config
# resource) follow the same scheme; the group id is the znode name, as under /consumers.
CONFIG_GROUPS = "/config/groups"
#: The entity type of group configs in a change notification's ``entity_path``.
CONFIG_GROUPS_ENTITY = "groups"


def group_config(g: str) -> str:
    """``/config/groups/<group>``: the group's own configs, ``{"version":1,"config":{"key":"value",...}}``."""
    return f"{CONFIG_GROUPS}/{_validate_component('group id', g)}"


def group_config_entity(g: str) -> str:
    """``groups/<group>``: how a config change notification names the group's configs."""
    return f"{CONFIG_GROUPS_ENTITY}/{_validate_component('group id', g)}"


# ---------------------------------------------------------- entity configs (topics, brokers)
# ZooKeeper-mode Kafka's own: a topic's overrides at /config/topics/<topic>, one broker's dynamic
# configs at /config/brokers/<id>, every broker's at /config/brokers/<default>; each change is
# announced under /config/changes with entity_path "topics/<t>" or "brokers/<id|<default>>".
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_TOPICS_ENTITY = "topics"
CONFIG_BROKERS_ENTITY = "brokers"
#: The entity name of the cluster-wide dynamic broker defaults (Kafka's ``ZooKeeperInternals.DEFAULT_STRING``).
BROKER_DEFAULT_ENTITY = "<default>"


def topic_config(name: str) -> str:
    """``/config/topics/<topic>``: the topic's own configs, ``{"version":1,"config":{...}}``."""
    return f"{CONFIG_TOPICS}/{validate_topic(name)}"


def broker_config(name: str) -> str:
    """``/config/brokers/<id>`` (one broker's dynamic configs) or ``/config/brokers/<default>``."""
    if name != BROKER_DEFAULT_ENTITY:
        name = str(validate_broker_id(int(name)))
    return f"{CONFIG_BROKERS}/{name}"
