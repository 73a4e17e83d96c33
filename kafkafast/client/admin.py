"""Admin client: topics, partitions, configs, consumer groups and their offsets, cluster.

Requests go to the controller (from Metadata; any broker when the cluster has none) and
wait for the topics to show up in (or vanish from) the metadata, so a topic can be used
as soon as `create_topics` returns. Errors are raised per topic as typed exceptions;
`create_topics(..., exist_ok=True)` ignores TOPIC_ALREADY_EXISTS.

Group operations (list, describe, committed offsets, offset resets, delete) go to each
group's coordinator (FindCoordinator); ListGroups asks every broker. Requests whose API
this client's producer and consumer never send pick their version here (`ADMIN_VERSIONS`).
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import time
import uuid as _uuid
from collections.abc import Iterable
from typing import Any

from dataclasses import dataclass, field

from kafkafast.client.cluster import Cluster, TopicPartition
from kafkafast.client.connection import BrokerConnection
from kafkafast.client.consumer_protocol import decode_assignment
from kafkafast.client.lowlevel import list_offsets_with
from kafkafast.protocol import _generated as gen
from kafkafast.protocol.errors import KafkaError, TopicAlreadyExistsError, for_code

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4

NewTopic = tuple[str, int] | tuple[str, int, dict[str, str]]

# api key -> (lowest, highest) version the admin client speaks, for APIs not in CLIENT_VERSIONS.
ADMIN_VERSIONS: dict[int, tuple[int, int]] = {
    15: (0, 5),   # DescribeGroups
    16: (0, 4),   # ListGroups (v5 adds a types filter we do not use)
    33: (0, 2),   # AlterConfigs
    42: (0, 2),   # DeleteGroups
    43: (0, 2),   # ElectLeaders
    45: (0, 0),   # AlterPartitionReassignments
    46: (0, 0),   # ListPartitionReassignments
    44: (0, 1),   # IncrementalAlterConfigs
    60: (0, 1),   # DescribeCluster
    21: (0, 2),   # DeleteRecords
    27: (0, 1),   # WriteTxnMarkers (kafka-transactions abort)
    35: (0, 4),   # DescribeLogDirs
    47: (0, 0),   # OffsetDelete
    48: (0, 1),   # DescribeClientQuotas
    49: (0, 1),   # AlterClientQuotas
    50: (0, 0),   # DescribeUserScramCredentials
    51: (0, 0),   # AlterUserScramCredentials
    61: (0, 0),   # DescribeProducers
    65: (0, 0),   # DescribeTransactions
    66: (0, 1),   # ListTransactions
    29: (1, 3),   # DescribeAcls (v1: pattern types)
    30: (1, 3),   # CreateAcls
    31: (1, 3),   # DeleteAcls
}
CONFIG_SET, CONFIG_DELETE = 0, 1


def admin_version(conn: BrokerConnection, api_key: int) -> int:
    lo, hi = ADMIN_VERSIONS[api_key]
    blo, bhi = conn.versions.get(api_key, (0, -1))
    v = min(hi, bhi)
    if v < max(lo, blo):
        raise for_code(35)(f"broker {conn.host}:{conn.port} does not serve {gen.API_NAMES.get(api_key, api_key)} "
                           f"v{lo}-{hi}")
    return v


# DescribeConfigs config_source values
SOURCE_DYNAMIC_TOPIC, SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT_BROKER = 1, 2, 3
SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 4, 5
SOURCE_GROUP = 8
SOURCE_NAMES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
                4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
                7: "DYNAMIC_CLIENT_METRICS_CONFIG", 8: "DYNAMIC_GROUP_CONFIG"}


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int
    read_only: bool
    sensitive: bool
    synonyms: tuple[tuple[int, str, str | None], ...] = ()  # (source, name, value), when asked for


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: str
    is_internal: bool
    partitions: tuple[PartitionDescription, ...]
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[tuple[int, str, int, str | None], ...]  # (node id, host, port, rack)


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    coordinator: int
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class AclBinding:
    """An ACL (or, for describe/delete, a filter: None matches anything) with Kafka's codes
    (kafkafast.security.acl: resource type, pattern type, operation, permission type)."""
    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int


@dataclass(slots=True)
class GroupOffsets:
    """Committed offset, log end and lag of every partition a group has committed."""
    group_id: str
    rows: dict[TopicPartition, tuple[int | None, int]] = field(default_factory=dict)  # tp -> (committed, log end)

    def lag(self, tp: TopicPartition) -> int | None:
        committed, end = self.rows[tp]
        return None if committed is None else max(0, end - committed)


@dataclass(frozen=True)
class LogDirDescription:
    """One log dir of a broker (DescribeLogDirs): its partitions as (topic, partition, size,
    offset lag, is future)."""
    log_dir: str
    error_code: int
    partitions: tuple[tuple[str, int, int, int, bool], ...]


SCRAM_MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
SCRAM_HASHES = {1: "sha256", 2: "sha512"}


class AdminClient:
    """Async admin operations over one `Cluster`."""

    def __init__(self, bootstrap_servers: str | list[str], *, client_id: str = "kafkafast-admin",
                 request_timeout_ms: int = 30000, security: Any = None) -> None:
        self.cluster = Cluster(bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms,
                               metadata_max_age_ms=0, allow_auto_topic_creation=False, security=security)
        self.timeout_ms = request_timeout_ms

    async def start(self) -> AdminClient:
        await self.cluster.start()
        return self

    async def close(self) -> None:
        await self.cluster.close()

    async def __aenter__(self) -> AdminClient:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _controller(self) -> Any:
        node = self.cluster.controller_id
        if node >= 0 and node in self.cluster.brokers:
            return await self.cluster.connection(node)
        return await self.cluster.any_connection()

    async def _node_for(self, resource_type: int, name: str) -> Any:
        """Where a config request about a resource goes: a broker's own configs to that broker
        (as Kafka's admin client routes them), everything else to the controller."""
        if resource_type == RESOURCE_BROKER and name.isdigit():
            if int(name) not in self.cluster.brokers:
                await self.cluster.refresh_metadata()
            if int(name) in self.cluster.brokers:
                return await self.cluster.connection(int(name))
        return await self._controller()

    async def create_topics(self, topics: Iterable[NewTopic], *, replication_factor: int = 1,
                            exist_ok: bool = False, validate_only: bool = False) -> None:
        CT = gen.CreateTopicsRequest.CreatableTopic
        Cfg = CT.CreatableTopicConfig
        items = []
        names = []
        for t in topics:
            name, partitions = t[0], t[1]
            configs: dict[str, str] = t[2] if len(t) > 2 else {}  # type: ignore[misc]
            names.append(name)
            items.append(CT(name=name, num_partitions=partitions, replication_factor=replication_factor,
                            assignments=[], configs=[Cfg(name=k, value=str(v)) for k, v in configs.items()]))
        conn = await self._controller()
        resp = await conn.send(gen.CreateTopicsRequest(topics=items, timeout_ms=self.timeout_ms,
                                                       validate_only=validate_only))
        for r in resp.topics:
            if r.error_code and not (exist_ok and r.error_code == TopicAlreadyExistsError.code):
                raise for_code(r.error_code)(f"create topic {r.name!r}: {r.error_message or ''}".rstrip(": "))
        if not validate_only:
            await self._wait(names, present=True)

    async def delete_topics(self, names: Iterable[str], *, missing_ok: bool = False) -> None:
        names = list(names)
        conn = await self._controller()
        v = conn.version(20)
        req = gen.DeleteTopicsRequest(topic_names=names, timeout_ms=self.timeout_ms,
                                      topics=[gen.DeleteTopicsRequest.DeleteTopicState(name=n) for n in names])
        resp = await conn.send(req, version=v)
        for r in resp.responses:
            if r.error_code and not (missing_ok and r.error_code == 3):
                raise for_code(r.error_code)(f"delete topic {r.name!r}: {r.error_message or ''}".rstrip(": "))
        await self._wait(names, present=False)

    async def _wait(self, names: list[str], *, present: bool) -> None:
        deadline = time.monotonic() + self.timeout_ms / 1000.0
        self.cluster.add_topics(names)
        while True:
            await self.cluster.refresh_metadata()
            state = [self.cluster.partitions_for(n) is not None
                     and all(p.leader >= 0 for p in self.cluster.topics[n].partitions.values()) for n in names]
            if all(s == present for s in state) or time.monotonic() > deadline:
                if not present:
                    self.cluster.wanted_topics -= set(names)
                return
            await asyncio.sleep(0.05)

    async def list_topics(self) -> list[str]:
        self.cluster.want_all_topics = True
        await self.cluster.refresh_metadata()
        self.cluster.want_all_topics = False
        return sorted(t.name for t in self.cluster.topics.values() if not t.is_internal and not t.error_code)

    async def describe_configs(self, resources: Iterable[tuple[int, str]] | str,
                               keys: list[str] | None = None) -> dict[tuple[int, str], dict[str, str | None]]:
        """{(resource type, name): {config: value}}; a bare string means one topic."""
        if isinstance(resources, str):
            resources = [(RESOURCE_TOPIC, resources)]
        entries = await self.describe_config_entries(resources, keys)
        return {res: {e.name: e.value for e in es} for res, es in entries.items()}

    async def describe_config_entries(self, resources: Iterable[tuple[int, str]], keys: list[str] | None = None,
                                      *, synonyms: bool = False) -> dict[tuple[int, str], list[ConfigEntry]]:
        """Every config (or `keys`) of each resource with its source (SOURCE_*), read-only
        and sensitive flags (and with `synonyms` its synonyms), as DescribeConfigs v1+ gives
        them, sorted by name."""
        R = gen.DescribeConfigsRequest.DescribeConfigsResource
        by_node: dict[Any, list[tuple[int, str]]] = {}
        for t, n in resources:
            by_node.setdefault(await self._node_for(t, n), []).append((t, n))
        out: dict[tuple[int, str], list[ConfigEntry]] = {}
        for conn, group in by_node.items():
            resp = await conn.send(gen.DescribeConfigsRequest(
                resources=[R(resource_type=t, resource_name=n, configuration_keys=keys) for t, n in group],
                include_synonyms=synonyms, include_documentation=False))
            for r in resp.results:
                if r.error_code:
                    raise for_code(r.error_code)(f"describe configs {r.resource_name!r}: {r.error_message or ''}")
                out[(r.resource_type, r.resource_name)] = sorted(
                    (ConfigEntry(c.name, c.value, c.config_source, bool(c.read_only), bool(c.is_sensitive),
                                 tuple((y.source, y.name, y.value) for y in c.synonyms or ()))
                     for c in r.configs), key=lambda e: e.name)
        return out

    async def create_partitions(self, topic: str, total: int) -> None:
        T = gen.CreatePartitionsRequest.CreatePartitionsTopic
        conn = await self._controller()
        resp = await conn.send(gen.CreatePartitionsRequest(topics=[T(name=topic, count=total, assignments=None)],
                                                           timeout_ms=self.timeout_ms, validate_only=False))
        for r in resp.results:
            if r.error_code:
                raise for_code(r.error_code)(f"create partitions {r.name!r}: {r.error_message or ''}")


    # -- topics and cluster -------------------------------------------------------------

    async def describe_cluster(self) -> ClusterDescription:
        """Brokers, controller and cluster id (DescribeCluster where served, else Metadata)."""
        conn = await self.cluster.any_connection()
        if 60 in conn.versions:
            resp = await conn.send(gen.DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                              endpoint_type=1), version=admin_version(conn, 60))
            if resp.error_code:
                raise for_code(resp.error_code)(f"describe cluster: {resp.error_message or ''}")
            brokers = tuple((b.broker_id, b.host, b.port, b.rack) for b in resp.brokers)
            return ClusterDescription(resp.cluster_id, resp.controller_id, tuple(sorted(brokers)))
        await self.cluster.refresh_metadata()
        return ClusterDescription(self.cluster.cluster_id, self.cluster.controller_id,
                                  tuple(sorted((b.node_id, b.host, b.port, b.rack)
                                               for b in self.cluster.brokers.values())))

    async def elect_leaders(self, partitions: Iterable[tuple[str, int]] | None, *,
                            unclean: bool = False) -> dict[tuple[str, int], int]:
        """ElectLeaders at the controller (retried once it moved): partition -> error code
        (0 elected, 84 ELECTION_NOT_NEEDED, ...). None: every partition of the cluster."""
        ER = gen.ElectLeadersRequest
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions or ():
            by_topic.setdefault(t, []).append(p)
        tps = None if partitions is None else [ER.TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()]
        deadline = time.monotonic() + self.timeout_ms / 1000.0
        while True:
            await self.cluster.refresh_metadata()
            conn = await self._controller()
            v = admin_version(conn, 43)
            if unclean and v < 1:
                raise for_code(35)("unclean leader election needs ElectLeaders v1")
            resp = await conn.send(ER(election_type=1 if unclean else 0, topic_partitions=tps,
                                      timeout_ms=self.timeout_ms), version=v)
            codes = {(r.topic, p.partition_id): p.error_code for r in resp.replica_election_results
                     for p in r.partition_result}
            top = resp.error_code or next((c for c in codes.values() if c == 41), 0)
            if top == 41 and time.monotonic() < deadline:  # NOT_CONTROLLER: the controller moved
                await asyncio.sleep(0.2)
                continue
            if top:
                raise for_code(top)("elect leaders")
            return codes

    async def _at_controller(self, api_key: int, make: Any) -> Any:
        """Sends `make(version)` to the controller, again while it answers NOT_CONTROLLER."""
        deadline = time.monotonic() + self.timeout_ms / 1000.0
        while True:
            await self.cluster.refresh_metadata()
            conn = await self._controller()
            resp = await conn.send(make(admin_version(conn, api_key)), version=admin_version(conn, api_key))
            if resp.error_code == 41 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                continue
            if resp.error_code:
                raise for_code(resp.error_code)(getattr(resp, "error_message", None) or gen.API_NAMES.get(api_key))
            return resp

    # -- ACLs (any broker answers; in cluster mode they live in ZooKeeper) ---------------------

    async def create_acls(self, acls: Iterable[AclBinding]) -> list[tuple[AclBinding, int, str | None]]:
        """CreateAcls: (binding, error code, message) per binding, in order."""
        acls = list(acls)
        C = gen.CreateAclsRequest.AclCreation
        conn = await self.cluster.any_connection()
        v = admin_version(conn, 30)
        resp = await conn.send(gen.CreateAclsRequest(creations=[
            C(resource_type=a.resource_type, resource_name=a.resource_name, resource_pattern_type=a.pattern_type,
              principal=a.principal, host=a.host, operation=a.operation, permission_type=a.permission_type)
            for a in acls]), version=v)
        return [(a, r.error_code, r.error_message) for a, r in zip(acls, resp.results)]

    async def describe_acls(self, f: AclBinding) -> list[AclBinding]:
        """DescribeAcls with one filter (None fields: any; resource/operation/permission
        codes ANY=1, pattern type ANY=1 or MATCH=2)."""
        conn = await self.cluster.any_connection()
        resp = await conn.send(gen.DescribeAclsRequest(
            resource_type_filter=f.resource_type, resource_name_filter=f.resource_name,
            pattern_type_filter=f.pattern_type, principal_filter=f.principal, host_filter=f.host,
            operation=f.operation, permission_type=f.permission_type), version=admin_version(conn, 29))
        if resp.error_code:
            raise for_code(resp.error_code)(resp.error_message or "DescribeAcls")
        return [AclBinding(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                           a.permission_type) for r in resp.resources for a in r.acls]

    async def delete_acls(self, filters: Iterable[AclBinding]) -> list[tuple[int, str | None, list[AclBinding]]]:
        """DeleteAcls: per filter (error code, message, the ACLs it deleted)."""
        F = gen.DeleteAclsRequest.DeleteAclsFilter
        conn = await self.cluster.any_connection()
        resp = await conn.send(gen.DeleteAclsRequest(filters=[
            F(resource_type_filter=f.resource_type, resource_name_filter=f.resource_name,
              pattern_type_filter=f.pattern_type, principal_filter=f.principal, host_filter=f.host,
              operation=f.operation, permission_type=f.permission_type) for f in filters]),
            version=admin_version(conn, 31))
        return [(r.error_code, r.error_message,
                 [AclBinding(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
                             m.permission_type) for m in r.matching_acls if not m.error_code])
                for r in resp.filter_results]

    async def alter_partition_reassignments(self, targets: dict[tuple[str, int], list[int] | None]
                                            ) -> dict[tuple[str, int], int]:
        """Starts (a replica list) or cancels (None) reassignments: partition -> error code."""
        AR = gen.AlterPartitionReassignmentsRequest
        by_topic: dict[str, list] = {}
        for (t, p), replicas in targets.items():
            by_topic.setdefault(t, []).append(AR.ReassignablePartition(partition_index=p, replicas=replicas))
        resp = await self._at_controller(45, lambda v: AR(timeout_ms=self.timeout_ms, topics=[
            AR.ReassignableTopic(name=t, partitions=ps) for t, ps in by_topic.items()]))
        return {(r.name, p.partition_index): p.error_code for r in resp.responses for p in r.partitions}

    async def list_partition_reassignments(self, partitions: Iterable[tuple[str, int]] | None = None
                                           ) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        """Reassignments in progress: partition -> (replicas, adding, removing)."""
        LR = gen.ListPartitionReassignmentsRequest
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for t, p in partitions:
                by_topic.setdefault(t, []).append(p)
            topics = [LR.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
        resp = await self._at_controller(46, lambda v: LR(timeout_ms=self.timeout_ms, topics=topics))
        return {(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
                for t in resp.topics for p in t.partitions}

    async def describe_topics(self, names: Iterable[str] | None = None, *,
                              include_internal: bool = False) -> list[TopicDescription]:
        """Leader, replicas, ISR and offline replicas of every partition; all topics when
        `names` is None. A named topic that does not exist raises UNKNOWN_TOPIC_OR_PARTITION."""
        Topic = gen.MetadataRequest.MetadataRequestTopic
        conn = await self.cluster.any_connection()
        wanted = None if names is None else [Topic(name=n) for n in names]
        resp = await conn.send(gen.MetadataRequest(topics=wanted, allow_auto_topic_creation=False),
                               version=conn.version(3))
        out = []
        for t in resp.topics:
            if names is None and t.is_internal and not include_internal:
                continue
            if names is not None and t.error_code:
                raise for_code(t.error_code)(f"describe topic {t.name!r}")
            tid = t.topic_id
            parts = tuple(sorted((PartitionDescription(p.partition_index, p.leader_id, tuple(p.replica_nodes or ()),
                                                       tuple(p.isr_nodes or ()), tuple(p.offline_replicas or ()),
                                                       p.error_code) for p in t.partitions),
                                 key=lambda p: p.partition))
            out.append(TopicDescription(t.name, uuid_of(tid) if tid else "", bool(t.is_internal), parts,
                                        t.error_code))
        return sorted(out, key=lambda d: d.name)

    async def alter_configs(self, resource_type: int, name: str, *, set_configs: dict[str, str] | None = None,
                            delete_configs: Iterable[str] = (), validate_only: bool = False) -> None:
        """IncrementalAlterConfigs: SET and DELETE (back to the default) of single keys."""
        A = gen.IncrementalAlterConfigsRequest.AlterConfigsResource
        C = A.AlterableConfig
        configs = [C(name=k, config_operation=CONFIG_SET, value=str(v)) for k, v in (set_configs or {}).items()]
        configs += [C(name=k, config_operation=CONFIG_DELETE, value=None) for k in delete_configs]
        conn = await self._node_for(resource_type, name)
        resp = await conn.send(gen.IncrementalAlterConfigsRequest(
            resources=[A(resource_type=resource_type, resource_name=name, configs=configs)],
            validate_only=validate_only), version=admin_version(conn, 44))
        for r in resp.responses:
            if r.error_code:
                raise for_code(r.error_code)(f"alter configs {r.resource_name!r}: {r.error_message or ''}")

    async def list_offsets(self, tps: Iterable[tuple[str, int]], timestamp: int) -> dict[TopicPartition, int]:
        """Offset per partition for `timestamp` (-2 earliest, -1 latest, or ms since the epoch:
        the first offset whose timestamp is at or after it, the log end when there is none)."""
        tps = list(tps)
        if not tps:
            return {}
        self.cluster.add_topics({t for t, _ in tps})
        got = await list_offsets_with(self.cluster, tps, timestamp)
        out = {TopicPartition(*tp): off for tp, (off, _) in got.items()}
        missing = [tp for tp in tps if TopicPartition(*tp) not in out or out[TopicPartition(*tp)] < 0]
        if missing and timestamp >= 0:
            for tp, (off, _) in (await list_offsets_with(self.cluster, missing, -1)).items():
                out[TopicPartition(*tp)] = off
        return out

    # -- consumer groups ----------------------------------------------------------------

    async def _coordinator(self, group: str) -> BrokerConnection:
        return await self.cluster.connection(await self.cluster.find_coordinator(group))

    async def list_groups(self) -> list[GroupListing]:
        """Every group on every broker (ListGroups is answered per broker)."""
        await self.cluster.refresh_metadata()
        out: dict[str, GroupListing] = {}
        for node in sorted(self.cluster.brokers):
            conn = await self.cluster.connection(node)
            resp = await conn.send(gen.ListGroupsRequest(states_filter=[], types_filter=[]),
                                   version=admin_version(conn, 16))
            if resp.error_code:
                raise for_code(resp.error_code)(f"list groups on broker {node}")
            for g in resp.groups:
                out[g.group_id] = GroupListing(g.group_id, g.protocol_type, g.group_state or "")
        return [out[k] for k in sorted(out)]

    async def describe_group(self, group: str) -> GroupDescription:
        node = await self.cluster.find_coordinator(group)
        conn = await self.cluster.connection(node)
        resp = await conn.send(gen.DescribeGroupsRequest(groups=[group], include_authorized_operations=False),
                               version=admin_version(conn, 15))
        g = resp.groups[0]
        if g.error_code:
            raise for_code(g.error_code)(f"describe group {group!r}")
        members = []
        for m in g.members:
            assignment: tuple[TopicPartition, ...] = ()
            if g.protocol_type == "consumer" and m.member_assignment:
                try:
                    assignment = tuple(TopicPartition(t, p) for t, p in
                                       sorted(decode_assignment(m.member_assignment).partitions))
                except Exception:  # noqa: BLE001 - a non-standard assignment is shown as none
                    assignment = ()
            members.append(MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                             assignment))
        return GroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data, tuple(members), node)

    async def group_offsets(self, group: str, topics: Iterable[str] | None = None) -> GroupOffsets:
        """Committed offsets of a group (all partitions it committed, or every partition of
        `topics`, uncommitted ones as None) with each partition's log end offset."""
        conn = await self._coordinator(group)
        T = gen.OffsetFetchRequest.OffsetFetchRequestTopic
        req_topics = None
        if topics is not None:
            req_topics = []
            for t in topics:
                self.cluster.add_topics([t])
                req_topics.append(T(name=t, partition_indexes=await self.cluster.wait_for_topic(t)))
        resp = await conn.send(gen.OffsetFetchRequest(group_id=group, topics=req_topics, require_stable=False),
                               version=min(conn.version(9), 7))
        if resp.error_code:
            raise for_code(resp.error_code)(f"offsets of group {group!r}")
        committed: dict[TopicPartition, int | None] = {}
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code:
                    raise for_code(p.error_code)(f"offsets of group {group!r} in {t.name}-{p.partition_index}")
                committed[TopicPartition(t.name, p.partition_index)] = (p.committed_offset
                                                                        if p.committed_offset >= 0 else None)
        ends = await self.list_offsets(list(committed), -1)
        out = GroupOffsets(group)
        for tp in sorted(committed):
            out.rows[tp] = (committed[tp], ends.get(tp, -1))
        return out

    async def commit_group_offsets(self, group: str, offsets: dict[TopicPartition, int]) -> None:
        """Commits offsets for a group that has no active members (as Kafka's tool requires:
        a live group answers UNKNOWN_MEMBER_ID / REBALANCE_IN_PROGRESS and nothing changes)."""
        T = gen.OffsetCommitRequest.OffsetCommitRequestTopic
        Pt = T.OffsetCommitRequestPartition
        topics: dict[str, Any] = {}
        for tp, off in sorted(offsets.items()):
            topics.setdefault(tp.topic, T(name=tp.topic, partitions=[])).partitions.append(
                Pt(partition_index=tp.partition, committed_offset=off, committed_leader_epoch=-1,
                   commit_timestamp=-1, committed_metadata=""))
        conn = await self._coordinator(group)
        resp = await conn.send(gen.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1,
                                                       member_id="", group_instance_id=None, retention_time_ms=-1,
                                                       topics=list(topics.values())))
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code:
                    raise for_code(p.error_code)(f"commit offsets of group {group!r} in {t.name}-{p.partition_index}")

    async def delete_groups(self, groups: Iterable[str]) -> dict[str, int]:
        """{group: error code} (0 = deleted; NON_EMPTY_GROUP while it has members)."""
        out: dict[str, int] = {}
        for g in groups:
            conn = await self._coordinator(g)
            resp = await conn.send(gen.DeleteGroupsRequest(groups_names=[g]), version=admin_version(conn, 42))
            for r in resp.results:
                out[r.group_id] = r.error_code
        return out


    # -- log dirs, records, transactions, producers, credentials, quotas (Kafka's admin tools) --

    async def _send_admin(self, conn: BrokerConnection, api_key: int, make: Any) -> Any:
        v = admin_version(conn, api_key)
        return await conn.send(make(v), version=v)

    async def broker_connections(self) -> dict[int, BrokerConnection]:
        """A connection to every registered broker (each has negotiated its API versions)."""
        await self.cluster.refresh_metadata()
        return {node: await self.cluster.connection(node) for node in sorted(self.cluster.brokers)}

    async def describe_log_dirs(self, node: int, topics: Iterable[str] | None = None) -> list[LogDirDescription]:
        """DescribeLogDirs at one broker: every log dir with its partitions (of `topics`, else all)."""
        D = gen.DescribeLogDirsRequest
        conn = await self.cluster.connection(node)
        wanted = None
        if topics is not None:
            await self.cluster.refresh_metadata()
            wanted = [D.DescribableLogDirTopic(topic=t, partitions=self.cluster.partitions_for(t) or []) for t in topics]
        resp = await self._send_admin(conn, 35, lambda v: D(topics=wanted))
        if resp.error_code:
            raise for_code(resp.error_code)(f"describe log dirs of broker {node}")
        return [LogDirDescription(r.log_dir, r.error_code, tuple(
            (t.name, p.partition_index, p.partition_size, p.offset_lag, bool(p.is_future_key))
            for t in r.topics for p in t.partitions)) for r in resp.results]

    async def _at_leaders(self, tps: Iterable[tuple[str, int]]) -> dict[int, list[tuple[str, int]]]:
        """Partitions by their leader's node id (UNKNOWN_TOPIC_OR_PARTITION for one without)."""
        tps = list(tps)
        self.cluster.add_topics({t for t, _ in tps})
        await self.cluster.refresh_metadata()
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for t, p in tps:
            leader = self.cluster.leader_for((t, p))
            if leader < 0:
                raise for_code(3)(f"partition {t}-{p} has no leader (does the topic exist?)")
            by_leader.setdefault(leader, []).append((t, p))
        return by_leader

    async def delete_records(self, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], tuple[int, int]]:
        """DeleteRecords at each leader: partition -> (low watermark, error code); offset -1 means
        the high watermark."""
        R = gen.DeleteRecordsRequest
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for node, tps in (await self._at_leaders(offsets)).items():
            by_topic: dict[str, list] = {}
            for t, p in tps:
                by_topic.setdefault(t, []).append(R.DeleteRecordsPartition(partition_index=p, offset=offsets[(t, p)]))
            resp = await self._send_admin(await self.cluster.connection(node), 21, lambda v: R(
                topics=[R.DeleteRecordsTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
                timeout_ms=self.timeout_ms))
            for t in resp.topics:
                for r in t.partitions:
                    out[(t.name, r.partition_index)] = (r.low_watermark, r.error_code)
        return out

    async def delete_group_offsets(self, group: str, tps: Iterable[tuple[str, int]]) -> tuple[int, dict]:
        """OffsetDelete at the group's coordinator: (top-level error, {partition: error code})."""
        R = gen.OffsetDeleteRequest
        by_topic: dict[str, list] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(R.OffsetDeleteRequestPartition(partition_index=p))
        resp = await self._send_admin(await self._coordinator(group), 47, lambda v: R(group_id=group, topics=[
            R.OffsetDeleteRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()]))
        return resp.error_code, {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}

    async def list_transactions(self, *, producer_ids: Iterable[int] = (), duration_ms: int = -1
                                ) -> dict[int, list[tuple[str, int, str]]]:
        """ListTransactions at every broker: node -> [(transactional id, producer id, state)]."""
        out = {}
        for node, conn in (await self.broker_connections()).items():
            resp = await self._send_admin(conn, 66, lambda v: gen.ListTransactionsRequest(
                state_filters=[], producer_id_filters=list(producer_ids), duration_filter=duration_ms))
            if resp.error_code:
                raise for_code(resp.error_code)(f"list transactions on broker {node}")
            out[node] = [(s.transactional_id, s.producer_id, s.transaction_state) for s in resp.transaction_states]
        return out

    async def describe_transaction(self, transactional_id: str) -> tuple[int, Any]:
        """DescribeTransactions at the transaction coordinator: (coordinator id, state)."""
        node = await self.cluster.find_coordinator(transactional_id, key_type=1)
        resp = await self._send_admin(await self.cluster.connection(node), 65, lambda v: gen.DescribeTransactionsRequest(
            transactional_ids=[transactional_id]))
        state = resp.transaction_states[0]
        if state.error_code:
            raise for_code(state.error_code)(f"describe transaction {transactional_id!r}")
        return node, state

    async def describe_producers(self, tp: tuple[str, int], broker_id: int | None = None) -> list[Any]:
        """DescribeProducers for one partition at its leader (or `broker_id`): its active producers."""
        node = broker_id if broker_id is not None else next(iter(await self._at_leaders([tp])))
        R = gen.DescribeProducersRequest
        resp = await self._send_admin(await self.cluster.connection(node), 61, lambda v: R(
            topics=[R.TopicRequest(name=tp[0], partition_indexes=[tp[1]])]))
        part = resp.topics[0].partitions[0]
        if part.error_code:
            raise for_code(part.error_code)(part.error_message or f"describe producers of {tp[0]}-{tp[1]}")
        return list(part.active_producers)

    async def abort_transaction(self, tp: tuple[str, int], producer_id: int, producer_epoch: int,
                                coordinator_epoch: int) -> None:
        """Writes an abort marker for the producer's open transaction on the partition (WriteTxnMarkers
        at the leader, as Kafka's Admin.abortTransaction)."""
        node = next(iter(await self._at_leaders([tp])))
        W = gen.WriteTxnMarkersRequest
        resp = await self._send_admin(await self.cluster.connection(node), 27, lambda v: W(markers=[
            W.WritableTxnMarker(producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
                                topics=[W.WritableTxnMarkerTopic(name=tp[0], partition_indexes=[tp[1]])],
                                coordinator_epoch=coordinator_epoch)]))
        code = resp.markers[0].topics[0].partitions[0].error_code
        if code:
            raise for_code(code)(f"abort transaction of producer {producer_id} on {tp[0]}-{tp[1]}")

    async def describe_user_scram_credentials(self, users: Iterable[str] | None = None
                                              ) -> dict[str, list[tuple[int, int]]]:
        """user -> [(mechanism, iterations)]; users without credentials are left out."""
        R = gen.DescribeUserScramCredentialsRequest
        wanted = None if users is None else [R.UserName(name=u) for u in users]
        resp = await self._send_admin(await self._controller(), 50, lambda v: R(users=wanted))
        if resp.error_code:
            raise for_code(resp.error_code)(resp.error_message or "describe SCRAM credentials")
        out = {}
        for r in resp.results:
            if r.error_code == 91:  # RESOURCE_NOT_FOUND: no credential for that user
                continue
            if r.error_code:
                raise for_code(r.error_code)(r.error_message or f"SCRAM credentials of {r.user!r}")
            out[r.user] = [(c.mechanism, c.iterations) for c in r.credential_infos]
        return out

    async def alter_user_scram_credentials(self, user: str, upserts: dict[int, tuple[int, bytes]],
                                           deletions: Iterable[int] = ()) -> None:
        """Sets (mechanism -> (iterations, password)) and deletes (mechanisms) a user's SCRAM
        credentials; the salted password is made here (RFC 5802 Hi), the password never sent."""
        R = gen.AlterUserScramCredentialsRequest
        ups = []
        for mech, (iterations, password) in upserts.items():
            salt = os.urandom(32)
            salted = hashlib.pbkdf2_hmac(SCRAM_HASHES[mech], password, salt, iterations)
            ups.append(R.ScramCredentialUpsertion(name=user, mechanism=mech, iterations=iterations, salt=salt,
                                                  salted_password=salted))
        resp = await self._send_admin(await self._controller(), 51, lambda v: R(
            deletions=[R.ScramCredentialDeletion(name=user, mechanism=m) for m in deletions], upsertions=ups))
        for r in resp.results:
            if r.error_code:
                raise for_code(r.error_code)(r.error_message or f"alter SCRAM credentials of {r.user!r}")

    async def describe_client_quotas(self, entity: dict[str, str | None], *, any_of: Iterable[str] = (),
                                     strict: bool = False) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """Quotas of the entity ({"user": name, "client-id": name}; None: the default) or of every
        entity of the types `any_of`: a list of (entity, {quota: value})."""
        R = gen.DescribeClientQuotasRequest
        components = [R.ComponentData(entity_type=k, match_type=1 if v is None else 0, match=v)
                      for k, v in entity.items()]
        components += [R.ComponentData(entity_type=k, match_type=2, match=None) for k in any_of]
        resp = await self._send_admin(await self.cluster.any_connection(), 48,
                                      lambda v: R(components=components, strict=strict))
        if resp.error_code:
            raise for_code(resp.error_code)(resp.error_message or "describe client quotas")
        return [({e.entity_type: e.entity_name for e in entry.entity}, {x.key: x.value for x in entry.values})
                for entry in resp.entries or []]

    async def alter_client_quotas(self, entity: dict[str, str | None], set_quotas: dict[str, float],
                                  remove: Iterable[str] = ()) -> None:
        R = gen.AlterClientQuotasRequest
        ops = [R.EntryData.OpData(key=k, value=v, remove=False) for k, v in set_quotas.items()]
        ops += [R.EntryData.OpData(key=k, value=0.0, remove=True) for k in remove]
        resp = await self._send_admin(await self._controller(), 49, lambda v: R(entries=[R.EntryData(
            entity=[R.EntryData.EntityData(entity_type=k, entity_name=n) for k, n in entity.items()], ops=ops)],
            validate_only=False))
        for e in resp.entries:
            if e.error_code:
                raise for_code(e.error_code)(e.error_message or "alter client quotas")

    async def features(self) -> Any:
        """The ApiVersions v3 answer of a broker: supported and finalized features."""
        conn = await self.cluster.any_connection()
        return await conn.send(gen.ApiVersionsRequest(client_software_name="kafkafast-admin",
                                                      client_software_version="1"), version=min(3, conn.version(18)))


def uuid_of(raw: Any) -> str:
    """A topic id as Kafka's tools print it (base64url without padding)."""
    b = raw.bytes if isinstance(raw, _uuid.UUID) else bytes(raw)
    if not any(b):
        return ""
    return base64.urlsafe_b64encode(b).decode().rstrip("=")


async def create_topics(bootstrap: str, topics: Iterable[NewTopic], **kw: Any) -> None:
    async with AdminClient(bootstrap) as admin:
        await admin.create_topics(topics, **kw)


async def delete_topics(bootstrap: str, names: Iterable[str], **kw: Any) -> None:
    async with AdminClient(bootstrap) as admin:
        await admin.delete_topics(names, **kw)


async def describe_configs(bootstrap: str, resources: Iterable[tuple[int, str]] | str,
                           keys: list[str] | None = None) -> dict[tuple[int, str], dict[str, str | None]]:
    async with AdminClient(bootstrap) as admin:
        return await admin.describe_configs(resources, keys)


def create_topics_sync(bootstrap: str, topics: Iterable[NewTopic], **kw: Any) -> None:
    asyncio.run(create_topics(bootstrap, topics, **kw))


def delete_topics_sync(bootstrap: str, names: Iterable[str], **kw: Any) -> None:
    asyncio.run(delete_topics(bootstrap, names, **kw))


def describe_configs_sync(bootstrap: str, resources: Iterable[tuple[int, str]] | str,
                          keys: list[str] | None = None) -> dict[tuple[int, str], dict[str, str | None]]:
    return asyncio.run(describe_configs(bootstrap, resources, keys))


__all__ = [
    "AdminClient", "KafkaError", "RESOURCE_BROKER", "RESOURCE_TOPIC", "create_topics", "create_topics_sync",
    "delete_topics", "delete_topics_sync", "describe_configs", "describe_configs_sync",
]
