"""Broker configuration: Kafka's property names and defaults.

`BrokerConfig.load(path, overrides)` reads a properties file with java.util.Properties'
rules (`parse_properties`) and applies `--set key=value` overrides. Every value is parsed and
validated against the table of known configs (`kafkafast.config_def.BROKER_CONFIGS`, Kafka's
ConfigDef): a bad one raises ConfigError `Invalid value X for configuration Y: reason`. An
unknown key is kept and logged at WARN once, as Kafka does. Broker-level log settings
map to the topic-level names the storage layer uses (`log.segment.bytes` ->
`segment.bytes`, ...), the same mapping Kafka applies to topics without overrides.
"""
from __future__ import annotations

import errno
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field

from kafkafast.config_def import (
    BROKER_CONFIGS, LONG_MAX, PASSWORD, SECURITY_PROTOCOLS, ConfigError, ibp_at_least, is_known)

log = logging.getLogger("kafkafast.config")

# Default ratio of message.max.decompressed.bytes to message.max.bytes (a topic's
# max.message.bytes where it is larger): room for what real producers compress (text and
# JSON 5-20x), far below what a compression bomb expands to (1000x and more).
DECOMPRESSED_PER_MESSAGE_BYTES = 64

DEFAULT_PROTOCOL_MAP = BROKER_CONFIGS["listener.security.protocol.map"].default or ""  # Kafka's

# name -> default (as a string, None meaning "not set"), from the table of known configs
DEFAULTS: dict[str, str | None] = {name: key.default for name, key in BROKER_CONFIGS.items()}

# broker property -> topic-level property (Kafka's LogConfig synonyms)
TOPIC_SYNONYMS: dict[str, str] = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "message.max.bytes": "max.message.bytes",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "log.message.timestamp.difference.max.ms": "message.timestamp.difference.max.ms",
    "log.message.format.version": "message.format.version",
    "log.message.downconversion.enable": "message.downconversion.enable",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "min.insync.replicas": "min.insync.replicas",
    "compression.type": "compression.type",
}


def max_decompressed_bytes(setting: str | None, max_message_bytes: int) -> int:
    """`message.max.decompressed.bytes` (a string, None when unset) in effect for batches
    bounded by `max_message_bytes`."""
    if setting is not None:
        return int(setting)
    return DECOMPRESSED_PER_MESSAGE_BYTES * max_message_bytes


_BLANK = " \t\f"  # java.util.Properties' white space
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str, source: str = "properties") -> dict[str, str]:
    """java.util.Properties.load's rules: `#`/`!` comment lines (only where a line starts),
    `=`, `:` or white space between key and value, a line ending in an odd number of
    backslashes continued on the next (its leading white space dropped), and the escapes
    `\\t \\n \\r \\f \\uXXXX` (any other escaped character stands for itself)."""
    props: dict[str, str] = {}
    parts = re.split(r"(\r\n|\r|\n)", text)
    lines, breaks = parts[0::2], parts[1::2]
    i = 0
    while i < len(lines):
        number, line = i + 1, lines[i].lstrip(_BLANK)
        i += 1
        if not line or line[0] in "#!":
            continue
        at_end = False  # a backslash (and one line break char) ends the text: Java keeps the line, even empty
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            line = line[:-1]
            at_end = i == len(lines) or (i == len(lines) - 1 and not lines[i] and breaks[i - 1] != "\r\n")
            if i < len(lines):
                more = lines[i].lstrip(_BLANK)
                i += 1
                # nothing read yet: still a new line to Java, so `#`/`!` starts a comment there
                line += "" if not line and more[:1] in ("#", "!") else more
        if not line and not at_end:  # a lone backslash continued by a blank line: no entry
            continue
        key, value = _split_entry(line)
        try:
            props[_unescape(key)] = _unescape(value)
        except ValueError as exc:
            raise ConfigError(f"{source} line {number}: {exc}") from None
    return props


def _split_entry(line: str) -> tuple[str, str]:
    """The key ends at the first unescaped `=`, `:` or white space; then white space, at most
    one `=`/`:`, white space; the rest is the value."""
    pos, n = 0, len(line)
    while pos < n and line[pos] not in "=:" + _BLANK:
        pos += 2 if line[pos] == "\\" else 1
    key, pos = line[:pos], min(pos, n)
    has_sep = pos < n and line[pos] in "=:"
    pos += 1 if has_sep else 0
    while pos < n and (line[pos] in _BLANK or (not has_sep and line[pos] in "=:")):
        has_sep = has_sep or line[pos] in "=:"
        pos += 1
    return key, line[pos:]


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out, pos = [], 0
    while pos < len(text):
        c = text[pos]
        pos += 1
        if c != "\\" or pos == len(text):
            out.append(c if c != "\\" else "")
            continue
        c = text[pos]
        pos += 1
        if c == "u":
            digits = text[pos:pos + 4]
            if not re.fullmatch(r"[0-9A-Fa-f]{4}", digits):
                raise ValueError("Malformed \\uxxxx encoding.")
            out.append(chr(int(digits, 16)))
            pos += 4
        else:
            out.append(_ESCAPES.get(c, c))
    text = "".join(out)
    # two \\uXXXX escapes of a surrogate pair are one character, as in Java's UTF-16 strings
    return text.encode("utf-16", "surrogatepass").decode("utf-16")


# Kafka's listener grammar: NAME://host:port, an IPv6 host in brackets, an empty host for all interfaces
LISTENER_RE = re.compile(r"^([A-Za-z0-9_.-]+)://\[?([0-9A-Za-z%._:-]*?)\]?:([0-9]+)$")


@dataclass(frozen=True)
class Listener:
    name: str  # upper-cased, as Kafka normalises listener names
    host: str  # "" binds every interface
    port: int
    security_protocol: str = "PLAINTEXT"


def parse_protocol_map(text: str) -> dict[str, str]:
    """`listener.security.protocol.map`: NAME:PROTOCOL pairs, comma-separated."""
    out: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, sep, proto = item.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name:
            raise ConfigError(f"listener.security.protocol.map: bad entry {item!r}, expected NAME:PROTOCOL")
        if proto not in SECURITY_PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: unknown security protocol {proto!r} for listener "
                              f"{name} (one of {', '.join(SECURITY_PROTOCOLS)})")
        if name in out:
            raise ConfigError(f"listener.security.protocol.map: listener {name} is mapped twice")
        out[name] = proto
    return out


def parse_listeners(text: str, protocol_map: dict[str, str] | None = None, *,
                    setting: str = "listeners") -> list[Listener]:
    """`NAME://host:port,...`; each NAME's security protocol comes from `protocol_map`
    (Kafka's default map when None). Names must be unique."""
    protocols = parse_protocol_map(DEFAULT_PROTOCOL_MAP) if protocol_map is None else protocol_map
    out: list[Listener] = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        m = LISTENER_RE.match(item)
        if m is None or not 0 <= int(m.group(3)) <= 65535:
            raise ConfigError(f"{setting}: bad listener {item!r}, expected NAME://host:port")
        name, host, port = m.group(1).upper(), m.group(2), int(m.group(3))
        proto = protocols.get(name)
        if proto is None:
            raise ConfigError(f"{setting}: no security protocol defined for listener {name} "
                              "(add it to listener.security.protocol.map)")
        if any(x.name == name for x in out):
            raise ConfigError(f"{setting}: listener {name} is defined twice; each listener needs its own name")
        out.append(Listener(name, host, port, proto))
    if not out:
        raise ConfigError(f"{setting}: no listener defined")
    return out


@dataclass
class BrokerConfig:
    props: dict[str, str | None] = field(default_factory=lambda: dict(DEFAULTS))

    @classmethod
    def load(cls, path: str | None = None, overrides: dict[str, str] | None = None) -> "BrokerConfig":
        props = dict(DEFAULTS)
        supplied: dict[str, str] = {}
        if path:
            with open(path, encoding="utf-8") as fh:
                supplied.update(parse_properties(fh.read(), path))
        supplied.update(overrides or {})
        for key, value in supplied.items():
            spec = BROKER_CONFIGS.get(key)
            # ConfigDef trims every value but a password's
            props[key] = value if spec is not None and spec.type == PASSWORD else value.strip()
            if not is_known(key):
                log.warning("The configuration '%s' was supplied but isn't a known config.", key)
        cfg = cls(props)
        cfg.validate()
        return cfg

    # -- typed accessors ------------------------------------------------------------------
    def get(self, key: str) -> str | None:
        return self.props.get(key)

    def get_int(self, key: str) -> int:
        v = self.props.get(key)
        if v is None:
            raise KeyError(key)
        return int(v)

    def get_bool(self, key: str) -> bool:
        """A boolean config (validated at load: only true/false, in any case)."""
        return str(self.props.get(key)).strip().lower() == "true"

    def validate(self) -> None:
        """Every known config's value parsed as its type and checked by its validator
        (ConfigError with Kafka's message); the listeners parsed."""
        for key, value in self.props.items():
            spec = BROKER_CONFIGS.get(key)
            if spec is not None:
                spec.parse(value)
        self._check_listeners()
        self._check_inter_broker_protocol()

    def _check_inter_broker_protocol(self) -> None:
        """Record batches v2 (Kafka's message format 0.11.0) need inter.broker.protocol.version
        0.11.0 or later. Kafka refuses an older one beside the default log.message.format.version
        with the message below; beside an older message format it would store message sets v0/v1,
        which kafkafast does not write."""
        ibp = self.props.get("inter.broker.protocol.version")
        if ibp is None or ibp_at_least(ibp, "0.11.0-IV0"):
            return
        fmt = self.props.get("log.message.format.version") or "3.0-IV1"
        if ibp_at_least(fmt, "0.11.0-IV0"):
            raise ConfigError(f"log.message.format.version {fmt} can only be used when "
                              f"inter.broker.protocol.version is set to version 0.11.0 or higher")
        raise ConfigError(f"inter.broker.protocol.version {ibp}: kafkafast stores record batches v2 only "
                          f"(message format 0.11.0 and later), not the older message sets of "
                          f"log.message.format.version {fmt}")

    def _check_listeners(self) -> None:
        """Listener names and protocols are checked by parsing them; an advertised listener
        must be one of the listeners."""
        listeners = self.listeners()
        names = {x.name for x in listeners}
        for adv in self.advertised_listeners():
            if adv.name not in names:
                raise ConfigError(f"advertised.listeners: listener {adv.name} is not one of listeners "
                                  f"({', '.join(sorted(names))})")

    def max_decompressed_bytes(self, max_message_bytes: int | None = None) -> int:
        """Largest size the records of one compressed batch may decompress to:
        `message.max.decompressed.bytes` if set, else DECOMPRESSED_PER_MESSAGE_BYTES times
        `max_message_bytes` (the topic's max.message.bytes) or message.max.bytes."""
        return max_decompressed_bytes(self.props.get("message.max.decompressed.bytes"),
                                      self.get_int("message.max.bytes") if max_message_bytes is None
                                      else max_message_bytes)

    @property
    def node_id(self) -> int:
        v = self.props.get("node.id")
        return int(v) if v is not None else self.get_int("broker.id")

    @property
    def log_dirs(self) -> list[str]:
        v = self.props.get("log.dirs") or self.props.get("log.dir") or "/tmp/kafka-logs"
        return [os.path.abspath(d.strip()) for d in v.split(",") if d.strip()]

    def check_log_dirs(self) -> None:
        """Creates the log dirs and checks each holds a file, as Kafka's LogManager does at
        start. One that fails is taken offline by the broker (logged here); the broker cannot
        start when the first (it holds meta.properties and the topic metadata) or every one fails."""
        failed: dict[str, str] = {}
        for d in self.log_dirs:
            try:
                if os.path.exists(d) and not os.path.isdir(d):
                    raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
                os.makedirs(d, exist_ok=True)
                fd, probe = tempfile.mkstemp(prefix=".kafkafast-probe-", dir=d)
                os.close(fd)
                os.unlink(probe)
            except OSError as exc:
                failed[d] = exc.strerror or str(exc)
                log.error("log dir %s cannot be used: %s", d, failed[d])
        if self.log_dirs[0] in failed or len(failed) == len(self.log_dirs):
            key = "log.dirs" if self.props.get("log.dirs") else "log.dir"
            first = next(iter(failed))
            raise ConfigError(f"Invalid value {self.props.get(key)} for configuration {key}: "
                              f"{first}: {failed[first]}")

    def protocol_map(self) -> dict[str, str]:
        return parse_protocol_map(self.props.get("listener.security.protocol.map") or DEFAULT_PROTOCOL_MAP)

    def listeners(self) -> list[Listener]:
        return parse_listeners(self.props.get("listeners") or "PLAINTEXT://127.0.0.1:9092", self.protocol_map())

    def advertised_listeners(self) -> list[Listener]:
        adv = self.props.get("advertised.listeners")
        return parse_listeners(adv, self.protocol_map(), setting="advertised.listeners") if adv else self.listeners()

    def retention_ms(self) -> int:
        for key, mult in (("log.retention.ms", 1), ("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)):
            v = self.props.get(key)
            if v is not None:
                n = int(v)
                return n if n < 0 else n * mult
        return 7 * 24 * 3_600_000

    def roll_ms(self) -> int:
        v = self.props.get("log.roll.ms")
        if v is not None:
            return int(v)
        return int(self.props.get("log.roll.hours") or 168) * 3_600_000

    def flush_ms(self) -> int:
        v = self.props.get("log.flush.interval.ms")
        if v is not None:
            return int(v)
        return int(self.props.get("log.flush.scheduler.interval.ms") or LONG_MAX)

    def topic_defaults(self) -> dict[str, str]:
        """Topic-level config defaults implied by the broker settings."""
        out: dict[str, str] = {}
        for broker_key, topic_key in TOPIC_SYNONYMS.items():
            v = self.props.get(broker_key)
            if v is not None:
                out[topic_key] = v
        out["retention.ms"] = str(self.retention_ms())
        out["segment.ms"] = str(self.roll_ms())
        out["flush.ms"] = str(self.flush_ms())
        return out

    def topic_config_source(self, topic_key: str) -> str | None:
        """The broker property a topic-level default comes from (for DescribeConfigs synonyms)."""
        for broker_key, tk in TOPIC_SYNONYMS.items():
            if tk == topic_key:
                return broker_key
        return None
