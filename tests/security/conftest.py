"""Certificates for the security tests (a CA, a server, clients), and SASL daemons.

`pki` is `testkit.pki.make_pki` (bench.security makes the same set) once per
session: PEM files made with `cryptography`, a CA; a server certificate
for 127.0.0.1 and localhost signed by it; a client certificate
(``CN=client,OU=eng,O=Acme``) signed by it; a self-signed client and an
expired one signed by the CA, for the refusals.
"""

from __future__ import annotations

import pytest

from testkit.pki import Pki, make_pki
from tests.server.conftest import daemons  # noqa: F401 - a fixture, used by name


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_args(pki: Pki, *, mutual: bool = False) -> list[str]:
    args = ["--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key)]
    return args + (["--tls-client-ca-file", str(pki.ca)] if mutual else [])
