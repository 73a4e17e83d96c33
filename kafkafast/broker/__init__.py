"""The broker core: one handler module per API key (handlers/), topics, partitions."""
