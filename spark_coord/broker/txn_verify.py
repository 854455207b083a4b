"""The Produce check of transactional batches (KIP-890 part 1; DESIGN.md, "Transactions (KIP-98)").

Kafka 4's partition leader (``transaction.partition.verification.enable``, default true) does not take
a transactional batch for a partition its producer has not added to an open transaction: the leader
asks the transactional id's coordinator first (``ReplicaManager`` with ``AddPartitionsToTxnManager``,
AddPartitionsToTxn v4 verify-only), so a batch sent after its transaction ended, or by a client that
skipped AddPartitionsToTxn, cannot leave a transaction open that no coordinator will ever close
(a "hanging" transaction, which would hold the last stable offset back for good).

Here the leader asks the id's coordinator as the other brokers' ``DescribeTransactions`` already
answers it (state, producer id and epoch, the open transaction's partitions): in process when this
broker holds the id's shard (a read of the coordinator's metadata), else over the inter-broker
listener on the marker channel's connection to the holder (``MarkerChannel.describe_transaction``).
The verdict is ``coordinator.txn.state.verify_partition``'s, the codes Kafka's leader answers a
Produce of v3-9: INVALID_TXN_STATE for a partition not in the producer's open transaction,
INVALID_PRODUCER_EPOCH for another epoch, INVALID_PRODUCER_ID_MAPPING for an unknown id or another
producer id, and NOT_ENOUGH_REPLICAS (which clients retry) while the transaction is being completed
or its coordinator cannot be reached or is loading, as Kafka's leader translates those.

The check runs once per partition per transaction, as Kafka's does: a producer whose transaction
is already open on the partition at the same epoch (a batch of it appended, no marker since) is
not asked about again.  The partitions of one request are asked about together (``verify_many``:
one DescribeTransactions, as Kafka batches its verification per coordinator).  A marker of the
producer arriving while the question is out drops its guard (``PartitionProducers.
start_verification``, Kafka's ``VerificationGuard``): the batch is then refused INVALID_TXN_STATE
rather than appended after its transaction ended.
"""

from __future__ import annotations

import logging
from typing import Any

from spark_coord.coordinator.txn import state as st
from spark_coord.errors import ErrorCode
from spark_coord.log.txn import is_transactional
from spark_coord.records.header import BatchHeader

log = logging.getLogger(__name__)

#: What DescribeTransactions answers for an id its coordinator has no state of (KIP-664).
TRANSACTIONAL_ID_NOT_FOUND = 105
#: The coordinator's answers that mean "ask again later": Kafka's leader tells Produce
#: NOT_ENOUGH_REPLICAS for these, which every client retries without a metadata refresh.
RETRIABLE = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE)


def transactional_producer(headers: list[BatchHeader]) -> tuple[int, int] | None:
    """(producer id, epoch) of the transactional batch among ``headers`` (one a partition from
    Produce v3 on), None when the entry has none."""
    for h in headers:
        if is_transactional(h) and not h.is_control and h.producer_id >= 0:
            return h.producer_id, h.producer_epoch
    return None


async def verify(ctx: Any, transactional_id: str, topic: str, partition: int, plog: Any,
                 producer: tuple[int, int]) -> tuple[int, object | None]:
    """(error code, guard) of the Produce check of ``producer``'s transactional batch for ``topic``-
    ``partition`` (log ``plog``): NONE with no guard when nothing needs asking (the check is off, no
    coordinator service runs here, or the producer's transaction is open on the partition at that
    epoch already); NONE with a guard the caller checks (``still_verified``) right before appending."""
    return (await verify_many(ctx, transactional_id, producer, [(topic, partition, plog)]))[(topic, partition)]


async def verify_many(ctx: Any, transactional_id: str, producer: tuple[int, int],
                      entries: list[tuple[str, int, Any]]) -> dict[tuple[str, int], tuple[int, object | None]]:
    """``verify`` of several partitions (topic, partition, log) of one producer's batches in one
    request, asked of the coordinator at once: one DescribeTransactions whatever their number.  Every
    guard is taken before the question goes out."""
    out: dict[tuple[str, int], tuple[int, object | None]] = {(t, p): (ErrorCode.NONE, None) for t, p, _ in entries}
    service = getattr(ctx, "transactions", None)
    if service is None or not ctx.config.get("transaction.partition.verification.enable", True):
        return out
    pid, epoch = producer
    guards: dict[tuple[str, int], object] = {}
    for topic, partition, plog in entries:
        txn_epoch, _, first_offset = plog.transaction_info(pid)
        if first_offset >= 0 and txn_epoch == epoch:
            continue  # verified when its transaction's first batch here was appended
        guards[(topic, partition)] = ctx.producers.sequences.partition(topic, partition, plog).start_verification(pid)
    if not guards:
        return out
    codes = await _ask(service, transactional_id, pid, epoch, list(guards))
    for tp, guard in guards.items():
        code = codes[tp]
        if code != ErrorCode.NONE:
            log.info("%s-%d: transactional batch of producer %d epoch %d (id %r) refused: %s", tp[0], tp[1], pid,
                     epoch, transactional_id, ErrorCode.name_of(code))
        out[tp] = (code, guard)
    return out


async def _ask(service: Any, tid: str, pid: int, epoch: int, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The coordinator's verdict on each of ``tps`` for ``tid``'s producer ``pid``/``epoch``."""
    coordinator, why = service.for_transaction(tid)
    if coordinator is not None:
        return {tp: int(coordinator.verify(tid, pid, epoch, tp)) for tp in tps}
    holder = service.holder_of(tid)[0]
    if why != ErrorCode.NOT_COORDINATOR or holder < 0 or holder == service.broker.broker_id:
        return dict.fromkeys(tps, ErrorCode.NOT_ENOUGH_REPLICAS)  # its shard loads here, or nobody holds it yet
    try:
        described = await service.markers.describe_transaction(holder, tid)
    except (OSError, ConnectionError, TimeoutError) as e:
        log.info("Produce check of %r at broker %d: %r", tid, holder, e)
        return dict.fromkeys(tps, ErrorCode.NOT_ENOUGH_REPLICAS)
    code = described.get("error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
    if code in RETRIABLE:
        return dict.fromkeys(tps, ErrorCode.NOT_ENOUGH_REPLICAS)
    if code == TRANSACTIONAL_ID_NOT_FOUND:
        return dict.fromkeys(tps, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    if code != ErrorCode.NONE:
        log.warning("Produce check of %r at broker %d: %s", tid, holder, ErrorCode.name_of(code))
        return dict.fromkeys(tps, ErrorCode.NOT_ENOUGH_REPLICAS)
    partitions = {(t["topic"], p) for t in described.get("topics") or [] for p in t.get("partitions") or []}
    state = st.TxnState.parse(described.get("transaction_state", ""))
    return {tp: st.verify_partition(state, described.get("producer_id", -1), described.get("producer_epoch", -1),
                                    partitions, pid, epoch, tp) for tp in tps}
