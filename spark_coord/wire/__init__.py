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
  naming the field's path.
- Decode: every field of the schema is present in the result; those absent in the
  version hold their defaults.  Records fields decode to a zero-copy memoryview of
  the frame (or None).  Malformed, truncated or inconsistent input raises
  ``ProtocolError``; every length and count is checked against the bytes left
  before anything is allocated.  Unknown tagged fields are skipped.
- ``registry`` is the one table of served (api_key, version) pairs; importing this
  package registers Kafka's data APIs (one module per API, each documenting its
  versions), SASL (SaslHandshake, SaslAuthenticate) and the ACL APIs (DescribeAcls,
  CreateAcls, DeleteAcls), the config APIs (DescribeConfigs, AlterConfigs,
  IncrementalAlterConfigs), the admin APIs (CreatePartitions, DeleteRecords, OffsetDelete,
  DescribeLogDirs, Describe/AlterUserScramCredentials, DescribeProducers), Kafka's group APIs
  and share-group APIs (KIP-932; their codecs
  only: a broker advertises and dispatches just the APIs it has handlers for), and the
  coordinator protocol (``coordinator``: api keys 1000-1005).
- ``consumer_protocol`` reads and writes the consumer protocol's subscription and
  assignment bytes carried inside JoinGroup and SyncGroup.
"""

from spark_coord.wire import (  # noqa: F401  (importing registers each API)
    alter_configs,
    alter_share_group_offsets,
    api_versions,
    consumer_group_describe,
    consumer_group_heartbeat,
    coordinator,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_share_group_offsets,
    delete_topics,
    describe_acls,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_share_group_offsets,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    metadata,
    offset_delete,
    offset_commit,
    offset_fetch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    scram_credentials,
    share_acknowledge,
    share_fetch,
    share_group_describe,
    share_group_heartbeat,
    sync_group,
)
from spark_coord.wire.types import EncodeError, ProtocolError  # noqa: F401
