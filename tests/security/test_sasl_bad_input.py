"""Bad SASL input on raw sockets: each gets its Kafka error code and a closed connection.

A request before authentication, SaslAuthenticate before SaslHandshake, an
unsupported mechanism, malformed and oversize SCRAM messages, an exchange
cut midway, SASL on a PLAINTEXT listener.  Afterwards the daemon is up and a
real client authenticates and produces.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
import warnings

import pytest

from kfs_core.server.protocol import ErrorCode
from testkit.daemon import Daemon, DaemonFactory, add_user
from testkit.ports import free_port
from testkit.raw_client import RawClient
from tests.security.test_listeners_sasl import PASSWORD, _confluent, _round_trip, _sasl

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
    from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def sasl_daemon(tmp_path_factory: pytest.TempPathFactory) -> Daemon:
    factory = DaemonFactory(tmp_path_factory.mktemp("sasl-bad"))
    sasl_port, plain_port = free_port(), free_port()
    listeners = f"SASL_PLAINTEXT://127.0.0.1:{sasl_port},PLAINTEXT://127.0.0.1:{plain_port}"
    daemon = factory.start(name="sasl-bad", extra_args=["--listeners", listeners])
    daemon.kafka_port = sasl_port  # bootstrap: the SASL listener
    daemon.plain_port = plain_port  # type: ignore[attr-defined]
    add_user(daemon, "alice", PASSWORD)
    yield daemon
    factory.close()


def _handshake(client: RawClient, mechanism: str) -> object:
    return client.request(SaslHandshakeRequest(version=1, mechanism=mechanism))


def _authenticate(client: RawClient, data: bytes) -> object:
    return client.request(SaslAuthenticateRequest(version=2, auth_bytes=data))


def test_requests_before_authentication_close_the_connection(sasl_daemon: Daemon) -> None:
    with RawClient(sasl_daemon.bootstrap) as client:
        versions = client.request(ApiVersionsRequest(version=3, client_software_name="raw",
                                                     client_software_version="1"))  # fmt: skip
        assert versions.error_code == 0  # ApiVersions is allowed before SASL
        client.send(MetadataRequest(version=12, topics=None, allow_auto_topic_creation=False))
        assert client.closed_by_server()


def test_authenticate_before_handshake_is_an_illegal_state(sasl_daemon: Daemon) -> None:
    with RawClient(sasl_daemon.bootstrap) as client:
        response = _authenticate(client, b"\0alice\0" + PASSWORD.encode())
        assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert client.closed_by_server()


def test_an_unsupported_mechanism_is_refused_with_the_list(sasl_daemon: Daemon) -> None:
    with RawClient(sasl_daemon.bootstrap) as client:
        response = _handshake(client, "GSSAPI")
        assert response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert response.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert client.closed_by_server()


@pytest.mark.parametrize(
    ("mechanism", "message"),
    [
        ("SCRAM-SHA-512", b"not scram at all"),
        ("SCRAM-SHA-512", b"n,,n=alice"),
        ("SCRAM-SHA-256", b"\xff\xfe\xfd"),
        ("PLAIN", b"alice-without-separators"),
        ("PLAIN", b"\0alice\0wrong password"),
        ("PLAIN", bytes(600_000)),
    ],
)
def test_malformed_and_oversize_sasl_messages_fail_and_close(
    sasl_daemon: Daemon, mechanism: str, message: bytes
) -> None:
    with RawClient(sasl_daemon.bootstrap) as client:
        assert _handshake(client, mechanism).error_code == 0
        response = _authenticate(client, message)
        assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert response.error_message == "Authentication failed: invalid credentials"
        assert client.closed_by_server()


def test_an_exchange_cut_midway_and_sasl_on_plaintext_harm_nobody(sasl_daemon: Daemon) -> None:
    with RawClient(sasl_daemon.bootstrap) as client:
        assert _handshake(client, "SCRAM-SHA-512").error_code == 0
        first = _authenticate(client, b"n,,n=alice,r=abcdef")
        assert first.error_code == 0 and first.auth_bytes.startswith(b"r=abcdef")
    # ... and the client vanished before its final message.
    plain = f"127.0.0.1:{sasl_daemon.plain_port}"  # type: ignore[attr-defined]
    with RawClient(plain) as client:
        assert _handshake(client, "PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert sasl_daemon.alive()
    conf = _confluent(sasl_daemon.kafka_port, "SASL_PLAINTEXT", None, **_sasl("SCRAM-SHA-512"))  # type: ignore[arg-type]
    assert len(_round_trip(conf, "after-bad-sasl", 5)) == 5


def _raw_token(client: RawClient, token: bytes) -> bytes | None:
    """A bare SASL token (after SaslHandshake v0) and the daemon's bare answer."""
    client.send_raw(struct.pack(">i", len(token)) + token)
    return client.read_frame()


def _scram_client_final(
    first_answer: bytes, client_first_bare: str, password: str
) -> tuple[str, bytes]:
    """RFC 5802 on the client side, written out here, independent of kfs_core.security.scram."""
    attrs = dict(part.split("=", 1) for part in first_answer.decode().split(","))
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), base64.b64decode(attrs["s"]),
                                 int(attrs["i"]))  # fmt: skip
    client_key = hmac.digest(salted, b"Client Key", "sha512")
    stored_key = hashlib.sha512(client_key).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{client_first_bare},{first_answer.decode()},{without_proof}".encode()
    signature = hmac.digest(stored_key, auth_message, "sha512")
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_key = hmac.digest(salted, b"Server Key", "sha512")
    expected = b"v=" + base64.b64encode(hmac.digest(server_key, auth_message, "sha512"))
    return f"{without_proof},p={base64.b64encode(proof).decode()}", expected


def test_sasl_handshake_v0_reads_bare_tokens(sasl_daemon: Daemon) -> None:
    """Clients before KIP-152 send the SASL tokens as bare frames after SaslHandshake v0."""
    with RawClient(sasl_daemon.bootstrap) as client:
        assert client.request(SaslHandshakeRequest(version=0, mechanism="PLAIN")).error_code == 0
        assert _raw_token(client, b"\0alice\0" + PASSWORD.encode()) == b""
        metadata = client.request(MetadataRequest(version=1, topics=None))
        assert [b.port for b in metadata.brokers] == [sasl_daemon.kafka_port]
    with RawClient(sasl_daemon.bootstrap) as client:
        assert (
            client.request(SaslHandshakeRequest(version=0, mechanism="SCRAM-SHA-512")).error_code
            == 0
        )
        bare = "n=alice,r=fyko+d2lbbFgONRv9qkxdawL"
        first = _raw_token(client, f"n,,{bare}".encode())
        assert first is not None and first.startswith(b"r=fyko+d2lbbFgONRv9qkxdawL")
        final, expected = _scram_client_final(first, bare, PASSWORD)
        assert _raw_token(client, final.encode()) == expected  # the server proved itself too
        assert client.request(MetadataRequest(version=1, topics=None)).brokers
    with RawClient(sasl_daemon.bootstrap) as client:
        assert client.request(SaslHandshakeRequest(version=0, mechanism="PLAIN")).error_code == 0
        client.send_raw(struct.pack(">i", 13) + b"\0alice\0wrong!")
        assert client.closed_by_server()
