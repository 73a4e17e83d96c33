"""Topic metadata: names, topic ids, partition counts, per-topic config overrides.

Stored as `<first log dir>/__kafkafast_topics.json`:
`{"version": 1, "topics": {"<name>": {"id": "<32 hex>", "partitions": N, "configs": {...}}}}`,
replaced atomically (write to a temporary file, fsync, rename; a full disk answers
KafkaStorageError and changes nothing). Writers take an exclusive
`flock` on `__kafkafast_topics.lock` so several worker processes can change topics safely
(the shared-memory metadata generation tells the other processes to reload). `generation`
counts the views of the file this process has held (each reload, each change made here,
the reload inside `change()` included): a broker compares it with the generation whose
partitions it opened, so a topic it learnt of only through `change()` (another process's
topic, read while creating its own) is opened too.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from kafkafast.protocol.errors import InvalidTopicError, KafkaStorageError
from kafkafast.storage.checkpoint import write_file_atomically

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def validate_topic_name(name: str | None) -> None:
    """Kafka's rules: 1-249 characters of [a-zA-Z0-9._-], not "." or ".."."""
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is longer than {MAX_NAME_LENGTH} characters")
    if not _LEGAL.match(name):
        raise InvalidTopicError(f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'")


@dataclass
class TopicMeta:
    name: str
    topic_id: bytes
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class TopicStore:
    FILE = "__kafkafast_topics.json"

    def __init__(self, log_dir: str) -> None:
        self.dir = log_dir
        self.path = os.path.join(log_dir, self.FILE)
        self.lock_path = os.path.join(log_dir, "__kafkafast_topics.lock")
        self.topics: dict[str, TopicMeta] = {}
        self.by_id: dict[bytes, TopicMeta] = {}
        self._mtime_ns = -1
        self.generation = 0

    def load(self) -> bool:
        """(Re)reads the file if it changed; True when something was reloaded."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            changed = bool(self.topics)
            self.topics, self.by_id, self._mtime_ns = {}, {}, -1
            self.generation += changed
            return changed
        if st.st_mtime_ns == self._mtime_ns:
            return False
        with open(self.path, encoding="utf-8") as fh:
            doc = json.load(fh)
        topics = {}
        for name, t in doc.get("topics", {}).items():
            topics[name] = TopicMeta(name, bytes.fromhex(t["id"]), int(t["partitions"]), dict(t.get("configs", {})))
        self.topics = topics
        self.by_id = {t.topic_id: t for t in topics.values()}
        self._mtime_ns = st.st_mtime_ns
        self.generation += 1
        return True

    def _save(self) -> None:
        doc = {"version": 1, "topics": {
            t.name: {"id": t.topic_id.hex(), "partitions": t.partitions, "configs": t.configs}
            for t in sorted(self.topics.values(), key=lambda t: t.name)}}
        try:
            write_file_atomically(self.path, json.dumps(doc, indent=1, sort_keys=True).encode(),
                                  tmp=self.path + ".tmp")
        except OSError as exc:
            raise KafkaStorageError(f"cannot write {self.path}: {exc}") from exc
        self._mtime_ns = os.stat(self.path).st_mtime_ns
        self.by_id = {t.topic_id: t for t in self.topics.values()}

    @contextmanager
    def change(self) -> Iterator[dict[str, TopicMeta]]:
        """Exclusive, cross-process change: reload, let the caller edit, save."""
        os.makedirs(self.dir, exist_ok=True)
        with open(self.lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self._mtime_ns = -1
                self.load()
                yield self.topics
                try:
                    self._save()
                except KafkaStorageError:
                    self._mtime_ns = -1
                    self.load()  # the change did not happen: forget it here too
                    raise
            finally:
                self.generation += 1  # whatever happened, the view may differ from the one applied
                fcntl.flock(lock, fcntl.LOCK_UN)

    def get(self, name: str) -> TopicMeta | None:
        return self.topics.get(name)

    def names(self) -> Iterable[str]:
        return self.topics.keys()

    @staticmethod
    def new_topic_id() -> bytes:
        while True:
            b = uuid.uuid4().bytes
            if b != b"\x00" * 16:
                return b
