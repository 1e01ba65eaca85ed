"""The server's TLS: a context from PEM files, reloadable, and the principal of a client certificate.

`ServerTls` builds one `ssl.SSLContext` (TLS 1.2 at least) from the server
certificate chain and key (``KFS_TLS_CERT_FILE``, ``KFS_TLS_KEY_FILE``) and,
with ``KFS_TLS_CLIENT_CA_FILE``, requires every client to present a
certificate signed by that CA (mutual TLS).  `ServerTls.reload` loads the
files again into the same context -- new handshakes get the new certificate,
open connections keep theirs -- and keeps the old one if the new files are
bad.  `principal_of` names a client by its certificate's subject as Kafka's
default ``ssl.principal.mapping.rules`` does: ``User:`` and the distinguished
name in RFC 2253 order (``CN=client,OU=eng,O=Acme``).
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from typing import Any

__all__ = ["ServerTls", "TlsFiles", "principal_of"]

log = logging.getLogger(__name__)

# RFC 2253 short names for the attributes Python's ssl module spells out.
_SHORT_NAMES = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


@dataclass(frozen=True)
class TlsFiles:
    cert_file: str
    key_file: str
    client_ca_file: str = ""


class ServerTls:
    """The TLS context every TLS listener shares; `reload` re-reads its files."""

    def __init__(self, files: TlsFiles) -> None:
        if not files.cert_file or not files.key_file:
            raise ValueError(
                "a TLS listener (SSL, SASL_SSL) needs KFS_TLS_CERT_FILE and KFS_TLS_KEY_FILE"
            )
        self.files = files
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._load(self.context)

    def _load(self, context: ssl.SSLContext) -> None:
        files = self.files
        try:
            context.load_cert_chain(files.cert_file, files.key_file)
            if files.client_ca_file:
                context.load_verify_locations(cafile=files.client_ca_file)
                context.verify_mode = ssl.CERT_REQUIRED
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"TLS files {files.cert_file}, {files.key_file}: {exc}") from None

    @property
    def mutual(self) -> bool:
        return bool(self.files.client_ca_file)

    def reload(self) -> bool:
        """Load the files again (SIGHUP); False, with the old certificate kept, if they are bad."""
        try:
            # Check the new files on a scratch context first: a bad key must not
            # leave the live context half-loaded.
            scratch = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._load(scratch)
            self._load(self.context)
        except ValueError as exc:
            log.error("TLS reload failed, the old certificate stays: %s", exc)
            return False
        log.info("TLS certificate reloaded from %s", self.files.cert_file)
        return True


def principal_of(peercert: dict[str, Any] | None) -> str | None:
    """``User:<subject DN>`` of a verified client certificate, or None without one."""
    if not peercert or not peercert.get("subject"):
        return None
    rdns = [  # RFC 2253: most specific first
        "+".join(f"{_SHORT_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn)
        for rdn in reversed(peercert["subject"])
    ]
    return "User:" + ",".join(rdns)


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out
