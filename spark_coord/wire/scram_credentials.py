"""DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (key 51): the SCRAM users
(KIP-554).

Served: v0 of each (the only version; flexible from v0).
- Describe: a user list (null or empty: every user) -> per user its mechanisms and
  iteration counts (never salts or keys); an unknown user answers RESOURCE_NOT_FOUND.
- Alter: deletions (user, mechanism) and upsertions (user, mechanism, iterations,
  salt, salted password -- the client derives the salted password, the password itself
  never travels) -> one result per user named.

Mechanisms are Kafka's ``ScramMechanism`` codes: 0 unknown, 1 SCRAM-SHA-256, 2 SCRAM-SHA-512.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

MECHANISM_UNKNOWN = 0
MECHANISM_SCRAM_SHA_256 = 1
MECHANISM_SCRAM_SHA_512 = 2

#: Kafka's ScramMechanism code -> its SASL name.
MECHANISMS = {MECHANISM_SCRAM_SHA_256: "SCRAM-SHA-256", MECHANISM_SCRAM_SHA_512: "SCRAM-SHA-512"}

DESCRIBE_REQUEST = Message("DescribeUserScramCredentialsRequest", valid="0", flexible="0+", fields=[
    Field("Users", "[]UserName", "0+", nullable="0+", default=None, fields=[
        Field("Name", "string", "0+"),
    ]),
])

DESCRIBE_RESPONSE = Message("DescribeUserScramCredentialsResponse", valid="0", flexible="0+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("ErrorCode", "int16", "0+"),
    Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    Field("Results", "[]DescribeUserScramCredentialsResult", "0+", fields=[
        Field("User", "string", "0+"),
        Field("ErrorCode", "int16", "0+"),
        Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
        Field("CredentialInfos", "[]CredentialInfo", "0+", fields=[
            Field("Mechanism", "int8", "0+"),
            Field("Iterations", "int32", "0+"),
        ]),
    ]),
])

ALTER_REQUEST = Message("AlterUserScramCredentialsRequest", valid="0", flexible="0+", fields=[
    Field("Deletions", "[]ScramCredentialDeletion", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("Mechanism", "int8", "0+"),
    ]),
    Field("Upsertions", "[]ScramCredentialUpsertion", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("Mechanism", "int8", "0+"),
        Field("Iterations", "int32", "0+"),
        Field("Salt", "bytes", "0+"),
        Field("SaltedPassword", "bytes", "0+"),
    ]),
])

ALTER_RESPONSE = Message("AlterUserScramCredentialsResponse", valid="0", flexible="0+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("Results", "[]AlterUserScramCredentialsResult", "0+", fields=[
        Field("User", "string", "0+"),
        Field("ErrorCode", "int16", "0+"),
        Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    ]),
])

register(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, "DescribeUserScramCredentials", DESCRIBE_REQUEST,
         DESCRIBE_RESPONSE, (0, 0))
register(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, "AlterUserScramCredentials", ALTER_REQUEST, ALTER_RESPONSE, (0, 0))
