"""Minimal admin client: create and delete topics, describe topic/broker configs.

Requests go to the controller (from Metadata; any broker when the cluster has none) and
wait for the topics to show up in (or vanish from) the metadata, so a topic can be used
as soon as `create_topics` returns. Errors are raised per topic as typed exceptions;
`create_topics(..., exist_ok=True)` ignores TOPIC_ALREADY_EXISTS.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from kafkafast.client.cluster import Cluster
from kafkafast.protocol import _generated as gen
from kafkafast.protocol.errors import KafkaError, TopicAlreadyExistsError, for_code

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4

NewTopic = tuple[str, int] | tuple[str, int, dict[str, str]]


class AdminClient:
    """Async admin operations over one `Cluster`."""

    def __init__(self, bootstrap_servers: str | list[str], *, client_id: str = "kafkafast-admin",
                 request_timeout_ms: int = 30000) -> None:
        self.cluster = Cluster(bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms,
                               metadata_max_age_ms=0, allow_auto_topic_creation=False)
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
        R = gen.DescribeConfigsRequest.DescribeConfigsResource
        req = gen.DescribeConfigsRequest(resources=[R(resource_type=t, resource_name=n, configuration_keys=keys)
                                                    for t, n in resources],
                                         include_synonyms=False, include_documentation=False)
        conn = await self._controller()
        resp = await conn.send(req)
        out: dict[tuple[int, str], dict[str, str | None]] = {}
        for r in resp.results:
            if r.error_code:
                raise for_code(r.error_code)(f"describe configs {r.resource_name!r}: {r.error_message or ''}")
            out[(r.resource_type, r.resource_name)] = {c.name: c.value for c in r.configs}
        return out

    async def create_partitions(self, topic: str, total: int) -> None:
        T = gen.CreatePartitionsRequest.CreatePartitionsTopic
        conn = await self._controller()
        resp = await conn.send(gen.CreatePartitionsRequest(topics=[T(name=topic, count=total, assignments=None)],
                                                           timeout_ms=self.timeout_ms, validate_only=False))
        for r in resp.results:
            if r.error_code:
                raise for_code(r.error_code)(f"create partitions {r.name!r}: {r.error_message or ''}")


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
