"""JAAS configuration text as Kafka reads it from `sasl.jaas.config`:
`<LoginModule class> <required|requisite|sufficient|optional> key=value key="value" ... ;`
Only the options matter here (PlainLoginModule's `user_<name>="<password>"`, the
unsecured OAUTHBEARER validator's `unsecuredValidator*` options)."""
from __future__ import annotations

import re

_TOKEN = re.compile(r'\s*(?:([A-Za-z0-9_.$\-]+)\s*=\s*(?:"((?:\\.|[^"\\])*)"|([^\s;"]+))|(;))')
FLAGS = ("required", "requisite", "sufficient", "optional")


class JaasError(ValueError):
    pass


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """(login module class name, options) of a single-module JAAS entry."""
    text = text.strip()
    m = re.match(r"([A-Za-z0-9_.$]+)\s+(\w+)", text)
    if m is None or m.group(2).lower() not in FLAGS:
        raise JaasError("sasl.jaas.config: expected '<LoginModule> required key=value ...;'")
    options: dict[str, str] = {}
    pos = m.end()
    while True:
        t = _TOKEN.match(text, pos)
        if t is None:
            raise JaasError(f"sasl.jaas.config: cannot parse {text[pos:pos + 40]!r}")
        pos = t.end()
        if t.group(4):
            break
        value = t.group(2) if t.group(2) is not None else t.group(3)
        options[t.group(1)] = re.sub(r"\\(.)", r"\1", value)
    if text[pos:].strip():
        raise JaasError("sasl.jaas.config: only one login module per entry is supported")
    return m.group(1), options


def jaas_for(listener, mechanism: str) -> tuple[str, dict[str, str]] | None:
    """The JAAS entry for `mechanism` on `listener`: listener.name.<l>.<mech>.sasl.jaas.config,
    then sasl.jaas.config (as Kafka looks them up)."""
    prefix = f"listener.name.{listener.name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = listener.props.get(prefix) or listener.props.get("sasl.jaas.config")
    return parse_jaas(text) if text else None
