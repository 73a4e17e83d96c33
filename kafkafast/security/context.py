"""The security state of one broker process and the one call handlers make.

`security_of(broker)` builds (once per process, after the fork) the SCRAM store, the ACL
authorizer when `authorizer.class.name` names one, and the timing settings. In cluster mode
(`zookeeper.connect`: the broker's kazoo session is given as `zk`) both stores are in
ZooKeeper (zk_stores.py), else files in the first log dir.
`allowed(broker, ctx, operation, resource_type, name)` is the check every handler makes:
True when no authorizer is configured, else the authorizer's decision for the request's
principal and client host. Requests forwarded from another worker carry their principal
(`FORWARDED_PRINCIPAL`, set by the internal connection from the frame's trailer, see
`principal_trailer`); internal requests without one (produce appends, fan-out parts the
forwarding worker already authorized) are trusted.
"""
from __future__ import annotations

import contextvars
from typing import Any

from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.sasl import ANONYMOUS
from kafkafast.security.scram import ScramStore

FORWARDED_PRINCIPAL: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "kafkafast_forwarded_principal", default=None)
TRAILER_MAGIC = b"KFPR"


class Security:
    def __init__(self, config: Any, log_dir: str, zk: Any = None) -> None:
        cls = (config.get("authorizer.class.name") or "").strip()
        if cls and cls not in acl.AUTHORIZER_CLASSES:
            raise ValueError(f"authorizer.class.name={cls} is not supported (use one of "
                             f"{', '.join(acl.AUTHORIZER_CLASSES)})")
        if zk is not None:
            from kafkafast.security.zk_stores import ZkAclStore, ZkScramStore  # deferred: cluster mode only (kazoo)
        self.authorizer = acl.AclAuthorizer(
            log_dir, super_users=config.get("super.users"),
            allow_if_no_acl=str(config.get("allow.everyone.if.no.acl.found")).lower() == "true",
            store=ZkAclStore(zk) if zk is not None else None) if cls else None
        self.scram: Any = ZkScramStore(zk) if zk is not None else ScramStore(log_dir)
        self.reauth_ms = int(config.get("connections.max.reauth.ms") or 0)
        self.failed_auth_delay = int(config.get("connection.failed.authentication.delay.ms") or 100) / 1000.0


def security_of(broker: Any) -> Security:
    sec = broker.__dict__.get("_security")
    if sec is None:
        # ACLs and SCRAM credentials: in the log dir, or in ZooKeeper when the control plane has it
        sec = broker._security = Security(broker.config, broker.log_dirs[0], broker.control.zk)
    return sec


def identity(ctx: Any) -> tuple[str, str] | None:
    """(principal, host) of the request, or None for a trusted internal request."""
    if ctx.internal:
        return FORWARDED_PRINCIPAL.get()
    session = getattr(ctx.conn, "session", None)
    if session is None:
        peer = getattr(ctx.conn, "peer", None)
        return ANONYMOUS, peer[0] if peer else "127.0.0.1"
    return session.principal, session.host


def allowed(broker: Any, ctx: Any, operation: int, resource_type: int, name: str = acl.CLUSTER_NAME) -> bool:
    sec = broker.__dict__.get("_security") or security_of(broker)
    if sec.authorizer is None:
        return True
    who = identity(ctx)
    if who is None:
        return True
    return sec.authorizer.authorize(who[0], who[1], operation, resource_type, name)


def any_allowed(broker: Any, ctx: Any, operation: int, resource_type: int) -> bool:
    sec = security_of(broker)
    if sec.authorizer is None:
        return True
    who = identity(ctx)
    return who is None or sec.authorizer.any_allowed(who[0], who[1], operation, resource_type)


# The operations Kafka reports in authorized-operations bit fields, per resource type.
_RESOURCE_OPERATIONS = {
    acl.TOPIC: (acl.READ, acl.WRITE, acl.CREATE, acl.DELETE, acl.ALTER, acl.DESCRIBE,
                acl.DESCRIBE_CONFIGS, acl.ALTER_CONFIGS),
    acl.GROUP: (acl.READ, acl.DESCRIBE, acl.DELETE),
    acl.CLUSTER: (acl.CREATE, acl.CLUSTER_ACTION, acl.DESCRIBE_CONFIGS, acl.ALTER_CONFIGS,
                  acl.IDEMPOTENT_WRITE, acl.ALTER, acl.DESCRIBE),
}


def authorized_operations(broker: Any, ctx: Any, resource_type: int, name: str = acl.CLUSTER_NAME) -> int:
    """The bit field (1 << operation) of what the principal may do on the resource, as
    Metadata, DescribeGroups and DescribeCluster answer when asked (KIP-430)."""
    bits = 0
    for op in _RESOURCE_OPERATIONS[resource_type]:
        if allowed(broker, ctx, op, resource_type, name):
            bits |= 1 << op
    return bits


def authorizer_enabled(broker: Any) -> bool:
    return security_of(broker).authorizer is not None


# -- principals across worker forwarding ---------------------------------------------------
def principal_trailer(frame: Any, conn: Any) -> Any:
    """The frame with the client's principal and host appended (request parsers ignore
    bytes after the body): `<principal>\\0<host>` + int16 length + b"KFPR". Returned as is
    when the connection has no session (nothing to carry)."""
    session = getattr(conn, "session", None)
    if session is None:
        return frame
    return bytearray(frame) + trailer_bytes((session.principal, session.host))


def trailer_bytes(who: tuple[str, str] | None) -> bytes:
    if who is None:
        return b""
    tail = f"{who[0]}\0{who[1]}".encode()
    return tail + len(tail).to_bytes(2, "big") + TRAILER_MAGIC


def carry_principal(conn: Any) -> None:
    """Makes the connection's principal the one that requests split off from its request
    (group fan-out) are authorized as, locally (`identity` of an internal request) and on
    other workers (`trailer_bytes(FORWARDED_PRINCIPAL.get())`)."""
    session = getattr(conn, "session", None)
    FORWARDED_PRINCIPAL.set((session.principal, session.host) if session is not None else None)


def read_trailer(frame: Any) -> tuple[str, str] | None:
    if len(frame) < 14 or bytes(frame[-4:]) != TRAILER_MAGIC:
        return None
    n = int.from_bytes(frame[-6:-4], "big")
    if n + 6 > len(frame) - 8:
        return None
    principal, _, host = bytes(frame[-6 - n:-6]).decode("utf-8", "replace").partition("\0")
    return principal, host


# -- one-line checks for handlers -------------------------------------------------------------
_DENIED_CODE = {acl.TOPIC: 29, acl.GROUP: 30, acl.CLUSTER: 31, acl.TRANSACTIONAL_ID: 53, acl.DELEGATION_TOKEN: 65}


def denied(broker: Any, ctx: Any, operation: int, resource_type: int, name: str = acl.CLUSTER_NAME) -> int:
    """0 when allowed, else the error code Kafka answers for the resource type
    (TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""
    return 0 if allowed(broker, ctx, operation, resource_type, name) else _DENIED_CODE[resource_type]


def require(broker: Any, ctx: Any, operation: int, resource_type: int, name: str = acl.CLUSTER_NAME) -> None:
    """Raises the KafkaError of `denied` (for handlers that answer errors from an except clause)."""
    code = denied(broker, ctx, operation, resource_type, name)
    if code:
        raise E.for_code(code)()


def fetch_denied(broker: Any, ctx: Any, replica_id: int, topic: str) -> int:
    """Fetch: a consumer needs Read on the topic; a fetch naming a broker's replica_id needs
    ClusterAction on the cluster (a client cannot pose as a follower, CVE-2018-1288)."""
    if replica_id is not None and replica_id >= 0:
        return 29 if not allowed(broker, ctx, acl.CLUSTER_ACTION, acl.CLUSTER) else 0
    return denied(broker, ctx, acl.READ, acl.TOPIC, topic)
