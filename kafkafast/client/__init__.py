"""kafkafast's own Kafka client: asyncio core, synchronous facade, low-level reads, admin.

Works against any Kafka-compatible broker. Layers, bottom up: `connection` (one pipelined
socket per broker, version negotiation), `cluster` (metadata, connections per node),
`lowlevel` and `admin` (request/response helpers), then the producer (`accumulator`,
`partitioner`, `producer`) and the consumer (`fetcher`, `group`, `assignors`,
`consumer_protocol`, `consumer`); `sync` wraps the async classes for threaded code.
"""
from kafkafast.client.cluster import OffsetAndMetadata, TopicPartition
from kafkafast.client.records import ConsumerRecord, RecordMetadata

__all__ = ["ConsumerRecord", "OffsetAndMetadata", "RecordMetadata", "TopicPartition"]
