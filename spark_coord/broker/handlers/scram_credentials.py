"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): the SCRAM users of
``spark-coord users``, through Kafka's admin APIs (KIP-554).

Both work on the ZooKeeper credentials ``security.credentials.UserStore`` keeps in
Kafka's layout (``/config/users/<user>``, a change notification after every write), so
every broker's credential cache follows at once and ``spark-coord users list`` shows
the same users.  Describing needs Describe on the cluster, altering Alter on the
cluster, else CLUSTER_AUTHORIZATION_FAILED.

Describe: a null or empty user list means every user with credentials; a user without
any is RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE; mechanisms and
iteration counts are answered, never salts or keys.

Alter, as Kafka checks it: one result per user named; an empty name or iterations
outside 4096..16384 or an empty salt is UNACCEPTABLE_CREDENTIAL, a mechanism other than
SCRAM-SHA-256/512 UNSUPPORTED_SASL_MECHANISM, the same (user, mechanism) twice in a
request DUPLICATE_RESOURCE, deleting a credential the user does not have
RESOURCE_NOT_FOUND; a user with any error keeps its credentials as they were.  An
upsertion carries the salted password (the client salts it; the password never
travels) and is stored as StoredKey/ServerKey, as Kafka stores it.
"""

from __future__ import annotations

import logging
from collections import Counter

from spark_coord.broker.handlers.base import Handler
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import CLUSTER, AclOperation
from spark_coord.security.credentials import UserStore
from spark_coord.security.scram import credential_from_salted_password
from spark_coord.wire.registry import ApiKey
from spark_coord.wire.scram_credentials import MECHANISMS

log = logging.getLogger(__name__)

_CODE_OF = {name: code for code, name in MECHANISMS.items()}


# ------------------------------------------------------------------ describe

def _described(user: str, code: int, message: str | None = None, infos: list[dict] | None = None) -> dict:
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": infos or []}


def _describe_users(zk, names: list[str] | None) -> list[dict]:
    """The answer per user (blocking ZooKeeper reads)."""
    store = UserStore(zk)
    if not names:
        names = sorted(store.users())
    counts = Counter(names)
    results, reported = [], set()
    for name in names:
        if counts[name] > 1:
            if name not in reported:
                reported.add(name)
                results.append(_described(name, ErrorCode.DUPLICATE_RESOURCE,
                                          "Cannot describe SCRAM credentials for the same user twice in a single "
                                          "request"))
            continue
        credentials = store.credentials(name)
        if not credentials:
            results.append(_described(name, ErrorCode.RESOURCE_NOT_FOUND,
                                      "Attempt to describe a user credential that does not exist"))
            continue
        results.append(_described(name, ErrorCode.NONE, None, [
            {"mechanism": _CODE_OF[m], "iterations": c.iterations} for m, c in sorted(credentials.items())]))
    return results


async def describe(ctx, conn, header, body: dict) -> dict:
    if not ctx.authorized(conn, AclOperation.DESCRIBE, CLUSTER):
        return describe_error(body, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    users = body.get("users")
    names = None if users is None else [u.get("name") or "" for u in users]
    results = await ctx.zk_call(_describe_users, ctx.zk, names)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "results": results}


def describe_error(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": None, "results": []}


# ------------------------------------------------------------------ alter

def _check(deletions: list[dict], upsertions: list[dict]) -> dict[str, tuple[int, str]]:
    """The users whose alterations are refused, with Kafka's first reason for each."""
    refused: dict[str, tuple[int, str]] = {}
    pairs = Counter((d.get("name"), d.get("mechanism")) for d in deletions + upsertions)
    for d in deletions + upsertions:
        name, mechanism = d.get("name") or "", d.get("mechanism")
        if name in refused:
            continue
        if not name:
            refused[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mechanism not in MECHANISMS:
            refused[name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif pairs[(d.get("name"), mechanism)] > 1:
            refused[name] = (ErrorCode.DUPLICATE_RESOURCE,
                             "A user credential cannot be altered twice in the same request")
    for u in upsertions:
        name = u.get("name") or ""
        if name in refused:
            continue
        if u.get("iterations", 0) < 4096:
            refused[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif u.get("iterations", 0) > 16384:
            refused[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        elif not u.get("salt") or not u.get("salted_password"):
            refused[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
    return refused


def _alter_users(zk, deletions: list[dict], upsertions: list[dict]) -> list[dict]:
    """Apply the request per user (blocking ZooKeeper reads and writes); one result per user."""
    store = UserStore(zk)
    refused = _check(deletions, upsertions)
    order = list(dict.fromkeys((d.get("name") or "") for d in deletions + upsertions))
    results = []
    for name in order:
        if name in refused:
            code, message = refused[name]
            results.append({"user": name, "error_code": code, "error_message": message})
            continue
        gone = [MECHANISMS[d["mechanism"]] for d in deletions if d.get("name") == name]
        have = store.credentials(name)
        if any(m not in have for m in gone):
            results.append({"user": name, "error_code": ErrorCode.RESOURCE_NOT_FOUND,
                            "error_message": "Attempt to delete a user credential that does not exist"})
            continue
        new = {MECHANISMS[u["mechanism"]]: credential_from_salted_password(
                   MECHANISMS[u["mechanism"]], u["salt"], u["salted_password"], u["iterations"])
               for u in upsertions if u.get("name") == name}
        if gone:
            store.delete(name, gone)
        if new:
            store.set_credentials(name, new)
        log.info("SCRAM credentials of user %r: deleted %s, set %s", name, gone or "none",
                 sorted(new) or "none")
        results.append({"user": name, "error_code": ErrorCode.NONE, "error_message": None})
    return results


async def alter(ctx, conn, header, body: dict) -> dict:
    if not ctx.authorized(conn, AclOperation.ALTER, CLUSTER):
        return alter_error(body, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    results = await ctx.zk_call(_alter_users, ctx.zk, list(body.get("deletions") or []),
                                list(body.get("upsertions") or []))
    return {"throttle_time_ms": 0, "results": results}


def alter_error(body: dict, code: int) -> dict:
    names = dict.fromkeys((d.get("name") or "") for d in
                          list(body.get("deletions") or []) + list(body.get("upsertions") or []))
    return {"throttle_time_ms": 0, "results": [{"user": n, "error_code": code, "error_message": None}
                                               for n in names]}


DESCRIBE = Handler(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, "DescribeUserScramCredentials", describe, describe_error)
ALTER = Handler(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, "AlterUserScramCredentials", alter, alter_error)
