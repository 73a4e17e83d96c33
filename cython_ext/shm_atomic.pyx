# cython: language_level=3, boundscheck=False, wraparound=False
"""Atomic int64 words in a writable buffer shared between processes (an mmap).

Used by the per-partition append lock (kafkafast/runtime/append_lock.py). Every access is a
GCC `__atomic` builtin with sequentially consistent ordering on the word's own address, so
processes that use this module and processes that use the pure twin
(kafkafast/runtime/_pure_shm_atomic.py: the same builtins through libatomic) interoperate.
`offset` is a byte offset into the buffer and must be a multiple of 8.
"""
from libc.stdint cimport int64_t
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_WRITABLE

cdef extern from *:
    """
    #include <stdint.h>
    static inline int kf_cas64(int64_t *p, int64_t expected, int64_t desired) {
        return __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    static inline int64_t kf_load64(int64_t *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
    static inline void kf_store64(int64_t *p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
    """
    bint kf_cas64(int64_t *p, int64_t expected, int64_t desired) nogil
    int64_t kf_load64(int64_t *p) nogil
    void kf_store64(int64_t *p, int64_t v) nogil


cdef inline int64_t* _word(Py_buffer* view, Py_ssize_t offset) except NULL:
    if offset < 0 or offset & 7 or offset + 8 > view.len:
        raise ValueError(f"word offset {offset} not 8-aligned inside a {view.len}-byte buffer")
    return <int64_t*>(<char*>view.buf + offset)


def compare_and_swap(buf, Py_ssize_t offset, int64_t expected, int64_t desired) -> bool:
    """Stores `desired` at `offset` if the word holds `expected`; True if it did."""
    cdef Py_buffer view
    cdef bint ok
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    try:
        ok = kf_cas64(_word(&view, offset), expected, desired)
    finally:
        PyBuffer_Release(&view)
    return ok


def load(buf, Py_ssize_t offset) -> int:
    """The word at `offset`."""
    cdef Py_buffer view
    cdef int64_t v
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    try:
        v = kf_load64(_word(&view, offset))
    finally:
        PyBuffer_Release(&view)
    return v


def store(buf, Py_ssize_t offset, int64_t value) -> None:
    """Stores `value` at `offset`."""
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    try:
        kf_store64(_word(&view, offset), value)
    finally:
        PyBuffer_Release(&view)
