"""A daemon's SASL login on another daemon: the exchange, and each refusal in one line."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from kfs_core.errors import PeerUnavailable
from kfs_core.server.peer_sasl import PeerSasl


def _login(answers: list[Any], mechanism: str = "PLAIN") -> list[Any]:
    """Run a login against canned answers; the requests it sent."""
    sent: list[Any] = []

    async def send(request: Any) -> Any:
        sent.append(request)
        return answers.pop(0)

    asyncio.run(PeerSasl(mechanism, "kfs-daemon", "secret").authenticate("SASL_SSL", send))
    return sent


def _handshake(error: int = 0) -> SimpleNamespace:
    return SimpleNamespace(error_code=error, mechanisms=["SCRAM-SHA-512"])


def _answer(error: int = 0, message: str | None = None, data: bytes = b"") -> SimpleNamespace:
    return SimpleNamespace(error_code=error, error_message=message, auth_bytes=data)


def test_a_plain_login_sends_the_credentials_once() -> None:
    handshake, authenticate = _login([_handshake(), _answer()])
    assert handshake.mechanism == "PLAIN"
    assert authenticate.auth_bytes == b"kfs-daemon\0kfs-daemon\0secret"


def test_refusals_say_why() -> None:
    with pytest.raises(
        PeerUnavailable, match=r"PLAIN is not enabled there \(it offers SCRAM-SHA-512\)"
    ):
        _login([_handshake(error=33)])
    with pytest.raises(PeerUnavailable, match="login as 'kfs-daemon' refused: bad password"):
        _login([_handshake(), _answer(error=58, message="bad password")])
    with pytest.raises(PeerUnavailable, match="login as 'kfs-daemon': Server nonce"):
        _login([_handshake(), _answer(data=b"r=someone-elses,s=c2FsdA==,i=4096")], "SCRAM-SHA-512")


def test_the_password_stays_out_of_reprs() -> None:
    assert "secret" not in repr(PeerSasl("PLAIN", "kfs-daemon", "secret"))
