"""What every client command shares: the bootstrap and --command-config flags, client
properties (Kafka's names) turned into keyword settings, table and JSON output."""
from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import socket
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from kafkafast.client.admin import AdminClient
from kafkafast.config import parse_properties
from kafkafast.protocol.errors import for_code
from kafkafast.security.client import ClientSecurity

T = TypeVar("T")

BOOTSTRAP_ENV = "KAFKAFAST_BOOTSTRAP_SERVERS"
DEFAULT_PORT = 9092

# Properties kafkafast's client has no use for: accepted silently, as the Java tools do.
_IGNORED = {"bootstrap.servers", "key.serializer", "value.serializer", "key.deserializer", "value.deserializer"}


class CommandError(Exception):
    """A user-facing failure: printed as one line, exit code 1."""


def add_bootstrap(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    env = os.environ.get(BOOTSTRAP_ENV)
    p.add_argument("--bootstrap-server", required=required and not env, default=env, metavar="HOST:PORT[,...]",
                   help=f"broker(s) to connect to; the port defaults to {DEFAULT_PORT} "
                        f"(default: ${BOOTSTRAP_ENV}{' = ' + env if env else ''})")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties file (Kafka's names: client.id, request.timeout.ms, acks, "
                        "security.protocol, ssl.*, sasl.*, ...)")


def normalize_bootstrap(servers: str) -> str:
    """`host` means `host:9092` (as rpk); a port that is not a number is an error."""
    out = []
    for item in (i.strip() for i in servers.split(",")):
        if not item:
            continue
        address = item.split("://", 1)[-1]
        host, sep, port = address.rpartition(":")
        if not sep or host.count(":") and not host.endswith("]"):  # `host`, or a bare IPv6 address
            item += f":{DEFAULT_PORT}"
        elif not port.isdigit():
            raise CommandError(f"--bootstrap-server {item}: the port must be a number")
        out.append(item)
    if not out:
        raise CommandError("--bootstrap-server names no broker")
    return ",".join(out)


def unreachable(servers: str, timeout: float = 3.0) -> str | None:
    """`cannot reach HOST:PORT: REASON` for the first bootstrap address that refuses a TCP
    connection, None when every one accepts (the failure was elsewhere)."""
    for item in servers.split(","):
        host, _, port = item.split("://", 1)[-1].rpartition(":")
        host = host.strip("[]")
        try:
            socket.create_connection((host, int(port)), timeout=timeout).close()
        except socket.gaierror as exc:
            return f"cannot reach {item}: unknown host ({exc.strerror})"
        except OSError as exc:
            reason = exc.strerror or ("timed out" if isinstance(exc, TimeoutError) else type(exc).__name__)
            return f"cannot reach {item}: {reason[0].lower() + reason[1:]}"
    return None


def add_output(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output", choices=("text", "json"), default="text", help="json: one JSON document on stdout")


def example_epilog(*lines: str) -> str:
    return "example:\n" + "\n".join(f"  {line}" for line in lines)


def parser_for(sub: Any, name: str, help_: str, examples: Sequence[str],
               aliases: Sequence[str] = ()) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=help_, description=help_, epilog=example_epilog(*examples),
                          formatter_class=argparse.RawDescriptionHelpFormatter, aliases=list(aliases))


def admin_tool_parser(sub: Any, name: str, help_: str, examples: Sequence[str], *,
                      describe: str | None = None) -> argparse.ArgumentParser:
    """The parser of an admin tool: --bootstrap-server, --command-config and, when `describe`
    says what it shows, Kafka's required --describe flag."""
    p = parser_for(sub, name, help_, examples)
    add_bootstrap(p)
    if describe:
        p.add_argument("--describe", action="store_true", required=True, help=describe)
    return p


def report_each(results: Iterable[tuple[int, str, str]]) -> int:
    """Prints each (error code, line if 0, line otherwise); exit code 1 if one failed."""
    failed = 0
    for code, ok, error in results:
        failed += bool(code)
        print(error if code else ok)
    return 1 if failed else 0


def load_client_properties(path: str | None, extra: Iterable[str] = (), *,
                           secure_ok: bool = False) -> dict[str, str]:
    """The --command-config file plus `key=value` items (later ones win). `secure_ok`: the
    command connects through `client_security`, so any security.protocol."""
    props: dict[str, str] = {}
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                props.update(parse_properties(fh.read()))
        except OSError as exc:
            raise CommandError(f"cannot read --command-config {path}: {exc.strerror}") from exc
    for item in extra:
        if "=" not in item:
            raise CommandError(f"expected key=value, got {item!r}")
        k, v = item.split("=", 1)
        props[k.strip()] = v.strip()
    proto = props.get("security.protocol", "PLAINTEXT").upper()
    if proto != "PLAINTEXT" and not secure_ok:
        raise CommandError(f"security.protocol={proto}: this command's client speaks PLAINTEXT only "
                           "(the admin commands, produce, consume and bench speak SSL and SASL too)")
    return props


def client_security(props: dict[str, str]) -> Any:
    """The TLS context and SASL login of `security.protocol` & co., None for PLAINTEXT."""
    if props.get("security.protocol", "PLAINTEXT").upper() == "PLAINTEXT":
        return None
    try:
        return ClientSecurity(props)
    except (ValueError, OSError) as exc:
        raise CommandError(f"client properties: {exc}") from exc


def merged_client_properties(command_config: str | None, config_file: str | None,
                             items: Iterable[str] = ()) -> dict[str, str]:
    """--command-config, then the tool's own properties file (--producer.config,
    --consumer.config), then its key=value items: later ones win, as in Kafka's tools. The
    security settings among them go to `client_security`."""
    props = load_client_properties(command_config, secure_ok=True)
    props.update(load_client_properties(config_file, items, secure_ok=True))
    return props


def settings_for(cls: Any, props: dict[str, str]) -> dict[str, Any]:
    """Keyword settings of a kafkafast client class from Kafka property names
    (`linger.ms` -> linger_ms), converted to the parameter's default's type; `security.protocol`,
    `ssl.*` and `sasl.*` become its `security` (ClientSecurity, which refuses a setting it cannot
    honour). Properties the class does not take are reported on stderr and left out."""
    params = inspect.signature(cls).parameters
    out: dict[str, Any] = {}
    for key, value in props.items():
        if key in _IGNORED or key.startswith("security.") or key.startswith("ssl.") or key.startswith("sasl."):
            continue
        name = key.replace(".", "_").replace("-", "_")
        param = params.get(name)
        if param is None or param.kind is not inspect.Parameter.KEYWORD_ONLY:
            print(f"warning: property {key} is not used by kafkafast's client", file=sys.stderr)
            continue
        out[name] = _convert(value, param.default)
    if "security" in params:
        out["security"] = client_security(props)
    return out


def _convert(value: str, default: Any) -> Any:
    if isinstance(default, bool):
        return value.strip().lower() == "true"
    if isinstance(default, int):
        try:
            return int(value)
        except ValueError:
            return value  # acks=all
    if isinstance(default, float):
        return float(value)
    return value


def admin_settings(props: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "client.id" in props:
        out["client_id"] = props["client.id"]
    if "request.timeout.ms" in props:
        out["request_timeout_ms"] = int(props["request.timeout.ms"])
    return out


def run_admin(args: argparse.Namespace, fn: Callable[[Any], Awaitable[T]]) -> T:
    """Runs `fn(admin)` with an AdminClient for --bootstrap-server/--command-config."""
    props = load_client_properties(getattr(args, "command_config", None), secure_ok=True)
    security = client_security(props)

    async def go() -> T:
        async with AdminClient(args.bootstrap_server, **admin_settings(props), security=security) as admin:
            return await fn(admin)

    return asyncio.run(go())


def print_json(doc: Any) -> None:
    json.dump(doc, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], out: Any = None) -> None:
    out = out or sys.stdout
    rows = [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    out.write("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip() + "\n")
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n")


def java_exception(code: int) -> str:
    """The class name Kafka's Java tools print for an error code
    (org.apache.kafka.common.errors.OffsetOutOfRangeException)."""
    return f"org.apache.kafka.common.errors.{for_code(code).__name__.removesuffix('Error')}Exception"


def print_tool_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """The table of Kafka's Java tools (ToolsUtils.prettyPrintTable): each column padded to
    its widest value and followed by a tab, the header row first."""
    rows = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    for r in [list(headers), *rows]:
        print("".join(c.ljust(w) + "\t" for c, w in zip(r, widths)))


def parse_kv(items: Iterable[str], what: str, *, comma_list: bool = False) -> dict[str, str]:
    """key=value items; with comma_list, each item may hold several (`a=1,b=[x,y]`)."""
    out: dict[str, str] = {}
    for item in items:
        for piece in (_split_config_list(item) if comma_list else [item]):
            if "=" not in piece:
                raise CommandError(f"{what} expects key=value, got {piece!r}")
            k, v = piece.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def _split_config_list(item: str) -> list[str]:
    """Kafka's `--add-config a=1,b=[x,y]`: commas separate entries except inside brackets."""
    out, depth, cur = [], 0, ""
    for ch in item:
        if ch == "[":
            depth += 1
            continue
        if ch == "]":
            depth -= 1
            continue
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        cur += ch
    if cur:
        out.append(cur)
    return [p for p in (s.strip() for s in out) if p]
