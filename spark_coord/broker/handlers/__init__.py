"""Request handlers, one module per Kafka API.

Each module exports ``HANDLER``: a ``Handler`` with the API key, an async
``handle(ctx, conn, header, body)`` returning a version-agnostic superset response
dict (the wire encoder drops fields a version lacks) or None for "no response"
(Produce with acks=0), and ``error_response(body, code)`` building the answer
that carries one error code everywhere the response shape has one (used when
a handler fails unexpectedly: the client gets UNKNOWN_SERVER_ERROR, the server
keeps running).  Errors are data: handlers put ``ErrorCode`` values in responses.

Authorization: a handler asks ``ctx.authorized(conn, operation, resource)`` (the
connection's principal and host, ``security.authorizer``) for every resource a
request touches, and answers Kafka's *_AUTHORIZATION_FAILED codes where it is
refused; ``may_create_topic`` is the check shared by everything that creates topics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.broker.handlers.base import Handler


def data_handlers() -> "list[Handler]":
    """The Kafka data-plane handlers every broker serves."""
    from spark_coord.broker.handlers import (
        acls,
        alter_configs,
        api_versions,
        create_partitions,
        create_topics,
        delete_records,
        delete_topics,
        describe_client_quotas,
        describe_configs,
        describe_log_dirs,
        describe_producers,
        fetch,
        incremental_alter_configs,
        init_producer_id,
        list_offsets,
        metadata,
        produce,
        sasl_authenticate,
        sasl_handshake,
        scram_credentials,
        share_acknowledge,
        share_fetch,
        write_txn_markers,
    )

    return [api_versions.HANDLER, metadata.HANDLER, produce.HANDLER, fetch.HANDLER, list_offsets.HANDLER,
            create_topics.HANDLER, delete_topics.HANDLER, init_producer_id.HANDLER, sasl_handshake.HANDLER,
            sasl_authenticate.HANDLER, acls.DESCRIBE, acls.CREATE, acls.DELETE,
            describe_configs.HANDLER, alter_configs.HANDLER, incremental_alter_configs.HANDLER, share_fetch.HANDLER,
            share_acknowledge.HANDLER, create_partitions.HANDLER, delete_records.HANDLER,
            describe_log_dirs.HANDLER, describe_producers.HANDLER, scram_credentials.DESCRIBE,
            scram_credentials.ALTER, describe_client_quotas.HANDLER,
            write_txn_markers.HANDLER]
