"""kafkafast's own Kafka client: asyncio core, synchronous facade, low-level reads, admin.

Works against any Kafka-compatible broker. Layers, bottom up: `connection` (one pipelined
socket per broker, version negotiation), `cluster` (metadata, connections per node),
`lowlevel` and `admin` (request/response helpers), the producer (`partitioner`,
`accumulator`, `producer`), the consumer (`consumer_protocol`, `assignors`, `group`,
`consumer` with its fetcher); `sync` wraps the async classes for threaded code.
"""
from kafkafast.client.cluster import OffsetAndMetadata, TopicPartition
from kafkafast.client.consumer import AIOConsumer
from kafkafast.client.producer import AIOProducer
from kafkafast.client.records import ConsumerRecord, RecordMetadata
from kafkafast.client.sync import KafkaConsumer, KafkaProducer

__all__ = ["AIOConsumer", "AIOProducer", "ConsumerRecord", "KafkaConsumer", "KafkaProducer", "OffsetAndMetadata",
           "RecordMetadata", "TopicPartition"]
