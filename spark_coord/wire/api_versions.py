"""ApiVersions (key 18): which APIs and versions a broker serves.

Served: v0-4.
- v0: error code and the api list.
- v1: adds ThrottleTimeMs.  v2: same shape (throttling semantics only).
- v3: first flexible version; the request gains ClientSoftwareName/Version and the
  response gains tagged feature fields (we send none).  The response header stays
  v0 in every version (KIP-511): a client that does not know our versions must still
  read the correlation id.  A request at a version we do not serve gets a v0-format
  answer with UNSUPPORTED_VERSION and the api list (``protocol.encode_api_versions_fallback``).
- v4: same shape; only lifts a rule about features with min version 0
  (KAFKA-17011), which does not concern us (we advertise no features).
  kafka-python 3.x opens with v4.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("ApiVersionsRequest", valid="0-4", flexible="3+", fields=[
    Field("ClientSoftwareName", "string", "3+"),
    Field("ClientSoftwareVersion", "string", "3+"),
])

RESPONSE = Message("ApiVersionsResponse", valid="0-4", flexible="3+", fields=[
    Field("ErrorCode", "int16", "0+"),
    Field("ApiKeys", "[]ApiVersion", "0+", fields=[
        Field("ApiKey", "int16", "0+"),
        Field("MinVersion", "int16", "0+"),
        Field("MaxVersion", "int16", "0+"),
    ]),
    Field("ThrottleTimeMs", "int32", "1+"),
    Field("SupportedFeatures", "[]SupportedFeatureKey", "3+", tag=0, tagged="3+", fields=[
        Field("Name", "string", "3+"),
        Field("MinVersion", "int16", "3+"),
        Field("MaxVersion", "int16", "3+"),
    ]),
    Field("FinalizedFeaturesEpoch", "int64", "3+", tag=1, tagged="3+", default=-1),
    Field("FinalizedFeatures", "[]FinalizedFeatureKey", "3+", tag=2, tagged="3+", fields=[
        Field("Name", "string", "3+"),
        Field("MaxVersionLevel", "int16", "3+"),
        Field("MinVersionLevel", "int16", "3+"),
    ]),
    Field("ZkMigrationReady", "bool", "3+", tag=3, tagged="3+", default=False),
])

register(ApiKey.API_VERSIONS, "ApiVersions", REQUEST, RESPONSE, (0, 4), response_header_version=0)
