"""SaslAuthenticate (key 36), v0-v2.

One step of the SASL exchange the handshake chose (oncelog.security.session): the
client's token in, the mechanism's answer out. A failed authentication is
SASL_AUTHENTICATION_FAILED with a message that names no secret; the server then waits
`connection.failed.authentication.delay.ms` and closes the connection. v1+ carries the
session's lifetime (KIP-368: `connections.max.reauth.ms`, or an OAUTHBEARER token's
expiry), before which the client re-authenticates. On PLAINTEXT and SSL listeners it is
ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

import datetime

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import ErrorCode


@api(36, "SaslAuthenticate", range(0, 3))
async def handle(ctx: RequestContext, request):
    session = ctx.session
    if not session.listener.protocol.sasl:
        return _answer(ctx, ErrorCode.illegal_sasl_state, "SaslAuthenticate on a listener without SASL", b"", 0)
    outcome = session.authenticate(bytes(request.auth_bytes))
    return _answer(ctx, ErrorCode(outcome.error_code), outcome.message, outcome.token, outcome.session_lifetime_ms)


def _answer(ctx: RequestContext, code: ErrorCode, message: str | None, token: bytes, lifetime_ms: int):
    return ctx.response.make("SaslAuthenticateResponse", error_code=code, error_message=message, auth_bytes=token,
                             session_lifetime=datetime.timedelta(milliseconds=lifetime_ms))
