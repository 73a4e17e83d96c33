"""Pure-Python twin of `kafkafast._native.shm_atomic` (cython_ext/shm_atomic.pyx).

The same three operations on an int64 word of a writable buffer shared between processes,
done by GCC's libatomic (`__atomic_compare_exchange_8`, `__atomic_load_8`,
`__atomic_store_8`, sequentially consistent) through ctypes on the word's address: the
instructions the compiled twin inlines (`lock cmpxchg` on x86-64), so a broker whose
workers mix the two twins still excludes correctly.
"""
from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

_SEQ_CST = 5

_lib = ctypes.CDLL(ctypes.util.find_library("atomic") or "libatomic.so.1")
_cas = _lib.__atomic_compare_exchange_8
_cas.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_int64, ctypes.c_int, ctypes.c_int]
_cas.restype = ctypes.c_bool
_load = _lib.__atomic_load_8
_load.argtypes = [ctypes.c_void_p, ctypes.c_int]
_load.restype = ctypes.c_int64
_store = _lib.__atomic_store_8
_store.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
_store.restype = None

# buffer id -> (the buffer, a ctypes view of it, its address, its length): the view pins the
# buffer's memory (an mmap cannot be closed while it exists), so the address stays valid.
_views: dict[int, tuple[Any, Any, int, int]] = {}


def _address(buf: Any, offset: int) -> int:
    entry = _views.get(id(buf))
    if entry is None or entry[0] is not buf:
        view = (ctypes.c_char * len(buf)).from_buffer(buf)
        entry = _views[id(buf)] = (buf, view, ctypes.addressof(view), len(buf))
    if offset < 0 or offset & 7 or offset + 8 > entry[3]:
        raise ValueError(f"word offset {offset} not 8-aligned inside a {entry[3]}-byte buffer")
    return entry[2] + offset


def compare_and_swap(buf: Any, offset: int, expected: int, desired: int) -> bool:
    """Stores `desired` at `offset` if the word holds `expected`; True if it did."""
    exp = ctypes.c_int64(expected)
    return bool(_cas(_address(buf, offset), ctypes.byref(exp), desired, _SEQ_CST, _SEQ_CST))


def load(buf: Any, offset: int) -> int:
    """The word at `offset`."""
    return int(_load(_address(buf, offset), _SEQ_CST))


def store(buf: Any, offset: int, value: int) -> None:
    """Stores `value` at `offset`."""
    _store(_address(buf, offset), value, _SEQ_CST)
