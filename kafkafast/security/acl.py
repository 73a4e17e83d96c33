"""ACL authorizer with the semantics of Kafka's AclAuthorizer / StandardAuthorizer.

An ACL: (resource type, resource name, pattern type LITERAL|PREFIXED, principal
`User:<name>` or `User:*`, host or `*`, operation, ALLOW|DENY). `authorize(principal, host,
op, type, name)`: super users (`super.users=User:a;User:b`) are allowed everything; else
the ACLs whose resource pattern matches the name (LITERAL equal or `*`, PREFIXED a prefix of
it) are taken; none at all -> `allow.everyone.if.no.acl.found`; any matching DENY (same
principal or `User:*`, same host or `*`, same operation or ALL) -> denied; else allowed iff
a matching ALLOW grants the operation, ALL, or an operation that implies it (Read, Write,
Delete, Alter imply Describe; AlterConfigs implies DescribeConfigs).

Storage (single node): `<first log dir>/__kafkafast_acls.json`, a JSON list of ACL
objects `{"resource_type": 2, "resource_name": "t", "pattern_type": 3, "principal":
"User:a", "host": "*", "operation": 3, "permission_type": 3}` (Kafka's numeric codes),
replaced atomically under a flock of `<file>.lock`. Each process re-reads it when its
mtime changes, checked at most every RELOAD_INTERVAL seconds, and at once when told
(`reload`): the worker that changed it bumps a shared-memory word before it answers, and
every other worker re-reads the file before its next request (runtime/shm.py), so a change
applies to every request the broker handles after the CreateAcls/DeleteAcls answer.
In cluster mode the store is ZooKeeper (`store=ZkAclStore`, Kafka's
/kafka-acl layout, see zk_stores.py). One authorizer over either store (`FileAclStore` here):
CreateAcls and DeleteAcls edit the list the same way in both (`with_added`, `without_matching`).
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import asdict, dataclass
from typing import Any

# Kafka's codes (org.apache.kafka.common.resource.ResourceType, acl.AclOperation, ...)
UNKNOWN, ANY = 0, 1
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = 2, 3, 4, 5, 6, 7
MATCH, LITERAL, PREFIXED = 2, 3, 4
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION = 2, 3, 4, 5, 6, 7, 8, 9
DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, CREATE_TOKENS, DESCRIBE_TOKENS = 10, 11, 12, 13, 14
DENY, ALLOW = 2, 3
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
RESOURCE_TYPES = (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER)
OPERATIONS = tuple(range(2, 15))
IMPLIED_BY = {DESCRIBE: (DESCRIBE, READ, WRITE, DELETE, ALTER, ALL),
              DESCRIBE_CONFIGS: (DESCRIBE_CONFIGS, ALTER_CONFIGS, ALL)}
STORE_FILE = "__kafkafast_acls.json"
RELOAD_INTERVAL = 0.5
AUTHORIZER_CLASSES = ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer",
                      "org.apache.kafka.metadata.authorizer.StandardAuthorizer")


@dataclass(frozen=True)
class Acl:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True)
class AclFilter:
    """Kafka's AclBindingFilter: ANY (1) / None match everything; pattern MATCH matches
    every pattern that would apply to the (literal) name."""
    resource_type: int = ANY
    resource_name: str | None = None
    pattern_type: int = ANY
    principal: str | None = None
    host: str | None = None
    operation: int = ANY
    permission_type: int = ANY

    def matches(self, a: Acl) -> bool:
        if self.resource_type != ANY and a.resource_type != self.resource_type:
            return False
        if self.pattern_type == MATCH:
            if self.resource_name is not None and not _pattern_applies(a, self.resource_name):
                return False
        else:
            if self.pattern_type != ANY and a.pattern_type != self.pattern_type:
                return False
            if self.resource_name is not None and a.resource_name != self.resource_name:
                return False
        return ((self.principal is None or a.principal == self.principal)
                and (self.host is None or a.host == self.host)
                and (self.operation == ANY or a.operation == self.operation)
                and (self.permission_type == ANY or a.permission_type == self.permission_type))


def _pattern_applies(a: Acl, name: str) -> bool:
    if a.pattern_type == LITERAL:
        return a.resource_name == name or a.resource_name == WILDCARD
    return a.pattern_type == PREFIXED and name.startswith(a.resource_name)


def validate(a: Acl) -> str | None:
    """Why Kafka would refuse to create this ACL, or None."""
    if a.resource_type not in RESOURCE_TYPES:
        return "Invalid resource type"
    if a.pattern_type not in (LITERAL, PREFIXED):
        return "Invalid resource pattern type"
    if a.operation not in OPERATIONS:
        return "Invalid operation"
    if a.permission_type not in (ALLOW, DENY):
        return "Invalid permission type"
    if not a.resource_name:
        return "Resource name must not be empty"
    if a.resource_type == CLUSTER and a.resource_name != CLUSTER_NAME:
        return "The only valid name for the CLUSTER resource is kafka-cluster"
    if ":" not in a.principal:
        return f"Could not parse principal from `{a.principal}` (no colon is present separating the principal type from name)"
    if not a.host:
        return "Host must not be empty"
    return None


def with_added(have: list[Acl], new: list[Acl]) -> list[Acl]:
    """`have` and then those of `new` it lacks (each once): CreateAcls' edit in every store."""
    return have + [a for a in dict.fromkeys(new) if a not in have]


def without_matching(have: list[Acl], filters: list[AclFilter]) -> tuple[list[Acl], list[list[Acl]]]:
    """(what stays, what each filter matched): DeleteAcls' edit in every store."""
    matched = [[a for a in have if f.matches(a)] for f in filters]
    gone = {a for m in matched for a in m}
    return [a for a in have if a not in gone], matched


class FileAclStore:
    """The authorizer's store on a single node: STORE_FILE in the first log dir (module
    docstring); zk_stores.py:ZkAclStore is the same interface over ZooKeeper. `generation`
    changes with the file; `acls()` is its list."""

    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, STORE_FILE)

    @property
    def generation(self) -> tuple | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def acls(self) -> list[Acl]:
        try:
            with open(self.path, encoding="utf-8") as fh:
                return [Acl(**raw) for raw in json.load(fh)]
        except FileNotFoundError:
            return []

    def _rewrite(self, change):
        with open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            acls, result = change(self.acls())
            tmp = f"{self.path}.tmp{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump([asdict(a) for a in acls], fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            return result

    def create(self, new: list[Acl]) -> None:
        self._rewrite(lambda have: (with_added(have, new), None))

    def delete(self, filters: list[AclFilter]) -> list[list[Acl]]:
        return self._rewrite(lambda have: without_matching(have, filters))


class AclAuthorizer:
    def __init__(self, log_dir: str, *, super_users: str | None = None, allow_if_no_acl: bool = False,
                 store: object = None) -> None:
        self.store: Any = store or FileAclStore(log_dir)  # ZkAclStore in cluster mode
        self.super_users = frozenset(p.strip() for p in (super_users or "").split(";") if p.strip())
        self.allow_if_no_acl = allow_if_no_acl
        self._acls: list[Acl] = []
        self._by_type: dict[int, list[Acl]] = {}
        self._stamp: object = None
        self._loaded = False
        self._checked = 0.0
        self._decisions: dict[tuple, bool] = {}  # cleared whenever the ACLs change

    # -- store ----------------------------------------------------------------------------
    def _refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._checked < RELOAD_INTERVAL:
            return
        self._checked = now
        stamp = self.store.generation
        if stamp == self._stamp and self._loaded:
            return
        self._install(list(self.store.acls()), stamp)

    def _install(self, acls: list[Acl], stamp: object) -> None:
        self._acls, self._stamp, self._loaded = acls, stamp, True
        self._decisions = {}
        self._by_type = {}
        for a in acls:
            self._by_type.setdefault(a.resource_type, []).append(a)

    def reload(self) -> None:
        """Re-reads the store now: another process serving this broker changed it."""
        self._refresh(force=True)

    def acls(self, flt: AclFilter | None = None) -> list[Acl]:
        self._refresh(force=True)
        return [a for a in self._acls if flt is None or flt.matches(a)]

    def create(self, new: list[Acl]) -> None:
        self.store.create(new)
        self._refresh(force=True)

    def delete(self, filters: list[AclFilter]) -> list[list[Acl]]:
        matched = self.store.delete(filters)
        self._refresh(force=True)
        return matched

    # -- decisions ------------------------------------------------------------------------
    def authorize(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        self._refresh()
        key = (principal, host, operation, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            if len(self._decisions) > 65536:
                self._decisions = {}
            decision = self._decisions[key] = self._decide(principal, host, operation, resource_type, name)
        return decision

    def _decide(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        matching = [a for a in self._by_type.get(resource_type, ()) if _pattern_applies(a, name)]
        if not matching:
            return self.allow_if_no_acl
        granted = IMPLIED_BY.get(operation, (operation, ALL))
        allowed = False
        for a in matching:
            if a.principal != principal and a.principal != "User:*":
                continue
            if a.host != host and a.host != WILDCARD:
                continue
            if a.permission_type == DENY:
                if a.operation == operation or a.operation == ALL:
                    return False
            elif a.operation in granted:
                allowed = True
        return allowed

    def any_allowed(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """Whether some resource of the type may be acted on (Kafka's authorizeByResourceType,
        used for idempotent produce and topic creation checks)."""
        if principal in self.super_users:
            return True
        self._refresh()
        granted = IMPLIED_BY.get(operation, (operation, ALL))
        return any((a.principal in (principal, "User:*")) and a.host in (host, WILDCARD)
                   and a.permission_type == ALLOW and a.operation in granted
                   for a in self._by_type.get(resource_type, ()))
