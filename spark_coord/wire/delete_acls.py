"""DeleteAcls (key 31): remove the ACL bindings matching each filter.

Served: v0-3.  v1 adds the pattern type (filters and answers; v0 means LITERAL),
v2 is the first flexible version, v3 adds the User resource type.  One result per
filter, listing the bindings it removed.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("DeleteAclsRequest", valid="0-3", flexible="2+", fields=[
    Field("Filters", "[]DeleteAclsFilter", "0+", fields=[
        Field("ResourceTypeFilter", "int8", "0+"),
        Field("ResourceNameFilter", "string", "0+", nullable="0+", default=None),
        Field("PatternTypeFilter", "int8", "1+", default=3),
        Field("PrincipalFilter", "string", "0+", nullable="0+", default=None),
        Field("HostFilter", "string", "0+", nullable="0+", default=None),
        Field("Operation", "int8", "0+"),
        Field("PermissionType", "int8", "0+"),
    ]),
])

RESPONSE = Message("DeleteAclsResponse", valid="0-3", flexible="2+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("FilterResults", "[]DeleteAclsFilterResult", "0+", fields=[
        Field("ErrorCode", "int16", "0+"),
        Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
        Field("MatchingAcls", "[]DeleteAclsMatchingAcl", "0+", fields=[
            Field("ErrorCode", "int16", "0+"),
            Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
            Field("ResourceType", "int8", "0+"),
            Field("ResourceName", "string", "0+"),
            Field("PatternType", "int8", "1+", default=3),
            Field("Principal", "string", "0+"),
            Field("Host", "string", "0+"),
            Field("Operation", "int8", "0+"),
            Field("PermissionType", "int8", "0+"),
        ]),
    ]),
])

register(ApiKey.DELETE_ACLS, "DeleteAcls", REQUEST, RESPONSE, (0, 3))
