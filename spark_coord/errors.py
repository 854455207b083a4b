"""Kafka's error codes, in one table.  Errors are data: handlers put ``ErrorCode``
values in responses; only a framing violation closes a socket.

The coordinator's own codes (seeds 003, section 7) live above 1000 so they can never
collide with a Kafka code.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    UNKNOWN_TOPIC_ID = 100
    INCONSISTENT_TOPIC_ID = 103
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_RECORD_STATE = 121  # share groups: an acknowledgement of a record not acquired by the member
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_REGULAR_EXPRESSION = 128
    SHARE_SESSION_LIMIT_REACHED = 133

    # spark-coord coordinator protocol (seeds 003 section 7; generation ids from 004)
    CONSUMER_ID_ALREADY_REGISTERED = 1001
    SESSION_TIMEOUT_TOO_SMALL = 1002
    UNKNOWN_CONSUMER = 1003
    STALE_GENERATION = 1004
    STALE_COORDINATOR_EPOCH = 1005
    PARTITION_NOT_OWNED = 1006
    INVALID_SUBSCRIPTION = 1007
    OFFSET_BACKWARDS = 1008  # below the offset already committed for the partition in this generation
    CLAIM_REFUSED = 1009  # not taken back with what it claims: stop it all, register again without a claim

    @property
    def retriable(self) -> bool:
        """Whether a client may retry the request that got this code (see ``RETRIABLE``)."""
        return self in RETRIABLE

    @classmethod
    def name_of(cls, code: int) -> str:
        """A readable name for any code, including ones this table does not know."""
        try:
            return cls(code).name
        except ValueError:
            return f"UNKNOWN_ERROR_{code}"


#: The codes whose exceptions are ``RetriableException``s in Kafka's Java client
#: (``org.apache.kafka.common.errors``: directly, or through ``InvalidMetadataException``
#: or ``TimeoutException``): the same request may succeed if sent again, usually after
#: refreshing metadata.  Every client here decides retries with this one table.
RETRIABLE: frozenset[ErrorCode] = frozenset({
    ErrorCode.CORRUPT_MESSAGE,                  # CorruptRecordException: may be corruption in transit
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,       # InvalidMetadataException
    ErrorCode.LEADER_NOT_AVAILABLE,             # InvalidMetadataException
    ErrorCode.NOT_LEADER_OR_FOLLOWER,           # InvalidMetadataException
    ErrorCode.REQUEST_TIMED_OUT,                # TimeoutException
    ErrorCode.REPLICA_NOT_AVAILABLE,            # InvalidMetadataException
    ErrorCode.NETWORK_EXCEPTION,                # InvalidMetadataException
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.NOT_CONTROLLER,
    ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.KAFKA_STORAGE_ERROR,              # InvalidMetadataException
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
    ErrorCode.INVALID_FETCH_SESSION_EPOCH,
    ErrorCode.LISTENER_NOT_FOUND,               # InvalidMetadataException
    ErrorCode.FENCED_LEADER_EPOCH,              # InvalidMetadataException
    ErrorCode.UNKNOWN_LEADER_EPOCH,             # InvalidMetadataException
    ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,   # InvalidMetadataException
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,   # InvalidMetadataException
    ErrorCode.ELECTION_NOT_NEEDED,              # InvalidMetadataException
    ErrorCode.UNSTABLE_OFFSET_COMMIT,
    ErrorCode.THROTTLING_QUOTA_EXCEEDED,
    ErrorCode.UNKNOWN_TOPIC_ID,                 # InvalidMetadataException
    ErrorCode.INCONSISTENT_TOPIC_ID,            # InvalidMetadataException
    ErrorCode.SHARE_SESSION_NOT_FOUND,          # the member opens a new share session
    ErrorCode.INVALID_SHARE_SESSION_EPOCH,      # likewise
})


def is_retriable(code: int) -> bool:
    """``RETRIABLE`` for a raw code from a response (codes this table does not know are not)."""
    return code in RETRIABLE


class KafkaError(Exception):
    """An error a broker reported, carried by our own clients."""

    def __init__(self, code: int, message: str = ""):
        self.code = int(code)
        super().__init__(f"{ErrorCode.name_of(self.code)} ({self.code}){': ' + message if message else ''}")
