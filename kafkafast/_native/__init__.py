"""Compiled twins built from `cython_ext/` by setup.py (`records`, `index_search`).

Do not import these modules directly: use `kafkafast.native.load(name)`, which falls back
to the pure-Python twin when the compiled module is missing.
"""
