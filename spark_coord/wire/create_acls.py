"""CreateAcls (key 30): add ACL bindings.

Served: v0-3.  v1 adds ResourcePatternType (v0 means LITERAL), v2 is the first
flexible version, v3 adds the User resource type.  One result per creation, in
request order.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("CreateAclsRequest", valid="0-3", flexible="2+", fields=[
    Field("Creations", "[]AclCreation", "0+", fields=[
        Field("ResourceType", "int8", "0+"),
        Field("ResourceName", "string", "0+"),
        Field("ResourcePatternType", "int8", "1+", default=3),
        Field("Principal", "string", "0+"),
        Field("Host", "string", "0+"),
        Field("Operation", "int8", "0+"),
        Field("PermissionType", "int8", "0+"),
    ]),
])

RESPONSE = Message("CreateAclsResponse", valid="0-3", flexible="2+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("Results", "[]AclCreationResult", "0+", fields=[
        Field("ErrorCode", "int16", "0+"),
        Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    ]),
])

register(ApiKey.CREATE_ACLS, "CreateAcls", REQUEST, RESPONSE, (0, 3))
