"""SASL users: SCRAM credentials kept in the store beside the catalog.

One object per user, ``{ns}/_security/users/<name>.json`` (the name
percent-encoded), holding a credential per SCRAM mechanism (salt,
iterations, StoredKey, ServerKey -- never a password)::

    {"name": "alice", "scram": {"SCRAM-SHA-512": {"salt": ..., "iterations": 8192,
                                                  "stored_key": ..., "server_key": ...}}}

Every daemon sharing the namespace sees the same users: `UserCache` serves
lookups from memory and re-reads a user's object once its copy is older than
``max_age_s`` (so a new password or a deleted user takes effect within
seconds, without a restart).  `kfs users` and AlterUserScramCredentials write
through `UserStore`.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator

from kfs_core.catalog import layout
from kfs_core.errors import ObjectNotFound
from kfs_core.namespace import SECURITY_DIR
from kfs_core.security.scram import MECHANISMS, Credential
from kfs_core.storage.base import ObjectStore

__all__ = ["UserCache", "UserStore"]

USERS_DIR = "users"
SUFFIX = ".json"


class UserStore:
    """Read and write users' SCRAM credentials in ``store`` under namespace ``namespace``."""

    def __init__(self, store: ObjectStore, namespace: str) -> None:
        self.store = store
        self.namespace = namespace
        self._prefix = layout.join(namespace, SECURITY_DIR, USERS_DIR) + "/"

    def _key(self, name: str) -> str:
        if not name:
            raise ValueError("a user name must not be empty")
        return self._prefix + urllib.parse.quote(name, safe="") + SUFFIX

    def credentials(self, name: str) -> dict[str, Credential]:
        """The user's credentials by mechanism; empty if there is no such user."""
        try:
            doc = json.loads(self.store.get(self._key(name)))
        except ObjectNotFound:
            return {}
        return {
            mechanism: Credential.from_json(mechanism, value)
            for mechanism, value in doc.get("scram", {}).items()
            if mechanism in MECHANISMS
        }

    def set_credential(self, name: str, credential: Credential) -> None:
        """Add or replace one mechanism's credential of ``name`` (creating the user)."""
        current = self.credentials(name)
        current[credential.mechanism] = credential
        self._write(name, current)

    def delete_credential(self, name: str, mechanism: str) -> bool:
        """Remove one mechanism's credential; the user goes with its last one.  Whether it existed."""
        current = self.credentials(name)
        if current.pop(mechanism, None) is None:
            return False
        if current:
            self._write(name, current)
        else:
            self.store.delete(self._key(name))
        return True

    def delete(self, name: str) -> bool:
        """Remove the user and every credential; whether it existed."""
        key = self._key(name)
        exists = bool(self.credentials(name))
        self.store.delete(key)
        return exists

    def _write(self, name: str, credentials: dict[str, Credential]) -> None:
        doc = {"name": name, "scram": {m: c.to_json() for m, c in sorted(credentials.items())}}
        self.store.put(self._key(name), json.dumps(doc, indent=1).encode())

    def names(self) -> Iterator[str]:
        """Every user, in name order."""
        for info in self.store.list(self._prefix):
            leaf = info.key[len(self._prefix) :]
            if leaf.endswith(SUFFIX) and "/" not in leaf:
                yield urllib.parse.unquote(leaf[: -len(SUFFIX)])


class UserCache:
    """Credential lookups for the daemon: from memory, each user re-read after ``max_age_s``."""

    def __init__(
        self, users: UserStore, max_age_s: float = 5.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.users = users
        self.max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, dict[str, Credential]]] = {}

    def lookup(self, name: str, mechanism: str) -> Credential | None:
        """The user's credential for ``mechanism`` (None: no such user or mechanism)."""
        return self.credentials(name).get(mechanism)

    def credentials(self, name: str) -> dict[str, Credential]:
        now = self._clock()
        with self._lock:
            entry = self._entries.get(name)
        if entry is not None and now - entry[0] < self.max_age_s:
            return entry[1]
        credentials = self.users.credentials(name)
        with self._lock:
            self._entries[name] = (now, credentials)
            if len(self._entries) > 10_000:  # unknown names must not grow it without bound
                self._entries.pop(next(iter(self._entries)))
        return credentials

    def forget(self, name: str) -> None:
        with self._lock:
            self._entries.pop(name, None)
