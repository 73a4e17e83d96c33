"""A broker's connections to other brokers' inter-broker listeners, for the coordinators'
requests (transaction markers, share-partition state): one per broker, made on first use with
the inter-broker listener's security, made again when the broker's endpoint changed or the
connection closed, and dropped when a request on it fails."""
from __future__ import annotations

import asyncio
from typing import Any

from kafkafast.client.connection import BrokerConnection


class PeerConnections:
    def __init__(self, broker: Any, purpose: str) -> None:
        self.broker = broker
        self.purpose = purpose  # in the client id: broker-<id>-<purpose>
        self._conns: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}

    async def get(self, broker_id: int) -> BrokerConnection | None:
        """The connection to `broker_id` (None when the metadata does not know the broker)."""
        async with self._connecting.setdefault(broker_id, asyncio.Lock()):
            b = self.broker.control.metadata.brokers.get(broker_id)
            if b is None:
                return None
            conn = self._conns.get(broker_id)
            if conn is not None and not conn.closed and (conn.host, conn.port) == (b.host, b.port):
                return conn
            if conn is not None:
                conn.close()
            conn = await BrokerConnection(b.host, b.port, node_id=broker_id,
                                          client_id=f"broker-{self.broker.node_id}-{self.purpose}",
                                          security=self.broker.control.node.inter_broker).connect()
            self._conns[broker_id] = conn
            return conn

    async def send(self, broker_id: int, request: Any, version: int, timeout_s: float) -> Any:
        """The answer of `broker_id` to `request`, or None when the broker is not known; a failed
        send drops the connection and raises."""
        conn = await self.get(broker_id)
        if conn is None:
            return None
        try:
            return await conn.send(request, version=version, timeout=timeout_s)
        except BaseException:
            conn.close()
            self._conns.pop(broker_id, None)
            raise

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
