"""Produce (key 0): validate record batches and append them to the partition logs.

Versions served per the wire registry (3-9; v0-2 carry message formats v0/v1,
which we do not store): v3 adds transactional_id, v5 log_start_offset in the
answer, v8 record_errors and error_message, v9 is flexible.  acks 0 (no
response at all), 1 and -1 (= 1: one replica); anything else
INVALID_REQUIRED_ACKS.  Per partition: not the leader -> NOT_LEADER_OR_FOLLOWER,
unknown -> UNKNOWN_TOPIC_OR_PARTITION, a bad batch -> CORRUPT_MESSAGE or
MESSAGE_TOO_LARGE with nothing of that partition appended.  An append wakes the
fetches long-polling that partition.  A batch with a producer id (idempotent
producer) is checked against the producer's sequence state first
(``broker.producer_state``): a duplicate is answered with its original base
offset and not appended again; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER, a stale
epoch INVALID_PRODUCER_EPOCH.  A topic the principal may not Write answers
TOPIC_AUTHORIZATION_FAILED for each of its partitions (nothing appended); with
acks=0 such a refusal closes the connection, the only way to tell the client, as
Kafka does.  (Idempotent batches need no more than Write: Kafka 3's rule, KIP-679.)

The appends themselves run on the event loop, one request after another, so
each partition's batches keep their arrival order.  When the flush policy wants
an fsync (``log.flush.interval.messages``), it runs on the log's I/O threads
(all partitions of the request at once) and the answer waits for it: an
acknowledged produce is on disk, and the loop keeps serving everyone else --
pings included -- meanwhile.  A failed fsync answers KAFKA_STORAGE_ERROR.

Per topic (``configs.topic``): max.message.bytes bounds a batch (MESSAGE_TOO_LARGE);
with message.timestamp.type=LogAppendTime the log stamps each batch and the answer
carries log_append_time_ms; a compacted topic (cleanup.policy has compact) refuses a
record without a key with INVALID_RECORD, as Kafka does.

Transactional batches (KIP-98), as Kafka 4 takes them: with an authorizer, a request holding any
needs its transactional_id and Write on it, else every partition answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing is appended (Kafka's KafkaApis).  Without one a
request with no transactional_id is taken unchecked, as WriteTxnMarkers is then open to any client
too: the partition side is driven alone so (batches and markers by hand) by tests and tools.  The
first transactional batch of a producer on a partition in a transaction, in a request naming its
transactional id, is checked with the id's transaction coordinator (``broker.txn_verify``, KIP-890
part 1's ``transaction.partition.verification.enable``): a partition not added to the producer's
open transaction is INVALID_TXN_STATE, another epoch INVALID_PRODUCER_EPOCH, and so on, with nothing
of that partition appended.
"""

from __future__ import annotations

import asyncio
import logging

from spark_coord.broker import topics as topic_admin
from spark_coord.broker import txn_verify
from spark_coord.broker.handlers.base import Handler, may_create_topic
from spark_coord.errors import ErrorCode
from spark_coord.records.header import TRANSACTIONAL_MASK, BatchTooLarge, InvalidBatch, parse_header, validate_batches
from spark_coord.records.reader import iter_records
from spark_coord.security.acl import AclOperation, Resource, ResourceType
from spark_coord.wire.registry import ApiKey

log = logging.getLogger(__name__)

API_KEY = ApiKey.PRODUCE


def _partition(index: int, code: int, base_offset: int = -1, log_start_offset: int = -1,
               message: str | None = None) -> dict:
    return {"index": index, "error_code": code, "base_offset": base_offset, "log_append_time_ms": -1,
            "log_start_offset": log_start_offset, "record_errors": [], "error_message": message}


async def handle(ctx, conn, header, body: dict) -> dict | None:
    acks = body.get("acks", 1)
    if acks not in (0, 1, -1):
        return error_response(body, ErrorCode.INVALID_REQUIRED_ACKS)
    tid = body.get("transactional_id")
    if ctx.authorizer.enabled and _has_transactional_batches(body) and (not tid or not ctx.authorized(
            conn, AclOperation.WRITE, Resource(ResourceType.TRANSACTIONAL_ID, tid))):
        log.info("%r: transactional produce %s", conn, "without a transactional id" if not tid
                 else f"with transactional id {tid!r} it may not write")
        return error_response(body, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    checked = await _check_transactional(ctx, conn, tid, body) if tid else {}
    max_batch = ctx.config["message.max.bytes"]
    responses = []
    to_flush: list[tuple[dict, str, object]] = []  # (partition answer, topic, log) awaiting an fsync
    denied = False
    for topic_data in body.get("topic_data") or []:
        name = topic_data.get("name")
        if not ctx.authorized(conn, AclOperation.WRITE, Resource.topic(name or "")):
            denied = True
            responses.append({"name": name, "partition_responses": [
                _partition(pd.get("index", -1), ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                for pd in topic_data.get("partition_data") or []]})
            continue
        if (name not in ctx.view.topics and ctx.config["auto.create.topics.enable"] and name
                and may_create_topic(ctx, conn, name)):
            await topic_admin.auto_create(ctx, name)
        parts = []
        for pd in topic_data.get("partition_data") or []:
            answer, plog = await _append_one(ctx, conn, name, pd.get("index", -1), pd.get("records"), max_batch, tid,
                                             checked)
            parts.append(answer)
            if plog is not None:
                to_flush.append((answer, name, plog))
        responses.append({"name": name, "partition_responses": parts})
    if to_flush:
        await _flush(ctx, to_flush)
    if acks == 0:
        if denied:
            log.info("%r: acks=0 produce to a topic it may not write; closing the connection", conn)
            conn.close_after_response = True
        return None
    return {"responses": responses, "throttle_time_ms": 0}


async def _flush(ctx, pending: list[tuple[dict, str, object]]) -> None:
    """fsync the logs the flush policy asked for, off the loop; a failure turns that answer into an error."""
    outcomes = await asyncio.gather(*(ctx.logs.run_io(plog.flush) for _, _, plog in pending), return_exceptions=True)
    for (answer, topic, _), outcome in zip(pending, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            log.error("%s-%d: flush failed: %s", topic, answer["index"], outcome)
            answer.update(error_code=ErrorCode.KAFKA_STORAGE_ERROR, base_offset=-1,
                          error_message=f"flush failed: {outcome}")


def _has_transactional_batches(body: dict) -> bool:
    """Whether a partition's first batch has the transactional bit (Kafka's ``hasTransactionalRecords``;
    a batch too short to have a header is left to the partition's own check)."""
    for topic_data in body.get("topic_data") or []:
        for pd in topic_data.get("partition_data") or []:
            records = pd.get("records")
            try:
                if records is not None and parse_header(records).attributes & TRANSACTIONAL_MASK:
                    return True
            except (InvalidBatch, ValueError, IndexError):
                continue
    return False


async def _check_transactional(ctx, conn, tid: str, body: dict) -> dict:
    """The Produce check (``broker.txn_verify``) of every partition led here, of a topic the principal
    may Write, whose batch is transactional, before anything is appended: one question to the
    coordinator per producer, however many of its partitions the request holds.  (A batch that then
    fails validation is refused as it would be without it.)"""
    wanted: dict[tuple[int, int], list] = {}
    for topic_data in body.get("topic_data") or []:
        name = topic_data.get("name")
        if not ctx.authorized(conn, AclOperation.WRITE, Resource.topic(name or "")):
            continue
        for pd in topic_data.get("partition_data") or []:
            records, index = pd.get("records"), pd.get("index", -1)
            try:
                h = parse_header(records) if records is not None else None
            except (InvalidBatch, ValueError, IndexError):
                continue
            if h is None or txn_verify.transactional_producer([h]) is None or ctx.leader_error(name, index):
                continue
            wanted.setdefault((h.producer_id, h.producer_epoch), []).append(
                (name, index, ctx.logs.get_or_create(name, index)))
    checked: dict = {}
    for producer, entries in wanted.items():
        checked.update(await txn_verify.verify_many(ctx, tid, producer, entries))
    return checked


async def _append_one(ctx, conn, topic: str, partition: int, records, max_batch: int,
                      tid: str | None, checked: dict) -> tuple[dict, object]:
    """(the partition's answer, its log when an fsync must complete before the answer goes out)."""
    code = ctx.leader_error(topic, partition)
    if code:
        return _partition(partition, code), None
    if records is None or len(records) == 0:
        return _partition(partition, ErrorCode.CORRUPT_MESSAGE, message="no records"), None
    topic_config = ctx.dynamic_configs.log_config(topic) if ctx.dynamic_configs is not None else None
    if topic_config is not None:
        max_batch = topic_config.max_message_bytes
    try:
        headers = validate_batches(records, max_batch)
        if topic_config is not None and topic_config.compact:
            _check_keys(records)
    except BatchTooLarge as e:
        log.info("%r: %s-%d: %s", conn, topic, partition, e)
        return _partition(partition, ErrorCode.MESSAGE_TOO_LARGE, message=str(e)), None
    except KeylessRecord as e:
        log.info("%r: %s-%d: %s", conn, topic, partition, e)
        return _partition(partition, ErrorCode.INVALID_RECORD, message=str(e)), None
    except InvalidBatch as e:
        log.warning("%r: %s-%d: rejected record batch: %s", conn, topic, partition, e)
        return _partition(partition, ErrorCode.CORRUPT_MESSAGE, message=str(e)), None
    plog = ctx.logs.get_or_create(topic, partition)
    sequences = ctx.producers.sequences
    producer = txn_verify.transactional_producer(headers) if tid else None
    guard = None
    if producer is not None:
        found = checked.get((topic, partition))
        code, guard = found if found is not None else await txn_verify.verify(ctx, tid, topic, partition, plog,
                                                                               producer)
        if code == ErrorCode.NONE and guard is not None and \
                not sequences.partition(topic, partition, plog).still_verified(producer[0], guard):
            code = ErrorCode.INVALID_TXN_STATE  # its transaction ended while the coordinator was asked
        if code != ErrorCode.NONE:
            return _partition(partition, code, message="Partition was not added to the transaction"
                              if code == ErrorCode.INVALID_TXN_STATE else None), None
        code = ctx.leader_error(topic, partition)  # the leader may have moved meanwhile
        if code:
            return _partition(partition, code), None
    verdict = sequences.check(topic, partition, plog, headers)
    if verdict.duplicate_of is not None:
        log.info("%r: %s-%d: duplicate batch of producer %d (sequence %d) answered with offset %d", conn, topic,
                 partition, headers[0].producer_id, headers[0].base_sequence, verdict.duplicate_of)
        return _partition(partition, ErrorCode.NONE, verdict.duplicate_of, plog.log_start_offset), None
    if verdict.code != ErrorCode.NONE:
        log.info("%r: %s-%d: %s", conn, topic, partition, verdict.message)
        return _partition(partition, verdict.code, message=verdict.message), None
    try:
        base_offset, flush_now = plog.append_deferred(records, headers)
    except OSError as e:
        log.error("%s-%d: append failed: %s", topic, partition, e)
        return _partition(partition, ErrorCode.KAFKA_STORAGE_ERROR, message=str(e)), None
    sequences.record(topic, partition, plog, headers, base_offset)
    ctx.appends.notify((topic, partition))
    ctx.metrics.appended(topic, len(records), sum(h.records_count for h in headers))
    answer = _partition(partition, ErrorCode.NONE, base_offset, plog.log_start_offset)
    if plog.config.message_timestamp_type == "LogAppendTime":
        answer["log_append_time_ms"] = plog.last_append_time_ms
    return answer, plog if flush_now else None


class KeylessRecord(InvalidBatch):
    """A record without a key sent to a compacted topic (Kafka: INVALID_RECORD)."""


def _check_keys(records) -> None:
    """A compacted topic keeps the last record of each key: a record without one is refused, as Kafka does."""
    for record in iter_records(records, verify_crc=False):
        if record.key is None:
            raise KeylessRecord("Compacted topic cannot accept message without key")


def error_response(body: dict, code: int) -> dict | None:
    if body.get("acks", 1) == 0 and code != ErrorCode.INVALID_REQUIRED_ACKS:
        return None
    return {"throttle_time_ms": 0, "responses": [
        {"name": t.get("name"),
         "partition_responses": [_partition(pd.get("index", -1), code) for pd in t.get("partition_data") or []]}
        for t in body.get("topic_data") or []]}


HANDLER = Handler(API_KEY, "Produce", handle, error_response)
