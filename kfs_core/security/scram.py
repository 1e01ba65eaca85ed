"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) on the server, and PLAIN against them.

A `Credential` is what is stored for a user and mechanism: salt, iteration
count, ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")``; never the password.
`ScramServer` runs one exchange::

    client-first   n,,n=<user>,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<salt>,i=<iterations>
    client-final   c=biws,r=<nonce>,p=<proof>
    server-final   v=<server signature>

and `check_plain` verifies a PLAIN password by deriving the same keys from
the stored salt and iterations.  A failed exchange raises
`SaslAuthenticationFailed` with a message that says what was wrong without
saying whether the user exists.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from kfs_core.errors import KfsError

__all__ = [
    "MECHANISMS",
    "Credential",
    "SaslAuthenticationFailed",
    "ScramServer",
    "check_plain",
    "make_credential",
]

#: SCRAM mechanism -> hash name; Kafka's minimum iteration count is 4096.
MECHANISMS: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS: Final = 4096
MAX_ITERATIONS: Final = 16384  # Kafka's upper bound
DEFAULT_ITERATIONS: Final = 8192


class SaslAuthenticationFailed(KfsError):
    """The client's credentials or its SASL messages were not accepted."""


@dataclass(frozen=True)
class Credential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_json(self) -> dict[str, object]:
        b64 = base64.b64encode
        return {
            "salt": b64(self.salt).decode(),
            "iterations": self.iterations,
            "stored_key": b64(self.stored_key).decode(),
            "server_key": b64(self.server_key).decode(),
        }

    @classmethod
    def from_json(cls, mechanism: str, doc: dict[str, object]) -> Credential:
        def b(name: str) -> bytes:
            return base64.b64decode(str(doc[name]), validate=True)

        return cls(
            mechanism, b("salt"), int(str(doc["iterations"])), b("stored_key"), b("server_key")
        )


def _hash(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ValueError(
            f"unknown SCRAM mechanism {mechanism!r}: {', '.join(MECHANISMS)}"
        ) from None


def credential_from_salted(
    mechanism: str, salted_password: bytes, salt: bytes, iterations: int
) -> Credential:
    """The stored form from a salted password (what AlterUserScramCredentials sends)."""
    name = _hash(mechanism)
    client_key = hmac.digest(salted_password, b"Client Key", name)
    return Credential(
        mechanism,
        salt,
        iterations,
        hashlib.new(name, client_key).digest(),
        hmac.digest(salted_password, b"Server Key", name),
    )


def make_credential(
    mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> Credential:
    """A new credential for ``password``: random salt, PBKDF2 with ``iterations``."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(
            f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS} (Kafka's bounds), "
            f"got {iterations}"
        )
    salt = salt if salt is not None else secrets.token_bytes(32)
    salted = hashlib.pbkdf2_hmac(_hash(mechanism), password.encode(), salt, iterations)
    return credential_from_salted(mechanism, salted, salt, iterations)


def check_plain(credential: Credential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (constant-time compare)."""
    again = make_credential(credential.mechanism, password, credential.iterations, credential.salt)
    return hmac.compare_digest(again.stored_key, credential.stored_key)


def _attributes(message: str) -> dict[str, str]:
    out = {}
    for part in message.split(","):
        name, sep, value = part.partition("=")
        if not sep or len(name) != 1:
            raise SaslAuthenticationFailed(f"malformed SCRAM attribute {part[:40]!r}")
        out[name] = value
    return out


def _unescape_name(name: str) -> str:
    """RFC 5802 saslname: ``=2C`` is a comma, ``=3D`` an equals sign; nothing else may follow ``=``."""
    out, i = [], 0
    while i < len(name):
        if name[i] == "=":
            code = name[i + 1 : i + 3]
            if code not in ("2C", "3D"):
                raise SaslAuthenticationFailed("malformed SCRAM user name")
            out.append("," if code == "2C" else "=")
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


class ScramServer:
    """The server side of one SCRAM exchange: `first` then `final`.

    ``lookup(user)`` returns the user's credential for this mechanism or
    None; an unknown user gets a believable server-first message (a salt
    derived from a per-process secret) and fails at the proof, as a wrong
    password does.
    """

    _secret = secrets.token_bytes(32)

    def __init__(self, mechanism: str, lookup: Callable[[str], Credential | None]) -> None:
        self.mechanism = mechanism
        self._hash = _hash(mechanism)
        self._lookup = lookup
        self.user: str | None = None
        self._credential: Credential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    def first(self, message: bytes) -> bytes:
        """client-first → server-first."""
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed("SCRAM client-first message is not UTF-8") from None
        gs2, sep, bare = text.partition(",")
        authzid, sep2, bare = bare.partition(",")
        if not sep or not sep2 or gs2 not in ("n", "y") or authzid:
            raise SaslAuthenticationFailed(
                "SCRAM client-first message: expected 'n,,' (no channel binding, no authzid)"
            )
        attrs = _attributes(bare)
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise SaslAuthenticationFailed("SCRAM client-first message lacks n= or r=")
        self.user = _unescape_name(attrs["n"])
        credential = self._lookup(self.user)
        self._credential = credential
        if credential is None:  # unknown user: look the same, fail at the proof
            salt = hmac.digest(self._secret, self.user.encode(), "sha256")
            iterations = DEFAULT_ITERATIONS
        else:
            salt, iterations = credential.salt, credential.iterations
        self._nonce = attrs["r"] + secrets.token_urlsafe(24)
        self._client_first_bare = bare
        self._server_first = f"r={self._nonce},s={base64.b64encode(salt).decode()},i={iterations}"
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        """client-final → server-final; raises `SaslAuthenticationFailed` on a bad proof."""
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed("SCRAM client-final message is not UTF-8") from None
        without_proof, sep, proof_attr = text.rpartition(",p=")
        if not sep:
            raise SaslAuthenticationFailed("SCRAM client-final message lacks p=")
        attrs = _attributes(without_proof)
        if attrs.get("r") != self._nonce:
            raise SaslAuthenticationFailed("SCRAM nonce mismatch")
        if attrs.get("c") not in ("biws", "eSws"):  # base64 of "n,," and "y,,"
            raise SaslAuthenticationFailed("SCRAM channel binding is not supported")
        try:
            proof = base64.b64decode(proof_attr, validate=True)
        except ValueError:
            raise SaslAuthenticationFailed("SCRAM proof is not base64") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        credential = self._credential
        if credential is None:
            raise SaslAuthenticationFailed(f"authentication failed for {self.user!r}")
        signature = hmac.digest(credential.stored_key, auth_message, self._hash)
        if len(proof) != len(signature):
            raise SaslAuthenticationFailed(f"authentication failed for {self.user!r}")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(
            hashlib.new(self._hash, client_key).digest(), credential.stored_key
        ):
            raise SaslAuthenticationFailed(f"authentication failed for {self.user!r}")
        server_signature = hmac.digest(credential.server_key, auth_message, self._hash)
        return b"v=" + base64.b64encode(server_signature)
