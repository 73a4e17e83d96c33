"""SaslHandshake (key 17), versions 0-1.

On a SASL listener: picks the mechanism for the exchange that follows (it must be in
`sasl.enabled.mechanisms`, else UNSUPPORTED_SASL_MECHANISM with the enabled list, and the
connection is closed). v0: the tokens then come bare, size-prefixed, without request headers;
v1: in SaslAuthenticate requests. A handshake on an authenticated connection starts a
KIP-368 re-authentication (same mechanism). On other listeners: ILLEGAL_SASL_STATE.
"""
from kafkafast.broker.registry import handles
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from kafkafast.security.context import security_of
from kafkafast.security.sasl import AuthenticationFailed, enabled_mechanisms


@handles(SaslHandshakeRequest, 0, 1)
async def handle(broker, ctx, req: SaslHandshakeRequest, version: int) -> SaslHandshakeResponse:
    session = getattr(ctx.conn, "session", None)
    if session is None or not session.listener.sasl:
        return SaslHandshakeResponse(error_code=E.ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    enabled = enabled_mechanisms(session.listener)
    mechanism = (req.mechanism or "").upper()
    if mechanism not in enabled:
        session.failed = True
        return SaslHandshakeResponse(error_code=E.ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled)
    try:
        session.handshake(mechanism, version, enabled, security_of(broker).scram, security_of(broker).reauth_ms)
    except AuthenticationFailed:
        session.failed = True
        return SaslHandshakeResponse(error_code=E.ErrorCode.ILLEGAL_SASL_STATE, mechanisms=enabled)
    return SaslHandshakeResponse(error_code=0, mechanisms=enabled)
