"""A test PKI: a CA and the certificates signed by it, as PEM files, made with `cryptography`.

`make_pki` writes a CA; a server certificate for 127.0.0.1 and localhost
signed by it; a client certificate (``CN=client,OU=eng,O=Acme``) signed by
it; a self-signed client and an expired one signed by the CA, for the
refusals.  The security tests (tests/security/conftest.py's ``pki``) and
bench.security's SASL_SSL listener use it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from ipaddress import ip_address
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_cert: Path  # self-signed
    rogue_key: Path
    expired_cert: Path  # signed by the CA, expired
    expired_key: Path
    root: Path

    def server(self, name: str, key: ec.EllipticCurvePrivateKey | None = None) -> tuple[Path, Path]:
        """Another server certificate (for reload tests); its (cert, key) paths."""
        return _issue(self.root, name, self._ca_pair(), server=True)

    def _ca_pair(self) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        cert = x509.load_pem_x509_certificate(self.ca.read_bytes())
        key = serialization.load_pem_private_key((self.root / "ca.key").read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return cert, key


def _name(cn: str, ou: str = "", o: str = "Acme") -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o)]
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _write(
    root: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> tuple[Path, Path]:
    cert_path, key_path = root / f"{name}.pem", root / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def _issue(
    root: Path,
    name: str,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    *,
    server: bool = False,
    subject: x509.Name | None = None,
    expired: bool = False,
) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    start, end = (now - dt.timedelta(days=30), now - dt.timedelta(days=1)) if expired else (
        now - dt.timedelta(minutes=5), now + dt.timedelta(days=30))  # fmt: skip
    subject = subject or _name(name)
    issuer_name, signing_key = (issuer[0].subject, issuer[1]) if issuer else (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    cert = builder.sign(signing_key, hashes.SHA256())
    return _write(root, name, cert, key)


def make_pki(root: Path) -> Pki:
    """A CA and the certificates the tests (and bench.security) use, as PEM files in ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("KFS test CA"))
        .issuer_name(_name("KFS test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    ca, _ = _write(root, "ca", ca_cert, ca_key)
    issuer = (ca_cert, ca_key)
    server_cert, server_key = _issue(root, "server", issuer, server=True)
    client_cert, client_key = _issue(root, "client", issuer, subject=_name("client", "eng"))
    rogue_cert, rogue_key = _issue(root, "rogue", None, subject=_name("client", "eng"))
    expired_cert, expired_key = _issue(root, "expired", issuer, expired=True)
    return Pki(ca, server_cert, server_key, client_cert, client_key, rogue_cert, rogue_key,
               expired_cert, expired_key, root)  # fmt: skip
