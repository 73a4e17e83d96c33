"""Consumer groups: the group state machine (`group.py`) and the `__consumer_offsets`
record formats (`offsets_records.py`). The coordinator that drives them is
`kafkafast/broker/group_coordinator.py`."""
