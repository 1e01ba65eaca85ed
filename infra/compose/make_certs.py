"""A CA and a server certificate for the daemon's SASL_SSL listener in docker compose.

    python3 make_certs.py DIR HOST [HOST ...]

Writes ``ca.pem``, ``server.pem`` and ``server.key`` into DIR unless they
exist (so a restart keeps the certificate clients already trust).  The server
certificate names every HOST (DNS names, or IP addresses).  Clients trust
``ca.pem``: ``docker compose cp kfs:/etc/kfs/certs/ca.pem .``.  For
development and evaluation only: production certificates come from your CA.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "KFS compose"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])  # fmt: skip


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def main(directory: str, hosts: list[str]) -> None:
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    if all((out / name).exists() for name in ("ca.pem", "server.pem", "server.key")):
        print(f"certificates in {out} kept")
        return
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder().subject_name(_name("KFS compose CA")).issuer_name(_name("KFS compose CA"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=825))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=397))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    (out / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (out / "server.pem").write_bytes(server.public_bytes(serialization.Encoding.PEM))
    (out / "server.key").write_bytes(_pem_key(key))
    (out / "server.key").chmod(0o600)
    print(f"certificates for {', '.join(hosts)} written to {out}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
