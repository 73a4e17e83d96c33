# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of kafkafast/runtime/_pure_shm_slots.py: a partition slot's published
state words and a follower entry's words in the shared-memory table, read and written as
attributes without a Python frame per access (about 40 ns instead of 100).

Each field is a `_Word` descriptor (C-level `__get__`/`__set__`) on a subclass of `_Words`,
which holds the buffer it was made from for its whole life (the mapping stays exported:
an `mmap` cannot close under it). Each access is one aligned 8-byte load or store
(`__atomic` relaxed: a plain `mov` on x86-64, as the pure twin's `memoryview` access), so
processes that use either twin interoperate. The field order is the layout's
(`runtime/shm.py`): `storage.partition_state.FIELDS` for the state, `FOLLOWER_FIELDS` for
a follower entry.
"""
from libc.stdint cimport int64_t
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_WRITABLE

cdef extern from *:
    """
    #include <stdint.h>
    static inline int64_t kf_get(int64_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
    static inline void kf_set(int64_t *p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
    """
    int64_t kf_get(int64_t *p) nogil
    void kf_set(int64_t *p, int64_t v) nogil

STATE_FIELDS = ("log_start_offset", "log_end_offset", "high_watermark", "last_stable_offset", "active_base_offset",
                "active_committed_size", "segments_version", "max_timestamp", "max_timestamp_offset", "offline")
FOLLOWER_FIELDS = ("leo", "last_fetch_ms", "leo_at_last_fetch", "last_caught_up_ms")


cdef class _Words:
    """`len(FIELDS)` int64 words from word `first_word` of the writable buffer `words`."""

    cdef int64_t* p
    cdef Py_buffer view
    cdef bint held
    cdef readonly object words

    def __init__(self, words, Py_ssize_t first_word):
        cdef Py_ssize_t count = len(type(self).FIELDS)
        if self.held:
            raise TypeError("already initialised")
        PyObject_GetBuffer(words, &self.view, PyBUF_WRITABLE)
        self.held = True
        if first_word < 0 or (first_word + count) * 8 > self.view.len:
            raise ValueError(f"words {first_word}..{first_word + count - 1} outside a {self.view.len}-byte buffer")
        if <size_t>self.view.buf & 7:
            raise ValueError("the buffer is not 8-byte aligned")
        self.p = <int64_t*>self.view.buf + first_word
        self.words = words

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.view)


cdef class _Word:
    """The field at word `index` of a `_Words` (a data descriptor)."""

    cdef Py_ssize_t index

    def __init__(self, Py_ssize_t index):
        self.index = index

    def __get__(self, obj, objtype):
        if obj is None:
            return self
        cdef _Words w = <_Words?>obj
        if w.p == NULL:
            raise ValueError("slot words not initialised")
        return kf_get(w.p + self.index)

    def __set__(self, obj, int64_t value):
        cdef _Words w = <_Words?>obj
        if w.p == NULL:
            raise ValueError("slot words not initialised")
        kf_set(w.p + self.index, value)


def _words_class(name, fields, doc):
    return type(name, (_Words,), {"__slots__": (), "__doc__": doc, "__module__": __name__, "FIELDS": fields,
                                  **{f: _Word(i) for i, f in enumerate(fields)}})


SlotStateWords = _words_class("SlotStateWords", STATE_FIELDS,
                              "The published partition state at word `first_word` of `words` (STATE_FIELDS in order).")
SlotFollowerWords = _words_class("SlotFollowerWords", FOLLOWER_FIELDS,
                                 "A follower entry's fetch state at word `first_word` of `words` (FOLLOWER_FIELDS in order).")
