"""Named listeners: `listeners`, `advertised.listeners`, `listener.security.protocol.map`.

`listeners=CLIENT://0.0.0.0:9093,INTERNAL://10.0.0.5:9094` names each endpoint; the map
(`CLIENT:SASL_SSL,INTERNAL:SSL`; Kafka's default maps each protocol name to itself) gives
its security protocol. `advertised.listeners` is matched by name; a listener without an
advertised entry advertises its bind address (port 0 binds a free port, which is then
advertised). Per-listener settings use Kafka's prefix `listener.name.<name lower>.<key>`
(see `ListenerSpec.get`). No I/O here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in PROTOCOLS)


@dataclass
class ListenerSpec:
    name: str  # upper case, as Kafka normalises it
    protocol: str
    host: str
    port: int
    advertised_host: str
    advertised_port: int  # 0: the port actually bound
    props: dict = field(default_factory=dict, repr=False)

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def get(self, key: str, default: Any = None) -> Any:
        """A setting with its `listener.name.<listener>.` override, as Kafka resolves it."""
        v = self.props.get(f"listener.name.{self.name.lower()}.{key}")
        if v is None:
            v = self.props.get(key)
        return default if v is None else v

    def endpoint(self) -> tuple[str, int]:
        return self.advertised_host or self.host or "127.0.0.1", self.advertised_port or self.port


def parse_endpoints(text: str) -> list[tuple[str, str, int]]:
    """`NAME://host:port,...` -> [(NAME, host, port)]; listener names may hold `_`
    (SASL_SSL), which URL parsers refuse as a scheme; IPv6 hosts in brackets."""
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, sep, rest = item.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not name or not port.isdigit() or int(port) > 65535:
            raise ValueError(f"bad listener {item!r}: expected NAME://host:port")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        out.append((name.upper(), host, int(port)))
    return out


def protocol_map(props: dict) -> dict[str, str]:
    text = props.get("listener.security.protocol.map") or DEFAULT_PROTOCOL_MAP
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, sep, proto = item.partition(":")
        proto = proto.strip().upper()
        if not sep or proto not in PROTOCOLS:
            raise ValueError(f"listener.security.protocol.map: bad entry {item!r} "
                             f"(protocols: {', '.join(PROTOCOLS)})")
        out[name.strip().upper()] = proto
    return out


def listener_specs(props: dict) -> list[ListenerSpec]:
    """Every configured listener, in the order of `listeners`."""
    pmap = protocol_map(props)
    binds = parse_endpoints(props.get("listeners") or "PLAINTEXT://127.0.0.1:9092")
    adv = {n: (h, p) for n, h, p in parse_endpoints(props.get("advertised.listeners") or "")}
    names = [n for n, _, _ in binds]
    if len(set(names)) != len(names):
        raise ValueError(f"listeners: each listener name must be unique: {names}")
    for name in adv:
        if name not in names:
            raise ValueError(f"advertised.listeners names {name}, which is not in listeners")
    specs = []
    for name, host, port in binds:
        if name not in pmap:
            raise ValueError(f"listener {name} has no entry in listener.security.protocol.map")
        ahost, aport = adv.get(name, (host, port))
        if ahost in ("0.0.0.0", "::"):
            raise ValueError(f"listener {name}: advertised.listeners cannot use the nonroutable meta-address "
                             f"{ahost}; advertise a routable address for it")
        specs.append(ListenerSpec(name, pmap[name], host, port, ahost, aport, props))
    inter = props.get("inter.broker.listener.name")
    if inter and inter.upper() not in names:
        raise ValueError(f"inter.broker.listener.name {inter} is not in listeners")
    return specs
