"""SaslAuthenticate (key 36), versions 0-2.

Carries one token of the exchange chosen by SaslHandshake v1 and answers with the
server's token. Failure: SASL_AUTHENTICATION_FAILED with the reason, then the connection
is closed after `connection.failed.authentication.delay.ms`. v1+: on success
`session_lifetime_ms` is `connections.max.reauth.ms` (capped by an OAUTHBEARER token's
expiry; 0 when re-authentication is off). Without a preceding handshake: ILLEGAL_SASL_STATE.
"""
import logging

from kafkafast.broker.registry import handles
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from kafkafast.security.context import security_of
from kafkafast.security.sasl import AuthenticationFailed

log = logging.getLogger("kafkafast.sasl")


@handles(SaslAuthenticateRequest, 0, 2)
async def handle(broker, ctx, req: SaslAuthenticateRequest, version: int) -> SaslAuthenticateResponse:
    session = getattr(ctx.conn, "session", None)
    if session is None or session.exchange is None or session.raw_tokens:
        if session is not None:
            session.failed = True
        return SaslAuthenticateResponse(error_code=E.ErrorCode.ILLEGAL_SASL_STATE,
                                        error_message="SaslAuthenticate without a SaslHandshake v1",
                                        auth_bytes=b"", session_lifetime_ms=0)
    sec = security_of(broker)
    reauth = session.reauthenticating
    try:
        token, lifetime = session.step(bytes(req.auth_bytes), sec.reauth_ms)
    except AuthenticationFailed as exc:
        session.failed = True
        return SaslAuthenticateResponse(error_code=E.ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(exc),
                                        auth_bytes=b"", session_lifetime_ms=0)
    if session.authenticated and ctx.conn is not None:
        ctx.conn.max_request = broker.config.get_int("socket.request.max.bytes")
        if lifetime:
            log.info("%s %s %s with %s for %d ms", ctx.conn.peer, "re-authenticated" if reauth else "authenticated as",
                     session.principal, session.mechanism, lifetime)
    return SaslAuthenticateResponse(error_code=0, error_message=None, auth_bytes=token,
                                    session_lifetime_ms=lifetime)
