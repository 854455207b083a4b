"""The Kafka wire codec, shared by the broker and the clients.  Codecs do no I/O.

Contract (see ``protocol`` for the entry points):

- Bodies are plain dicts keyed by the snake_case of Kafka's JSON field names
  (``ThrottleTimeMs`` -> ``throttle_time_ms``); arrays are lists of dicts (or of
  ints/strings for primitive arrays); uuids are 16 bytes.
- Encode: a missing key takes the field's default (0, "", False, [] for arrays,
  None for fields nullable in some version, or the JSON's ``default``); keys of
  fields not in the version being encoded are ignored; None in a version where the
  field is not nullable is written as the empty value.  So a handler builds one
  superset dict for every version.  Records fields accept None, bytes, bytearray,
  memoryview, a ``FileRegion``, or a list of such pieces (concatenated; regions are
  never read).  A value that cannot be encoded raises ``EncodeError`` (a ValueError)
  naming the field's path.  A key that is a field of no version of its message or
  struct (a typo) is ignored, or with ``SPARK_COORD_STRICT_WIRE=1`` (the test suite)
  raises ``UnknownKeyError`` naming the message, the version and the key.
- Decode: every field of the schema is present in the result; those absent in the
  version hold their defaults.  Records fields decode to a zero-copy memoryview of
  the frame (or None).  Malformed, truncated or inconsistent input raises
  ``ProtocolError``; every length and count is checked against the bytes left
  before anything is allocated.  Unknown tagged fields are skipped.
- ``registry`` is the one table of served (api_key, version) pairs; a module registers
  its API when the registry first looks up one of its keys.  There are Kafka's data APIs
  (one module per API, each documenting its versions), SASL (SaslHandshake,
  SaslAuthenticate), the ACL APIs (DescribeAcls, CreateAcls, DeleteAcls), the config APIs
  (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs), the admin APIs
  (CreatePartitions, DeleteRecords, OffsetDelete, DescribeLogDirs,
  Describe/AlterUserScramCredentials, DescribeProducers), Kafka's group APIs and
  share-group APIs (KIP-932; their codecs only: a broker advertises and dispatches just
  the APIs it has handlers for), and the coordinator protocol (``coordinator``: api keys
  1000-1006).
- ``consumer_protocol`` reads and writes the consumer protocol's subscription and
  assignment bytes carried inside JoinGroup and SyncGroup.
"""

from spark_coord.wire.types import EncodeError, ProtocolError  # noqa: F401
