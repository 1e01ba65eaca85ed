"""Kafka listeners: ``PROTOCOL://host:port`` entries, each with its security protocol.

``KFS_LISTENERS=SASL_SSL://0.0.0.0:9093,PLAINTEXT://127.0.0.1:9092`` opens
two Kafka ports.  As in Kafka without ``listener.security.protocol.map``, a
listener's name is its security protocol, so each protocol appears once.
``KFS_ADVERTISED_LISTENERS`` (same shape) says what Metadata tells clients
of each listener; a listener it leaves out is advertised with
``KFS_ADVERTISED_HOST`` (or its own host; the machine's name when that is a
wildcard) and the port it is bound to.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Listener", "SecurityProtocol", "parse_host_port", "parse_listeners"]


class SecurityProtocol(enum.StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


@dataclass(frozen=True)
class Listener:
    """One listener: its protocol and the address it binds (port 0: any free port)."""

    protocol: SecurityProtocol
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.protocol}://{host}:{self.port}"


def parse_listeners(text: str, what: str = "KFS_LISTENERS") -> list[Listener]:
    """``PROTOCOL://host:port,...`` → listeners; ValueError with a one-line message."""
    listeners: list[Listener] = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, address = entry.partition("://")
        if not sep:
            raise ValueError(f"{what}: {entry!r} is not PROTOCOL://host:port")
        try:
            protocol = SecurityProtocol(name.upper())
        except ValueError:
            choices = ", ".join(p.value for p in SecurityProtocol)
            raise ValueError(f"{what}: unknown security protocol {name!r} ({choices})") from None
        try:
            host, port = parse_host_port(address, -1)
        except ValueError as exc:
            raise ValueError(f"{what}: {exc}") from None
        if port < 0:
            raise ValueError(f"{what}: {entry!r} needs a port")
        if any(other.protocol is protocol for other in listeners):
            raise ValueError(f"{what}: {protocol} is listed twice (one listener per protocol)")
        if port and any(other.port == port for other in listeners):
            raise ValueError(f"{what}: port {port} is listed twice")
        listeners.append(Listener(protocol, host, port))
    if not listeners:
        raise ValueError(f"{what}: no listener in {text!r}")
    return listeners


def parse_host_port(text: str, default_port: int) -> tuple[str, int]:
    """``host:port``, ``[v6]:port``, ``host`` or ``:port`` → (host, port)."""
    text = text.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"bad address {text!r}: use [ipv6]:port")
        port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        raise ValueError(f"bad address {text!r}: write IPv6 addresses as [addr]:port")
    else:
        host, port_text = text, ""
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"bad port in address {text!r}: expected 0..65535")
    return host, int(port_text)
