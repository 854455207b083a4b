"""The ACL model, its ZooKeeper JSON and change notifications (Kafka's formats), the authorizer's
decisions (on a real ZooKeeper), and the checks the coordinator's APIs will call."""

from __future__ import annotations

import json

import pytest

from spark_coord.errors import ErrorCode
from spark_coord.security import coordination
from spark_coord.security.acl import (
    CLUSTER,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    Resource,
    ResourcePattern,
    ResourceType,
    encode_acls,
    encode_change,
    parse_acls,
    parse_change,
    validate_binding,
)
from spark_coord.security.authorizer import AclAuthorizer, NoAuthorizer
from spark_coord.security.principal import KafkaPrincipal

Op, Perm, RT, PT = AclOperation, AclPermissionType, ResourceType, PatternType
ALICE, BOB = KafkaPrincipal.user("alice"), KafkaPrincipal.user("bob")


def allow(principal, op, host="*"):
    return AccessControlEntry(str(principal), host, op, Perm.ALLOW)


def deny(principal, op, host="*"):
    return AccessControlEntry(str(principal), host, op, Perm.DENY)


def topic(name, pattern=PT.LITERAL):
    return ResourcePattern(RT.TOPIC, name, pattern)


# ------------------------------------------------------------------------- formats

def test_acl_json_is_kafkas_and_reads_kafkas():
    kafka_written = (b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read",'
                     b'"host":"*"},{"principal":"User:bob","permissionType":"Deny","operation":"IdempotentWrite",'
                     b'"host":"10.0.0.1"}]}')
    entries = parse_acls(kafka_written)
    assert entries == {allow(ALICE, Op.READ), deny(BOB, Op.IDEMPOTENT_WRITE, "10.0.0.1")}
    assert parse_acls(encode_acls(entries)) == entries
    doc = json.loads(encode_acls([allow(ALICE, Op.DESCRIBE_CONFIGS)]))
    assert doc == {"version": 1, "acls": [{"principal": "User:alice", "permissionType": "Allow",
                                           "operation": "DescribeConfigs", "host": "*"}]}
    for bad in (b"[]", b'{"version":2,"acls":[]}', b'{"version":1,"acls":[{"principal":"User:a"}]}', b"\xff"):
        with pytest.raises(ValueError):
            parse_acls(bad)


def test_change_notifications_in_both_of_kafkas_encodings():
    assert encode_change(topic("clicks")) == b"TOPIC:clicks"
    assert parse_change(b"TOPIC:clicks", False) == topic("clicks")
    assert parse_change(b"Topic:with:colons", False) == topic("with:colons")  # older Kafka wrote CamelCase
    assert parse_change(b"TransactionalId:tx", False).resource_type == RT.TRANSACTIONAL_ID
    prefixed = ResourcePattern(RT.GROUP, "app-", PT.PREFIXED)
    assert json.loads(encode_change(prefixed)) == {"version": 1, "resourceType": "GROUP", "name": "app-",
                                                   "patternType": "PREFIXED"}
    assert parse_change(encode_change(prefixed), True) == prefixed


@pytest.mark.parametrize("binding, fragment", [
    (AclBinding(ResourcePattern(RT.ANY, "x"), allow(ALICE, Op.READ)), "specific"),
    (AclBinding(ResourcePattern(RT.TOPIC, "x", PT.MATCH), allow(ALICE, Op.READ)), "LITERAL or PREFIXED"),
    (AclBinding(ResourcePattern(RT.TOPIC, "*", PT.PREFIXED), allow(ALICE, Op.READ)), "PREFIXED"),
    (AclBinding(ResourcePattern(RT.CLUSTER, "other"), allow(ALICE, Op.ALTER)), "kafka-cluster"),
    (AclBinding(topic("x"), AccessControlEntry("alice", "*", Op.READ, Perm.ALLOW)), "principal"),
    (AclBinding(topic("x"), AccessControlEntry("User:a", "*", Op.ANY, Perm.ALLOW)), "operation"),
    (AclBinding(topic("x"), AccessControlEntry("User:a", "*", Op.READ, Perm.ANY)), "ALLOW or DENY"),
    (AclBinding(topic("x"), AccessControlEntry("User:a", "", Op.READ, Perm.ALLOW)), "host"),
])
def test_invalid_bindings_are_refused_with_the_reason(binding, fragment):
    assert fragment in (validate_binding(binding) or "")


def test_filters_match_as_kafkas_do():
    lit = AclBinding(topic("clicks"), allow(ALICE, Op.READ))
    wild = AclBinding(topic("*"), allow(BOB, Op.DESCRIBE))
    pre = AclBinding(topic("cli", PT.PREFIXED), deny(BOB, Op.WRITE))
    group = AclBinding(ResourcePattern(RT.GROUP, "g"), allow(ALICE, Op.READ))
    every = [lit, wild, pre, group]
    assert [b for b in every if AclBindingFilter().matches(b)] == every
    assert [b for b in every if AclBindingFilter(RT.TOPIC, "clicks", PT.LITERAL).matches(b)] == [lit]
    assert [b for b in every if AclBindingFilter(RT.TOPIC, "clicks", PT.MATCH).matches(b)] == [lit, wild, pre]
    assert [b for b in every if AclBindingFilter(RT.TOPIC, None, PT.PREFIXED).matches(b)] == [pre]
    assert [b for b in every if AclBindingFilter(principal="User:bob").matches(b)] == [wild, pre]
    assert [b for b in every if AclBindingFilter(operation=Op.READ, permission=Perm.ALLOW).matches(b)] == \
        [lit, group]


# ------------------------------------------------------------------------- decisions

@pytest.fixture
def authorizer(zk):
    a = AclAuthorizer(zk, super_users=["User:admin"])
    a.start()
    yield a
    a.stop()


def test_literal_wildcard_prefixed_deny_and_implied_operations(authorizer):
    authorizer.create([AclBinding(topic("clicks"), allow(ALICE, Op.READ)),
                       AclBinding(topic("logs-", PT.PREFIXED), allow(ALICE, Op.WRITE)),
                       AclBinding(topic("*"), allow("User:*", Op.DESCRIBE, "10.0.0.9")),
                       AclBinding(topic("logs-secret"), deny(ALICE, Op.ALL))])
    ok = lambda p, op, name, host="127.0.0.1": authorizer.authorize(p, host, op, Resource.topic(name))  # noqa: E731
    assert ok(ALICE, Op.READ, "clicks") and not ok(ALICE, Op.WRITE, "clicks")
    assert ok(ALICE, Op.DESCRIBE, "clicks")                          # Read implies Describe
    assert ok(ALICE, Op.WRITE, "logs-app") and ok(ALICE, Op.DESCRIBE, "logs-app")
    assert not ok(ALICE, Op.WRITE, "logs-secret")                    # DENY All wins over the prefix's ALLOW
    assert not ok(ALICE, Op.DESCRIBE, "logs-secret")
    assert ok(BOB, Op.DESCRIBE, "anything", "10.0.0.9") and not ok(BOB, Op.DESCRIBE, "anything")  # host-bound
    assert not ok(BOB, Op.READ, "clicks")
    assert not ok(BOB, Op.READ, "no-acls-at-all")                    # allow.everyone.if.no.acl.found=false
    assert ok("User:admin", Op.DELETE, "clicks") and authorizer.authorize("User:admin", "h", Op.ALTER, CLUSTER)


def test_allow_everyone_if_no_acl_found(zk):
    a = AclAuthorizer(zk, allow_if_no_acl=True)
    a.start()
    try:
        assert a.authorize(BOB, "h", Op.READ, Resource.topic("open"))
        a.create([AclBinding(topic("closed"), allow(ALICE, Op.READ))])
        assert not a.authorize(BOB, "h", Op.READ, Resource.topic("closed"))
    finally:
        a.stop()


def test_acls_are_stored_in_kafkas_layout_and_removed_by_filters(authorizer, zk):
    authorizer.create([AclBinding(topic("clicks"), allow(ALICE, Op.READ)),
                       AclBinding(ResourcePattern(RT.GROUP, "app-", PT.PREFIXED), allow(ALICE, Op.READ))])
    assert json.loads(zk.get("/kafka-acl/Topic/clicks")[0])["acls"] == [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]
    assert zk.exists("/kafka-acl-extended/prefixed/Group/app-")
    assert zk.get_children("/kafka-acl-changes") and zk.get_children("/kafka-acl-extended-changes")
    removed = authorizer.delete([AclBindingFilter(RT.TOPIC, "clicks", PT.LITERAL)])
    assert [b.pattern for b in removed[0]] == [topic("clicks")]
    assert zk.exists("/kafka-acl/Topic/clicks") is None  # an emptied resource goes, as in Kafka
    assert [b.pattern.name for b in authorizer.acls()] == ["app-"]


def test_no_authorizer_allows_everything():
    assert NoAuthorizer().authorize(BOB, "h", Op.DELETE, CLUSTER)


# ------------------------------------------------------------------ coordinator helpers

def test_group_member_and_wildcard_checks(authorizer):
    authorizer.create([AclBinding(ResourcePattern(RT.GROUP, "analytics"), allow(ALICE, Op.READ)),
                       AclBinding(topic("clicks"), allow(ALICE, Op.READ)),
                       AclBinding(topic("views"), allow(ALICE, Op.READ)),
                       AclBinding(topic("payments"), allow(BOB, Op.READ))])
    member = coordination.authorize_group_member
    assert member(authorizer, ALICE, "h", "analytics", ["clicks", "views"]) == ErrorCode.NONE
    assert member(authorizer, ALICE, "h", "analytics", ["clicks", "payments"]) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert member(authorizer, BOB, "h", "analytics", ["payments"]) == ErrorCode.GROUP_AUTHORIZATION_FAILED
    topics = ["clicks", "views", "payments", "clicks-archive"]
    assert coordination.readable_topics(authorizer, ALICE, "h", topics, r"clicks.*|views|payments") == \
        ["clicks", "views"]
    assert coordination.unreadable_topics(authorizer, ALICE, "h", topics) == ["clicks-archive", "payments"]
    assert coordination.authorize_offsets(authorizer, ALICE, "h", "analytics", ["clicks", "payments"]) == \
        {"clicks": ErrorCode.NONE, "payments": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    assert set(coordination.authorize_offsets(authorizer, BOB, "h", "analytics", ["payments"]).values()) == \
        {ErrorCode.GROUP_AUTHORIZATION_FAILED}
    assert coordination.authorize_group(authorizer, ALICE, "h", Op.DESCRIBE, "analytics") == ErrorCode.NONE
    assert coordination.authorize_group(authorizer, ALICE, "h", Op.DELETE, "analytics") == \
        ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert coordination.describable_groups(authorizer, ALICE, "h", ["analytics", "other"]) == ["analytics"]
    assert coordination.describable_groups(authorizer, "User:admin", "h", ["analytics", "other"]) == \
        ["analytics", "other"]
