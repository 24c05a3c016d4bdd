"""SaslHandshake (key 17), v0-v1.

On a SASL listener it picks the mechanism of the exchange that follows: SaslAuthenticate
requests (v1), or bare SASL tokens (v0, legacy clients). The response lists the
listener's `sasl.enabled.mechanisms`; an unknown mechanism is UNSUPPORTED_SASL_MECHANISM
and the connection closes. On an authenticated connection it starts a KIP-368
re-authentication with the same mechanism. On PLAINTEXT and SSL listeners it is
ILLEGAL_SASL_STATE, as Kafka answers it there (oncelog.security.session).
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import ErrorCode


@api(17, "SaslHandshake", range(0, 2))
async def handle(ctx: RequestContext, request):
    session = ctx.session
    if not session.listener.protocol.sasl:
        code = ErrorCode.illegal_sasl_state
    else:
        code = ErrorCode(session.handshake(request.mechanism, ctx.version))
    return ctx.response.make("SaslHandshakeResponse", error_code=code, mechanisms=session.listener.mechanisms)
