"""Types of the compiled twin built from cython_ext/shm_slots.pyx (pure twin:
kafkafast/runtime/_pure_shm_slots.py)."""
from typing import Any

STATE_FIELDS: tuple[str, ...]
FOLLOWER_FIELDS: tuple[str, ...]

class SlotStateWords:
    words: Any
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int
    active_base_offset: int
    active_committed_size: int
    segments_version: int
    max_timestamp: int
    max_timestamp_offset: int
    offline: int
    def __init__(self, words: Any, first_word: int) -> None: ...

class SlotFollowerWords:
    words: Any
    leo: int
    last_fetch_ms: int
    leo_at_last_fetch: int
    last_caught_up_ms: int
    def __init__(self, words: Any, first_word: int) -> None: ...
