"""Generates the protocol codec modules from Kafka's JSON message schemas.

Input: `../shared/kafka-protocol/` (override with KAFKAFAST_PROTOCOL_DIR): `messages/*.json`
for requests, responses and headers, `group-coordinator/*.json` and
`transaction-coordinator/*.json` for internal-topic record formats, with `schemas/` beside this
module for messages and record formats newer than those (its README.md); `schema_patches.json`
beside this module adds versions newer than those schemas (new valid versions, new fields).
Output: `kafkafast/protocol/_generated/`, one module per API key (request and response
side by side), `headers.py`, `coordinator_records.py`, and `__init__.py` with the
registries. The output is committed; `tests/unit/test_protocol_generated.py` regenerates
into a temporary directory and fails on any difference.

Run: `python -m kafkafast.protocol.generator` (or `--check` to compare only). Without the
schemas both stop with exit status 2 and say where they looked; nothing is written.

Each generated struct class has `__slots__`, keyword construction with the schema's
defaults, `decode(reader, version)` (classmethod) and `encode(writer, version)`. Flexible
versions use compact strings/arrays/bytes and a tagged-field section after the fields of
every struct; known tagged fields are decoded into attributes and unknown ones kept in
`_unknown_tags` so that they round-trip.
"""
from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
OUT_DIR = PACKAGE_DIR / "_generated"
REPO_DIR = PACKAGE_DIR.parent.parent

PRIMITIVES = {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "string", "bytes", "records", "uuid"}
_FIXED_READ = {"bool": "boolean", "int8": "int8", "int16": "int16", "uint16": "uint16", "int32": "int32",
               "uint32": "uint32", "int64": "int64", "float64": "float64", "uuid": "uuid"}
INF = 1 << 30


def protocol_dir() -> Path:
    env = os.environ.get("KAFKAFAST_PROTOCOL_DIR")
    if env:
        return Path(env)
    return REPO_DIR.parent / "shared" / "kafka-protocol"


# ----------------------------------------------------------------------------- schema model
@dataclass(frozen=True)
class Versions:
    low: int
    high: int  # inclusive; INF for open-ended

    @staticmethod
    def parse(text: str | None) -> "Versions":
        if text is None or text == "none":
            return Versions(INF, -1)
        text = text.strip()
        if text.endswith("+"):
            return Versions(int(text[:-1]), INF)
        if "-" in text:
            a, b = text.split("-")
            return Versions(int(a), int(b))
        return Versions(int(text), int(text))

    @property
    def empty(self) -> bool:
        return self.low > self.high

    def intersect(self, other: "Versions") -> "Versions":
        return Versions(max(self.low, other.low), min(self.high, other.high))

    def contains_all(self, other: "Versions") -> bool:
        return other.empty or (self.low <= other.low and other.high <= self.high)

    def cond(self, var: str, within: "Versions") -> str | None:
        """A Python condition for `var` in self, given var is known to lie in `within`.
        None means always true; "False" means never."""
        eff = self.intersect(within)
        if eff.empty:
            return "False"
        parts = []
        if eff.low > within.low:
            parts.append(f"{var} >= {eff.low}")
        if eff.high < within.high:
            parts.append(f"{var} <= {eff.high}")
        return " and ".join(parts) if parts else None


@dataclass
class Field:
    name: str
    attr: str
    type: str  # element type for arrays
    is_array: bool
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: str | None
    struct: "Struct | None" = None
    flexible_override: Versions | None = None

    @property
    def is_struct(self) -> bool:
        return self.struct is not None


@dataclass
class Struct:
    name: str  # python class name
    short: str  # schema struct name
    fields: list[Field] = field(default_factory=list)


def snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    s = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s)
    return s.lower()


def load_json(path: Path) -> dict:
    text = re.sub(r"^\s*//.*$", "", path.read_text(), flags=re.M)
    return json.loads(text)


PATCHES_FILE = PACKAGE_DIR / "schema_patches.json"
SCHEMAS_DIR = PACKAGE_DIR / "schemas"  # coordinator record schemas the shared ones lack (its README.md)


def _insert_after(fields: list, anchor: str, new: list) -> bool:
    for i, f in enumerate(fields):
        if f.get("name") == anchor:
            fields[i + 1:i + 1] = new
            return True
        if _insert_after(f.get("fields", []), anchor, new):
            return True
    return False


def patched(spec: dict) -> dict:
    """The schema with this repository's patch for its message applied (`schema_patches.json`:
    versions newer than the shared schemas: a new validVersions, fields inserted after a named
    field, and `field_versions` for fields a newer version no longer has)."""
    patch = json.loads(PATCHES_FILE.read_text()).get(spec.get("name", ""))
    if not patch:
        return spec
    if "validVersions" in patch:
        spec["validVersions"] = patch["validVersions"]
    for anchor, new in patch.get("fields_after", {}).items():
        if not _insert_after(spec["fields"], anchor, new):
            raise ValueError(f"schema patch for {spec['name']}: no field {anchor}")
    for name, versions in patch.get("field_versions", {}).items():
        if not _set_versions(spec["fields"], name, versions):
            raise ValueError(f"schema patch for {spec['name']}: no field {name}")
    return spec


def _set_versions(fields: list, name: str, versions: str) -> bool:
    """Gives the first field called `name` (searched in nested structs) the versions `versions`:
    a field a newer version dropped."""
    for f in fields:
        if f.get("name") == name:
            f["versions"] = versions
            return True
        if _set_versions(f.get("fields", []), name, versions):
            return True
    return False


class Message:
    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.name: str = spec["name"]
        self.type: str = spec["type"]
        self.api_key: int | None = spec.get("apiKey")
        self.valid = Versions.parse(spec["validVersions"])
        self.flexible = Versions.parse(spec.get("flexibleVersions", "none"))
        self.structs: list[Struct] = []  # inner-first order
        self._common = {cs["name"]: cs for cs in spec.get("commonStructs", [])}
        self._built: dict[str, Struct] = {}
        self.root = self._build_struct(self.name, self.name, spec.get("fields", []))

    def _build_struct(self, cls_name: str, short: str, fields_spec: list[dict]) -> Struct:
        st = Struct(cls_name, short)
        for f in fields_spec:
            st.fields.append(self._build_field(f))
        self.structs.append(st)
        return st

    def _build_field(self, f: dict) -> Field:
        t: str = f["type"]
        is_array = t.startswith("[]")
        elem = t[2:] if is_array else t
        fld = Field(
            name=f["name"], attr=snake(f["name"]), type=elem, is_array=is_array,
            versions=Versions.parse(f.get("versions")),
            nullable=Versions.parse(f.get("nullableVersions")),
            tagged=Versions.parse(f.get("taggedVersions")),
            tag=f.get("tag"), default=f.get("default"),
            flexible_override=Versions.parse(f["flexibleVersions"]) if "flexibleVersions" in f else None,
        )
        if elem not in PRIMITIVES:
            if elem in self._built:
                fld.struct = self._built[elem]
            elif "fields" in f:
                fld.struct = self._build_struct(self.name + elem, elem, f["fields"])
                self._built[elem] = fld.struct
            elif elem in self._common:
                fld.struct = self._build_struct(self.name + elem, elem, self._common[elem]["fields"])
                self._built[elem] = fld.struct
            else:
                raise ValueError(f"{self.name}: unknown type {t}")
        return fld


# ----------------------------------------------------------------------------- code emission
class Emitter:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.indent = 0

    def __call__(self, line: str = "") -> None:
        self.lines.append(("    " * self.indent + line) if line else "")

    def block(self) -> "_Indent":
        return _Indent(self)


class _Indent:
    def __init__(self, e: Emitter) -> None:
        self.e = e

    def __enter__(self) -> None:
        self.e.indent += 1

    def __exit__(self, *a: object) -> None:
        self.e.indent -= 1


def default_expr(f: Field) -> str:
    """Python expression for a field's default value."""
    if f.is_array:
        return "[]" if f.default is None else ("None" if f.default == "null" else "[]")
    if f.is_struct:
        return "None" if f.default == "null" else f"{f.struct.name}()"  # type: ignore[union-attr]
    d = f.default if f.default is None or isinstance(f.default, str) else json.dumps(f.default)
    if d == "null":
        return "None"
    t = f.type
    if t == "bool":
        return "True" if (d or "false").lower() == "true" else "False"
    if t in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return str(int(d, 0)) if d else "0"
    if t == "float64":
        return repr(float(d)) if d else "0.0"
    if t == "string":
        return repr(d or "")
    if t == "uuid":
        return "ZERO_UUID"
    if t == "bytes":
        return "b''"
    if t == "records":
        return "None"
    raise ValueError(t)


def is_mutable_default(f: Field) -> bool:
    return f.is_array or (f.is_struct and f.default != "null")


class MessageGen:
    def __init__(self, msg: Message) -> None:
        self.msg = msg
        self.valid = msg.valid

    def flex_cond(self, within: Versions) -> str | None:
        return self.msg.flexible.cond("version", within)

    def emit(self, e: Emitter) -> None:
        for st in self.msg.structs:
            self.emit_struct(e, st)
            e()
            e()

    def emit_struct(self, e: Emitter, st: Struct) -> None:
        msg = self.msg
        is_root = st is msg.root
        e(f"class {st.name}:")
        with e.block():
            if is_root:
                if msg.api_key is not None:
                    e(f"API_KEY = {msg.api_key}")
                e(f"MIN_VERSION = {msg.valid.low}")
                e(f"MAX_VERSION = {msg.valid.high}")
                e(f"FLEXIBLE_VERSION = {msg.flexible.low if not msg.flexible.empty else None}")
            # The nested struct classes, assigned after the module's classes: declared here
            # for type checkers.
            nested = [s for s in msg.structs if s is not st] if is_root else \
                [f.struct for f in st.fields if f.is_struct]  # type: ignore[misc]
            for name, short in dict.fromkeys((n.name, n.short) for n in nested):  # type: ignore[union-attr]
                e(f'{short}: "ClassVar[type[{name}]]"')
            attrs = [f.attr for f in st.fields] + ["_unknown_tags"]
            e(f"__slots__ = ({', '.join(repr(a) for a in attrs)},)")
            e()
            # __init__
            params = []
            for f in st.fields:
                params.append(f"{f.attr}=_UNSET" if is_mutable_default(f) else f"{f.attr}={default_expr(f)}")
            params.append("_unknown_tags=None")
            e(f"def __init__(self, {', '.join(params)}):")
            with e.block():
                for f in st.fields:
                    if is_mutable_default(f):
                        e(f"self.{f.attr} = {default_expr(f)} if {f.attr} is _UNSET else {f.attr}")
                    else:
                        e(f"self.{f.attr} = {f.attr}")
                e("self._unknown_tags = _unknown_tags")
            e()
            e("def __repr__(self):")
            with e.block():
                inner = ", ".join(f"{f.attr}={{self.{f.attr}!r}}" for f in st.fields)
                e(f"return f\"{st.name}({inner})\"")
            e()
            e("def __eq__(self, other):")
            with e.block():
                e("if type(other) is not type(self):")
                with e.block():
                    e("return NotImplemented")
                if st.fields:
                    e("return " + " and ".join(f"_eq(self.{f.attr}, other.{f.attr})" for f in st.fields))
                else:
                    e("return True")
            e()
            self.emit_decode(e, st)
            e()
            self.emit_encode(e, st)

    # -- decode ---------------------------------------------------------------------
    def emit_decode(self, e: Emitter, st: Struct) -> None:
        e("@classmethod")
        e("def decode(cls, r, version):")
        with e.block():
            e("self = cls.__new__(cls)")
            e("self._unknown_tags = None")
            flex = self.flex_cond(self.valid)
            e(f"flexible = {flex if flex is not None else 'True'}")
            tagged_fields = [f for f in st.fields if f.tag is not None and not f.tagged.empty]
            for f in st.fields:
                regular = f.versions if f.tag is None else Versions(INF, -1)
                cond = regular.cond("version", self.valid)
                if cond == "False":
                    e(f"self.{f.attr} = {default_expr(f)}")
                    continue
                if cond is None:
                    self.emit_read(e, f, f"self.{f.attr}")
                else:
                    e(f"if {cond}:")
                    with e.block():
                        self.emit_read(e, f, f"self.{f.attr}")
                    e("else:")
                    with e.block():
                        e(f"self.{f.attr} = {default_expr(f)}")
            e("if flexible:")
            with e.block():
                e("n_tags = r.uvarint()")
                e("if n_tags > r.remaining():")
                with e.block():
                    e("raise DecodeError('tag count longer than the bytes left')")
                e("for _ in range(n_tags):")
                with e.block():
                    e("tag = r.uvarint()")
                    e("size = r.uvarint()")
                    first = True
                    for f in tagged_fields:
                        cond = f.tagged.cond("version", self.valid)
                        c = f"tag == {f.tag}" + (f" and {cond}" if cond else "")
                        e(f"{'if' if first else 'elif'} {c}:")
                        first = False
                        with e.block():
                            e("sub = Reader(r.raw(size))")
                            self.emit_read(e, f, f"self.{f.attr}", reader="sub", flexible_known=True)
                    if first:
                        e("if True:")
                    else:
                        e("else:")
                    with e.block():
                        e("if self._unknown_tags is None:")
                        with e.block():
                            e("self._unknown_tags = {}")
                        e("self._unknown_tags[tag] = bytes(r.raw(size))")
            e("return self")

    def _flex_expr(self, f: Field, flexible_known: bool) -> str:
        if f.flexible_override is not None:
            return f.flexible_override.cond("version", self.valid) or "True"
        return "True" if flexible_known else "flexible"

    def emit_read(self, e: Emitter, f: Field, target: str, reader: str = "r", flexible_known: bool = False) -> None:
        flex = self._flex_expr(f, flexible_known)
        nullable_cond = f.nullable.cond("version", self.valid)
        nullable = nullable_cond != "False"
        if f.is_array:
            e(f"n = {reader}.compact_array_length() if {flex} else {reader}.array_length()")
            e("if n < 0:")
            with e.block():
                if nullable:
                    if nullable_cond is None:
                        e(f"{target} = None")
                    else:
                        e(f"if not ({nullable_cond}):")
                        with e.block():
                            e("raise DecodeError('null array where not nullable')")
                        e(f"{target} = None")
                else:
                    e("raise DecodeError('null array where not nullable')")
            e("else:")
            with e.block():
                if f.is_struct:
                    e(f"_dec = {f.struct.name}.decode")  # type: ignore[union-attr]
                    e(f"{target} = [_dec({reader}, version) for _ in range(n)]")
                else:
                    e(f"{target} = [{self.prim_read(f.type, reader, flex, False)} for _ in range(n)]")
            return
        if f.is_struct:
            if nullable:
                e(f"if {reader}.int8() < 0:")
                with e.block():
                    e(f"{target} = None")
                e("else:")
                with e.block():
                    e(f"{target} = {f.struct.name}.decode({reader}, version)")  # type: ignore[union-attr]
            else:
                e(f"{target} = {f.struct.name}.decode({reader}, version)")  # type: ignore[union-attr]
            return
        if nullable and nullable_cond is not None and f.type in ("string", "bytes", "records"):
            e(f"if {nullable_cond}:")
            with e.block():
                e(f"{target} = {self.prim_read(f.type, reader, flex, True)}")
            e("else:")
            with e.block():
                e(f"{target} = {self.prim_read(f.type, reader, flex, False)}")
            return
        e(f"{target} = {self.prim_read(f.type, reader, flex, nullable)}")

    @staticmethod
    def prim_read(t: str, r: str, flex: str, nullable: bool) -> str:
        if t in _FIXED_READ:
            return f"{r}.{_FIXED_READ[t]}()"
        if t == "string":
            c, p = ("compact_nullable_string", "nullable_string") if nullable else ("compact_string", "string")
        elif t == "bytes":
            c, p = ("compact_nullable_bytes", "nullable_bytes") if nullable else ("compact_bytes", "bytes_")
        elif t == "records":
            c, p = "compact_nullable_bytes", "nullable_bytes"
        else:
            raise ValueError(t)
        if flex == "True":
            return f"{r}.{c}()"
        if flex == "False":
            return f"{r}.{p}()"
        return f"({r}.{c}() if {flex} else {r}.{p}())"

    # -- encode ---------------------------------------------------------------------
    def emit_encode(self, e: Emitter, st: Struct) -> None:
        e("def encode(self, w, version):")
        with e.block():
            flex = self.flex_cond(self.valid)
            e(f"flexible = {flex if flex is not None else 'True'}")
            tagged_fields = sorted((f for f in st.fields if f.tag is not None and not f.tagged.empty), key=lambda f: f.tag)
            for f in st.fields:
                if f.tag is not None:
                    continue
                cond = f.versions.cond("version", self.valid)
                if cond == "False":
                    continue
                if cond is None:
                    self.emit_write(e, f, f"self.{f.attr}")
                else:
                    e(f"if {cond}:")
                    with e.block():
                        self.emit_write(e, f, f"self.{f.attr}")
            e("if flexible:")
            with e.block():
                if not tagged_fields:
                    e("w.tagged_fields(self._unknown_tags)")
                else:
                    e("tags = dict(self._unknown_tags) if self._unknown_tags else {}")
                    for f in tagged_fields:
                        cond = f.tagged.cond("version", self.valid)
                        c = f"self.{f.attr} != {default_expr(f)}"
                        if cond:
                            c = f"({cond}) and {c}"
                        e(f"if {c}:")
                        with e.block():
                            e("sub = Writer()")
                            self.emit_write(e, f, f"self.{f.attr}", writer="sub", flexible_known=True)
                            e(f"tags[{f.tag}] = bytes(sub.buf)")
                    e("w.tagged_fields(tags)")

    def emit_write(self, e: Emitter, f: Field, value: str, writer: str = "w", flexible_known: bool = False) -> None:
        flex = self._flex_expr(f, flexible_known)
        nullable = f.nullable.cond("version", self.valid) != "False"
        if f.is_array:
            e(f"v = {value}")
            e("if v is None:")
            with e.block():
                e(f"{writer}.compact_array_length(-1) if {flex} else {writer}.array_length(-1)")
            e("else:")
            with e.block():
                e(f"{writer}.compact_array_length(len(v)) if {flex} else {writer}.array_length(len(v))")
                if f.is_struct:
                    e("for item in v:")
                    with e.block():
                        e(f"item.encode({writer}, version)")
                else:
                    e("for item in v:")
                    with e.block():
                        self.emit_prim_write(e, f.type, "item", writer, flex, False)
            return
        if f.is_struct:
            if nullable:
                e(f"if {value} is None:")
                with e.block():
                    e(f"{writer}.int8(-1)")
                e("else:")
                with e.block():
                    e(f"{writer}.int8(1)")
                    e(f"{value}.encode({writer}, version)")
            else:
                e(f"{value}.encode({writer}, version)")
            return
        self.emit_prim_write(e, f.type, value, writer, flex, nullable)

    @staticmethod
    def emit_prim_write(e: Emitter, t: str, value: str, w: str, flex: str, nullable: bool) -> None:
        if t in _FIXED_READ:
            e(f"{w}.{_FIXED_READ[t]}({value})")
            return
        if t == "records":
            e(f"{w}.records({value}, {flex})")
            return
        if t == "string":
            c, p = ("compact_nullable_string", "nullable_string") if nullable else ("compact_string", "string")
        else:
            c, p = ("compact_nullable_bytes", "nullable_bytes") if nullable else ("compact_bytes", "bytes_")
        if flex == "True":
            e(f"{w}.{c}({value})")
        elif flex == "False":
            e(f"{w}.{p}({value})")
        else:
            e(f"{w}.{c}({value}) if {flex} else {w}.{p}({value})")


HEADER = '''"""Generated by kafkafast.protocol.generator from {source}. Do not edit."""
# fmt: off
# ruff: noqa
from typing import ClassVar

from kafkafast.protocol.primitives import DecodeError, Reader, Writer, ZERO_UUID

_UNSET = object()


def _eq(a, b):
    if isinstance(a, memoryview) or isinstance(b, memoryview):
        return a is b or (a is not None and b is not None and bytes(a) == bytes(b))
    return a == b

'''


def emit_module(messages: list[Message], source: str) -> str:
    e = Emitter()
    for m in messages:
        MessageGen(m).emit(e)
        # nested struct classes reachable as attributes of the root class
        for st in m.structs:
            if st is not m.root:
                e(f"{m.root.name}.{st.short} = {st.name}")
        e()
        e()
    for m in messages:
        for st in m.structs:
            for f in st.fields:
                if f.is_struct and st is not m.root:
                    e(f"{st.name}.{f.struct.short} = {f.struct.name}")  # type: ignore[union-attr]
    body = "\n".join(e.lines).rstrip() + "\n"
    return HEADER.format(source=source) + "\n" + body


def module_name(msg_name: str) -> str:
    base = re.sub(r"(Request|Response)$", "", msg_name)
    return snake(base)


class SchemaDirMissing(FileNotFoundError):
    """The schema directory (or its messages/*.json) is not there: nothing to compare with."""


def generate(out_dir: Path, proto: Path | None = None) -> dict[str, str]:
    """Returns {relative file name: content} and writes nothing."""
    proto = proto or protocol_dir()
    if not any((proto / "messages").glob("*Request.json")):
        raise SchemaDirMissing(f"Kafka's protocol schemas are not at {proto} (no messages/*Request.json): put "
                               "the kafka-protocol directory at ../shared/kafka-protocol beside the clone, or "
                               "name it with KAFKAFAST_PROTOCOL_DIR")
    files: dict[str, str] = {}
    by_key: dict[int, dict[str, Message]] = {}
    headers: list[Message] = []
    data_msgs: list[Message] = []
    for path in sorted([*(proto / "messages").glob("*.json"), *(SCHEMAS_DIR / "messages").glob("*.json")]):
        spec = patched(load_json(path))
        msg = Message(spec)
        if msg.type in ("request", "response"):
            by_key.setdefault(msg.api_key, {})[msg.type] = msg  # type: ignore[arg-type]
        elif msg.type == "header":
            headers.append(msg)
        else:
            data_msgs.append(msg)
    registry_lines = []
    for key in sorted(by_key):
        pair = by_key[key]
        req, resp = pair["request"], pair["response"]
        mod = module_name(req.name)
        files[f"{mod}.py"] = emit_module([req, resp], f"messages/{req.name}.json and {resp.name}.json")
        registry_lines.append((key, mod, req.name, resp.name, req.spec.get("listeners", [])))
    files["headers.py"] = emit_module(sorted(headers, key=lambda m: m.name), "messages/RequestHeader.json and ResponseHeader.json")
    coord: list[Message] = []
    for sub in ("group-coordinator", "transaction-coordinator"):
        for path in sorted((proto / sub).glob("*.json")):
            coord.append(Message(load_json(path)))
    for path in sorted(SCHEMAS_DIR.glob("*-coordinator/*.json")):  # record formats newer than the shared schemas
        coord.append(Message(load_json(path)))
    files["coordinator_records.py"] = emit_module(
        coord, "group-coordinator/*.json and transaction-coordinator/*.json, and kafkafast/protocol/schemas/*/*.json")
    # registry
    lines = ['"""Generated by kafkafast.protocol.generator. Do not edit.',
             "",
             "REQUESTS / RESPONSES map an API key to its request / response class;",
             "API_NAMES maps an API key to its name; LISTENERS to the schema's listeners.",
             '"""', "# fmt: off", "# ruff: noqa"]
    for key, mod, req, resp, _ in registry_lines:
        lines.append(f"from kafkafast.protocol._generated.{mod} import {req}, {resp}")
    lines.append("")
    lines.append("REQUESTS = {")
    lines += [f"    {key}: {req}," for key, _, req, _, _ in registry_lines]
    lines.append("}")
    lines.append("RESPONSES = {")
    lines += [f"    {key}: {resp}," for key, _, _, resp, _ in registry_lines]
    lines.append("}")
    lines.append("API_NAMES = {")
    lines += [f"    {key}: {req[:-len('Request')]!r}," for key, _, req, _, _ in registry_lines]
    lines.append("}")
    lines.append("LISTENERS = {")
    lines += [f"    {key}: {tuple(lst)!r}," for key, _, _, _, lst in registry_lines]
    lines.append("}")
    files["__init__.py"] = "\n".join(lines) + "\n"
    return files


def write(out_dir: Path = OUT_DIR) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    files = generate(out_dir)
    for old in out_dir.glob("*.py"):
        if old.name not in files:
            old.unlink()
    for name, content in files.items():
        (out_dir / name).write_text(content)


def diff(out_dir: Path = OUT_DIR) -> list[str]:
    """Names of generated files that differ from (or are missing in) out_dir."""
    files = generate(out_dir)
    bad = []
    for name, content in files.items():
        p = out_dir / name
        if not p.exists() or p.read_text() != content:
            bad.append(name)
    for old in out_dir.glob("*.py"):
        if old.name not in files:
            bad.append(old.name)
    return bad


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        return _run(argv)
    except SchemaDirMissing as exc:
        print(f"kafkafast.protocol.generator: {exc}", file=sys.stderr)
        return 2


def _run(argv: list[str]) -> int:
    if "--check" in argv:
        bad = diff()
        if bad:
            print("generated protocol modules differ:", ", ".join(bad))
            return 1
        print("generated protocol modules are up to date")
        return 0
    write()
    print(f"wrote {OUT_DIR}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
