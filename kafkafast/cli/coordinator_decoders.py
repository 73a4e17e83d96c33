"""The records of `__consumer_offsets` and `__transaction_state` as kafka-dump-log.sh's
`--offsets-decoder` and `--transaction-log-decoder` print them.

Offsets topic: key `{"type":"<key version>","data":{...}}`, value
`{"version":"<value version>","data":{...}}` (the schema's field names, only the fields of
that version; bytes as base64), `<DELETE>` for a tombstone. Transaction log: key
`transaction_metadata::transactionalId=<id>`, value
`producerId:P,producerEpoch:E,state=S,partitions=[t-0,...],txnLastUpdateTimestamp=T,txnTimeoutMs=M`.
"""
from __future__ import annotations

import base64
import json
from typing import Any

from kafkafast.broker.groups.offsets_records import CONSUMER_RECORDS, SHARE_RECORDS
from kafkafast.broker.txn_coordinator import STATE_NAMES, decode_txn_record
from kafkafast.client.consumer_protocol import decode_assignment, decode_subscription
from kafkafast.protocol._generated.coordinator_records import (GroupMetadataKey, GroupMetadataValue,
                                                               OffsetCommitKey, OffsetCommitValue)
from kafkafast.protocol.primitives import Reader

# fields whose schema versions are not "0+": name -> (first, last) version that has it
_FIELD_VERSIONS = {
    "OffsetCommitValue": {"leader_epoch": (3, 99), "expire_timestamp": (1, 1)},
    "GroupMetadataValue": {"current_state_timestamp": (2, 99)},
    "GroupMetadataValueMemberMetadata": {"group_instance_id": (3, 99), "rebalance_timeout": (1, 99)},
}
_KEYS: dict[int, tuple[Any, Any]] = {0: (OffsetCommitKey, OffsetCommitValue), 1: (OffsetCommitKey, OffsetCommitValue),
                                     2: (GroupMetadataKey, GroupMetadataValue),
                                     **{v: (k, val) for v, (_, k, val) in {**CONSUMER_RECORDS, **SHARE_RECORDS}.items()}}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def to_json(obj: Any, version: int) -> Any:
    """A generated message as Kafka's JsonConverter writes it for `version`."""
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(obj)).decode()
    if isinstance(obj, list):
        return [to_json(x, version) for x in obj]
    if not hasattr(obj, "__slots__"):
        return obj if obj is None or isinstance(obj, (int, float, str, bool)) else str(obj)
    gated = _FIELD_VERSIONS.get(type(obj).__name__, {})
    return {_camel(name): to_json(getattr(obj, name), version) for name in obj.__slots__
            if not name.startswith("_") and gated.get(name, (0, 99))[0] <= version <= gated.get(name, (0, 99))[1]}


def _by_topic(tps: list[tuple[str, int]]) -> list[dict[str, Any]]:
    out: dict[str, list[int]] = {}
    for t, p in tps:
        out.setdefault(t, []).append(p)
    return [{"topic": t, "partitions": ps} for t, ps in out.items()]


def _user_data(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _consumer_members(value: Any, doc: dict[str, Any]) -> None:
    """A consumer group's member subscriptions and assignments decoded (the consumer protocol,
    by its own version), as Kafka's tool does; a member whose bytes do not decode keeps them."""
    for member, out in zip(value.members or [], doc.get("members") or []):
        try:
            s = decode_subscription(bytes(member.subscription))
            sub: dict[str, Any] = {"topics": s.topics, "userData": _user_data(s.user_data)}
            if s.version >= 1:
                sub["ownedPartitions"] = _by_topic(s.owned_partitions)
            if s.version >= 2:
                sub["generationId"] = s.generation_id
            if s.version >= 3:
                sub["rackId"] = s.rack_id
            out["subscription"] = sub
        except Exception:  # noqa: BLE001 - Kafka keeps the original bytes
            pass
        try:
            a = decode_assignment(bytes(member.assignment))
            out["assignment"] = {"assignedPartitions": _by_topic(a.partitions), "userData": _user_data(a.user_data)}
        except Exception:  # noqa: BLE001
            pass


def offsets_record(key: bytes | None, value: bytes | None, offset: int) -> tuple[str, str | None]:
    if key is None:
        raise ValueError(f"Failed to decode message at offset {offset} using offset topic decoder "
                         "(message had a missing key)")
    try:
        r = Reader(bytes(key))
        kv = r.int16()
        if kv not in _KEYS:
            return f"Unknown record type {kv} at offset {offset}, skipping.", None
        key_cls, value_cls = _KEYS[kv]
        key_text = json.dumps({"type": str(kv), "data": to_json(key_cls.decode(r, kv), kv)}, separators=(",", ":"))
        if value is None:
            return key_text, "<DELETE>"
        vr = Reader(bytes(value))
        vv = vr.int16()
        decoded = value_cls.decode(vr, min(vv, value_cls.MAX_VERSION))
        data = to_json(decoded, vv)
        if value_cls is GroupMetadataValue and decoded.protocol_type == "consumer":
            _consumer_members(decoded, data)
        return key_text, json.dumps({"version": str(vv), "data": data}, separators=(",", ":"))
    except Exception as exc:  # noqa: BLE001 - Kafka's tool prints the error and goes on
        return f"Error at offset {offset}, skipping. {exc}", None


def transaction_log_record(key: bytes | None, value: bytes | None, offset: int) -> tuple[str, str | None]:
    decoded = decode_txn_record(key, value)
    if decoded is None:
        version = int.from_bytes(bytes(key)[:2], "big", signed=True) if key is not None and len(key) >= 2 else -1
        return f"unknown::version={version}", None
    tid, m = decoded
    key_text = f"transaction_metadata::transactionalId={tid}"
    if m is None:
        return key_text, "<DELETE>"
    parts = ",".join(f"{t}-{p}" for t, p in sorted(m.partitions))
    return key_text, (f"producerId:{m.producer_id},producerEpoch:{m.producer_epoch},state={STATE_NAMES[m.state]},"
                      f"partitions=[{parts}],txnLastUpdateTimestamp={m.update_ms},txnTimeoutMs={m.timeout_ms}")
