"""ACLs and SCRAM credentials in ZooKeeper (cluster mode: chosen when `zookeeper.connect` is
set), in Kafka's own layout, so every broker sees a change within seconds and Kafka's tools
read what kafkafast wrote:

    /kafka-acl/<ResourceType>/<name>                      LITERAL ACLs of one resource
    /kafka-acl-extended/prefixed/<ResourceType>/<name>    PREFIXED ACLs
        {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                              "operation":"Read","host":"*"}]}
    /kafka-acl-changes/acl_changes_<seq>                  "<ResourceType>:<name>" (a LITERAL resource changed)
    /kafka-acl-extended-changes/acl_changes_<seq>         {"version":1,"resourceType":"Topic",
                                                           "name":"t","patternType":"PREFIXED"}
    /config/users/<url-encoded user>                      {"version":1,"config":{"SCRAM-SHA-256":
                                                           "salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=4096"}}
    /config/changes/config_change_<seq>                   {"version":2,"entity_path":"users/<user>"}

Each store keeps everything in memory (authorization and SCRAM logins never wait for
ZooKeeper), loads it all at start, and re-reads one resource or user when a change
notification names it (kazoo watch threads; the published snapshot is replaced whole).
Writes are read-modify-write at the znode's version, retried when another broker wrote
in between, then announced with a sequential change znode. Notifications older than 15
minutes are removed, as Kafka's change listener does.
"""
from __future__ import annotations

import base64
import json
import logging
import threading
import time
import urllib.parse
from typing import Any, Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from kafkafast.security import acl as A
from kafkafast.security.scram import MECHANISMS, ScramCredential

log = logging.getLogger("kafkafast.security.zk")

ACL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
ACL_CHANGES = "/kafka-acl-changes"
EXTENDED_ACL_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
USERS = "/config/users"
CONFIG_CHANGES = "/config/changes"
CHANGE_EXPIRY_MS = 15 * 60 * 1000

TYPE_NAMES = {A.TOPIC: "Topic", A.GROUP: "Group", A.CLUSTER: "Cluster", A.TRANSACTIONAL_ID: "TransactionalId",
              A.DELEGATION_TOKEN: "DelegationToken", A.USER: "User"}
OPERATION_NAMES = {A.ALL: "All", A.READ: "Read", A.WRITE: "Write", A.CREATE: "Create", A.DELETE: "Delete",
                   A.ALTER: "Alter", A.DESCRIBE: "Describe", A.CLUSTER_ACTION: "ClusterAction",
                   A.DESCRIBE_CONFIGS: "DescribeConfigs", A.ALTER_CONFIGS: "AlterConfigs",
                   A.IDEMPOTENT_WRITE: "IdempotentWrite", A.CREATE_TOKENS: "CreateTokens",
                   A.DESCRIBE_TOKENS: "DescribeTokens"}
PERMISSION_NAMES = {A.ALLOW: "Allow", A.DENY: "Deny"}


def _code(names: dict[int, str], text: str) -> int:
    """Kafka parses these names case-insensitively, with or without underscores."""
    key = text.replace("_", "").lower()
    for code, name in names.items():
        if name.lower() == key:
            return code
    raise ValueError(f"unknown name {text!r}")


Resource = tuple[int, str, int]  # (resource type, name, pattern type)


def resource_path(r: Resource) -> str:
    root = ACL_ROOT if r[2] == A.LITERAL else PREFIXED_ROOT
    return f"{root}/{TYPE_NAMES[r[0]]}/{r[1]}"


def encode_acls(acls: list[A.Acl]) -> bytes:
    return json.dumps({"version": 1, "acls": [
        {"principal": a.principal, "permissionType": PERMISSION_NAMES[a.permission_type],
         "operation": OPERATION_NAMES[a.operation], "host": a.host} for a in acls]}, separators=(",", ":")).encode()


def decode_acls(r: Resource, data: bytes | None) -> list[A.Acl]:
    if not data:
        return []
    return [A.Acl(r[0], r[1], r[2], e["principal"], e["host"], _code(OPERATION_NAMES, e["operation"]),
                  _code(PERMISSION_NAMES, e["permissionType"])) for e in json.loads(data).get("acls", [])]


def encode_change(r: Resource) -> tuple[str, bytes]:
    if r[2] == A.LITERAL:
        return ACL_CHANGES, f"{TYPE_NAMES[r[0]]}:{r[1]}".encode()
    return EXTENDED_ACL_CHANGES, json.dumps({"version": 1, "resourceType": TYPE_NAMES[r[0]], "name": r[1],
                                             "patternType": "PREFIXED"}, separators=(",", ":")).encode()


def decode_change(root: str, data: bytes) -> Resource:
    text = data.decode()
    if root == ACL_CHANGES:
        rtype, _, name = text.partition(":")
        return _code(TYPE_NAMES, rtype), name, A.LITERAL
    doc = json.loads(text)
    return _code(TYPE_NAMES, doc["resourceType"]), doc["name"], _code({A.LITERAL: "Literal", A.PREFIXED: "Prefixed"},
                                                                      doc["patternType"])


class ChangeFeed:
    """Calls `handle(child name, data)` once for each new child of `path` (sequential change
    znodes), on kazoo's watch thread, starting with the ones created after `start()`; removes
    changes older than CHANGE_EXPIRY_MS."""

    def __init__(self, zk: Any, path: str, handle: Callable[[str, bytes], None]) -> None:
        self.zk, self.path, self.handle = zk, path, handle
        self.lock = threading.Lock()
        zk.ensure_path(path)
        self.seen = set(zk.get_children(path))

    def start(self) -> None:
        now_ms = time.time() * 1000
        for child in list(self.seen):  # the ones from before this broker started: only purged
            stat = self.zk.exists(f"{self.path}/{child}")
            if stat is not None and now_ms - stat.ctime > CHANGE_EXPIRY_MS:
                self._delete(child)
        self.zk.ChildrenWatch(self.path, self._on_children)

    def _on_children(self, children: list[str]) -> None:
        with self.lock:
            now_ms = time.time() * 1000
            for child in sorted(set(children) - self.seen):
                self.seen.add(child)
                try:
                    data, stat = self.zk.get(f"{self.path}/{child}")
                except NoNodeError:
                    continue
                try:
                    self.handle(child, data)
                except Exception:
                    log.exception("change %s/%s not applied", self.path, child)
                if now_ms - stat.ctime > CHANGE_EXPIRY_MS:
                    self._delete(child)
            self.seen &= set(children)

    def _delete(self, child: str) -> None:
        try:
            self.zk.delete(f"{self.path}/{child}")
        except (NoNodeError, NotEmptyError):
            pass


def _write_at_version(zk: Any, path: str, update: Callable[[bytes | None], bytes | None]) -> None:
    """Applies `update(current data or None) -> new data (None: delete)` at the znode's version,
    again when another writer got there first."""
    while True:
        try:
            data, stat = zk.get(path)
        except NoNodeError:
            new = update(None)
            if new is None:
                return
            try:
                zk.create(path, new, makepath=True)
                return
            except NodeExistsError:
                continue
        new = update(data)
        try:
            if new is None:
                zk.delete(path, version=stat.version)
            else:
                zk.set(path, new, version=stat.version)
            return
        except (BadVersionError, NoNodeError):
            continue


class ZkAclStore:
    """The AclAuthorizer's store in cluster mode. `generation` moves on every change;
    `acls()` is the current list (a snapshot)."""

    def __init__(self, zk: Any) -> None:
        self.zk = zk
        self.lock = threading.Lock()
        self.by_resource: dict[Resource, list[A.Acl]] = {}
        self.generation = 0
        self._snapshot: list[A.Acl] = []
        feeds = [ChangeFeed(zk, root, lambda child, data, root=root: self._reload(decode_change(root, data)))
                 for root in (ACL_CHANGES, EXTENDED_ACL_CHANGES)]
        for root, pattern in ((ACL_ROOT, A.LITERAL), (PREFIXED_ROOT, A.PREFIXED)):
            zk.ensure_path(root)
            for type_name in zk.get_children(root):
                try:
                    rtype = _code(TYPE_NAMES, type_name)
                except ValueError:
                    continue
                for name in zk.get_children(f"{root}/{type_name}"):
                    self._reload((rtype, name, pattern))
        for feed in feeds:
            feed.start()

    def _reload(self, r: Resource) -> None:
        try:
            data, _ = self.zk.get(resource_path(r))
        except NoNodeError:
            data = None
        self._publish(r, decode_acls(r, data))

    def _publish(self, r: Resource, acls: list[A.Acl]) -> None:
        with self.lock:
            if acls:
                self.by_resource[r] = acls
            else:
                self.by_resource.pop(r, None)
            self._snapshot = [a for group in self.by_resource.values() for a in group]
            self.generation += 1

    def acls(self) -> list[A.Acl]:
        return self._snapshot

    def _change(self, r: Resource, edit: Callable[[list[A.Acl]], list[A.Acl]]) -> None:
        result: list[list[A.Acl]] = []

        def update(data: bytes | None) -> bytes | None:
            new = edit(decode_acls(r, data))
            result[:] = [new]
            return encode_acls(new) if new else None

        _write_at_version(self.zk, resource_path(r), update)
        self._publish(r, result[0])
        root, note = encode_change(r)
        self.zk.create(f"{root}/{CHANGE_PREFIX}", note, sequence=True, makepath=True)

    def create(self, new: list[A.Acl]) -> None:
        by_resource: dict[Resource, list[A.Acl]] = {}
        for a in new:
            by_resource.setdefault((a.resource_type, a.resource_name, a.pattern_type), []).append(a)
        for r, adds in by_resource.items():
            self._change(r, lambda have, adds=adds: A.with_added(have, adds))

    def delete(self, filters: list[A.AclFilter]) -> list[list[A.Acl]]:
        matched: list[list[A.Acl]] = [[] for _ in filters]
        for r in list(self.by_resource):
            if not any(f.matches(a) for a in self.by_resource.get(r, ()) for f in filters):
                continue
            hits: list[list[A.Acl]] = []  # of the attempt that was written

            def edit(have: list[A.Acl]) -> list[A.Acl]:
                kept, hits[:] = A.without_matching(have, filters)
                return kept

            self._change(r, edit)
            for i, h in enumerate(hits):
                matched[i].extend(h)
        return matched


# -- SCRAM credentials ---------------------------------------------------------------------------
def user_path(user: str) -> str:
    """Kafka's sanitized entity name: URL encoding with `*` and `~` escaped too."""
    return f"{USERS}/{urllib.parse.quote(user, safe='').replace('~', '%7E')}"


def credential_text(c: ScramCredential) -> str:
    b64 = base64.b64encode
    return (f"salt={b64(c.salt).decode()},stored_key={b64(c.stored_key).decode()},"
            f"server_key={b64(c.server_key).decode()},iterations={c.iterations}")


def parse_credential(text: str) -> ScramCredential:
    f = dict(part.split("=", 1) for part in text.split(","))
    return ScramCredential(base64.b64decode(f["salt"]), int(f["iterations"]), base64.b64decode(f["stored_key"]),
                           base64.b64decode(f["server_key"]))


def parse_user_config(data: bytes | None) -> tuple[dict, dict[str, ScramCredential]]:
    """(every config of the user, its SCRAM credentials): the znode also holds quotas."""
    config = json.loads(data).get("config", {}) if data else {}
    return config, {m: parse_credential(v) for m, v in config.items() if m in MECHANISMS}


class ZkScramStore:
    """ScramStore's interface (`get`, `users`, `change`) over /config/users."""

    def __init__(self, zk: Any) -> None:
        self.zk = zk
        self.lock = threading.Lock()
        self._users: dict[str, dict[str, ScramCredential]] = {}
        feed = ChangeFeed(zk, CONFIG_CHANGES, self._on_change)
        zk.ensure_path(USERS)
        for child in zk.get_children(USERS):
            self._reload(urllib.parse.unquote(child))
        feed.start()

    def _on_change(self, child: str, data: bytes) -> None:
        entity = json.loads(data).get("entity_path", "")
        if entity.startswith("users/"):
            self._reload(urllib.parse.unquote(entity[len("users/"):]))

    def _reload(self, user: str) -> None:
        try:
            data, _ = self.zk.get(user_path(user))
        except NoNodeError:
            data = None
        self._publish(user, parse_user_config(data)[1])

    def _publish(self, user: str, creds: dict[str, ScramCredential]) -> None:
        with self.lock:
            users = dict(self._users)
            if creds:
                users[user] = creds
            else:
                users.pop(user, None)
            self._users = users

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return self._users

    def change(self, upserts: list[tuple[str, str, ScramCredential]], deletes: list[tuple[str, str]]) -> None:
        per_user: dict[str, list[tuple[str, ScramCredential | None]]] = {}
        for user, mech in deletes:
            per_user.setdefault(user, []).append((mech, None))
        for user, mech, cred in upserts:
            per_user.setdefault(user, []).append((mech, cred))
        for user, edits in per_user.items():
            result: list[dict[str, ScramCredential]] = []

            def update(data: bytes | None, edits=edits) -> bytes | None:
                config, _ = parse_user_config(data)
                config = dict(config)
                for mech, cred in edits:
                    if cred is None:
                        config.pop(mech, None)
                    else:
                        config[mech] = credential_text(cred)
                result[:] = [{m: parse_credential(v) for m, v in config.items() if m in MECHANISMS}]
                return json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()

            _write_at_version(self.zk, user_path(user), update)
            self._publish(user, result[0])
            self.zk.create(f"{CONFIG_CHANGES}/config_change_",
                           json.dumps({"version": 2, "entity_path": f"users/{user_path(user)[len(USERS) + 1:]}"},
                                      separators=(",", ":")).encode(), sequence=True, makepath=True)
