"""Choice between the compiled twins (`kafkafast._native.*`) and their pure-Python twins.

Each compiled module built from `cython_ext/` has a pure twin with the identical function
set (`PURE_MODULES`). `load(name)` makes the choice once per name and caches it:

* `KAFKAFAST_PURE=1` in the environment forces the pure twin;
* otherwise the compiled module is used if importable, else the pure twin with a WARNING.

The choice is logged at INFO on the "kafkafast.native" logger; `native_status()` reports it.
"""
from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType

logger = logging.getLogger("kafkafast.native")

PURE_MODULES: dict[str, str] = {
    "records": "kafkafast.records._pure_codec",
    "index_search": "kafkafast.records._pure_index_search",
    "arrow_decode": "kafkafast.client._pure_arrow_decode",
    "shm_atomic": "kafkafast.runtime._pure_shm_atomic",
    "shm_slots": "kafkafast.runtime._pure_shm_slots",
}
COMPILED_PACKAGE = "kafkafast._native"

FORCE_PURE: bool = os.environ.get("KAFKAFAST_PURE", "") == "1"

_loaded: dict[str, ModuleType] = {}
_kind: dict[str, str] = {}


def load_compiled(name: str) -> ModuleType:
    """The compiled twin `kafkafast._native.<name>`; ImportError if it was not built."""
    if name not in PURE_MODULES:
        raise KeyError(f"no twin named {name!r}")
    return importlib.import_module(f"{COMPILED_PACKAGE}.{name}")


def load_pure(name: str) -> ModuleType:
    """The pure-Python twin of `name`."""
    return importlib.import_module(PURE_MODULES[name])


def load(name: str) -> ModuleType:
    """The twin chosen for `name` (compiled unless forced pure or not importable)."""
    module = _loaded.get(name)
    if module is not None:
        return module
    if name not in PURE_MODULES:
        raise KeyError(f"no twin named {name!r}")
    error: ImportError | None = None
    if FORCE_PURE:
        module, kind = load_pure(name), "pure"
    else:
        try:
            module, kind = load_compiled(name), "cython"
        except ImportError as exc:
            module, kind, error = load_pure(name), "pure", exc
    if name in _loaded:
        # Importing a twin imports the package that uses it, which called load() for the
        # same name in the meantime; that call made (and logged) the choice.
        return _loaded[name]
    if error is not None:
        logger.warning("%s: compiled twin not importable (%s); using the pure-Python twin", name, error)
    elif kind == "pure":
        logger.info("%s: pure-Python twin loaded (KAFKAFAST_PURE=1)", name)
    else:
        logger.info("%s: compiled twin %s loaded", name, module.__name__)
    _loaded[name] = module
    _kind[name] = kind
    return module


def native_status() -> dict[str, str]:
    """For every twin, which one is in use: "cython" or "pure"."""
    for name in PURE_MODULES:
        load(name)
    return {name: _kind[name] for name in PURE_MODULES}
