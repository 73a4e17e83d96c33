"""Share groups (KIP-932, queues for Kafka): membership, share-partition state, its persistence."""
