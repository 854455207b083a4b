"""ShareAcknowledge (key 79, v1-2): acknowledgements of a share group's member, with no fetch (KIP-932).

Along the member's share session like ShareFetch: the session's next epoch, or -1 with the
member's last acknowledgements (the session then closes and what the member still holds goes
back); epoch 0 never opens a session here (INVALID_SHARE_SESSION_EPOCH).  Each partition's
first error is its ErrorCode (INVALID_RECORD_STATE: a record this member does not hold;
INVALID_REQUEST: batches breaking Kafka's rules -- an empty, inverted or overlapping range, a
type out of range, Renew without v2's IsRenewAck -- of which none is applied).  The answer
comes once the acknowledgements are written to ZooKeeper.
"""

from __future__ import annotations

from spark_coord.broker.handlers.base import Handler
from spark_coord.broker.handlers.share_common import (
    acknowledge_partitions,
    apply_acknowledgements,
    await_acknowledgements,
    check_group,
    error_response,
    response,
)
from spark_coord.errors import ErrorCode
from spark_coord.wire.registry import ApiKey


async def handle(ctx, conn, header, body: dict) -> dict:
    share = ctx.share
    code, message = check_group(ctx, conn, body)
    if code:
        return error_response(body, code, message)
    group, member = body["group_id"], body["member_id"]
    epoch = body.get("share_session_epoch", 0)
    if epoch == 0 or epoch < -1:
        return error_response(body, ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                              f"epoch {epoch}: ShareAcknowledge does not open a share session")
    session, code = share.session(group, member, epoch)
    if code:
        return error_response(body, code)
    parts: dict[tuple, dict] = {}
    pending = await apply_acknowledgements(ctx, conn, group, member, body.get("topics") or [], parts, {},
                                           renew=header.api_version >= 2 and bool(body.get("is_renew_ack")))
    if epoch == -1:
        share.close_session(session)
    await await_acknowledgements(pending, parts)
    return acknowledge_partitions(response(ctx, conn, parts, share.settings(group).lock_duration_ms))


HANDLER = Handler(ApiKey.SHARE_ACKNOWLEDGE, "ShareAcknowledge", handle, error_response)
