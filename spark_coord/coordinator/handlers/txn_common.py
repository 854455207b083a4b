"""What the transaction coordinator's APIs share: the transactional id's ACL, the coordinator serving
it, and Kafka's answer to a client too old for PRODUCER_FENCED."""

from __future__ import annotations

from typing import Any

from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation, Resource, ResourceType


def txn_refused(ctx: Any, conn: Any, operation: AclOperation, transactional_id: str) -> bool:
    """Whether the connection's principal may not do ``operation`` on the transactional id (Kafka's
    TRANSACTIONAL_ID resource: Write for InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn;
    Describe for FindCoordinator, DescribeTransactions, ListTransactions)."""
    if not getattr(ctx.authorizer, "enabled", False):
        return False
    return not ctx.authorized(conn, operation, Resource(ResourceType.TRANSACTIONAL_ID, transactional_id))


def fenced_for(version: int, first_fenced_version: int, code: int) -> int:
    """PRODUCER_FENCED as a request of ``version`` may be told it: clients older than
    ``first_fenced_version`` (KIP-588) get INVALID_PRODUCER_EPOCH, as Kafka's KafkaApis answers them."""
    if code == ErrorCode.PRODUCER_FENCED and version < first_fenced_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


def coordinator_for(door: Any, transactional_id: Any) -> tuple[Any, int]:
    """(the ``TxnCoordinator`` serving the id here, NONE), or (None, why not): INVALID_REQUEST for an
    empty or missing id, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS."""
    if not isinstance(transactional_id, str) or not transactional_id:
        return None, ErrorCode.INVALID_REQUEST
    find = getattr(door, "for_transaction", None)
    if find is None:
        return None, ErrorCode.NOT_COORDINATOR
    txn, code = find(transactional_id)
    return (txn, ErrorCode.NONE) if txn is not None else (None, code)
