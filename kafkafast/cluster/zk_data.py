"""Kafka's ZooKeeper layout (ZooKeeper mode, Kafka 3.x): paths and JSON, as `ZkData.scala`
writes them, so Kafka's ZooKeeper tooling reads a kafkafast cluster and vice versa.

    /cluster/id                                   {"version":"1","id":"<cluster id>"}
    /controller                  (ephemeral)      {"version":1,"brokerid":N,"timestamp":"<ms>"}
    /controller_epoch                             "<epoch>"  (its zkVersion fences old controllers)
    /brokers/ids/<id>            (ephemeral)      v5: endpoints, listener_security_protocol_map,
                                                  host, port, rack, jmx_port, timestamp, features
    /brokers/seqid                                data unused; its version generates broker ids
    /brokers/topics/<t>                           {"version":3,"topic_id":"<base64 uuid>",
                                                   "partitions":{"0":[1,2,3]},
                                                   "adding_replicas":{},"removing_replicas":{}}
    /brokers/topics/<t>/partitions/<p>/state      {"controller_epoch":E,"leader":L,"version":1,
                                                   "leader_epoch":LE,"isr":[...]}
    /config/topics/<t>                            {"version":1,"config":{...}}
    /config/brokers/<id>                          {"version":1,"config":{...}}: dynamic broker configs
    /config/brokers/<default>                     the same, cluster-wide defaults (AlterConfigs on broker "")
    /config/users/<user>, /config/users/<user>/clients/<client id>, /config/clients/<client id>,
    /config/ips/<ip>                              {"version":1,"config":{...}}: client quotas (and users'
                                                  SCRAM credentials), names URL-encoded, <default> for all
    /config/groups/<group id>                     {"version":1,"config":{...}}: group configs (share.*),
                                                  the group id URL-encoded
    /config/changes/config_change_<seq>           {"version":2,"entity_path":"topics/<t>"}, "brokers/<id>",
                                                  "brokers/<default>", "users/<user>", ..., "groups/<group id>"
    /admin/delete_topics/<t>                      (empty)
    /latest_producer_id_block                     {"version":1,"broker":N,
                                                   "block_start":"S","block_end":"E"}
"""
from __future__ import annotations

import base64
import json
import time
import uuid
from urllib.parse import quote, unquote
from dataclasses import dataclass

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
BROKER_SEQID = "/brokers/seqid"
TOPICS = "/brokers/topics"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_GROUPS = "/config/groups"
DEFAULT_ENTITY = "<default>"  # Kafka's ConfigEntityName.Default: the cluster-wide broker defaults
CONFIG_CHANGES = "/config/changes"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
PERSISTENT_PATHS = (BROKER_IDS, TOPICS, BROKER_SEQID, CONFIG_TOPICS, CONFIG_CHANGES, DELETE_TOPICS,
                    CONFIG_BROKERS, "/config/clients", "/config/users", "/isr_change_notification",
                    "/cluster")
PRODUCER_ID_BLOCK_SIZE = 1000
RESERVED_BROKER_MAX_ID = 1000
SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


def now_text() -> str:
    return str(int(time.time() * 1000))


def dumps(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def loads(data: bytes | None) -> dict:
    return json.loads(data.decode()) if data else {}


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


# -- topic ids: Kafka prints a Uuid as URL-safe base64 without padding ------------------------------
def topic_id_text(topic_id: bytes) -> str:
    return base64.urlsafe_b64encode(topic_id).decode().rstrip("=")


def topic_id_bytes(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def new_topic_id() -> bytes:
    while True:
        b = uuid.uuid4().bytes
        if b != bytes(16):
            return b


# -- codecs ------------------------------------------------------------------------------------------
def cluster_id_json(cluster_id: str) -> bytes:
    return dumps({"version": "1", "id": cluster_id})


def controller_json(broker_id: int) -> bytes:
    return dumps({"version": 1, "brokerid": broker_id, "timestamp": now_text()})


@dataclass(frozen=True)
class BrokerInfo:
    """One `/brokers/ids/<id>` registration; `epoch` is the znode's czxid (Kafka's broker epoch)."""

    broker_id: int
    endpoints: tuple[tuple[str, str, int], ...]  # (listener name, host, port)
    rack: str | None
    security_protocols: tuple[tuple[str, str], ...]
    epoch: int = -1

    def endpoint(self, listener: str) -> tuple[str, int]:
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        name, host, port = self.endpoints[0]
        return host, port

    def to_json(self) -> bytes:
        doc: dict = {"features": {},
                     "listener_security_protocol_map": dict(self.security_protocols),
                     "endpoints": [f"{n}://{h}:{p}" for n, h, p in self.endpoints],
                     "jmx_port": -1, "host": None, "port": -1, "timestamp": now_text(), "version": 5}
        for name, host, port in self.endpoints:
            if dict(self.security_protocols).get(name) == "PLAINTEXT":
                doc["host"], doc["port"] = host, port
                break
        if self.rack is not None:
            doc["rack"] = self.rack
        return dumps(doc)

    @classmethod
    def from_json(cls, broker_id: int, data: bytes, epoch: int = -1) -> "BrokerInfo":
        doc = loads(data)
        protocols = doc.get("listener_security_protocol_map") or {"PLAINTEXT": "PLAINTEXT"}
        eps = []
        for text in doc.get("endpoints", []):
            name, rest = text.split("://", 1)
            host, _, port = rest.rpartition(":")
            eps.append((name, host.strip("[]"), int(port)))
        if not eps and doc.get("host"):
            eps.append(("PLAINTEXT", doc["host"], int(doc["port"])))
        return cls(broker_id, tuple(eps), doc.get("rack"), tuple(protocols.items()), epoch)


def topic_assignment_json(topic_id: bytes, assignment: dict[int, list[int]],
                          adding: dict[int, list[int]] | None = None,
                          removing: dict[int, list[int]] | None = None) -> bytes:
    """During a reassignment `partitions` holds target + original replicas, `adding_replicas`
    the target's new ones and `removing_replicas` the original ones leaving (Kafka's v3)."""
    return dumps({"version": 3, "topic_id": topic_id_text(topic_id),
                  "partitions": {str(p): list(r) for p, r in sorted(assignment.items())},
                  "adding_replicas": {str(p): list(r) for p, r in sorted((adding or {}).items()) if r},
                  "removing_replicas": {str(p): list(r) for p, r in sorted((removing or {}).items()) if r}})


def parse_reassigning(data: bytes) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """(adding_replicas, removing_replicas) of a topic znode: the reassignments in progress."""
    doc = loads(data)
    return ({int(p): [int(r) for r in reps] for p, reps in (doc.get("adding_replicas") or {}).items()},
            {int(p): [int(r) for r in reps] for p, reps in (doc.get("removing_replicas") or {}).items()})


def reassign_partitions_json(targets: dict[tuple[str, int], list[int]]) -> bytes:
    """`/admin/reassign_partitions`: {"version":1,"partitions":[{"topic","partition","replicas"}]}."""
    return dumps({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": list(r)}
                                               for (t, p), r in sorted(targets.items())]})


def parse_reassign_partitions(data: bytes | None) -> dict[tuple[str, int], list[int]]:
    doc = loads(data)
    return {(str(e["topic"]), int(e["partition"])): [int(r) for r in e["replicas"]]
            for e in doc.get("partitions", [])}


def parse_topic_assignment(data: bytes) -> tuple[bytes | None, dict[int, list[int]]]:
    doc = loads(data)
    tid = doc.get("topic_id")
    return (topic_id_bytes(tid) if tid else None,
            {int(p): [int(r) for r in reps] for p, reps in doc.get("partitions", {}).items()})


@dataclass(frozen=True)
class LeaderIsr:
    """A partition state znode; `zk_version` is the znode version (Kafka's partition epoch)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = 0

    def to_json(self) -> bytes:
        return dumps({"controller_epoch": self.controller_epoch, "leader": self.leader, "version": 1,
                      "leader_epoch": self.leader_epoch, "isr": list(self.isr)})

    @classmethod
    def from_json(cls, data: bytes, zk_version: int) -> "LeaderIsr":
        doc = loads(data)
        return cls(int(doc["leader"]), int(doc["leader_epoch"]), tuple(int(i) for i in doc["isr"]),
                   int(doc["controller_epoch"]), zk_version)


def entity_config_json(configs: dict[str, str]) -> bytes:
    return dumps({"version": 1, "config": dict(configs)})


def parse_entity_config(data: bytes | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in loads(data).get("config", {}).items()}


def broker_config_entity(scope: str) -> str:
    """The /config/brokers child of a dynamic-config scope: "" (cluster-wide) or a broker id."""
    return scope or DEFAULT_ENTITY


def broker_config_path(scope: str) -> str:
    return f"{CONFIG_BROKERS}/{broker_config_entity(scope)}"


def group_config_entity(group_id: str) -> str:
    """The /config/groups child of a group: its id URL-encoded, as Kafka's Sanitizer writes entity
    names (an id may hold '/'); "." and ".." spelt %2E, which a znode name cannot be."""
    name = quote(group_id, safe="")
    return name.replace(".", "%2E") if name in (".", "..") else name


def group_config_path(group_id: str) -> str:
    return f"{CONFIG_GROUPS}/{group_config_entity(group_id)}"


def group_of_config_entity(name: str) -> str:
    """The inverse of `group_config_entity`."""
    return unquote(name)


QUOTA_ROOTS = {"user": "users", "client-id": "clients", "ip": "ips"}


def _quota_name(entity_type: str, name: str | None) -> str:
    """A quota entity's znode name: <default> for a null name; user principals and client ids
    URL-encoded, as Kafka's Sanitizer writes them (a name may hold '/')."""
    if name is None:
        return DEFAULT_ENTITY
    return name if entity_type == "ip" else quote(name, safe="")


def quota_entity_path(entity: tuple[tuple[str, str | None], ...]) -> str:
    """The entity path of a client-quota entity (Kafka's layout under /config): users/<user>,
    users/<user>/clients/<client-id>, clients/<client-id>, ips/<ip>."""
    d = dict(entity)
    if "ip" in d:
        return f"ips/{_quota_name('ip', d['ip'])}"
    if "user" in d:
        path = f"users/{_quota_name('user', d['user'])}"
        return path + (f"/clients/{_quota_name('client-id', d['client-id'])}" if "client-id" in d else "")
    return f"clients/{_quota_name('client-id', d['client-id'])}"


def quota_entity_of(path: str) -> tuple[tuple[str, str | None], ...]:
    """The inverse of `quota_entity_path`."""
    parts = path.split("/")
    out = []
    for kind, name in zip(parts[0::2], parts[1::2]):
        entity_type = {"users": "user", "clients": "client-id", "ips": "ip"}[kind]
        out.append((entity_type, None if name == DEFAULT_ENTITY else (name if entity_type == "ip" else unquote(name))))
    return tuple(out)


def config_change_json(name: str, entity_type: str = "topics") -> bytes:
    return dumps({"version": 2, "entity_path": f"{entity_type}/{name}"})


def producer_id_block_json(broker_id: int, start: int, end: int) -> bytes:
    return dumps({"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(end)})
