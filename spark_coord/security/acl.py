"""Kafka's ACL model: resource patterns, access control entries, filters, and their JSON in ZooKeeper.

An ACL binding says: ``<principal>`` from ``<host>`` is allowed (or denied)
``<operation>`` on the resources matching ``<pattern>``.  A pattern is a resource
type (Topic, Group, Cluster, TransactionalId, ...), a name and a pattern type:
LITERAL (that name; ``*`` is the wildcard matching every name) or PREFIXED
(every name starting with it).  Codes are Kafka's own (they travel in CreateAcls,
DescribeAcls and DeleteAcls), and so are the names in ZooKeeper::

    /kafka-acl/Topic/clicks  {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                                                   "operation":"Read","host":"*"}]}

Implied operations (Kafka's ``AclAuthorizer``): Read, Write, Delete or Alter allow
Describe; AlterConfigs allows DescribeConfigs; All allows everything.  A DENY of an
operation (or of All) wins over any ALLOW.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Iterable

from spark_coord.security.principal import KafkaPrincipal

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"
ACL_JSON_VERSION = 1


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


class _Named(IntEnum):
    @property
    def camel(self) -> str:
        """Kafka's CamelCase name (``IdempotentWrite``, ``TransactionalId``): ZooKeeper paths and JSON."""
        return _camel(self.name)

    @classmethod
    def parse(cls, text: str) -> "_Named":
        """By name, any case, with or without underscores (``Read``, ``READ``, ``idempotent-write``)."""
        key = re.sub(r"[-_ ]", "", str(text)).upper()
        for member in cls:
            if member.name.replace("_", "") == key:
                return member
        raise ValueError(f"unknown {cls.__name__} {text!r} (one of "
                         f"{', '.join(m.camel for m in cls if m.value > 1)})")


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Named):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: Operations an ALLOW of the key also allows (Kafka's implied operations).
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                                      AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}


def allowing(operation: AclOperation) -> frozenset[AclOperation]:
    """The operations whose ALLOW allows ``operation``: itself, All, and those implying it."""
    return frozenset({operation, AclOperation.ALL}) | IMPLIED_BY.get(operation, frozenset())


@dataclass(frozen=True)
class Resource:
    """A concrete resource a request touches (what ``authorize`` is asked about)."""

    type: ResourceType
    name: str

    @classmethod
    def topic(cls, name: str) -> "Resource":
        return cls(ResourceType.TOPIC, name)

    @classmethod
    def group(cls, name: str) -> "Resource":
        return cls(ResourceType.GROUP, name)

    @classmethod
    def cluster(cls) -> "Resource":
        return CLUSTER

    def __str__(self) -> str:
        return f"{self.type.camel}:{self.name}"


CLUSTER = Resource(ResourceType.CLUSTER, CLUSTER_NAME)


@dataclass(frozen=True)
class ResourcePattern:
    """Which resources an ACL covers."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def matches(self, resource: Resource) -> bool:
        if resource.type != self.resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.name == WILDCARD or self.name == resource.name
        return self.pattern_type == PatternType.PREFIXED and resource.name.startswith(self.name)

    def __str__(self) -> str:
        return f"{self.resource_type.camel}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True)
class AccessControlEntry:
    """Who (principal, host), what (operation) and whether (permission)."""

    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def applies_to(self, principal: str, host: str) -> bool:
        return self.principal in (principal, WILDCARD_PRINCIPAL) and self.host in (host, WILDCARD)

    def __str__(self) -> str:
        return (f"{self.principal} has {self.permission.camel} permission for operation {self.operation.camel} "
                f"from host {self.host}")


@dataclass(frozen=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        return f"({self.pattern}, {self.entry})"


def validate_binding(b: AclBinding) -> str | None:
    """Why a binding cannot be created (Kafka's rules), or None when it can."""
    p, e = b.pattern, b.entry
    if p.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        return "the resource type must be specific (Topic, Group, Cluster, TransactionalId, ...)"
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "the pattern type must be LITERAL or PREFIXED"
    if not p.name:
        return "the resource name is empty"
    if p.pattern_type == PatternType.PREFIXED and p.name == WILDCARD:
        return "a PREFIXED pattern cannot be '*' (use LITERAL '*' for every resource)"
    if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        return f"the Cluster resource is named {CLUSTER_NAME!r}"
    if e.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        return "the operation must be specific"
    if e.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return "the permission must be ALLOW or DENY"
    try:
        KafkaPrincipal.parse(e.principal)
    except ValueError as err:
        return str(err)
    if not e.host:
        return "the host is empty (use '*' for every host)"
    return None


@dataclass(frozen=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select: None and ANY match everything; pattern type MATCH
    selects every pattern that matches the named resource (literal, wildcard and prefixes)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, b: AclBinding) -> bool:
        p, e = b.pattern, b.entry
        if self.resource_type != ResourceType.ANY and self.resource_type != p.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.name is not None and not p.matches(Resource(p.resource_type, self.name)):
                return False
        else:
            if self.pattern_type != PatternType.ANY and self.pattern_type != p.pattern_type:
                return False
            if self.name is not None and self.name != p.name:
                return False
        return ((self.principal is None or self.principal == e.principal)
                and (self.host is None or self.host == e.host)
                and (self.operation == AclOperation.ANY or self.operation == e.operation)
                and (self.permission == AclPermissionType.ANY or self.permission == e.permission))

    def invalid(self) -> str | None:
        """Why the filter is unusable (unknown codes), or None."""
        if ResourceType.UNKNOWN == self.resource_type or PatternType.UNKNOWN == self.pattern_type:
            return "unknown resource or pattern type"
        if AclOperation.UNKNOWN == self.operation or AclPermissionType.UNKNOWN == self.permission:
            return "unknown operation or permission type"
        return None


def _enum(cls, value: Any):
    try:
        return cls(value)
    except ValueError:
        return cls.UNKNOWN


def binding_from_wire(d: dict, pattern_key: str = "resource_pattern_type") -> AclBinding:
    """An ``AclBinding`` from a CreateAcls creation (codes outside Kafka's tables become UNKNOWN)."""
    return AclBinding(
        ResourcePattern(_enum(ResourceType, d.get("resource_type")), d.get("resource_name") or "",
                        _enum(PatternType, d.get(pattern_key, PatternType.LITERAL))),
        AccessControlEntry(d.get("principal") or "", d.get("host") or "", _enum(AclOperation, d.get("operation")),
                           _enum(AclPermissionType, d.get("permission_type"))))


def filter_from_wire(d: dict) -> AclBindingFilter:
    """An ``AclBindingFilter`` from a DescribeAcls request or a DeleteAcls filter."""
    return AclBindingFilter(_enum(ResourceType, d.get("resource_type_filter")), d.get("resource_name_filter"),
                            _enum(PatternType, d.get("pattern_type_filter", PatternType.LITERAL)),
                            d.get("principal_filter"), d.get("host_filter"), _enum(AclOperation, d.get("operation")),
                            _enum(AclPermissionType, d.get("permission_type")))


# ----------------------------------------------------------------------- ZooKeeper JSON

def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    """Kafka's ``{"version":1,"acls":[...]}`` for a resource znode (sorted, so writes are stable)."""
    acls = [{"principal": e.principal, "permissionType": e.permission.camel, "operation": e.operation.camel,
             "host": e.host} for e in sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission))]
    return json.dumps({"version": ACL_JSON_VERSION, "acls": acls}, separators=(",", ":")).encode()


def parse_acls(data: bytes | None, where: str = "acls") -> frozenset[AccessControlEntry]:
    """The entries of a resource znode; ValueError naming ``where`` on anything malformed."""
    if not data:
        return frozenset()
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise ValueError(f"{where}: not JSON") from None
    if not isinstance(doc, dict) or doc.get("version") != ACL_JSON_VERSION or not isinstance(doc.get("acls"), list):
        raise ValueError(f"{where}: expected {{\"version\":1,\"acls\":[...]}}")
    out = set()
    for a in doc["acls"]:
        try:
            out.add(AccessControlEntry(str(a["principal"]), str(a["host"]), AclOperation.parse(a["operation"]),
                                       AclPermissionType.parse(a["permissionType"])))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{where}: bad ACL entry {a!r}: {e}") from None
    return frozenset(out)


def encode_change(pattern: ResourcePattern) -> bytes:
    """A change notification's content: ``TOPIC:<name>`` for literal patterns (``/kafka-acl-changes``),
    Kafka's JSON event for the others (``/kafka-acl-extended-changes``)."""
    if pattern.pattern_type == PatternType.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    return json.dumps({"version": 1, "resourceType": pattern.resource_type.name, "name": pattern.name,
                       "patternType": pattern.pattern_type.name}, separators=(",", ":")).encode()


def parse_change(data: bytes, extended: bool) -> ResourcePattern:
    """The pattern a change notification names (either encoding; Kafka's older CamelCase type names too)."""
    text = data.decode("utf-8")
    if not extended:
        kind, sep, name = text.partition(":")
        if not sep:
            raise ValueError(f"ACL change {text[:80]!r} is not <ResourceType>:<name>")
        return ResourcePattern(ResourceType.parse(kind), name, PatternType.LITERAL)
    doc = json.loads(text)
    return ResourcePattern(ResourceType.parse(doc["resourceType"]), str(doc["name"]),
                           PatternType.parse(doc["patternType"]))
