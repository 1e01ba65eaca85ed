"""The pieces of SASL and TLS on their own.

SCRAM against RFC 7677's example, PLAIN, the failure delay, listener parsing,
certificate principals, the user store.
"""

from __future__ import annotations

import asyncio
import base64

import pytest

from kfs_core.security import scram
from kfs_core.security.listeners import Listener, SecurityProtocol, parse_listeners
from kfs_core.security.sasl import (
    ILLEGAL_SASL_STATE,
    SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
    Authenticator,
    FailureDelay,
    Session,
)
from kfs_core.security.scram import (
    SaslAuthenticationFailed,
    ScramServer,
    check_plain,
    make_credential,
)
from kfs_core.security.tls import principal_of
from kfs_core.security.users import UserCache, UserStore
from kfs_core.storage.local import LocalObjectStore

# RFC 7677, section 3: SCRAM-SHA-256, user "user", password "pencil".
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


@pytest.fixture
def rfc_credential() -> scram.Credential:
    return make_credential("SCRAM-SHA-256", "pencil", 4096, RFC_SALT)


def test_scram_sha_256_matches_rfc_7677(
    rfc_credential: scram.Credential, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scram.secrets, "token_urlsafe", lambda n: RFC_SERVER_NONCE)
    server = ScramServer("SCRAM-SHA-256", {"user": rfc_credential}.get)
    assert server.first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.user == "user"


@pytest.mark.parametrize(
    ("first", "final", "why"),
    [
        (RFC_CLIENT_FIRST, RFC_CLIENT_FINAL.replace(b"dHzb", b"dHzc"), "failed"),  # wrong proof
        (RFC_CLIENT_FIRST, RFC_CLIENT_FINAL.replace(b"r=rOpr", b"r=xOpr"), "nonce"),
        (RFC_CLIENT_FIRST, RFC_CLIENT_FINAL.replace(b"c=biws", b"c=cD10bHMtdW5pcXVl"), "binding"),
        (RFC_CLIENT_FIRST, RFC_CLIENT_FINAL.split(b",p=")[0], "p="),
        (RFC_CLIENT_FIRST, b"\xff\xfe", "UTF-8"),
        (b"p=tls-unique,,n=user,r=abc", None, "channel binding"),
        (b"n,a=admin,n=user,r=abc", None, "authzid"),
        (b"n,,n=us=er,r=abc", None, "user name"),
        (b"n,,r=abc", None, "n= or r="),
        (b"garbage", None, "client-first"),
    ],
)
def test_bad_scram_messages_fail_with_a_reason(
    rfc_credential: scram.Credential,
    monkeypatch: pytest.MonkeyPatch,
    first: bytes,
    final: bytes | None,
    why: str,
) -> None:
    monkeypatch.setattr(scram.secrets, "token_urlsafe", lambda n: RFC_SERVER_NONCE)
    server = ScramServer("SCRAM-SHA-256", {"user": rfc_credential}.get)
    with pytest.raises(SaslAuthenticationFailed, match=why):
        server.first(first)
        assert final is not None
        server.final(final)


def test_an_unknown_user_gets_a_believable_challenge_then_fails() -> None:
    server = ScramServer("SCRAM-SHA-512", lambda name: None)
    challenge = server.first(b"n,,n=nobody,r=abc").decode()
    assert challenge.startswith("r=abc") and ",s=" in challenge and challenge.endswith(",i=8192")
    again = ScramServer("SCRAM-SHA-512", lambda name: None).first(b"n,,n=nobody,r=abc").decode()
    assert challenge.split(",")[1] == again.split(",")[1]  # the same salt every time
    nonce = challenge.split(",")[0][2:]
    with pytest.raises(SaslAuthenticationFailed, match="authentication failed"):
        server.final(f"c=biws,r={nonce},p={base64.b64encode(bytes(64)).decode()}".encode())


def test_plain_is_checked_against_the_scram_credential() -> None:
    credential = make_credential("SCRAM-SHA-512", "s3cret", 4096)
    assert check_plain(credential, "s3cret")
    assert not check_plain(credential, "s3cret ")
    assert "s3cret" not in repr(credential) and credential.to_json()["iterations"] == 4096
    with pytest.raises(ValueError, match="iterations"):
        make_credential("SCRAM-SHA-512", "x", 100)


def test_failure_delay_doubles_per_address_and_is_forgotten() -> None:
    now = [0.0]
    delay = FailureDelay(base_s=0.1, max_s=1.0, forget_after_s=60, clock=lambda: now[0])
    assert [delay.failed("a") for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert delay.failed("b") == 0.1  # another address starts afresh
    now[0] = 61.0
    assert delay.failed("a") == 0.1
    delay.succeeded("b")
    assert delay.failed("b") == 0.1


def test_listener_parsing_and_its_errors() -> None:
    assert parse_listeners("SASL_SSL://0.0.0.0:9093, plaintext://[::1]:9092") == [
        Listener(SecurityProtocol.SASL_SSL, "0.0.0.0", 9093),
        Listener(SecurityProtocol.PLAINTEXT, "::1", 9092),
    ]
    for bad, message in [
        ("", "no listener"),
        ("KERBEROS://h:1", "unknown security protocol"),
        ("SSL://h", "needs a port"),
        ("SSL://h:1,SSL://h:2", "listed twice"),
        ("SSL://h:1,PLAINTEXT://h:1", "port 1 is listed twice"),
        ("h:9092", "PROTOCOL://host:port"),
        ("SSL://h:99999", "bad port"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_listeners(bad)


def test_a_certificate_subject_is_a_kafka_principal() -> None:
    subject = (
        (("countryName", "DE"),),
        (("organizationName", "Acme, Inc."),),
        (("organizationalUnitName", "eng"),),
        (("commonName", "client"),),
    )
    assert principal_of({"subject": subject}) == "User:CN=client,OU=eng,O=Acme\\, Inc.,C=DE"
    assert principal_of(None) is None and principal_of({}) is None


def test_user_store_round_trip_and_cache(tmp_path: object) -> None:
    store = LocalObjectStore(str(tmp_path))
    users = UserStore(store, "ns")
    users.set_credential("a/b c", make_credential("SCRAM-SHA-256", "pw", 4096))
    users.set_credential("a/b c", make_credential("SCRAM-SHA-512", "pw", 4096))
    users.set_credential("zed", make_credential("SCRAM-SHA-512", "pw", 4096))
    assert list(users.names()) == ["a/b c", "zed"]
    assert sorted(users.credentials("a/b c")) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert not any("pw" in info.key for info in store.list("ns/"))
    now = [0.0]
    cache = UserCache(users, max_age_s=5, clock=lambda: now[0])
    assert cache.lookup("zed", "SCRAM-SHA-512") is not None
    assert users.delete_credential("zed", "SCRAM-SHA-512")
    assert cache.lookup("zed", "SCRAM-SHA-512") is not None  # still the cached copy
    now[0] = 6.0
    assert cache.lookup("zed", "SCRAM-SHA-512") is None and list(users.names()) == ["a/b c"]
    assert users.delete("a/b c") and not users.delete("a/b c")


def test_the_sasl_state_machine(tmp_path: object) -> None:
    users = UserStore(LocalObjectStore(str(tmp_path)), "ns")
    users.set_credential("alice", make_credential("SCRAM-SHA-512", "pw", 4096))
    results: list[tuple[str, bool]] = []
    auth = Authenticator(
        ["PLAIN", "SCRAM-SHA-512"],
        UserCache(users),
        delay=FailureDelay(base_s=0.0),
        on_result=lambda m, ok: results.append((m, ok)),
        reauth_ms=60_000,
    )

    async def scenario() -> None:
        plaintext = Session.on(SecurityProtocol.PLAINTEXT, "h")
        assert (
            plaintext.authenticated and auth.handshake(plaintext, "PLAIN")[0] == ILLEGAL_SASL_STATE
        )

        early = Session.on(SecurityProtocol.SASL_PLAINTEXT, "h")
        assert (
            await auth.authenticate(early, b"x")
        ).error_code == ILLEGAL_SASL_STATE and early.failed

        wrong = Session.on(SecurityProtocol.SASL_PLAINTEXT, "h")
        assert auth.handshake(wrong, "GSSAPI") == (
            UNSUPPORTED_SASL_MECHANISM,
            ["PLAIN", "SCRAM-SHA-512"],
        )
        assert wrong.failed

        session = Session.on(SecurityProtocol.SASL_SSL, "h")
        assert not session.authenticated
        assert auth.handshake(session, "PLAIN") == (0, ["PLAIN", "SCRAM-SHA-512"])
        bad = await auth.authenticate(session, b"\0alice\0nope")
        assert bad.error_code == SASL_AUTHENTICATION_FAILED and "nope" not in (bad.message or "")
        assert session.failed and not session.authenticated

        session = Session.on(SecurityProtocol.SASL_SSL, "h")
        auth.handshake(session, "PLAIN")
        ok = await auth.authenticate(session, b"alice\0alice\0pw")
        assert ok.error_code == 0 and ok.session_lifetime_ms == 60_000
        assert session.authenticated and session.principal == "User:alice"
        assert session.expires_at is not None and not session.expired()
        # Re-authentication (KIP-368) as someone else is refused.
        users.set_credential("bob", make_credential("SCRAM-SHA-512", "pw", 4096))
        auth.handshake(session, "PLAIN")
        again = await auth.authenticate(session, b"\0bob\0pw")
        assert again.error_code == SASL_AUTHENTICATION_FAILED and session.failed

        huge = Session.on(SecurityProtocol.SASL_SSL, "h")
        auth.handshake(huge, "PLAIN")
        assert (
            await auth.authenticate(huge, bytes(600_000))
        ).error_code == SASL_AUTHENTICATION_FAILED

    asyncio.run(scenario())
    assert results == [("PLAIN", False), ("PLAIN", True), ("PLAIN", False), ("PLAIN", False)]
