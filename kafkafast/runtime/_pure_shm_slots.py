"""Pure-Python twin of `kafkafast._native.shm_slots` (cython_ext/shm_slots.pyx): a
partition slot's published state words and a follower entry's words in the shared-memory
table (`runtime/shm.py`), read and written as attributes through a `memoryview.cast("q")`
(one whole int64 load or store each: processes using either twin interoperate)."""
from __future__ import annotations

from typing import Any

STATE_FIELDS = ("log_start_offset", "log_end_offset", "high_watermark", "last_stable_offset", "active_base_offset",
                "active_committed_size", "segments_version", "max_timestamp", "max_timestamp_offset", "offline")
FOLLOWER_FIELDS = ("leo", "last_fetch_ms", "leo_at_last_fetch", "last_caught_up_ms")


class _Words:
    """`len(FIELDS)` int64 words from word `first_word` of `words` (a `memoryview.cast("q")`)."""

    __slots__ = ("words", "_b")
    FIELDS: tuple[str, ...] = ()

    def __init__(self, words: Any, first_word: int) -> None:
        count = len(type(self).FIELDS)
        if first_word < 0 or first_word + count > len(words):
            raise ValueError(f"words {first_word}..{first_word + count - 1} outside a {len(words) * 8}-byte buffer")
        self.words = words
        self._b = first_word


def _word(i: int) -> property:
    def get(self: Any) -> int:
        return self.words[self._b + i]

    def set_(self: Any, value: int) -> None:
        self.words[self._b + i] = value

    return property(get, set_)


def _words_class(name: str, fields: tuple[str, ...], doc: str) -> Any:
    return type(name, (_Words,), {"__slots__": (), "__doc__": doc, "__module__": __name__, "FIELDS": fields,
                                  **{f: _word(i) for i, f in enumerate(fields)}})


SlotStateWords = _words_class("SlotStateWords", STATE_FIELDS,
                              "The published partition state at word `first_word` of `words` (STATE_FIELDS in order).")
SlotFollowerWords = _words_class("SlotFollowerWords", FOLLOWER_FIELDS,
                                 "A follower entry's fetch state at word `first_word` of `words` (FOLLOWER_FIELDS in order).")
