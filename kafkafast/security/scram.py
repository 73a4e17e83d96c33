"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka runs them.

Credentials are kept only as salted keys: per user and mechanism the salt, the iteration
count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey =
HMAC(SaltedPassword, "Server Key"). Single-node store: `<first log dir>/__kafkafast_scram.json`

    {"<user>": {"SCRAM-SHA-256": {"salt": b64, "iterations": n, "stored_key": b64,
                                  "server_key": b64}, ...}, ...}

replaced atomically under a flock of `<file>.lock`, re-read when its mtime changes (every
worker sees an AlterUserScramCredentials within a request). Iteration counts as Kafka:
4096..16384.
"""
from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": ("sha256", 1), "SCRAM-SHA-512": ("sha512", 2)}  # name -> (hash, Kafka's type code)
MECHANISM_BY_CODE = {code: name for name, (_, code) in MECHANISMS.items()}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384
STORE_FILE = "__kafkafast_scram.json"


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_salted_password(cls, mechanism: str, salt: bytes, iterations: int, salted: bytes) -> "ScramCredential":
        h = MECHANISMS[mechanism][0]
        client_key = hmac.new(salted, b"Client Key", h).digest()
        return cls(salt, iterations, hashlib.new(h, client_key).digest(), hmac.new(salted, b"Server Key", h).digest())

    @classmethod
    def from_password(cls, mechanism: str, password: str, iterations: int = MIN_ITERATIONS) -> "ScramCredential":
        salt = secrets.token_bytes(16)
        salted = hashlib.pbkdf2_hmac(MECHANISMS[mechanism][0], password.encode(), salt, iterations)
        return cls.from_salted_password(mechanism, salt, iterations, salted)


class ScramStore:
    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, STORE_FILE)
        self._stamp: tuple | None = None
        self._users: dict[str, dict[str, ScramCredential]] = {}

    def _load(self) -> dict[str, dict[str, ScramCredential]]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._stamp, self._users = None, {}
            return self._users
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp != self._stamp:
            with open(self.path, encoding="utf-8") as fh:
                raw = json.load(fh)
            self._users = {u: {m: ScramCredential(base64.b64decode(c["salt"]), c["iterations"],
                                                  base64.b64decode(c["stored_key"]), base64.b64decode(c["server_key"]))
                               for m, c in mechs.items()} for u, mechs in raw.items()}
            self._stamp = stamp
        return self._users

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._load().get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return self._load()

    def change(self, upserts: list[tuple[str, str, ScramCredential]], deletes: list[tuple[str, str]]) -> None:
        """Applies the changes under the store's lock and replaces the file atomically."""
        with open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._stamp = None
            users = {u: dict(m) for u, m in self._load().items()}
            for user, mech in deletes:
                users.get(user, {}).pop(mech, None)
                if user in users and not users[user]:
                    del users[user]
            for user, mech, cred in upserts:
                users.setdefault(user, {})[mech] = cred
            raw = {u: {m: {"salt": _b64(c.salt), "iterations": c.iterations, "stored_key": _b64(c.stored_key),
                           "server_key": _b64(c.server_key)} for m, c in mechs.items()} for u, mechs in users.items()}
            tmp = f"{self.path}.tmp{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(raw, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            self._stamp = None


class ScramError(Exception):
    pass


def _attrs(msg: str) -> dict[str, str]:
    out = {}
    for part in msg.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"malformed SCRAM message attribute {part[:20]!r}")
        out.setdefault(part[0], part[2:])
    return out


def _unescape_name(name: str) -> str:
    if re_bad_escape(name):
        raise ScramError("invalid username escape")
    return name.replace("=2C", ",").replace("=3D", "=")


def re_bad_escape(name: str) -> bool:
    i = name.find("=")
    while i >= 0:
        if name[i:i + 3] not in ("=2C", "=3D"):
            return True
        i = name.find("=", i + 1)
    return False


class ScramServer:
    """One server-side SCRAM exchange: `step(client message) -> server message`; `done`
    and `username` once the client proved its key. Unknown users get a made-up salt and
    fail at the proof, so the exchange does not reveal whether the user exists."""

    def __init__(self, mechanism: str, store: ScramStore) -> None:
        self.mechanism = mechanism
        self.hash = MECHANISMS[mechanism][0]
        self.store = store
        self.state = 0
        self.username = ""
        self.done = False
        self.token_auth = False

    def step(self, data: bytes) -> bytes:
        try:
            msg = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("SCRAM message is not UTF-8") from None
        if self.state == 0:
            return self._first(msg)
        if self.state == 1:
            return self._final(msg)
        raise ScramError("unexpected SCRAM message after the exchange completed")

    def _first(self, msg: str) -> bytes:
        gs2_flag, sep, rest = msg.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2 or gs2_flag not in ("n", "y") or (authzid and not authzid.startswith("a=")):
            raise ScramError("malformed SCRAM client-first message")
        attrs = _attrs(bare)
        if "n" not in attrs or "r" not in attrs or "m" in attrs:
            raise ScramError("malformed SCRAM client-first message")
        self.username = _unescape_name(attrs["n"])
        if authzid and _unescape_name(authzid[2:]) != self.username:
            raise ScramError("authorization id differs from the user name")
        self.token_auth = attrs.get("tokenauth", "").lower() == "true"
        self.gs2_header = f"{gs2_flag},{authzid},"
        self.client_first_bare = bare
        cred = self.store.get(self.username, self.mechanism)
        if cred is None:
            cred = ScramCredential(hashlib.sha256(b"kafkafast" + self.username.encode()).digest()[:16],
                                   MIN_ITERATIONS, secrets.token_bytes(64), secrets.token_bytes(64))
            self.unknown = True
        else:
            self.unknown = False
        self.cred = cred
        self.nonce = attrs["r"] + base64.b64encode(secrets.token_bytes(24)).decode().rstrip("=")
        self.server_first = f"r={self.nonce},s={_b64(cred.salt)},i={cred.iterations}"
        self.state = 1
        return self.server_first.encode()

    def _final(self, msg: str) -> bytes:
        without_proof, sep, proof_attr = msg.rpartition(",p=")
        if not sep:
            raise ScramError("SCRAM client-final message without a proof")
        attrs = _attrs(without_proof)
        # RFC 5802 wants the combined nonce echoed exactly; librdkafka 2.0 (Debian's kcat)
        # echoes the client nonce followed by the combined one. Kafka 3.x's broker checks only
        # that the echo ends with the combined nonce, so old librdkafka logs in there: do the
        # same. The proof below covers the message as the client sent it.
        if not attrs.get("r", "").endswith(self.nonce):
            raise ScramError("SCRAM nonce mismatch")
        if base64.b64decode(attrs.get("c", "")) != self.gs2_header.encode():
            raise ScramError("SCRAM channel binding mismatch")
        auth_message = f"{self.client_first_bare},{self.server_first},{without_proof}".encode()
        signature = hmac.new(self.cred.stored_key, auth_message, self.hash).digest()
        try:
            proof = base64.b64decode(proof_attr, validate=True)
        except ValueError:
            raise ScramError("SCRAM proof is not base64") from None
        if len(proof) != len(signature):
            raise ScramError("invalid credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if self.unknown or self.token_auth or not hmac.compare_digest(
                hashlib.new(self.hash, client_key).digest(), self.cred.stored_key):
            raise ScramError("invalid credentials")
        self.state = 2
        self.done = True
        return b"v=" + base64.b64encode(hmac.new(self.cred.server_key, auth_message, self.hash).digest())
