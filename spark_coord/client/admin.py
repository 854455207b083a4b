"""Topic and ACL administration and offset look-ups over the Kafka protocol."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import TYPE_CHECKING

from spark_coord.client.connection import BrokerConnectionError
from spark_coord.client.metadata import ClusterClient
from spark_coord.common import EARLIEST, LATEST
from spark_coord.errors import ErrorCode, KafkaError, is_retriable
from spark_coord.wire.registry import ApiKey

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.security.acl import AclBinding, AclBindingFilter

log = logging.getLogger(__name__)

#: How long ``list_offsets`` asks again after retriable answers, and how long it waits between asks.
RETRY_TIMEOUT_S = 15.0
RETRY_BACKOFF_S = 0.2


class AdminClient:
    """CreateTopics, CreatePartitions, DeleteTopics, DeleteRecords, Metadata, ListOffsets and the ACL APIs, as
    a script would use them."""

    def __init__(self, cluster: ClusterClient, retry_timeout_s: float = RETRY_TIMEOUT_S):
        """``retry_timeout_s``: how long look-ups that Kafka answers with a retriable error (a leader
        that moved or has no offset yet, a broker gone) are asked again, with fresh metadata."""
        self.cluster = cluster
        self.retry_timeout_s = retry_timeout_s

    def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1, if_not_exists: bool = False,
                     timeout_ms: int = 30000, configs: dict[str, str] | None = None) -> int:
        """Create ``name`` (with its own ``configs``); returns its partition count. Raises KafkaError with the
        broker's code and message."""
        body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                            "assignments": [], "configs": [{"name": k, "value": v}
                                                           for k, v in (configs or {}).items()]}],
                "timeout_ms": timeout_ms, "validate_only": False}
        resp = self.cluster.request_any(ApiKey.CREATE_TOPICS, body)
        result = resp["topics"][0]
        code = result["error_code"]
        if code == ErrorCode.TOPIC_ALREADY_EXISTS and if_not_exists:
            code = ErrorCode.NONE
        if code:
            raise KafkaError(code, result.get("error_message") or f"creating topic {name!r}")
        info = self.cluster.topic(name, refresh=True, wait=timeout_ms / 1000)
        return len(info.partitions)

    def alter_topic_configs(self, name: str, set_configs: dict[str, str] | None = None,
                            delete: list[str] | None = None, validate_only: bool = False) -> None:
        """IncrementalAlterConfigs of a topic: SET ``set_configs``, DELETE (back to the broker's) ``delete``.
        Raises KafkaError (INVALID_CONFIG naming the key, UNKNOWN_TOPIC_OR_PARTITION...)."""
        ops = [{"name": k, "config_operation": 0, "value": v} for k, v in (set_configs or {}).items()]
        ops += [{"name": k, "config_operation": 1, "value": None} for k in delete or []]
        body = {"resources": [{"resource_type": 2, "resource_name": name, "configs": ops}],
                "validate_only": validate_only}
        result = self.cluster.request_any(ApiKey.INCREMENTAL_ALTER_CONFIGS, body)["responses"][0]
        if result["error_code"]:
            raise KafkaError(result["error_code"], result.get("error_message") or f"altering topic {name!r}")

    def describe_topic_configs(self, name: str) -> list[dict]:
        """DescribeConfigs of a topic: ``{"name", "value", "config_source", ...}`` per config."""
        body = {"resources": [{"resource_type": 2, "resource_name": name, "configuration_keys": None}],
                "include_synonyms": False, "include_documentation": False}
        result = self.cluster.request_any(ApiKey.DESCRIBE_CONFIGS, body)["results"][0]
        if result["error_code"]:
            raise KafkaError(result["error_code"], result.get("error_message") or f"describing topic {name!r}")
        return result["configs"]

    def delete_topic(self, name: str, timeout_ms: int = 30000) -> None:
        resp = self.cluster.request_any(ApiKey.DELETE_TOPICS, {"topic_names": [name], "timeout_ms": timeout_ms})
        result = resp["responses"][0]
        if result["error_code"]:
            raise KafkaError(result["error_code"], result.get("error_message") or f"deleting topic {name!r}")
        self.cluster.topics.pop(name, None)

    def list_topics(self) -> list[str]:
        return sorted(t for t, info in self.cluster.refresh(None).items() if info.error == 0)

    def list_offsets(self, topic: str, partitions: list[int] | None, timestamp: int | dict[int, int],
                     isolation_level: int = 0) -> dict[int, int]:
        """Offsets per partition for ``timestamp`` (EARLIEST, LATEST, or epoch ms: the first record at or
        after it, -1 when there is none), asking each leader; ``timestamp`` may also be a dict
        ``{partition: timestamp}`` (``partitions`` is then its keys when None).  ``isolation_level`` 1
        (read_committed): LATEST is the last stable offset, and a timestamp finds only records below it."""
        info = self.cluster.topic(topic)
        if isinstance(timestamp, dict):
            stamps = timestamp
            wanted = sorted(stamps) if partitions is None else partitions
        else:
            wanted = sorted(info.partitions) if partitions is None else partitions
            stamps = dict.fromkeys(wanted, timestamp)
        out: dict[int, int] = {}
        pending = list(wanted)
        deadline = time.monotonic() + self.retry_timeout_s
        while True:
            again, failure = self._list_offsets_once(topic, pending, stamps, out, isolation_level)
            if not again:
                return out
            if time.monotonic() >= deadline:
                raise failure
            log.info("offsets of %s: %s; asking again with fresh metadata", topic, failure)
            time.sleep(RETRY_BACKOFF_S)
            self.cluster.topics.pop(topic, None)  # leaders from fresh metadata
            pending = again

    def _list_offsets_once(self, topic: str, wanted: list[int], stamps: dict[int, int],
                           out: dict[int, int], isolation_level: int = 0) -> tuple[list[int], Exception | None]:
        """One ListOffsets per leader of ``wanted`` into ``out``; the partitions to ask again (their
        leader moved, is gone, or has no offset yet: Kafka's retriable answers), with the last failure."""
        again: list[int] = []
        failure: Exception | None = None
        by_leader: dict[int, list[int]] = defaultdict(list)
        for p in wanted:
            try:
                by_leader[self.cluster.leader(topic, p)].append(p)
            except KafkaError as e:
                if not is_retriable(e.code):
                    raise
                again.append(p)
                failure = e
        for leader, parts in by_leader.items():
            body = {"replica_id": -1, "isolation_level": isolation_level,
                    "topics": [{"name": topic, "partitions": [
                        {"partition_index": p, "current_leader_epoch": -1, "timestamp": stamps[p], "max_num_offsets": 1}
                        for p in parts]}]}
            try:
                conn = self.cluster.connection(leader)
                resp = conn.request(ApiKey.LIST_OFFSETS, body)
            except BrokerConnectionError as e:
                again.extend(parts)
                failure = e
                continue
            for t in resp["topics"]:
                for p in t["partitions"]:
                    if p["error_code"]:
                        error = KafkaError(p["error_code"], f"{topic}-{p['partition_index']}")
                        if not is_retriable(p["error_code"]):
                            raise error
                        again.append(p["partition_index"])
                        failure = error
                        continue
                    offset = p["offset"]
                    if conn.version_for(ApiKey.LIST_OFFSETS) == 0:
                        olds = p.get("old_style_offsets") or [-1]
                        offset = olds[0]
                    out[p["partition_index"]] = offset
        return again, failure

    def describe(self, topics: list[str] | None = None) -> list[dict]:
        """One row per partition: topic, partition, leader, replicas, earliest and latest offset."""
        meta = self.cluster.refresh(topics)
        rows = []
        for name in sorted(meta):
            info = meta[name]
            if info.error:
                raise KafkaError(info.error, f"topic {name!r}")
            earliest = self.list_offsets(name, None, EARLIEST)
            latest = self.list_offsets(name, None, LATEST)
            for p in sorted(info.partitions):
                part = info.partitions[p]
                rows.append({"topic": name, "partition": p, "leader": part.leader, "replicas": part.replicas,
                             "earliest": earliest.get(p, -1), "latest": latest.get(p, -1)})
        return rows

    def add_partitions(self, name: str, count: int, timeout_ms: int = 30000, validate_only: bool = False) -> int:
        """CreatePartitions: grow ``name`` to ``count`` partitions (the broker places them); returns the new
        count.  Raises KafkaError (INVALID_PARTITIONS when ``count`` is not larger, UNKNOWN_TOPIC_OR_PARTITION)."""
        body = {"topics": [{"name": name, "count": count, "assignments": None}], "timeout_ms": timeout_ms,
                "validate_only": validate_only}
        result = self.cluster.request_any(ApiKey.CREATE_PARTITIONS, body)["results"][0]
        if result["error_code"]:
            raise KafkaError(result["error_code"], result.get("error_message") or f"adding partitions to {name!r}")
        if validate_only:
            return count
        return len(self.cluster.topic(name, refresh=True, wait=timeout_ms / 1000).partitions)

    def delete_records(self, topic: str, before: dict[int, int], timeout_ms: int = 30000) -> dict[int, int]:
        """DeleteRecords: ``{partition: offset}`` (-1: the high watermark) to each leader; returns each
        partition's new log start offset.  Raises KafkaError (OFFSET_OUT_OF_RANGE beyond the high watermark)."""
        by_leader: dict[int, list[int]] = defaultdict(list)
        for p in before:
            by_leader[self.cluster.leader(topic, p)].append(p)
        out: dict[int, int] = {}
        for leader, parts in by_leader.items():
            body = {"topics": [{"name": topic, "partitions": [{"partition_index": p, "offset": before[p]}
                                                              for p in parts]}], "timeout_ms": timeout_ms}
            for t in self.cluster.connection(leader).request(ApiKey.DELETE_RECORDS, body)["topics"]:
                for r in t["partitions"]:
                    if r["error_code"]:
                        raise KafkaError(r["error_code"], f"deleting records of {topic}-{r['partition_index']} "
                                                          f"before {before[r['partition_index']]}")
                    out[r["partition_index"]] = r["low_watermark"]
        return out

    # ------------------------------------------------------------------ ACLs
    def create_acls(self, bindings: "list[AclBinding]") -> None:
        """CreateAcls; raises KafkaError with the first refusal's code and the broker's message."""
        body = {"creations": [{"resource_type": b.pattern.resource_type, "resource_name": b.pattern.name,
                               "resource_pattern_type": b.pattern.pattern_type, "principal": b.entry.principal,
                               "host": b.entry.host, "operation": b.entry.operation,
                               "permission_type": b.entry.permission} for b in bindings]}
        resp = self.cluster.request_any(ApiKey.CREATE_ACLS, body)
        for b, r in zip(bindings, resp["results"], strict=False):
            if r["error_code"]:
                raise KafkaError(r["error_code"], f"creating ACL {b}: {r.get('error_message') or ''}".rstrip(": "))

    def describe_acls(self, filt: "AclBindingFilter") -> "list[AclBinding]":
        """DescribeAcls: the bindings matching ``filt``."""
        from spark_coord.security.acl import binding_from_wire

        resp = self.cluster.request_any(ApiKey.DESCRIBE_ACLS, _filter_body(filt))
        if resp["error_code"]:
            raise KafkaError(resp["error_code"], resp.get("error_message") or "DescribeAcls")
        return [binding_from_wire({**r, **a}, "pattern_type") for r in resp["resources"] for a in r["acls"]]

    def delete_acls(self, filters: "list[AclBindingFilter]") -> "list[AclBinding]":
        """DeleteAcls: removes what each filter matches; returns every removed binding."""
        from spark_coord.security.acl import binding_from_wire

        resp = self.cluster.request_any(ApiKey.DELETE_ACLS, {"filters": [_filter_body(f) for f in filters]})
        removed = []
        for r in resp["filter_results"]:
            if r["error_code"]:
                raise KafkaError(r["error_code"], r.get("error_message") or "DeleteAcls")
            removed += [binding_from_wire(m, "pattern_type") for m in r["matching_acls"]]
        return removed


def _filter_body(f: "AclBindingFilter") -> dict:
    return {"resource_type_filter": f.resource_type, "resource_name_filter": f.name,
            "pattern_type_filter": f.pattern_type, "principal_filter": f.principal, "host_filter": f.host,
            "operation": f.operation, "permission_type": f.permission}
