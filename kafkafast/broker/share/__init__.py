"""Share groups (KIP-932, queues for Kafka): membership, share-partition state, its persistence."""

# The share group APIs: heartbeat, describe, fetch, acknowledge, the share coordinator's
# state APIs and the offsets APIs.
SHARE_API_KEYS = frozenset({76, 77, 78, 79, 83, 84, 85, 86, 87, 90, 91, 92})
# The share coordinator's state APIs (Initialize/Read/Write/DeleteShareGroupState, the summary).
SHARE_STATE_API_KEYS = frozenset({83, 84, 85, 86, 87})
