"""DescribeAcls (key 29): the ACL bindings that match a filter.

Served: v0-3.  v1 adds the pattern type (filter and answer; v0 means LITERAL),
v2 is the first flexible version, v3 adds the User resource type.  Codes of
resource types, pattern types, operations and permissions are Kafka's
(``security.acl``).
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("DescribeAclsRequest", valid="0-3", flexible="2+", fields=[
    Field("ResourceTypeFilter", "int8", "0+"),
    Field("ResourceNameFilter", "string", "0+", nullable="0+", default=None),
    Field("PatternTypeFilter", "int8", "1+", default=3),
    Field("PrincipalFilter", "string", "0+", nullable="0+", default=None),
    Field("HostFilter", "string", "0+", nullable="0+", default=None),
    Field("Operation", "int8", "0+"),
    Field("PermissionType", "int8", "0+"),
])

RESPONSE = Message("DescribeAclsResponse", valid="0-3", flexible="2+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("ErrorCode", "int16", "0+"),
    Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    Field("Resources", "[]DescribeAclsResource", "0+", fields=[
        Field("ResourceType", "int8", "0+"),
        Field("ResourceName", "string", "0+"),
        Field("PatternType", "int8", "1+", default=3),
        Field("Acls", "[]AclDescription", "0+", fields=[
            Field("Principal", "string", "0+"),
            Field("Host", "string", "0+"),
            Field("Operation", "int8", "0+"),
            Field("PermissionType", "int8", "0+"),
        ]),
    ]),
])

register(ApiKey.DESCRIBE_ACLS, "DescribeAcls", REQUEST, RESPONSE, (0, 3))
